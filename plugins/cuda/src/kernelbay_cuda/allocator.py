"""A caching device allocator after MLX's CUDA allocator.

* Requests of at most 8 bytes (zero included) come from a small-block pool: 8-byte slots
  carved out of 64 KiB slabs, so scalars do not each cost a ``cuMemAlloc``.
* Requests under 16 KiB are rounded up to a power of two; larger ones to whole 16 KiB pages.
* A freed block goes to a free list by rounded size and is reused by the next request of that
  size; the allocator never hands out managed memory.
* A memory limit (default 90% of the device's memory, :func:`set_memory_limit`) bounds active
  plus cached bytes: above it the cache is released first. When ``cuMemAlloc`` fails the cache
  is released and the allocation retried once; then :class:`OutOfMemoryError` names active,
  cached and peak bytes.

Blocks are reused as soon as they are freed: work queued on the legacy default stream (and on
blocking streams, which order with it) is safe; keep an array alive until a non-blocking
stream that uses it has been synchronised.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from kernelbay.errors import InvalidArgumentError, OutOfMemoryError
from kernelbay.types import MemoryStats

from . import _driver

__all__ = ["DeviceAllocator", "allocator", "set_memory_limit", "ExternalPointer"]

SMALL = 8
SLAB = 64 * 1024
PAGE = 16 * 1024
DEFAULT_FRACTION = 0.9


def round_size(nbytes: int) -> int:
    """The size class of a request (> 8 bytes)."""
    if nbytes < PAGE:
        return 1 << max(4, (nbytes - 1).bit_length())
    return (nbytes + PAGE - 1) // PAGE * PAGE


class ExternalPointer(int):
    """A device pointer adopted from another library; keeps the owner alive (``.owner``)."""

    owner: Any
    device: Any


class DeviceAllocator:
    """The caching allocator of one device."""

    def __init__(self, index: int, total_memory: int) -> None:
        self.index = index
        self.lock = threading.Lock()
        self.free_lists: dict[int, list[int]] = {}
        self.sizes: dict[int, int] = {}  # live block pointer -> size class (not small slots)
        self.small_free: list[int] = []
        self.small_live: set[int] = set()
        self.slabs: list[int] = []
        self.active = 0
        self.peak = 0
        self.cached = 0
        self.total = total_memory
        self.limit = int(total_memory * DEFAULT_FRACTION) if total_memory else None
        self._cu_alloc = None
        self._cu_free = None

    # --- raw driver calls -----------------------------------------------------------

    def _raw_alloc(self, size: int) -> int:
        lib = _driver.libcuda()
        _driver.ensure_current(self.index)
        p = ctypes.c_uint64()
        rc = lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size))
        if rc == 2:  # out of memory: give back the cache and try once more
            self._release_cache_locked()
            rc = lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size))
        if rc == 2:
            raise self._oom(size, "the device has no more free memory")
        _driver.check(rc, f"cuMemAlloc({size})", self.index)
        return p.value

    def _raw_free(self, ptr: int) -> None:
        if _driver.dead_reason(self.index) is not None:
            return
        _driver.ensure_current(self.index)
        _driver.libcuda().cuMemFree_v2(ctypes.c_uint64(ptr))

    def _oom(self, size: int, why: str) -> OutOfMemoryError:
        return OutOfMemoryError(
            f"cuda:{self.index}: out of memory allocating {size} bytes ({why}): active {self.active}, "
            f"cached {self.cached}, peak {self.peak}, limit {self.limit} bytes. Free arrays you no longer "
            "need, or raise the limit with kernelbay_cuda.set_memory_limit()"
        )

    # --- allocate / free ------------------------------------------------------------

    def malloc(self, nbytes: int) -> int:
        if nbytes <= SMALL:
            return self._small()
        if nbytes < PAGE:
            size = 1 << max(4, (nbytes - 1).bit_length())
        else:
            size = (nbytes + PAGE - 1) & -PAGE
        lock = self.lock
        lock.acquire()
        try:
            lst = self.free_lists.get(size)
            if lst:
                p = lst.pop()
                self.cached -= size
            else:
                p = self._miss(size)
            self.sizes[p] = size
            a = self.active = self.active + size
            if a > self.peak:
                self.peak = a
        finally:
            lock.release()
        return p

    def _miss(self, size: int) -> int:
        lim = self.limit
        if lim is not None:
            if self.active + size > lim:
                self._release_cache_locked()
                raise self._oom(size, f"the memory limit of {lim} bytes would be exceeded")
            if self.active + self.cached + size > lim:
                self._release_cache_locked()
        return self._raw_alloc(size)

    def _small(self) -> int:
        with self.lock:
            if not self.small_free:
                slab = self._raw_alloc(SLAB)
                self.slabs.append(slab)
                self.small_free.extend(range(slab + SLAB - SMALL, slab - 1, -SMALL))
            p = self.small_free.pop()
            self.small_live.add(p)
            self.active += SMALL
            if self.active > self.peak:
                self.peak = self.active
            return p

    def free(self, ptr: int) -> None:
        lock = self.lock
        lock.acquire()
        try:
            size = self.sizes.pop(ptr, None)
            if size is None:
                if ptr in self.small_live:
                    self.small_live.discard(ptr)
                    self.small_free.append(ptr)
                    self.active -= SMALL
                return
            a = self.active = self.active - size
            lim = self.limit
            if lim is not None and a + self.cached + size > lim:
                self._raw_free(ptr)
                return
            lst = self.free_lists.get(size)
            if lst is None:
                self.free_lists[size] = [ptr]
            else:
                lst.append(ptr)
            self.cached += size
        finally:
            lock.release()

    def size_of(self, ptr: int) -> int | None:
        return self.sizes.get(ptr)

    # --- cache and stats ------------------------------------------------------------

    def _release_cache_locked(self) -> None:
        if not self.cached:
            return
        lists, self.free_lists = self.free_lists, {}
        for lst in lists.values():
            for p in lst:
                self._raw_free(p)
        self.cached = 0

    def clear_cache(self) -> None:
        with self.lock:
            self._release_cache_locked()

    def stats(self) -> MemoryStats:
        return MemoryStats(active=self.active, peak=self.peak, cached=self.cached, limit=self.limit)

    def reset_peak(self) -> None:
        self.peak = self.active


_allocators: dict[int, DeviceAllocator] = {}
_lock = threading.Lock()


def allocator(device: Any) -> DeviceAllocator:
    a = _allocators.get(device.index)
    if a is None:
        with _lock:
            a = _allocators.get(device.index)
            if a is None:
                a = _allocators[device.index] = DeviceAllocator(device.index, device.properties.get("total_memory", 0))
    return a


def set_memory_limit(device: Any, limit: int | None) -> int | None:
    """Set the allocator's limit for ``device`` in bytes (``None``: no limit); returns the old one."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise InvalidArgumentError(f"memory limit must be an int >= 0 or None, got {limit!r}")
    a = allocator(device)
    with a.lock:
        old, a.limit = a.limit, limit
        if limit is not None and a.active + a.cached > limit:
            a._release_cache_locked()
    return old


def allocate(device: Any, nbytes: int) -> Any:
    """The ``kernelbay_allocate`` hook."""
    a = _allocators.get(device.index)
    if a is None:
        a = allocator(device)
    return a.malloc(nbytes)


def free(device: Any, handle: Any) -> None:
    """The ``kernelbay_free`` hook (never raises)."""
    if type(handle) is not int:
        if isinstance(handle, ExternalPointer):
            handle.owner = None
        return
    a = _allocators.get(device.index)
    if a is not None:
        try:
            a.free(handle)
        except Exception:
            pass
