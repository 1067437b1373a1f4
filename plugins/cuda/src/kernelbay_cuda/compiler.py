"""NVRTC compilation (no GPU needed), the disk and in-process caches, and module loading.

* ``--gpu-architecture=sm_XY`` (SASS, a cubin) when this NVRTC knows the device's arch; else
  ``compute_XY`` PTX of the newest arch it knows, for the driver to JIT.
* Every kernel named (``Source.name``, ``Source.name_expressions``, or the one ``__global__``
  function in the text) is added as an NVRTC name expression, so templates (``"axpy<float>"``)
  and C++ names work; the lowered names are kept with the cached module.
* Parameter sizes and alignments are read from the PTX signature and kept too, so argument
  packing is validated even where the driver lacks ``cuFuncGetParamInfo`` (and in CI, without a GPU).
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import attrs

from kernelbay.errors import CompileError, InvalidArgumentError

from . import _driver

__all__ = ["Image", "compile_image", "choose_arch", "nvrtc_version", "parse_ptx_params", "load_module"]


@attrs.frozen
class Image:
    """A compiled (or given) module image.

    :ivar data: cubin, PTX (NUL-terminated) or fatbin bytes.
    :ivar kind: ``cubin``, ``ptx`` or ``fatbin``.
    :ivar arch: the ``--gpu-architecture`` value used (``sm_90``), or ``""`` for a given binary.
    :ivar lowered: name expression -> lowered (mangled) symbol.
    :ivar params: lowered symbol -> ``[(size, align, ptx_type), ...]`` where known.
    :ivar log: the compiler's log (warnings).
    :ivar from_cache: ``"disk"`` when read from the disk cache, else ``""``.
    """

    data: bytes
    kind: str
    arch: str = ""
    lowered: dict[str, str] = attrs.field(factory=dict)
    params: dict[str, list[tuple[int, int, str]]] = attrs.field(factory=dict)
    log: str = ""
    from_cache: str = ""


_version: tuple[int, int] | None = None
_archs: tuple[int, ...] | None = None


def nvrtc_version() -> tuple[int, int]:
    global _version
    if _version is None:
        err, major, minor = _driver.nvrtc().nvrtcVersion()
        _driver.check(err, "nvrtcVersion")
        _version = (major, minor)
    return _version


def supported_archs() -> tuple[int, ...]:
    global _archs
    if _archs is None:
        err, archs = _driver.nvrtc().nvrtcGetSupportedArchs()
        _driver.check(err, "nvrtcGetSupportedArchs")
        _archs = tuple(archs)
    return _archs


def choose_arch(cc: tuple[int, int]) -> tuple[str, str]:
    """``("sm_90", "cubin")`` when NVRTC knows ``cc``, else ``("compute_XY", "ptx")``."""
    n = cc[0] * 10 + cc[1]
    archs = supported_archs()
    if n in archs:
        return f"sm_{n}", "cubin"
    older = [a for a in archs if a <= n]
    if not older:
        raise CompileError(
            f"this NVRTC {'.'.join(map(str, nvrtc_version()))} cannot target compute capability "
            f"{cc[0]}.{cc[1]} (it supports {', '.join(map(str, archs))}); install an older nvidia-cuda-nvrtc"
        )
    return f"compute_{max(older)}", "ptx"


_GLOBAL_RE = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:[\w:]+\s+)*?(\w+)\s*\(")
_TEMPLATE_RE = re.compile(r"template\s*<[^>]*>\s*__global__")


def entry_names(source: Any) -> tuple[str, list[str]]:
    """The kernel to launch and every name expression to compile."""
    exprs = list(source.name_expressions)
    entry = source.name
    if entry is None:
        if exprs:
            entry = exprs[0]
        else:
            text = source.text
            found = [] if _TEMPLATE_RE.search(text) else _GLOBAL_RE.findall(text)
            found = list(dict.fromkeys(found))
            if len(found) != 1:
                raise InvalidArgumentError(
                    "cannot tell which kernel to launch: "
                    + (f"the source defines {', '.join(found)}" if found else "no plain __global__ function found")
                    + "; pass Source(..., name='kernel') (or name='axpy<float>' for a template)"
                )
            entry = found[0]
    if entry not in exprs:
        exprs.insert(0, entry)
    return entry, exprs


_LOG_LINE_RE = re.compile(r"\((\d+)\): (?:error|catastrophic error|warning)")


def _options(source: Any, arch: str) -> list[str]:
    opts = [str(o) for o in source.options]
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in opts):
        opts.insert(0, f"--gpu-architecture={arch}")
    return opts


_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def include_digests(source: Any, opts: list[str], limit: int = 4096) -> dict[str, str]:
    """``{path: sha256}`` of the files NVRTC may read from disk for ``source``: ``#include``s not
    given in ``Source.headers``, found absolute or through ``-I``/``--include-path`` (NVRTC has
    no dependency output, so the includes are followed here). Part of the cache key: an edited
    header on disk compiles anew instead of running stale code."""
    import hashlib
    import os

    dirs: list[str] = []
    it = iter(opts)
    for o in it:
        if o in ("-I", "--include-path"):
            dirs.append(next(it, ""))
        elif o.startswith("--include-path="):
            dirs.append(o.split("=", 1)[1])
        elif o.startswith("-I"):
            dirs.append(o[2:])
    out: dict[str, str] = {}
    todo: list[tuple[str, str | None]] = [(source.text, None)] + [(t, None) for t in source.headers.values()]
    while todo and len(out) < limit:
        text, here = todo.pop()
        for quote, name in _INCLUDE_RE.findall(text):
            if name in source.headers:
                continue
            cands = [name] if os.path.isabs(name) else ([os.path.join(here, name)] if here and quote == '"' else [])
            cands += [os.path.join(d, name) for d in dirs if not os.path.isabs(name)]
            for c in cands:
                path = os.path.realpath(c)
                if path in out or not os.path.isfile(path):
                    continue
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                out[path] = hashlib.sha256(data).hexdigest()
                todo.append((data.decode("utf-8", "replace"), os.path.dirname(path)))
                break
    return dict(sorted(out.items()))


def compile_image(source: Any, cc: tuple[int, int], *, use_cache: bool = True) -> Image:
    """Compile a ``cuda`` source for compute capability ``cc`` through the disk cache."""
    from kernelbay.cache import lookup, make_key, store

    arch, kind = choose_arch(cc)
    entry, exprs = entry_names(source)
    opts = _options(source, arch)
    if any(o.startswith(("-arch", "--gpu-architecture")) for o in source.options):
        user = [o for o in source.options if o.startswith(("-arch", "--gpu-architecture"))][-1]
        kind = "cubin" if "sm_" in user else "ptx"
    ver = nvrtc_version()
    key = make_key(
        backend="cuda",
        compiler="nvrtc",
        compiler_version=f"{ver[0]}.{ver[1]}",
        arch=arch,
        options=opts,
        source=source.text,
        entries=exprs,
        extra={
            "headers": json.dumps(dict(sorted(source.headers.items()))),
            "kind": kind,
            "includes": json.dumps(include_digests(source, opts)),
        },
    )
    cache = None
    if use_cache:
        cache, hit = lookup(key)  # an unusable cache never stops a compile
        if hit is not None:
            m = hit.meta
            return Image(
                data=hit.payload,
                kind=m["kind"],
                arch=m["arch"],
                lowered=dict(m["lowered"]),
                params={k: [tuple(p) for p in v] for k, v in m["params"].items()},
                log=m.get("log", ""),
                from_cache="disk",
            )
    img = _nvrtc(source, exprs, opts, kind, arch)
    store(cache, key, img.data, {"kind": img.kind, "arch": img.arch, "lowered": img.lowered, "params": img.params, "log": img.log})
    return img


def _nvrtc(source: Any, exprs: list[str], opts: list[str], kind: str, arch: str) -> Image:
    nv = _driver.nvrtc()
    text = source.text
    name = b"kernel.cu"
    hdr_names = [k.encode() for k in source.headers]
    hdr_srcs = [v.encode() for v in source.headers.values()]
    err, prog = nv.nvrtcCreateProgram(text.encode(), name, len(hdr_srcs), hdr_srcs, hdr_names)
    _driver.check(err, "nvrtcCreateProgram")
    try:
        for e in exprs:
            _driver.check(nv.nvrtcAddNameExpression(prog, e.encode()), f"nvrtcAddNameExpression({e!r})")
        (rc,) = nv.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        err, size = nv.nvrtcGetProgramLogSize(prog)
        log = ""
        if not int(err) and size > 1:
            buf = b" " * size
            nv.nvrtcGetProgramLog(prog, buf)
            log = buf.rstrip(b"\0 ").decode(errors="replace")
        if int(rc):
            lines = {int(m) for m in _LOG_LINE_RE.findall(log) if 0 < int(m) <= text.count("\n") + 1}
            raise CompileError(
                f"NVRTC {'.'.join(map(str, nvrtc_version()))} failed to compile {source.name or 'the kernel'!r} "
                f"for {arch} (options: {' '.join(opts)})",
                log=log,
                source=text,
                lines=lines,
            )
        lowered: dict[str, str] = {}
        for e in exprs:
            err, low = nv.nvrtcGetLoweredName(prog, e.encode())
            _driver.check(err, f"nvrtcGetLoweredName({e!r})")
            lowered[e] = low.decode()
        err, psize = nv.nvrtcGetPTXSize(prog)
        ptx = b""
        if not int(err):
            ptx = b" " * psize
            _driver.check(nv.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        params = parse_ptx_params(ptx.rstrip(b"\0").decode(errors="replace"))
        if kind == "cubin":
            err, csize = nv.nvrtcGetCUBINSize(prog)
            _driver.check(err, "nvrtcGetCUBINSize")
            data = b" " * csize
            _driver.check(nv.nvrtcGetCUBIN(prog, data), "nvrtcGetCUBIN")
        else:
            data = ptx if ptx.endswith(b"\0") else ptx + b"\0"
        return Image(data=data, kind=kind, arch=arch, lowered=lowered, params=params, log=log)
    finally:
        nv.nvrtcDestroyProgram(prog)


_ENTRY_RE = re.compile(r"\.entry\s+([\w$.]+)\s*\(([^)]*)\)", re.S)
_PARAM_RE = re.compile(r"\.param\s+((?:\.\w+\s+)*?)(?:\.align\s+(\d+)\s+)?\.(\w+)\s+[\w$.]+(?:\[(\d+)\])?")
_TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8, "pred": 1}


def parse_ptx_params(ptx: str) -> dict[str, list[tuple[int, int, str]]]:
    """Per ``.entry``: each parameter's ``(size, align, ptx_type)`` from a PTX text."""
    out: dict[str, list[tuple[int, int, str]]] = {}
    for name, body in _ENTRY_RE.findall(ptx):
        params: list[tuple[int, int, str]] = []
        for decl in body.split(","):
            decl = " ".join(decl.split())
            if not decl:
                continue
            m = re.search(r"\.align\s+(\d+)", decl)
            align = int(m.group(1)) if m else 0
            t = re.search(r"\.(b|s|u|f)(8|16|32|64)\b", decl)
            if not t:
                params = []
                break
            elem = _TYPE_BYTES[t.group(2)]
            arr = re.search(r"\[(\d+)\]\s*$", decl)
            size = elem * int(arr.group(1)) if arr else elem
            params.append((size, align or elem, t.group(1) + t.group(2)))
        out[name] = params
    return out


# --- loading -----------------------------------------------------------------------------


class Module:
    """A module loaded into one device's primary context; unloaded when collected."""

    def __init__(self, device_index: int, image: Image) -> None:
        import ctypes

        _driver.ensure_current(device_index)
        lib = _driver.libcuda()
        self.device_index = device_index
        self.image = image
        self.handle: int | None = None
        size = 1 << 16
        info = ctypes.create_string_buffer(size)
        errbuf = ctypes.create_string_buffer(size)
        # CU_JIT_INFO_LOG_BUFFER(3), ..._SIZE_BYTES(4), CU_JIT_ERROR_LOG_BUFFER(5), ..._SIZE_BYTES(6)
        opts = (ctypes.c_int * 4)(3, 4, 5, 6)
        vals = (ctypes.c_void_p * 4)(ctypes.addressof(info), size, ctypes.addressof(errbuf), size)
        mod = ctypes.c_void_p()
        data = ctypes.create_string_buffer(image.data, len(image.data))
        rc = lib.cuModuleLoadDataEx(ctypes.byref(mod), data, 4, opts, vals)
        if rc:
            jit = errbuf.value.decode(errors="replace") or info.value.decode(errors="replace")
            if rc in _driver.STICKY or _driver.dead_reason(device_index):
                _driver.check(rc, f"loading a module on cuda:{device_index}", device_index)
            raise CompileError(
                f"the CUDA driver could not load the {image.kind} module ({image.arch or 'given binary'}) on "
                f"cuda:{device_index}: {_driver.error_name(rc)}",
                log=jit,
            )
        self.handle = mod.value
        self.jit_log = info.value.decode(errors="replace")

    def function(self, symbol: str) -> int:
        import ctypes

        fn = ctypes.c_void_p()
        rc = _driver.libcuda().cuModuleGetFunction(ctypes.byref(fn), ctypes.c_void_p(self.handle), symbol.encode())
        if rc:
            raise InvalidArgumentError(
                f"kernel {symbol!r} is not in the module on cuda:{self.device_index} "
                f"({_driver.error_name(rc)}); check Source.name"
            )
        return fn.value

    def __del__(self) -> None:
        h = self.handle
        if h is not None and _driver.dead_reason(self.device_index) is None:
            try:
                import ctypes

                _driver.libcuda().cuModuleUnload(ctypes.c_void_p(h))
            except Exception:
                pass


def load_module(device_index: int, image: Image) -> Module:
    return Module(device_index, image)


_cache_lock = threading.Lock()
