"""Triton kernels (language ``triton``): compiled by Triton's own compiler, launched by kernelbay.

``kb.Source(fn, "triton", meta={...})`` where ``fn`` is a ``@triton.jit`` function. ``meta``:

* ``signature``: the type of every non-constexpr argument, Triton's spelling (``"*fp32"``,
  ``"i32"``, ``"fp16"``...), as a dict by argument name or a list in argument order;
* ``constexprs``: the value of every ``tl.constexpr`` argument, by name;
* ``num_warps`` (default 4), ``num_stages`` (default 3), ``num_ctas`` (default 1).

Triton compiles to a cubin for the device's arch (no GPU is needed to compile: the target is
explicit), and the cubin and its metadata are kept in kernelbay's disk cache (key: Triton's
version, the function's cache key -- its source and the sources of the functions it calls --,
the signature and constexprs, the options, the arch). The launch is kernelbay's: the block is
``32 x num_warps``, Triton's shared memory is added to the launch's dynamic shared memory (the
kernel's limit raised where it needs more than 48 KiB), and the trailing scratch pointer
parameters Triton appends are filled by kernelbay (NULL, or a scratch buffer sized for the grid
where the kernel's metadata asks for one). Launch with ``k.launch(grid, args=...)`` (``block``
may be omitted) or ``k[grid](*args)``-free: ``k(grid, args=...)``.
"""

from __future__ import annotations

import json
from typing import Any

from kernelbay.argrules import BY_NAME
from kernelbay.cache import lookup, make_key, store
from kernelbay.errors import BackendUnavailableError, CompileError, InvalidArgumentError

from .images import Image, parse_ptx_params

__all__ = ["compile_triton"]

# Triton's scalar types -> the table's dtype names (kernelbay.argrules).
_SCALARS = {
    "i1": "bool",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u1": "bool",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "f32": "float32",
    "fp64": "float64",
}


def _triton() -> Any:
    try:
        import triton  # deferred: optional, and heavy (the extra kernelbay-cuda[triton])
    except ImportError as exc:
        raise BackendUnavailableError(
            f"Triton kernels need Triton, which is not installed here ({exc}); install the extra: "
            "pip install 'kernelbay-cuda[triton]'"
        ) from None
    return triton


def _signature(fn: Any, meta: Any) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """(argument names, signature by name with constexprs marked, constexpr values)."""
    names = list(getattr(fn, "arg_names", None) or [])
    if not names:
        raise InvalidArgumentError(f"a triton Source takes a @triton.jit function, not {type(fn).__name__}")
    constexprs = dict(meta.get("constexprs") or {})
    sig_in = meta.get("signature")
    if sig_in is None:
        raise InvalidArgumentError(
            f"Source(fn, 'triton') needs meta={{'signature': ...}}: the Triton type of each argument of "
            f"{fn.__name__}({', '.join(names)}), e.g. {{'x_ptr': '*fp32', 'n': 'i32'}}"
        )
    runtime = [n for n in names if n not in constexprs]
    if isinstance(sig_in, dict):
        sig = {str(k): str(v) for k, v in sig_in.items()}
    else:
        sig = dict(zip(runtime, [str(t) for t in sig_in]))
        if len(sig_in) != len(runtime):
            raise InvalidArgumentError(
                f"meta['signature'] of {fn.__name__} lists {len(sig_in)} types for {len(runtime)} non-constexpr "
                f"arguments ({', '.join(runtime)})"
            )
    unknown = [n for n in [*sig, *constexprs] if n not in names]
    if unknown:
        raise InvalidArgumentError(
            f"{fn.__name__} has no argument(s) {', '.join(unknown)} (it takes {', '.join(names)})"
        )
    missing = [n for n in runtime if n not in sig or sig[n] == "constexpr"]
    if missing:
        raise InvalidArgumentError(
            f"meta of {fn.__name__} gives neither a type (signature) nor a value (constexprs) for {', '.join(missing)}"
        )
    for n in constexprs:
        sig[n] = "constexpr"
    return names, {n: sig[n] for n in names}, constexprs


def _ptype(t: str) -> str:
    """The parameter type packing understands (see packing.param_kind) for a Triton type."""
    if t.startswith("*"):
        return "pointer"
    name = _SCALARS.get(t)
    row = BY_NAME.get(name or "")
    if row is None:
        raise InvalidArgumentError(
            f"kernelbay cannot pass a Triton argument of type {t!r} (tensor descriptors and the like)"
        )
    return (row.c or row.name) if row.param else "other"


def compile_triton(source: Any, cc: tuple[int, int]) -> tuple[Image, str, dict[str, Any]]:
    """Compile a ``triton`` source for compute capability ``cc`` through the disk cache.

    :returns: the image, the entry symbol, and the launch settings (see :mod:`.compiler`'s
        ``compile_kernel``): ``block``, ``shared``, ``hidden`` (trailing parameters kernelbay
        fills), ``scratch`` ([(size per program, align)] for each hidden pointer), ``arg_names``.
    """
    triton = _triton()
    fn = source.code
    meta = source.meta
    names, sig, constexprs = _signature(fn, meta)
    for t in sig.values():
        if t != "constexpr":
            _ptype(t)  # refuses, before compiling, a type kernelbay cannot pass
    opts = {
        "num_warps": int(meta.get("num_warps", 4)),
        "num_stages": int(meta.get("num_stages", 3)),
        "num_ctas": int(meta.get("num_ctas", 1)),
    }
    arch = cc[0] * 10 + cc[1]
    key = make_key(
        backend="cuda",
        compiler="triton",
        compiler_version=triton.__version__,
        arch=f"sm_{arch}",
        options=[json.dumps(opts, sort_keys=True)],
        source=str(getattr(fn, "cache_key", None) or getattr(fn, "src", "")),
        entries=[fn.__name__],
        extra={"signature": json.dumps(sig), "constexprs": repr(sorted(constexprs.items()))},
    )
    cache, hit = lookup(key)
    if hit is not None:
        m = hit.meta
        params = {k: [tuple(p) for p in v] for k, v in m["params"].items()}
        return (
            Image(data=hit.payload, kind="cubin", arch=f"sm_{arch}", params=params, from_cache="disk"),
            m["name"],
            m["launch"],
        )
    compiled = _compile(triton, fn, sig, constexprs, opts, arch)
    md = compiled.metadata
    name = md.name
    ptx_params = parse_ptx_params(compiled.asm.get("ptx", ""))
    raw = ptx_params.get(name)
    runtime = [n for n in names if sig[n] != "constexpr"]
    if raw is None or len(raw) < len(runtime):
        raise CompileError(f"Triton's PTX for {name!r} does not show its parameters; cannot launch it", log="")
    hidden = len(raw) - len(runtime)
    typed = [(s, a, _ptype(sig[n])) for (s, a, _), n in zip(raw, runtime)] + [
        (s, a, "pointer") for s, a, _ in raw[len(runtime) :]
    ]
    scratch = [
        (int(getattr(md, "global_scratch_size", 0) or 0), int(getattr(md, "global_scratch_align", 1) or 1)),
        (int(getattr(md, "profile_scratch_size", 0) or 0), int(getattr(md, "profile_scratch_align", 1) or 1)),
    ][:hidden]
    scratch += [(0, 1)] * (hidden - len(scratch))
    scratch_lists = [[size, align] for size, align in scratch]  # as the disk cache gives it back
    launch = {
        "block": 32 * int(md.num_warps)
        if getattr(md, "warp_size", 32) == 32
        else int(md.warp_size) * int(md.num_warps),
        "shared": int(md.shared),
        "hidden": hidden,
        "scratch": scratch_lists,
        "num_ctas": int(getattr(md, "num_ctas", 1) or 1),
        "arg_names": runtime,
    }
    if launch["num_ctas"] != 1:
        raise CompileError(
            f"Triton kernel {name!r} uses thread-block clusters (num_ctas > 1), which kernelbay does not launch", log=""
        )
    image = Image(data=compiled.asm["cubin"], kind="cubin", arch=f"sm_{arch}", params={name: typed})
    store(cache, key, image.data, {"name": name, "params": image.params, "launch": launch})
    return image, name, launch


def _compile(
    triton: Any, fn: Any, sig: dict[str, str], constexprs: dict[str, Any], opts: dict[str, int], arch: int
) -> Any:
    from triton.backends.compiler import GPUTarget  # deferred: optional, and heavy
    from triton.compiler import ASTSource  # deferred: optional, and heavy

    try:
        src = ASTSource(fn, signature=sig, constexprs=constexprs)
        return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=opts)
    except Exception as exc:  # Triton raises its own types (CompilationError...) with the reason
        raise CompileError(
            f"Triton {triton.__version__} failed to compile {fn.__name__!r} for sm_{arch} "
            f"(signature {sig}, constexprs {constexprs}, options {opts}): {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            log=str(exc),
        ) from exc
