"""NVRTC: CUDA C++ to a module image (no GPU needed), through the disk cache.

* ``--gpu-architecture=sm_XY`` (SASS, a cubin) when this NVRTC knows the device's arch; else
  ``compute_XY`` PTX of the newest arch it knows, for the driver to JIT.
* Every kernel named (``Source.name``, ``Source.name_expressions``, or the one ``__global__``
  function in the text) is added as an NVRTC name expression, so templates (``"axpy<float>"``)
  and C++ names work; the lowered names are kept with the cached module.
* Parameter sizes and alignments are read from the PTX signature and kept too, so argument
  packing is validated even where the driver lacks ``cuFuncGetParamInfo`` (and in CI, without a
  GPU); the C type of each (signed or not, pointer...) from a probe compiled with the source
  (:data:`SIG_PROBE`).

:mod:`.compiler` (the compile hook) calls :func:`compile_image`; loading and launching are not
this module's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from typing import Any

from kernelbay.argrules import PARAM
from kernelbay.cache import locked, lookup, make_key, recheck, store
from kernelbay.csource import default_kernel
from kernelbay.errors import CompileError

from . import _driver, _install
from .images import Image, parse_ptx_params

log = logging.getLogger("kernelbay.cuda")

__all__ = [
    "SIG_PROBE",
    "choose_arch",
    "compile_image",
    "entry_names",
    "include_digests",
    "nvrtc_version",
    "shim_include",
    "supported_archs",
    "toolkit_include",
    "typed_params",
]


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
            f"{cc[0]}.{cc[1]} (it supports {', '.join(map(str, archs))}); install an older "
            f"{_install.nvrtc_package(nvrtc_version()[0])}"
        )
    return f"compute_{max(older)}", "ptx"


def entry_names(source: Any) -> tuple[str, list[str]]:
    """The kernel to launch and every name expression to compile."""
    exprs = list(source.name_expressions)
    entry = source.name
    if entry is None:
        entry = exprs[0] if exprs else default_kernel(source.text)
    if entry not in exprs:
        exprs.insert(0, entry)
    return entry, exprs


_LOG_LINE_RE = re.compile(r"\((\d+)\): (?:error|catastrophic error|warning)")


_toolkit_include: list[tuple[str, ...]] = []


def toolkit_include() -> tuple[str, ...]:
    """The CUDA headers' folders (``cooperative_groups.h``, and CCCL's ``cuda/std/...`` that
    CUDA 13 keeps in ``include/cccl``), or ``()``.

    NVRTC knows only its built-in headers; kernels that include the toolkit's need its folder
    on the search path. Found through cuda-pathfinder (the ``nvidia-cuda-runtime`` wheel's
    headers, ``CUDA_PATH``/``CUDA_HOME``, ``/usr/local/cuda``), once per process.
    """
    if not _toolkit_include:
        found: list[str] = []
        try:
            # deferred: cuda-pathfinder comes with cuda-bindings, an extra, and only headers need it
            from cuda.pathfinder import find_nvidia_header_directory

            for lib in ("cudart", "cccl"):
                try:
                    d = find_nvidia_header_directory(lib)
                except Exception:
                    d = None
                if d:
                    found.append(d)
        except ImportError:  # an old cuda-pathfinder: the usual places
            pass
        # The usual places too, searched after what pathfinder found: where that is a wheel's
        # partial set (nvidia/cu13/include has mma.h but not the crt/mma.h it includes), the
        # toolkit's folder supplies the rest.
        if not found or not any(os.path.exists(os.path.join(d, "crt", "mma.h")) for d in found):
            for base in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
                if base and os.path.exists(os.path.join(base, "include", "cooperative_groups.h")):
                    found.append(os.path.join(base, "include"))
                    if os.path.isdir(os.path.join(base, "include", "cccl")):
                        found.append(os.path.join(base, "include", "cccl"))
                    break
        log.debug("CUDA headers for NVRTC: %s", found or "none found")
        _toolkit_include.append(tuple(dict.fromkeys(found)))
    return _toolkit_include[0]


def shim_include() -> str:
    """kernelbay's own small headers for NVRTC (``kernelbay_cuda/include``): the C and C++
    standard headers device code includes under nvcc (``assert.h`` with a device ``assert``,
    ``float.h``, ``limits.h``, ``stdint.h``, ``math.h``, ``stdio.h``, ``type_traits`` and
    ``limits`` from CCCL...) and host-only ones (``iostream``, ``cublas_v2.h``) as empty
    headers. Searched before the toolkit's folders (which hold none of these names but the host-only
    ``cuda.h`` and library headers, whose host functions NVRTC refuses); their content is in the cache key
    (:func:`include_digests`)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def _options(source: Any, arch: str) -> list[str]:
    opts = [str(o) for o in source.options]
    # Functions without __host__/__device__ in a kernel's file (a shared header's helpers and
    # host prototypes) are host functions, which NVRTC's JIT mode refuses outright; nvcc
    # compiles them for the host and lets the kernels be. As device functions they cost nothing
    # unless a kernel calls them (and nvcc would have refused that call).
    if not any(o in ("-default-device", "--device-as-default-execution-space") for o in opts):
        opts.append("-default-device")
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in opts):
        opts.insert(0, f"--gpu-architecture={arch}")
    if "#include" in source.text or any("#include" in t for t in source.headers.values()):
        opts += [f"--include-path={d}" for d in (shim_include(), *toolkit_include())]
    return opts


_MISSING_RE = re.compile(r'^(\S+)\((\d+)\): catastrophic error: cannot open source file "([^"]+)"', re.M)
# The warp functions without _sync: the front end no longer declares the shuffles, and ptxas
# refuses the votes' instruction for sm_70 and newer.
_LEGACY_WARP_RE = re.compile(
    r'identifier "__(?:shfl(?:_up|_down|_xor)?|any|all|ballot)" is undefined|without \'\.sync\' is not supported'
)
_LEGACY_WARP_USE_RE = re.compile(r"\b(__shfl(?:_up|_down|_xor)?|__any|__all|__ballot)\s*\(")
_HOST_LAUNCH_RE = re.compile(r"cub/cub\.cuh|thrust/system/cuda")


def _hint(log: str, text: str = "") -> str:
    """What to do, for the errors NVRTC gives on headers it cannot compile, naming the
    include and its line; ``""`` for others."""
    if _HOST_LAUNCH_RE.search(log):
        return (
            "; <cub/cub.cuh> brings CUB's device-wide algorithms, which launch kernels from host code that NVRTC "
            "cannot compile: include the block- and warp-level headers the kernel uses instead "
            "(<cub/block/block_reduce.cuh>, <cub/warp/warp_reduce.cuh>...)"
        )
    m = _MISSING_RE.search(log)
    if m:
        where, line, name = m.groups()
        found = ", ".join(toolkit_include()) or "none found"
        return (
            f"; #include <{name}> ({where} line {line}) is not a header NVRTC or kernelbay knows: pass its "
            f"text in Source(headers={{{name!r}: ...}}), add its folder with options=['-I...'], or install the "
            f"CUDA headers (the nvidia-cuda-runtime and nvidia-cuda-cccl wheels, or a toolkit under CUDA_PATH; "
            f"found: {found})"
        )
    use = _LEGACY_WARP_USE_RE.search(text) if _LEGACY_WARP_RE.search(log) else None
    if use:
        name, line = use.group(1), text.count("\n", 0, use.start()) + 1
        return (
            f"; {name}() (kernel.cu line {line}) is a warp function without _sync, which CUDA 9 deprecated and "
            f"removed for sm_70 and newer: use {name}_sync(mask, ...) (0xffffffff for the whole warp)"
        )
    return ""


_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def include_digests(source: Any, opts: list[str], limit: int = 4096) -> dict[str, str]:
    """``{path: sha256}`` of the files NVRTC may read from disk for ``source``: ``#include``s not
    given in ``Source.headers``, found absolute or through ``-I``/``--include-path`` (NVRTC has
    no dependency output, so the includes are followed here). Part of the cache key: an edited
    header on disk compiles anew instead of running stale code."""
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
    todo: list[tuple[str, str | None]] = [(source.text, None), *((t, None) for t in source.headers.values())]
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
            "probe": _PROBE_VERSION,
            "includes": json.dumps(include_digests(source, opts)),
        },
    )
    if not use_cache:
        return _compile_new(source, entry, exprs, opts, kind, arch, ver)
    cache, hit = lookup(key)  # an unusable cache never stops a compile
    if hit is None:
        # One process or thread compiles a key; the others with the same key wait, then read it.
        with locked(cache, key):
            hit = recheck(cache, key)
            if hit is None:
                img = _compile_new(source, entry, exprs, opts, kind, arch, ver)
                meta = {
                    "kind": img.kind,
                    "arch": img.arch,
                    "lowered": img.lowered,
                    "params": img.params,
                    "log": img.log,
                    "kinds": img.kinds,
                }
                store(cache, key, img.data, meta)
                return img
    m = hit.meta
    return Image(
        data=hit.payload,
        kind=m["kind"],
        arch=m["arch"],
        lowered=dict(m["lowered"]),
        params={k: [tuple(p) for p in v] for k, v in m["params"].items()},
        log=m.get("log", ""),
        from_cache="disk",
        kinds=dict(m.get("kinds", {})),
    )


def _compile_new(
    source: Any, entry: str, exprs: list[str], opts: list[str], kind: str, arch: str, ver: tuple[int, int]
) -> Image:
    t0 = time.perf_counter()
    try:
        img = _nvrtc(source, exprs, opts, kind, arch, probe=True)
    except CompileError:
        # The probe cannot name every entry (an overloaded kernel, say): compile without it,
        # which also reports the user's own errors as they are.
        log.debug("kernelbay.cuda: signature probe failed for %r; compiling without it", entry)
        img = _nvrtc(source, exprs, opts, kind, arch)
    log.info(
        "compiled %s with NVRTC %d.%d in %.0f ms: %s", entry, *ver, (time.perf_counter() - t0) * 1e3, " ".join(opts)
    )
    return img


def _nvrtc(source: Any, exprs: list[str], opts: list[str], kind: str, arch: str, probe: bool = False) -> Image:
    nv = _driver.nvrtc()
    text = source.text
    probes = {e: f"kernelbay_sig_probe::sig<decltype({e})>" for e in exprs} if probe else {}
    if probe:
        text += SIG_PROBE
        exprs = [*exprs, *probes.values()]
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
                f"for {arch} (options: {' '.join(opts)}){_hint(log, text)}",
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
        ptx_text = ptx.rstrip(b"\0").decode(errors="replace")
        params = parse_ptx_params(ptx_text)
        kinds = {lowered[e]: k for e, p in probes.items() if (k := _probe_kinds(ptx_text, lowered[p])) is not None}
        for p in probes.values():
            del lowered[p]
        if kind == "cubin":
            err, csize = nv.nvrtcGetCUBINSize(prog)
            _driver.check(err, "nvrtcGetCUBINSize")
            data = b" " * csize
            _driver.check(nv.nvrtcGetCUBIN(prog, data), "nvrtcGetCUBIN")
        else:
            data = ptx if ptx.endswith(b"\0") else ptx + b"\0"
        return Image(data=data, kind=kind, arch=arch, lowered=lowered, params=params, log=log, kinds=kinds)
    finally:
        nv.nvrtcDestroyProgram(prog)


# Appended to a cuda source: for each kernel F, kernelbay_sig_probe::sig<decltype(F)> is a
# device array holding one letter per parameter (the C type's kind, which PTX does not keep:
# an int and an unsigned are both .u32). Read back from the PTX, without a GPU.
_PROBE_VERSION = "1"
SIG_PROBE = r"""
namespace kernelbay_sig_probe {
template <class T> struct K { enum : char { v = 'o' }; };
template <class T> struct K<T*> { enum : char { v = 'p' }; };
template <> struct K<bool> { enum : char { v = 'b' }; };
template <> struct K<char> { enum : char { v = (char)-1 < 0 ? 'i' : 'u' }; };
template <> struct K<signed char> { enum : char { v = 'i' }; };
template <> struct K<unsigned char> { enum : char { v = 'u' }; };
template <> struct K<short> { enum : char { v = 'i' }; };
template <> struct K<unsigned short> { enum : char { v = 'u' }; };
template <> struct K<int> { enum : char { v = 'i' }; };
template <> struct K<unsigned int> { enum : char { v = 'u' }; };
template <> struct K<long> { enum : char { v = 'i' }; };
template <> struct K<unsigned long> { enum : char { v = 'u' }; };
template <> struct K<long long> { enum : char { v = 'i' }; };
template <> struct K<unsigned long long> { enum : char { v = 'u' }; };
template <> struct K<float> { enum : char { v = 'f' }; };
template <> struct K<double> { enum : char { v = 'f' }; };
template <class F> __device__ const char sig[1] = {0};
template <class... P> __device__ const char sig<void(P...)>[sizeof...(P) + 1] = {K<P>::v..., 0};
}
"""
_PROBE_LETTERS = frozenset("pbiufo")


def _probe_kinds(ptx: str, symbol: str) -> str | None:
    """The letters the probe left for ``symbol`` in the PTX, or None where it is not there."""
    m = re.search(r"\.global\s+\.align\s+\d+\s+\.b8\s+" + re.escape(symbol) + r"\[(\d+)\](?:\s*=\s*\{([^}]*)\})?", ptx)
    if m is None:
        return None
    n = int(m.group(1)) - 1
    vals = [int(v) for v in (m.group(2) or "").split(",") if v.strip()]
    letters = "".join(chr(v) for v in vals[:n]) + "\0" * max(0, n - len(vals))
    return letters if len(letters) == n and set(letters) <= _PROBE_LETTERS else None


def typed_params(raw: list[tuple[int, int, str]], kinds: str | None) -> list[tuple[int, int, str]]:
    """PTX parameters with the C type the probe found put in place of the PTX type (an
    ``int`` is ``.u32`` in PTX; packing needs to know it is signed)."""
    if kinds is None or len(kinds) != len(raw):
        return raw
    out = []
    for (size, align, ptype), k in zip(raw, kinds):
        row = PARAM.get((k, size))
        name = "pointer" if k == "p" else "other" if k == "o" else row.c if row is not None and row.c else ptype
        out.append((size, align, name))
    return out
