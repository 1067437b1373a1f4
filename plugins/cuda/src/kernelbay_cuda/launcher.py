"""Kernels: the handle kept per compiled kernel, argument packing, validation and the launch.

Arguments are packed into one reusable parameter block per kernel (a ``void**`` array whose
pointers aim into one byte buffer). The first launch with a given tuple of argument types
validates each argument against the parameter's size (``cuFuncGetParamInfo`` where the driver
has it, else the PTX signature) and makes a fast path for that signature: a ``FastLaunch``
object from the native helpers (``_native.c``: type checks, values written into the block,
``cuLaunchKernel``, all in C), else a generated Python function (the same checks, one
``struct.pack_into``, the native launch call or the cuda.bindings one). Everything the fast
path does not cover goes to :func:`slow_launch`, the one place that validates and words errors.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Sequence
from typing import Any

from kernelbay.errors import ArgumentTypeError, InvalidArgumentError, LaunchError, UseAfterFreeError
from kernelbay.types import Buffer, dim3

from . import _driver, native
from .compiler import Image, Module

__all__ = ["CudaKernel", "launch", "pack_plan", "ParamSpec"]

_get_ident = threading.get_ident
_pack_into = struct.pack_into

#: (size, align, ptx type or "") per parameter, and the byte offset of each.
ParamSpec = tuple[int, int, str, int]

# Most recent launch per device, to name the kernel when a later synchronise reports a fault.
# The most recent launch per device, [kernel name, grid, block], for naming a kernel whose
# failure only shows at a later synchronise. Cells are mutated in place: generated fast paths
# hold a reference to their device's cell (three stores, no tuple per launch).
last_launch: dict[int, list[Any]] = {}


def _last_cell(index: int) -> list[Any]:
    cell = last_launch.get(index)
    if cell is None:
        cell = last_launch.setdefault(index, [None, None, None])
    return cell


def _record(index: int, name: str, g: Any, b: Any) -> None:
    cell = _last_cell(index)
    cell[0] = name
    cell[1] = g
    cell[2] = b


# Marks a kernel's memo of packed values as stale (never equal to a value, never identical).
_STALE = object()


# CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED, CUDA_ERROR_INVALID_HANDLE: what a
# launch returns when the current context is not the kernel's.
_WRONG_CONTEXT = (201, 709, 400)


class _Replan(Exception):
    """Raised by a generated packer when the arguments no longer match its signature."""


_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}
_UINT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
_FLOAT_CODES = {2: "e", 4: "f", 8: "d"}


def layout(params: Sequence[tuple[int, int, str]]) -> list[ParamSpec]:
    """Offsets for parameters given as (size, align, type), as the C ABI lays them out."""
    out: list[ParamSpec] = []
    pos = 0
    for size, align, t in params:
        align = max(1, align)
        pos = (pos + align - 1) // align * align
        out.append((size, align, t, pos))
        pos += size
    return out


def _describe(params: Sequence[ParamSpec]) -> str:
    return ", ".join(f"{s} bytes" + (f" ({t})" if t else "") for s, _, t, _ in params)


def pack_plan(
    name: str, params: Sequence[ParamSpec], args: Sequence[Any], device: Any
) -> tuple[str, list[str], list[str], list[str]]:
    """Validate ``args`` against ``params``; return (struct format, value expressions, handle
    names, pre-checks) for a packer. Raises the kernelbay error for the first bad argument."""
    import numpy as np

    if len(args) != len(params):
        raise InvalidArgumentError(
            f"kernel {name!r} takes {len(params)} argument(s) ({_describe(params)}), got {len(args)}"
        )
    fmt = "<"
    pos = 0
    values: list[str] = []
    handles: list[str] = []
    for i, (a, (size, _align, ptype, off)) in enumerate(zip(args, params)):
        if off > pos:
            fmt += f"{off - pos}x"
        pos = off + size
        where = f"argument {i} of kernel {name!r}"
        kind = ptype[:1]
        if isinstance(a, Buffer):
            h = a.handle
            if h is None:
                raise UseAfterFreeError(f"{where} is a {type(a).__name__} that was closed")
            if a.device != device:
                raise InvalidArgumentError(
                    f"{where} lives on {a.device}, but the kernel was compiled for {device}; copy it with "
                    f"kb.asarray(x, device={str(device)!r}) first"
                )
            if size != 8:
                raise ArgumentTypeError(f"{where} is a device array (an 8-byte pointer), but the parameter is {size} bytes")
            fmt += "Q"
            handles.append(f"a{i}")
            values.append(f"h{i}")
        elif isinstance(a, np.generic):
            dt = a.dtype
            if dt.itemsize != size:
                raise ArgumentTypeError(
                    f"{where} is {dt.name} ({dt.itemsize} bytes), but the parameter is {size} bytes"
                    + (f" ({ptype})" if ptype else "")
                )
            if kind == "f" and dt.kind != "f" or kind in ("s", "u") and dt.kind == "f":
                raise ArgumentTypeError(f"{where} is {dt.name}, but the parameter is {ptype}")
            if dt.kind == "f" and size in _FLOAT_CODES:
                fmt += _FLOAT_CODES[size]
            elif dt.kind in "ib" and size in _INT_CODES:
                fmt += _INT_CODES[size] if dt.kind == "i" else "?"
            elif dt.kind == "u" and size in _UINT_CODES:
                fmt += _UINT_CODES[size]
            else:
                fmt += f"{size}s"
                values.append(f"a{i}.tobytes()")
                continue
            values.append(f"a{i}")
        elif type(a) is float or (type(a) in (int, bool) and kind == "f"):
            if kind in ("s", "u", "b") and type(a) is float:
                raise ArgumentTypeError(f"{where} is a Python float, but the parameter is {ptype}; pass np.{ptype}-typed value")
            if size not in (4, 8):
                raise ArgumentTypeError(
                    f"{where} is a Python number, but the parameter is {size} bytes: pass a numpy scalar "
                    "(np.float16(...)) so the size is explicit"
                )
            fmt += _FLOAT_CODES[size]
            values.append(f"a{i}")
        elif type(a) in (int, bool):
            if size not in (4, 8):
                raise ArgumentTypeError(
                    f"{where} is a Python int, but the parameter is {size} bytes: pass a numpy scalar "
                    "(np.int16(...), np.uint8(...)) so the size is explicit"
                )
            lo, hi = -(1 << (8 * size - 1)), (1 << (8 * size)) - 1
            if not lo <= a <= hi:
                raise InvalidArgumentError(f"{where} = {a} does not fit the {size}-byte parameter")
            if a > (1 << (8 * size - 1)) - 1:
                fmt += _UINT_CODES[size]
            else:
                fmt += _INT_CODES[size]
            values.append(f"a{i}")
        elif hasattr(a, "__cuda_array_interface__"):
            if size != 8:
                raise ArgumentTypeError(f"{where} is a device array (an 8-byte pointer), but the parameter is {size} bytes")
            fmt += "Q"
            values.append(f"a{i}.__cuda_array_interface__['data'][0]")
        elif isinstance(a, (bytes, bytearray)):
            if len(a) != size:
                raise ArgumentTypeError(f"{where} is {len(a)} bytes, but the parameter is {size} bytes")
            fmt += f"{size}s"
            values.append(f"bytes(a{i})")
        else:
            raise ArgumentTypeError(
                f"{where} has type {type(a).__name__}; pass a kernelbay Array/Buffer, a numpy scalar "
                f"(np.float32(2.0)) or a Python number, for a {size}-byte parameter"
            )
    return fmt, values, handles, []


def make_packer(name: str, params: Sequence[ParamSpec], args: Sequence[Any], device: Any) -> Any:
    """A function ``pack(args, device, buf)`` specialised to the types of ``args``."""
    fmt, values, handles, _ = pack_plan(name, params, args, device)
    n = len(args)
    lines = ["def pack(args, dev, buf):"]
    if n:
        lines.append(f"    {', '.join(f'a{i}' for i in range(n))}, = args")
        lines.append("    if " + " or ".join(f"type(a{i}) is not T{i}" for i in range(n)) + ": raise Replan")
    else:
        lines.append("    if args: raise Replan")
    for h in handles:
        i = h[1:]
        lines.append(f"    h{i} = a{i}.handle")
    if handles:
        lines.append("    if " + " or ".join(f"h{h[1:]} is None" for h in handles) + ": raise Replan")
        lines.append(
            "    if " + " or ".join(f"(a{h[1:]}.device is not dev and a{h[1:]}.device != dev)" for h in handles)
            + ": raise Replan"
        )
    if values:
        lines.append(f"    pack_into(buf, 0, {', '.join(values)})")
    ns: dict[str, Any] = {"Replan": _Replan, "pack_into": struct.Struct(fmt).pack_into}
    for i, a in enumerate(args):
        ns[f"T{i}"] = type(a)
    exec("\n".join(lines), ns)
    return ns["pack"]


class _ParamBlock:
    """One reusable parameter block: a byte buffer and the ``void*`` array aimed into it."""

    __slots__ = ("buf", "ptrs", "cvp", "addr")

    def __init__(self, params: Sequence[ParamSpec]) -> None:
        total = max(8, max((off + size for size, _, _, off in params), default=8))
        self.buf = (ctypes.c_char * total)()
        base = ctypes.addressof(self.buf)
        self.ptrs = (ctypes.c_void_p * max(1, len(params)))(*[base + off for *_, off in params] or [None])
        self.addr = ctypes.addressof(self.ptrs)
        self.cvp = ctypes.c_void_p(self.addr)


class CudaKernel:
    """The handle the CUDA backend keeps for a compiled kernel (``Kernel.handle``)."""

    __slots__ = (
        "device", "index", "name", "symbol", "module", "fn", "fn_c", "params", "block", "packer",
        "tid", "max_threads", "max_gx", "max_gy", "max_gz", "max_bx", "max_by", "max_bz", "static_shared",
        "dyn_limit", "optin", "auto_block", "other_threads", "lock", "fast", "memo", "__weakref__",
    )

    def __init__(self, device: Any, module: Module, expr: str, symbol: str, params: list[ParamSpec] | None) -> None:
        p = device.properties
        self.device = device
        self.index = device.index
        self.name = expr
        self.symbol = symbol
        self.module = module
        self.fn = module.function(symbol)
        self.fn_c = ctypes.c_void_p(int(self.fn))
        lib = _driver.libcuda()
        self.max_threads = self._attr(lib, 0) or p.get("max_threads_per_block") or 1024
        self.static_shared = self._attr(lib, 1) or 0
        self.optin = max(p.get("max_shared_per_block_optin") or 0, p.get("max_shared_per_block") or 49152)
        self.dyn_limit = max(0, (p.get("max_shared_per_block") or 49152) - self.static_shared)
        self.max_gx = p.get("max_grid_x") or 2147483647
        self.max_gy = p.get("max_grid_y") or 65535
        self.max_gz = p.get("max_grid_z") or 65535
        self.max_bx = p.get("max_block_x") or 1024
        self.max_by = p.get("max_block_y") or 1024
        self.max_bz = p.get("max_block_z") or 64
        driver_params = self._driver_params(lib)
        if driver_params is not None:
            if params is not None and [s for s, *_ in params] == [s for s, *_ in driver_params]:
                params = [(s, a, t, o) for (s, a, t, _), (_, _, _, o) in zip(params, driver_params)]
            else:
                params = driver_params
        if params is None:
            raise InvalidArgumentError(
                f"cannot tell the parameters of kernel {expr!r}: this driver lacks cuFuncGetParamInfo and the "
                "module carries no PTX signature; compile from CUDA C++ or PTX, or upgrade the driver (>= 12.4)"
            )
        self.params = params
        self.block = _ParamBlock(params)
        self.packer = _never
        self.fast = self._first
        # The values last packed by the fast path (see make_fast); [_STALE] until then.
        self.memo: list[Any] = [_STALE]
        self.tid = -1
        self.auto_block: dict[int, int] = {}
        self.other_threads: dict[int, tuple[_ParamBlock, Any]] = {}
        self.lock = threading.Lock()

    def _attr(self, lib: ctypes.CDLL, attr: int) -> int | None:
        v = ctypes.c_int()
        return v.value if lib.cuFuncGetAttribute(ctypes.byref(v), attr, self.fn_c) == 0 else None

    def _driver_params(self, lib: ctypes.CDLL) -> list[ParamSpec] | None:
        f = getattr(lib, "cuFuncGetParamInfo", None)
        if f is None:
            return None
        out: list[ParamSpec] = []
        off, size = ctypes.c_size_t(), ctypes.c_size_t()
        for i in range(4096):
            rc = f(self.fn_c, ctypes.c_size_t(i), ctypes.byref(off), ctypes.byref(size))
            if rc:
                if i == 0 and rc != 1:  # not supported for this function: fall back to PTX
                    return None
                break
            out.append((size.value, 1, "", off.value))
        return out

    # --- the slow paths of launch -------------------------------------------------------

    def occupancy_block(self, shared_mem: int) -> int:
        b = self.auto_block.get(shared_mem)
        if b is None:
            _driver.ensure_current(self.index)
            mg, bs = ctypes.c_int(), ctypes.c_int()
            rc = _driver.libcuda().cuOccupancyMaxPotentialBlockSize(
                ctypes.byref(mg), ctypes.byref(bs), self.fn_c, None, ctypes.c_size_t(shared_mem), 0
            )
            _driver.check(rc, f"cuOccupancyMaxPotentialBlockSize for {self.name!r}", self.index)
            b = self.auto_block[shared_mem] = max(1, bs.value)
        return b

    def check_geometry(self, gx: Any, gy: Any, gz: Any, bx: Any, by: Any, bz: Any, shared_mem: Any) -> None:
        """Raise for a geometry outside the device's limits; raise the kernel's dynamic
        shared-memory limit when the request needs it (and the device allows it)."""
        for v, what in ((gx, "grid"), (gy, "grid"), (gz, "grid"), (bx, "block"), (by, "block"), (bz, "block")):
            if type(v) is not int or v < 1:
                raise InvalidArgumentError(f"launch of {self.name!r}: {what} dimensions must be ints >= 1, got {v!r}")
        g, b = (gx, gy, gz), (bx, by, bz)
        if gx > self.max_gx or gy > self.max_gy or gz > self.max_gz:
            raise InvalidArgumentError(
                f"launch of {self.name!r}: grid {g} exceeds {self.device}'s limits "
                f"({self.max_gx}, {self.max_gy}, {self.max_gz})"
            )
        if bx > self.max_bx or by > self.max_by or bz > self.max_bz:
            raise InvalidArgumentError(
                f"launch of {self.name!r}: block {b} exceeds {self.device}'s limits "
                f"({self.max_bx}, {self.max_by}, {self.max_bz})"
            )
        if bx * by * bz > self.max_threads:
            raise InvalidArgumentError(
                f"launch of {self.name!r}: block {b} has {bx * by * bz} threads; this kernel allows at most "
                f"{self.max_threads} per block on {self.device}"
            )
        if type(shared_mem) is not int or shared_mem < 0:
            raise InvalidArgumentError(f"launch of {self.name!r}: shared_mem must be an int >= 0, got {shared_mem!r}")
        if shared_mem > self.dyn_limit:
            most = self.optin - self.static_shared
            if shared_mem > most:
                raise InvalidArgumentError(
                    f"launch of {self.name!r}: {shared_mem} bytes of dynamic shared memory requested; {self.device} "
                    f"allows at most {most} for this kernel ({self.optin} per block, {self.static_shared} static)"
                )
            _driver.ensure_current(self.index)
            rc = _driver.libcuda().cuFuncSetAttribute(self.fn_c, 8, ctypes.c_int(shared_mem))
            _driver.check(rc, f"raising the dynamic shared-memory limit of {self.name!r} to {shared_mem}", self.index)
            self.dyn_limit = shared_mem
            try:
                self.fast.dyn_limit = shared_mem  # a FastLaunch keeps its own copy
            except AttributeError:
                pass

    def replan(self, args: Sequence[Any], block: _ParamBlock) -> Any:
        """Validate ``args`` fully, make a packer for their types and pack them into ``block``."""
        packer = make_packer(self.name, self.params, args, self.device)
        try:
            packer(args, self.device, block.buf)
        except (struct.error, OverflowError) as exc:  # e.g. a Python float beyond a float parameter's range
            raise InvalidArgumentError(f"arguments of kernel {self.name!r} do not fit its parameters: {exc}") from None
        return packer

    def launch_other_thread(self, g: tuple[int, int, int], b: tuple[int, int, int], args: Sequence[Any], shm: int, s: Any) -> None:
        """A launch from a thread other than the kernel's first: its own parameter block, so
        two threads never pack into one buffer."""
        tid = _get_ident()
        if self.tid == -1:
            with self.lock:
                if self.tid == -1:
                    self.tid = tid
            if self.tid == tid:
                self.memo[0] = _STALE
                self.packer = self.replan(args, self.block)
                _raw_launch(self, g, b, shm, s, self.block)
                return
        mine = self.other_threads.get(tid)
        if mine is None:
            mine = self.other_threads[tid] = (_ParamBlock(self.params), _never)
        blk, packer = mine
        try:
            packer(args, self.device, blk.buf)
        except Exception:
            packer = self.replan(args, blk)
            self.other_threads[tid] = (blk, packer)
        _raw_launch(self, g, b, shm, s, blk)

    def _first(self, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> None:
        slow_launch(self, grid, block, args, shared_mem, stream)
        if self.tid == _get_ident() and self.packer is not _never:
            self.fast = make_fast(self, args)

    def failed_fast(self, rc: int, grid: int, block: int, args: Sequence[Any], shm: int, stream: Any) -> None:
        """A fast-path launch failed: where it is because another device's context was current
        (this thread used another device since, or another library switched the context), make
        this kernel's context current and launch again through the slow path; else raise."""
        if rc in _WRONG_CONTEXT:
            _driver.force_current(self.index)
            return slow_launch(self, grid, block, args, shm, stream)
        return self.failed(rc, (grid, 1, 1), (block, 1, 1), shm)

    def failed(self, rc: int, g: tuple[int, int, int], b: tuple[int, int, int], shm: int) -> None:
        if rc == 0:
            return None
        _driver.check(rc, f"launch of kernel {self.name!r} (grid {g}, block {b}, shared_mem {shm})", self.index)
        raise LaunchError(f"launch of kernel {self.name!r} failed with CUDA error {rc}")


def _never(args: Any, dev: Any, buf: Any) -> None:
    raise _Replan


def _raw_launch(k: CudaKernel, g: tuple[int, int, int], b: tuple[int, int, int], shm: int, s: Any, blk: _ParamBlock) -> None:
    """Launch with ``blk`` (already packed) in the kernel's context; raise for a failure."""
    _driver.ensure_current(k.index)
    launch = _cu_launch()
    rc = launch(k.fn_c, g[0], g[1], g[2], b[0], b[1], b[2], shm, s, blk.cvp, None)
    if rc in _WRONG_CONTEXT:  # another library switched the context behind our record of it
        _driver.force_current(k.index)
        rc = launch(k.fn_c, g[0], g[1], g[2], b[0], b[1], b[2], shm, s, blk.cvp, None)
    _record(k.index, k.name, g, b)
    if rc:
        k.failed(rc, g, b, shm)


_launch_fn: Any = None
_native_ready = False


def _native_launcher() -> Any:
    """The native helper module with its ``cuLaunchKernel`` set, or None (see :mod:`.native`)."""
    global _native_ready
    nat = native.module()
    if nat is not None and not _native_ready:
        nat.set_launch(ctypes.cast(_driver.libcuda().cuLaunchKernel, ctypes.c_void_p).value)
        _native_ready = True
    return nat


def _cu_launch() -> Any:
    global _launch_fn
    if _launch_fn is None:
        _launch_fn = _driver.libcuda().cuLaunchKernel
    return _launch_fn


def launch(kernel: Any, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    """The ``kernelbay_launch`` hook: the kernel's generated fast path (see :func:`make_fast`)."""
    return kernel.handle.fast(grid, block, args, shared_mem, stream)


def slow_launch(k: CudaKernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    """Every launch the fast path does not take: any geometry, any stream, new argument types."""
    if type(grid) is int:
        gx = grid
        gy = gz = 1
    else:
        gx, gy, gz = dim3(grid, "grid")
    if block is None:
        bx = k.auto_block.get(shared_mem) or k.occupancy_block(shared_mem)
        by = bz = 1
    elif type(block) is int:
        bx = block
        by = bz = 1
    else:
        bx, by, bz = dim3(block, "block")
    if not (
        0 < gx <= k.max_gx
        and gy <= k.max_gy
        and gz <= k.max_gz
        and 0 < bx * by * bz <= k.max_threads
        and by <= k.max_by
        and bz <= k.max_bz
        and 0 <= shared_mem <= k.dyn_limit
    ):
        k.check_geometry(gx, gy, gz, bx, by, bz, shared_mem)
    if stream is None:
        s = None
    else:
        s = _stream_arg(stream, k)
    if _get_ident() != k.tid:
        k.launch_other_thread((gx, gy, gz), (bx, by, bz), args, shared_mem, s)
        return None
    k.memo[0] = _STALE  # the block is rewritten below, not by the fast path
    try:
        k.packer(args, k.device, k.block.buf)
    except Exception:
        k.packer = k.replan(args, k.block)
        k.fast = make_fast(k, args)
    _raw_launch(k, (gx, gy, gz), (bx, by, bz), shared_mem, s, k.block)
    return None


def _stream_arg(stream: Any, k: CudaKernel) -> Any:
    from .streams import as_stream

    stream = as_stream(stream, k.device)
    if stream.index != k.index:
        raise InvalidArgumentError(f"launch of {k.name!r} on {k.device} was given a stream of cuda:{stream.index}")
    return stream.cvp


# --- compile hook ------------------------------------------------------------------------

_kernels: dict[tuple[int, Any], CudaKernel] = {}
_modules: dict[tuple[int, bytes], Module] = {}
_lock = threading.Lock()


def compile_kernel(device: Any, source: Any) -> CudaKernel:
    """The ``kernelbay_compile`` hook: a kernel from the in-process cache, the disk cache or NVRTC."""
    key = (device.index, source)
    k = _kernels.get(key)
    if k is not None:
        return k
    with _lock:
        k = _kernels.get(key)
        if k is not None:
            return k
        _driver.check_alive(device.index)
        image, expr = _image_for(device, source)
        mkey = (device.index, image.data)
        mod = _modules.get(mkey)
        if mod is None:
            mod = _modules[mkey] = Module(device.index, image)
        symbol = image.lowered.get(expr, expr)
        raw = image.params.get(symbol)
        params = layout(raw) if raw is not None and (raw or "(" in expr or True) else None
        global _launch_fn
        if _launch_fn is None:
            _launch_fn = _driver.libcuda().cuLaunchKernel
        k = CudaKernel(device, mod, expr, symbol, params)
        _kernels[key] = k
        return k


def _image_for(device: Any, source: Any) -> tuple[Image, str]:
    from . import compiler

    cc = tuple(device.properties["compute_capability"])
    lang = source.lang
    if lang == "cuda":
        entry, _ = compiler.entry_names(source)
        return compiler.compile_image(source, cc), entry
    data = source.code if isinstance(source.code, bytes) else source.code.encode()
    params: dict[str, list[tuple[int, int, str]]] = {}
    if lang == "ptx":
        text = data.decode(errors="replace")
        params = compiler.parse_ptx_params(text)
        if not data.endswith(b"\0"):
            data += b"\0"
    name = source.name
    if name is None:
        if len(params) == 1:
            name = next(iter(params))
        else:
            raise InvalidArgumentError(f"a {lang} source needs Source(..., name='kernel_symbol') to say which kernel to launch")
    return Image(data=data, kind=lang, params=params), name


_FAST_TEMPLATE = """
def fast(grid, block, args, shared_mem, stream):
    if type(grid) is int and type(block) is int and get_ident() == TID:
        if stream is None:
            s = S0
        elif type(stream) is StreamT and stream.index == IDX and stream.handle:
            s = stream.{stream_attr}
        else:
            return slow(K, grid, block, args, shared_mem, stream)
        if 0 < grid <= MGX and 0 < block <= K.max_threads and 0 <= shared_mem <= K.dyn_limit:
            try:
                {unpack}
            except ValueError:
                return slow(K, grid, block, args, shared_mem, stream)
            if {typecheck}:
                {handles}
                if {handlecheck}:
                    if not ({memocheck}):
                        try:
                            pack_into(BUF, 0, {values})
                        except Exception:  # e.g. an int out of range: the slow path says so
                            M[0] = STALE
                            return slow(K, grid, block, args, shared_mem, stream)
                        {memostore}
                    rc = {launch_call}
                    CELL[0] = NAME; CELL[1] = grid; CELL[2] = block
                    if {ok_check}:
                        return None
                    return K.failed_fast(int(rc), grid, block, args, shared_mem, stream)
    return slow(K, grid, block, args, shared_mem, stream)
"""


_C_CODES = frozenset("fdbBhHiIqQ?")


def _c_kinds(fmt: str, values: list[str]) -> str | None:
    """Per argument, what FastLaunch writes: 'P' an array's handle, else the struct code of a
    plain value; None where an argument needs Python (half floats, raw bytes, foreign arrays)."""
    import re

    codes = [(cnt, c) for cnt, c in re.findall(r"(\d*)([a-zA-Z?])", fmt.lstrip("<")) if c != "x"]
    if len(codes) != len(values) or len(values) > 256:
        return None
    out = []
    for i, ((cnt, c), v) in enumerate(zip(codes, values)):
        if v == f"h{i}" and c == "Q" and not cnt:
            out.append("P")
        elif v == f"a{i}" and c in _C_CODES and not cnt:
            out.append(c)
        else:
            return None
    return "".join(out)


def make_fast(k: CudaKernel, args: Sequence[Any]) -> Any:
    """A launch function specialised to ``k`` and the argument types of ``args``: int grid and
    block, the default stream or a kernelbay Stream, arguments of those types. Everything else
    goes to :func:`slow_launch`, which validates fully. With the native helpers (:mod:`.native`)
    and plain argument kinds it is a ``FastLaunch`` object (the same checks in C); otherwise a
    generated Python function that launches the kernel's prepacked parameter block through the
    native ``launch`` or the cuda.bindings driver binding."""
    d = _driver.driver()
    nat = _native_launcher()
    fmt, values, handles, _ = pack_plan(k.name, k.params, args, k.device)
    n = len(args)
    if nat is not None:
        kinds = _c_kinds(fmt, values)
        if kinds is not None:  # the whole fast path in C (see FastLaunch in _native.c)
            from .streams import Stream

            k.memo = [_STALE]
            return nat.FastLaunch(
                int(k.fn), k.block.addr, ctypes.addressof(k.block.buf), k.tid, k.max_gx, k.max_threads,
                k.dyn_limit, Stream, k.index, k.device, tuple(type(a) for a in args), kinds,
                tuple(off for *_, off in k.params), slow_launch, k, k.failed_fast, _last_cell(k.index), k.name,
            )
    # Skip re-packing when every value is the one packed last time: array handles are compared
    # as ints (no reference to an array is kept, so none outlives its user), immutable scalars
    # (numpy scalars, Python numbers) by identity. Values of any other kind always re-pack.
    memo_ok = bool(values) and all(v.isidentifier() for v in values)
    if memo_ok:
        tests = [f"{v} == M[{j}]" if v.startswith("h") else f"{v} is M[{j}]" for j, v in enumerate(values)]
        memocheck = " and ".join(tests)
        memostore = "; ".join(f"M[{j}] = {v}" for j, v in enumerate(values))
        memo: list[Any] = [_STALE] * len(values)
    else:
        memocheck, memostore, memo = "False", "pass", [_STALE]
    k.memo = memo
    ns: dict[str, Any] = {
        "get_ident": _get_ident, "TID": k.tid, "IDX": k.index, "K": k,
        "slow": slow_launch, "MGX": k.max_gx, "BUF": k.block.buf, "ADDR": k.block.addr,
        "pack_into": struct.Struct(fmt).pack_into,
        "CELL": _last_cell(k.index), "M": memo, "STALE": _STALE, "NAME": k.name, "OK": d.CUresult.CUDA_SUCCESS, "DEV": k.device,
    }
    from .streams import Stream

    ns["StreamT"] = Stream
    if nat is not None:
        ns.update(S0=0, LAUNCH=nat.launch, FN=int(k.fn))
        how = {"stream_attr": "handle", "launch_call": "LAUNCH(FN, grid, 1, 1, block, 1, 1, shared_mem, s, ADDR)",
               "ok_check": "not rc"}
    else:
        ns.update(S0=d.CUstream(0), LAUNCH=d.cuLaunchKernel, FN=d.CUfunction(k.fn))
        how = {"stream_attr": "bobj", "launch_call": "LAUNCH(FN, grid, 1, 1, block, 1, 1, shared_mem, s, ADDR, 0)[0]",
               "ok_check": "rc is OK"}
    for i, a in enumerate(args):
        ns[f"T{i}"] = type(a)
    unpack = (", ".join(f"a{i}" for i in range(n)) + ", = args") if n else "if args: raise ValueError"
    typecheck = " and ".join(f"type(a{i}) is T{i}" for i in range(n)) or "True"
    hs = [h[1:] for h in handles]
    hlines = "; ".join(f"h{i} = a{i}.handle" for i in hs) or "pass"
    hcheck = " and ".join(f"h{i} is not None and (a{i}.device is DEV or a{i}.device == DEV)" for i in hs) or "True"
    src = _FAST_TEMPLATE.format(
        unpack=unpack, typecheck=typecheck, handles=hlines, handlecheck=hcheck, values=", ".join(values) or "",
        memocheck=memocheck, memostore=memostore, **how,
    )
    if not values:
        src = src.replace("pack_into(BUF, 0, )", "pass")
    exec(src, ns)
    return ns["fast"]
