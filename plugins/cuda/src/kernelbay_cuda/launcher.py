"""Launching: the ``kernelbay_launch`` hook, each kernel's launch entry, its fast paths and the
slow path behind them.

A kernel gets its entry from :func:`arm` when it is made (:class:`.kernel.CudaKernel`). The first
launch with a given tuple of argument types validates each argument against the parameter's
size (``cuFuncGetParamInfo`` where the driver has it, else the PTX signature, see
:mod:`.packing`) and makes a fast path for that signature: a ``FastLaunch`` object from the
native helpers (``_launch.c``: type checks, values written into the block, ``cuLaunchKernel``,
all in C), else a generated Python function (the same checks, one ``struct.pack_into``, the
native launch call or the cuda.bindings one). Everything the fast path does not cover goes to
:func:`slow_launch`, the one place that validates and words errors. What a launch runs with --
its grid, block and shared memory, its stream -- is the kernel's own plan
(``CudaKernel.geometry``, ``CudaKernel.stream_arg``), which graph nodes use too (:mod:`.graphs`).
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import kernelbay as kb
from kernelbay.streams import Stream as KbStream
from kernelbay.types import dim3

from . import _driver, allocator, native
from .devices import last_cell, record
from .packing import ParamBlock, c_kinds, never, pack_plan
from .streams import _StreamHandle

if TYPE_CHECKING:  # the kernel arms itself through arm(); here it is only an argument
    from .kernel import CudaKernel

__all__ = ["STALE", "launch", "slow_launch", "make_fast", "arm", "fill_scratch"]

_get_ident = threading.get_ident

# CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED, CUDA_ERROR_INVALID_HANDLE: what a
# launch returns when the current context is not the kernel's.
_WRONG_CONTEXT = (201, 709, 400)

#: Marks a kernel's last packed values as stale (never equal to a value, never identical).
STALE = object()


def arm(k: CudaKernel) -> None:
    """Give a new kernel its launch entry: the first launch goes through the slow path and
    makes the fast one. A kernel with scratch parameters (Triton's global or profile scratch)
    keeps :func:`_scratch_launch` as its entry, in front of the fast path."""
    first = functools.partial(_first, k)
    if any(size for size, _ in k.scratch):
        k.scratch_buffers = []
        k.inner_entry = first
        k.entry = functools.partial(_scratch_launch, k)
    else:
        k.entry = first


def _scratch_launch(k: CudaKernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    """Fill a Triton kernel's scratch pointers for this grid, then launch. The buffers grow to
    the largest grid seen and are kept with the kernel: launches of one such kernel on two
    streams at once share them (as launches on one stream do, in order)."""
    fill_scratch(k, grid)
    return k.inner_entry(grid, block, args, shared_mem, stream)


def fill_scratch(k: CudaKernel, grid: Any) -> None:
    """Grow a Triton kernel's scratch buffers for ``grid`` and aim its parameter blocks (and
    ``k.scratch_pointers``, which later blocks copy) at them."""
    g = (grid, 1, 1) if type(grid) is int else dim3(grid, "grid")
    programs = g[0] * g[1] * g[2]
    hidden = k.params[len(k.caller_params) :]
    bufs = k.scratch_buffers
    assert bufs is not None  # arm() gives every kernel with scratch parameters its list
    for j, ((size, align), (_s, _a, _t, off)) in enumerate(zip(k.scratch, hidden)):
        if not size:
            continue
        need = size * programs + align
        while len(bufs) <= j:
            bufs.append(None)
        if bufs[j] is None or bufs[j].nbytes < need:
            bufs[j] = kb.empty(need, "uint8", device=k.device)
            ptr = (bufs[j].handle + align - 1) // align * align
            for blk in [k.param_block, *(b for b, _ in k.other_threads.values())]:
                struct.pack_into("<Q", blk.buf, off, ptr)
            k.scratch_pointers[off] = ptr


def launch(kernel: Any, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    """The ``kernelbay_launch`` hook: the kernel's launch entry (see :func:`arm`, :func:`make_fast`)."""
    return kernel.handle.entry(grid, block, args, shared_mem, stream)


def _direct_launch() -> Any:
    mod = native.module()
    return None if mod is None or not hasattr(mod, "Direct") else mod.Direct(2, {}, launch, {})


# The hook as a C callable (hookspecs.py, *Direct*): kernel.handle.entry(...) with no Python frame.
launch.kernelbay_direct = _direct_launch  # type: ignore[attr-defined]


def slow_launch(k: CudaKernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    """Every launch the fast path does not take: any geometry, any stream, new argument types."""
    g, b, shm = k.geometry(grid, block, shared_mem)
    s = None if stream is None else k.stream_arg(stream)
    allocator.note_uses(k.device, args, s)
    if _get_ident() != k.first_thread:
        launch_other_thread(k, g, b, args, shm, s)
        return None
    k.last_packed[0] = STALE  # the block is rewritten below, not by the fast path
    try:
        k.packer(args, k.device, k.param_block.buf)
    except Exception:
        k.packer = k.replan(args, k.param_block)
        _set_entry(k, make_fast(k, args))
    _raw_launch(k, g, b, shm, s, k.param_block)
    return None


def _set_entry(k: CudaKernel, fast: Any) -> None:
    if k.scratch_buffers is None:
        k.entry = fast
    else:  # the entry stays _scratch_launch, which calls this one
        k.inner_entry = fast


def launch_other_thread(
    k: CudaKernel, g: tuple[int, int, int], b: tuple[int, int, int], args: Sequence[Any], shm: int, s: Any
) -> None:
    """A launch from a thread other than the kernel's first: its own parameter block, so
    two threads never pack into one buffer."""
    tid = _get_ident()
    if k.first_thread == -1:
        with k.lock:
            if k.first_thread == -1:
                k.first_thread = tid
        if k.first_thread == tid:
            k.last_packed[0] = STALE
            k.packer = k.replan(args, k.param_block)
            _raw_launch(k, g, b, shm, s, k.param_block)
            return
    mine = k.other_threads.get(tid)
    if mine is None:
        mine = k.other_threads[tid] = (k.new_param_block(), never)
    blk, packer = mine
    try:
        packer(args, k.device, blk.buf)
    except Exception:
        packer = k.replan(args, blk)
        k.other_threads[tid] = (blk, packer)
    _raw_launch(k, g, b, shm, s, blk)


def _first(k: CudaKernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> None:
    slow_launch(k, grid, block, args, shared_mem, stream)
    if k.first_thread == _get_ident() and k.packer is not never:
        _set_entry(k, make_fast(k, args))


def failed_fast(k: CudaKernel, rc: int, grid: Any, block: Any, args: Sequence[Any], shm: int, stream: Any) -> None:
    """A fast-path launch failed: where it is because another device's context was current
    (this thread used another device since, or another library switched the context), make
    this kernel's context current and launch again through the slow path; else raise."""
    if rc in _WRONG_CONTEXT:
        _driver.force_current(k.index)
        return slow_launch(k, grid, block, args, shm, stream)
    b = k.fixed_block if block is None else dim3(block, "block")
    return k.failed(rc, dim3(grid, "grid"), b, shm)


def _raw_launch(
    k: CudaKernel, g: tuple[int, int, int], b: tuple[int, int, int], shm: int, s: Any, blk: ParamBlock
) -> None:
    """Launch with ``blk`` (already packed) in the kernel's context; raise for a failure."""
    _driver.ensure_current(k.index)
    launch = _cu_launch()
    rc = launch(k.ctypes_function, g[0], g[1], g[2], b[0], b[1], b[2], shm, s, blk.ctypes_kernel_params, None)
    if rc in _WRONG_CONTEXT:  # another library switched the context behind our record of it
        _driver.force_current(k.index)
        rc = launch(k.ctypes_function, g[0], g[1], g[2], b[0], b[1], b[2], shm, s, blk.ctypes_kernel_params, None)
    record(k.index, k.name, g, b)
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


_FAST_TEMPLATE = """
def fast(grid, block, args, shared_mem, stream):
    if type(grid) is tuple and 0 < len(grid) <= 3 and grid[1:] in ((), (1,), (1, 1)):
        grid = grid[0]  # (n,), (n, 1), (n, 1, 1): the same launch as n
    if type(block) is tuple and 0 < len(block) <= 3 and block[1:] in ((), (1,), (1, 1)):
        block = block[0]
    if type(grid) is int and type(block) is int and get_ident() == TID:
        if stream is None:
            s = S0
            if POOL.homed:  # blocks homed on user streams: the slow path notes cross-stream uses
                return slow(K, grid, block, args, shared_mem, stream)
        else:
            st = stream.handle if type(stream) is KbStreamT else stream
            if type(st) is StreamT and st.index == IDX and st.handle and not POOL.may_track(st.handle):
                s = st.{stream_attr}
            else:
                return slow(K, grid, block, args, shared_mem, stream)
        if 0 < grid <= MGX and 0 < block <= K.max_threads and 0 <= shared_mem <= K.dynamic_shared_limit:
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
                            LAST[0] = STALE
                            return slow(K, grid, block, args, shared_mem, stream)
                        {memostore}
                    rc = {launch_call}
                    CELL[0] = NAME; CELL[1] = grid; CELL[2] = block
                    if {ok_check}:
                        return None
                    return FAILED(K, int(rc), grid, block, args, shared_mem, stream)
    return slow(K, grid, block, args, shared_mem, stream)
"""


def make_fast(k: CudaKernel, args: Sequence[Any]) -> Any:
    """A launch function specialised to ``k`` and the argument types of ``args``. With the
    native helpers (:mod:`.native`) and plain argument kinds it is a ``FastLaunch`` object: every
    call form (grid and block as ints or 1-3 tuples, the default stream, a kernelbay Stream or a
    foreign stream) in C. Otherwise a generated Python function for int grid and block and the
    default stream or a kernelbay Stream (1-D geometry: ints or tuples such as ``(n,)`` and
    ``(n, 1, 1)``), launching the kernel's prepacked parameter block
    through the native ``launch`` or the cuda.bindings driver binding. Everything else goes to
    :func:`slow_launch`, which validates fully."""
    d = _driver.driver()
    nat = _native_launcher()
    fmt, values, handles, ckinds = pack_plan(k.name, k.caller_params, args, k.device, k.arg_names)
    n = len(args)
    if nat is not None:
        kinds = c_kinds(ckinds)
        if kinds is not None:  # the whole fast path in C (see FastLaunch in _launch.c)
            k.last_packed = [STALE]
            return nat.FastLaunch(
                k.function,
                k.param_block.kernel_params,
                ctypes.addressof(k.param_block.buf),
                k.first_thread,
                (k.max_gx, k.max_gy, k.max_gz),
                (k.max_bx, k.max_by, k.max_bz),
                k.max_threads,
                k.dynamic_shared_limit,
                (_StreamHandle, KbStream),
                k.index,
                k.device,
                tuple(type(a) for a in args),
                kinds,
                tuple(off for *_, off in k.caller_params),
                slow_launch,
                k,
                functools.partial(failed_fast, k),
                last_cell(k.index),
                k.name,
                k.fixed_block,
                k.extra_shared,
                allocator.allocator(k.device).pool,
            )
    # Skip re-packing when every value is the one packed last time: array handles are compared
    # as ints (no reference to an array is kept, so none outlives its user), immutable scalars
    # (numpy scalars, Python numbers) by identity. Values of any other kind always re-pack.
    memo_ok = bool(values) and all(v.isidentifier() for v in values)
    if memo_ok:
        tests = [f"{v} == LAST[{j}]" if v.startswith("h") else f"{v} is LAST[{j}]" for j, v in enumerate(values)]
        memocheck = " and ".join(tests)
        memostore = "; ".join(f"LAST[{j}] = {v}" for j, v in enumerate(values))
        last: list[Any] = [STALE] * len(values)
    else:
        memocheck, memostore, last = "False", "pass", [STALE]
    k.last_packed = last
    ns: dict[str, Any] = {
        "get_ident": _get_ident,
        "FAILED": failed_fast,
        "TID": k.first_thread,
        "IDX": k.index,
        "K": k,
        "slow": slow_launch,
        "MGX": k.max_gx,
        "BUF": k.param_block.buf,
        "ADDR": k.param_block.kernel_params,
        "pack_into": struct.Struct(fmt).pack_into,
        "CELL": last_cell(k.index),
        "LAST": last,
        "STALE": STALE,
        "NAME": k.name,
        "OK": d.CUresult.CUDA_SUCCESS,
        "DEV": k.device,
        "POOL": allocator.allocator(k.device).pool,
    }
    ns["StreamT"] = _StreamHandle
    ns["KbStreamT"] = KbStream
    if nat is not None:
        ns.update(S0=0, LAUNCH=nat.launch, FN=k.function)
        how = {
            "stream_attr": "handle",
            "launch_call": "LAUNCH(FN, grid, 1, 1, block, 1, 1, shared_mem, s, ADDR)",
            "ok_check": "not rc",
        }
    else:
        ns.update(S0=d.CUstream(0), LAUNCH=d.cuLaunchKernel, FN=d.CUfunction(k.function))
        how = {
            "stream_attr": "bindings_handle",
            "launch_call": "LAUNCH(FN, grid, 1, 1, block, 1, 1, shared_mem, s, ADDR, 0)[0]",
            "ok_check": "rc is OK",
        }
    for i, a in enumerate(args):
        ns[f"T{i}"] = type(a)
    unpack = (", ".join(f"a{i}" for i in range(n)) + ", = args") if n else "if args: raise ValueError"
    typecheck = " and ".join(f"type(a{i}) is T{i}" for i in range(n)) or "True"
    hs = [h[1:] for h in handles]
    hlines = "; ".join(f"h{i} = a{i}.handle" for i in hs) or "pass"
    hcheck = " and ".join(f"h{i} is not None and (a{i}.device is DEV or a{i}.device == DEV)" for i in hs) or "True"
    src = _FAST_TEMPLATE.format(
        unpack=unpack,
        typecheck=typecheck,
        handles=hlines,
        handlecheck=hcheck,
        values=", ".join(values) or "",
        memocheck=memocheck,
        memostore=memostore,
        **how,
    )
    if not values:
        src = src.replace("pack_into(BUF, 0, )", "pass")
    exec(src, ns)
    return ns["fast"]
