"""Host memory: 64-byte-aligned buffers owned by numpy, copies by memmove, DLPack both ways.

A buffer's memory is a numpy ``uint8`` array, so a host view (``Array.numpy()``) or a DLPack
export keeps the memory alive by reference even after the Buffer is closed: no view can dangle.

Guard pages: a buffer of at least one page is mapped on its own, its end (rounded up to 64
bytes) against a ``PROT_NONE`` page, so a kernel that writes or reads past it faults (a
``LaunchError`` naming the buffer, see :func:`.guards.describe_address`) instead of reaching the next
buffer. Smaller buffers share the heap, as CUDA's allocations share their granule.

Stream-ordered memory: work queued on a user stream holds the memory of each buffer it uses
(:func:`hold`, :func:`unhold`). A buffer closed while held is set aside -- its memory, and in
isolated mode its shared region, stay in place -- and released when the last queued use is done.
``memory_stats`` counts set-aside bytes as cached, not active (as the cuda backend does); the
peak counts them too, as memory kernelbay still held.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
from typing import Any

from kernelbay.errors import OutOfMemoryError
from kernelbay.types import Array, Device, MemoryStats

from . import _driver
from .guards import PAGE, guards

ALIGN = 64
KDLCPU = 1
#: Guarded buffers alive at once at most: each costs two memory maps, and a process has about 65,000
#: (vm.max_map_count). Past it, buffers are allocated without a guard page.
MAX_GUARDED = 16384
#: Buffers of HUGE_MIN bytes and more start on a huge-page boundary of their own mapping, which
#: asks for transparent huge pages (``madvise``), as numpy does for its arrays of 4 MiB and more:
#: a 2^20-float residual add on small pages ran 0.87-0.90x numpy's on numpy's arrays, 0.96-1.00x
#: so (docs/performance-cpu-speed.md). ``KERNELBAY_CPU_HUGEPAGES=0`` keeps small pages.
ENV_HUGE = "KERNELBAY_CPU_HUGEPAGES"
HUGE = os.environ.get(ENV_HUGE, "").strip().lower() not in ("0", "off", "no", "false")
HUGE_MIN = HUGE_PAGE = 1 << 21

log = logging.getLogger("kernelbay.cpu")
_libc: list[Any] = []


class HostMemory:
    """The handle of a cpu buffer: the aligned address and the numpy array that owns it."""

    __slots__ = ("ptr", "array", "nbytes", "owned", "shared", "uses", "freed", "guard")

    def __init__(self, ptr: int, array: Any, nbytes: int, owned: bool, shared: Any = None) -> None:
        self.ptr = ptr
        self.array = array  # uint8, exactly nbytes long, starting at ptr
        self.nbytes = nbytes
        self.owned = owned  # False for memory adopted through DLPack
        self.shared = shared  # the shared-memory region in isolated mode (_worker_client.Region)
        self.uses = 0  # jobs queued on user streams that use this memory (under _stats.lock)
        self.freed = False  # closed while in use: released by the last unhold()
        self.guard = 0  # the PROT_NONE page after the buffer (0: none)

    def __repr__(self) -> str:
        return f"HostMemory(ptr=0x{self.ptr:x}, nbytes={self.nbytes})"


class _Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.deferred = 0  # closed, owned bytes still used by queued stream work
        self.peak = 0  # of active + deferred


_stats = _Stats()


def _after_fork_in_child() -> None:
    _stats.lock = threading.Lock()  # a stream worker of the parent may have held it at fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def allocate(device: Device, nbytes: int) -> HostMemory:
    import numpy as np  # heavy: loaded by the first allocation, not by importing the backend

    if _driver.isolated():  # the worker process maps the same memory at the same address
        # Isolated mode only: the worker client brings in sockets, pickling and shared memory.
        from . import _worker_client

        try:
            ptr, arr, region = _worker_client.allocate(nbytes)
        except OSError as exc:
            raise OutOfMemoryError(f"cannot allocate {nbytes} bytes of shared memory on {device}: {exc}") from None
        with _stats.lock:
            _stats.active += nbytes
            _stats.peak = max(_stats.peak, _stats.active + _stats.deferred)
        return HostMemory(ptr, arr, nbytes, True, region)
    if nbytes >= PAGE and len(guards) < MAX_GUARDED:
        h = _guarded(np, nbytes)
        if h is not None:
            _count(nbytes)
            return h
    try:
        raw = np.empty(nbytes + ALIGN, np.uint8)
    except MemoryError:
        with _stats.lock:
            active = _stats.active
        raise OutOfMemoryError(
            f"cannot allocate {nbytes} bytes of host memory on {device} ({active} bytes in use by kernelbay); "
            "free some arrays or use smaller ones"
        ) from None
    base = raw.ctypes.data
    off = (-base) % ALIGN
    arr = raw[off : off + nbytes]
    _count(nbytes)
    return HostMemory(base + off, arr, nbytes, True)


def _count(nbytes: int) -> None:
    with _stats.lock:
        _stats.active += nbytes
        if _stats.active + _stats.deferred > _stats.peak:
            _stats.peak = _stats.active + _stats.deferred


def _madvise_huge(m: mmap.mmap, start: int, length: int) -> None:
    """Ask for transparent huge pages over [start, start + length) of the mapping (where the
    system's setting is ``madvise``, as numpy does for its arrays of 4 MiB and more)."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            m.madvise(advice, start, length)
        except OSError:
            pass  # no transparent huge pages here: small pages, as before


def _mprotect_none(addr: int) -> bool:
    if not _libc:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _libc.append(libc)
    return _libc[0].mprotect(addr, PAGE, 0) == 0


def _guarded(np: Any, nbytes: int) -> HostMemory | None:
    """A buffer in its own mapping whose end (rounded up to ALIGN) touches a PROT_NONE page; None
    where the mapping cannot be made (the heap then serves it, without a guard)."""
    used = -(-nbytes // ALIGN) * ALIGN
    span = -(-used // PAGE) * PAGE
    huge = HUGE and nbytes >= HUGE_MIN
    try:
        m = mmap.mmap(-1, span + PAGE + (HUGE_PAGE if huge else 0), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as exc:
        raise OutOfMemoryError(f"cannot allocate {nbytes} bytes of host memory: {exc}") from None
    whole = np.frombuffer(m, np.uint8)  # the array keeps the mapping; it goes with the last view
    base = whole.ctypes.data
    start = (-base) % HUGE_PAGE if huge else 0  # the buffer's pages from a huge-page boundary on
    if huge:
        _madvise_huge(m, start, span)
    if not _mprotect_none(base + start + span):
        log.info("kernelbay: no guard page after a %d-byte buffer (mprotect: errno %d)", nbytes, ctypes.get_errno())
        return None
    off = start + span - used
    h = HostMemory(base + off, whole[off : off + nbytes], nbytes, True)
    h.guard = base + start + span
    guards[h.guard] = (h.ptr, nbytes)
    return h


def free(device: Device, handle: HostMemory) -> None:
    with _stats.lock:
        if handle.owned:
            _stats.active -= handle.nbytes
        if handle.uses:  # queued stream work still uses it: the last unhold() releases it
            handle.freed = True
            if handle.owned:
                _stats.deferred += handle.nbytes
            return
    _release(handle)


def _release(handle: HostMemory) -> None:
    if handle.guard:
        guards.pop(handle.guard, None)
        handle.guard = 0
    if handle.shared is not None:
        handle.shared.release()
    handle.array = None  # memory goes when the last host view of it goes


def hold(handles: list[HostMemory]) -> None:
    """Queued stream work uses these buffers' memory: a close defers its release until :func:`unhold`."""
    with _stats.lock:
        for h in handles:
            h.uses += 1


def unhold(handles: list[HostMemory]) -> None:
    """The queued work that :func:`hold` these is done: release those closed meanwhile."""
    done = []
    with _stats.lock:
        for h in handles:
            h.uses -= 1
            if h.freed and not h.uses:
                h.freed = False
                if h.owned:
                    _stats.deferred -= h.nbytes
                done.append(h)
    for h in done:
        _release(h)


def host_view(array: Array) -> Any:
    """A numpy view of ``array``'s memory (the DLPack export's; streams.host_view is the hook)."""
    h = array.checked_handle()
    return h.array.view(array.dtype).reshape(array.shape)


def memory_stats(device: Device) -> MemoryStats:
    with _stats.lock:
        # nothing is cached for reuse; blocks set aside for queued stream work count as cached
        return MemoryStats(active=_stats.active, peak=_stats.peak, cached=_stats.deferred, limit=None)


# --- DLPack -----------------------------------------------------------------------------


def from_external(obj: Any, device: Device | None) -> tuple[HostMemory, tuple[int, ...], Any] | None:
    """Adopt a kDLCPU DLPack producer (numpy, PyTorch, JAX on cpu) without a copy."""
    dev_fn = getattr(obj, "__dlpack_device__", None)
    if _driver.isolated():  # foreign memory is not shared with the worker: the core copies
        return None
    if dev_fn is None or not hasattr(obj, "__dlpack__"):
        return None
    try:
        dev_type, _ = dev_fn()
    except Exception:
        return None
    if int(dev_type) != KDLCPU:
        return None
    import numpy as np  # heavy: loaded by the first import of foreign memory, not by importing the backend

    try:
        view = np.from_dlpack(obj)
    except (BufferError, TypeError, ValueError, RuntimeError):
        return None
    # kernelbay arrays are C-contiguous and writable; anything else is copied by the core.
    if not view.flags.c_contiguous or not view.flags.writeable:
        return None
    flat = view.reshape(-1).view(np.uint8) if view.size else np.empty(0, np.uint8)
    return HostMemory(view.ctypes.data, flat, view.nbytes, False), tuple(view.shape), view.dtype


def to_dlpack(array: Array, stream: Any, max_version: Any) -> Any:
    view = host_view(array)
    # numpy writes a versioned, writable capsule when the consumer can read one.
    return view.__dlpack__() if max_version is None else view.__dlpack__(max_version=max_version)


def dlpack_device(array: Array) -> tuple[int, int]:
    return (KDLCPU, 0)
