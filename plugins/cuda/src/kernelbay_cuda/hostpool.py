"""Page-locked host arrays for device-to-host results (the ``kernelbay_host_empty`` hook).

``Array.numpy()``, ``np.asarray(array)`` and ``np.array(array)`` copy into a host array the core
makes. Into pageable memory a large copy is staged through pinned buffers by host threads
(copies.py) and is bounded by the host's memcpy and page faults (0.4-0.8x the pinned speed on
an H200 host, 0.35-0.5x into fresh pages); into page-locked memory it is one DMA. So those
arrays come from this pool of page-locked blocks, and a block goes back to the pool when the
last view of its array is gone.

Rules, each for a reason:

* Only copies of at least :data:`MIN_BYTES` (below it the driver's own staging is as fast).
* A size class is served from the pool from its second request on: ``cuMemHostAlloc`` of a new
  block costs more than one staged copy (page-locking touches every page), so a one-off copy
  keeps the pageable path and a repeated one (a loop fetching results) gets the fast one.
* The pool holds at most :data:`limit` bytes, in use and cached together
  (``KERNELBAY_CUDA_PINNED_RESULTS``; page-locked memory cannot be swapped out): past it a
  result is an ordinary ``np.empty`` again. ``kernelbay_clear_cache`` frees the cached blocks.
* Only the copy into the array uses the page-locked memory as such (one DMA, waited for). An
  upload from a result array takes the staged path as from any pageable array (copies.py), and
  graphs do not make it a host node (graphs.py): both would make the copy asynchronous to the
  host, which the user did not ask for (writing to the array right after ``kb.copy`` returned
  would change what is copied, or the block could go back to the pool while a copy reads it).
* Page-locked memory is a shared mapping: a forked child would share the parent's result arrays
  (its writes seen by the parent). So a child copies the live ones into private memory at the
  same addresses when it starts (numpy arrays behave after ``fork`` as they always do), and it
  never returns or frees its parent's blocks.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import weakref
from typing import Any

from kernelbay.settings import env_bytes

from . import _driver

__all__ = ["Lease", "host_empty", "pool", "MIN_BYTES", "size_class"]

log = logging.getLogger("kernelbay.cuda")

MIN_BYTES = 1 << 20
ENV_LIMIT = "KERNELBAY_CUDA_PINNED_RESULTS"


def size_class(nbytes: int) -> int:
    """The block size serving ``nbytes``: a multiple of 1 MiB, at most 1/8 above it for large
    sizes (its granule is an eighth of the power of two below ``nbytes``)."""
    granule = max(MIN_BYTES, 1 << max(0, (nbytes - 1).bit_length() - 4))
    return -(-nbytes // granule) * granule


def _default_limit() -> int:
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        ram = 8 << 30
    return min(4 << 30, ram // 8)


class _Block:
    """One page-locked allocation (``cuMemHostAlloc``, portable across contexts)."""

    __slots__ = ("ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr = ptr
        self.size = size


class Lease:
    """The owner of one result array's memory: numpy holds it as the array's ``base`` (through
    ``__array_interface__``); when numpy drops it, the block goes back to the pool."""

    __slots__ = ("block", "nbytes", "pool", "__weakref__")

    def __init__(self, block: _Block, nbytes: int, pool: HostPool) -> None:
        self.block = block
        self.nbytes = nbytes
        self.pool = pool
        _live.add(self)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.block.ptr, False), "version": 3}

    def __del__(self) -> None:
        try:
            self.pool.give_back(self.block)
        except Exception:  # interpreter shutdown: the process's end frees the memory
            pass


class HostPool:
    """Cached page-locked blocks by size class, bounded by :attr:`limit` bytes held."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pid = os.getpid()
        self.held = 0  # bytes of every block made, in use or cached
        self.cached: dict[int, list[_Block]] = {}
        self.asked: set[int] = set()  # size classes requested before (second request -> pool)
        self.lock = threading.RLock()  # re-entrant: a Lease may die (GC) inside take()

    def take(self, nbytes: int, device_index: int) -> Lease | None:
        """A lease of a block of ``size_class(nbytes)``, or None (below the minimum, a first
        request of its class, or over the limit)."""
        if nbytes < MIN_BYTES or self.limit <= 0 or os.getpid() != self.pid:
            return None
        size = size_class(nbytes)
        with self.lock:
            free = self.cached.get(size)
            block = free.pop() if free else None
            if block is None:
                if size not in self.asked:
                    self.asked.add(size)
                    return None
                if self.held + size > self.limit and not self._trim(size):
                    return None
                self.held += size  # counted before the allocation: another thread sees it
        if block is None:
            block = self._alloc(size, device_index)
            if block is None:
                return None
        return Lease(block, nbytes, self)

    def give_back(self, block: _Block) -> None:
        if os.getpid() != self.pid:
            return  # a forked child: the parent's block, not this process's to reuse or free
        with self.lock:
            self.cached.setdefault(block.size, []).append(block)

    def _alloc(self, size: int, device_index: int) -> _Block | None:
        lib = _driver.libcuda()
        p = ctypes.c_void_p()
        try:
            _driver.ensure_current(device_index)
            rc = lib.cuMemHostAlloc(ctypes.byref(p), ctypes.c_size_t(size), 1)  # PORTABLE
        except Exception:
            rc = -1
        if rc or not p.value:
            with self.lock:
                self.held -= size
            log.info(
                "pinned result block of %d bytes not available (CUDA error %s): a pageable array instead", size, rc
            )
            return None
        return _Block(p.value, size)

    def _trim(self, need: int) -> bool:
        """Free cached blocks (largest first) until ``need`` more bytes fit; the lock is held."""
        blocks = sorted((b for bs in self.cached.values() for b in bs), key=lambda b: b.size, reverse=True)
        for b in blocks:
            if self.held + need <= self.limit:
                break
            self.cached[b.size].remove(b)
            self._free(b)
        return self.held + need <= self.limit

    def _free(self, b: _Block) -> None:
        _driver.libcuda().cuMemFreeHost(ctypes.c_void_p(b.ptr))
        self.held -= b.size

    def clear(self) -> None:
        """Free every cached block (blocks in use come back and are cached as usual)."""
        if os.getpid() != self.pid:
            return
        with self.lock:
            for bs in self.cached.values():
                for b in bs:
                    self._free(b)
            self.cached.clear()

    def stats(self) -> dict[str, int]:
        with self.lock:
            cached = sum(b.size for bs in self.cached.values() for b in bs)
            return {"held": self.held, "cached": cached, "in_use": self.held - cached, "limit": self.limit}


_pool: HostPool | None = None
_pool_lock = threading.Lock()
_live: weakref.WeakSet[Lease] = weakref.WeakSet()  # leases whose arrays live (fork: made private)

_PROT_RW = 0x1 | 0x2
_MAP_PRIVATE_ANON_FIXED = 0x02 | 0x20 | 0x10


def _private_in_child() -> None:
    """In a forked child: each live result array's memory, a mapping shared with the parent, is
    replaced by private memory at the same address holding the same bytes."""
    leases = list(_live)
    if not leases:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    for lease in leases:
        b = lease.block
        keep = bytearray(lease.nbytes)
        ctypes.memmove((ctypes.c_char * lease.nbytes).from_buffer(keep), b.ptr, lease.nbytes)
        p = libc.mmap(b.ptr, b.size, _PROT_RW, _MAP_PRIVATE_ANON_FIXED, -1, 0)
        if p != b.ptr:  # cannot happen short of exhausted memory: say so rather than share silently
            log.warning(
                "forked child: result array at %#x stays shared with the parent (mmap errno %d)",
                b.ptr,
                ctypes.get_errno(),
            )
            continue
        ctypes.memmove(b.ptr, (ctypes.c_char * lease.nbytes).from_buffer(keep), lease.nbytes)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_private_in_child)


def pool() -> HostPool:
    """The process's pool (made at first use, its limit read then)."""
    global _pool
    p = _pool
    if p is None or p.pid != os.getpid():
        with _pool_lock:
            p = _pool
            if p is None or p.pid != os.getpid():
                p = _pool = HostPool(env_bytes(ENV_LIMIT, default=_default_limit()))
    return p


def host_empty(device: Any, nbytes: int) -> Any:
    """The ``kernelbay_host_empty`` hook: a page-locked result array, or None for np.empty."""
    if nbytes < MIN_BYTES:
        return None
    lease = pool().take(nbytes, device.index)
    if lease is None:
        return None
    import numpy as np  # deferred: importing the plugin stays cheap

    return np.asarray(lease)
