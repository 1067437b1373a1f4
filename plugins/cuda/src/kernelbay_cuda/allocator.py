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

Stream-ordered memory, after PyTorch's and CuPy's per-stream pools. Every block has a home
stream: the stream current when it was allocated (``with stream:``), else the legacy default
stream. A freed block goes back to its home's free list at once, with no event and no wait:
the next allocation on that stream reuses it in stream order. Blocking user streams
(``dev.stream()``) and the legacy default stream are ordered with each other by CUDA, so a block
of the default stream is also handed to them. Work kernelbay queues on any other stream (a
launch, a copy) notes that use (as ``record_stream`` does, automatically; :func:`note_use`):
freeing such a block records an event on each stream that used it, and the block is set aside
until those events complete (``memory_stats`` counts it as cached). Only such cross-stream
blocks cost an event. A foreign stream (PyTorch's, CuPy's) must outlive the kernelbay arrays
used on it, as PyTorch asks of ``record_stream``.
"""

from __future__ import annotations

import ctypes
import threading
from collections import deque
from typing import Any

from kernelbay import streams as _core_streams
from kernelbay.concurrency import OnceMap
from kernelbay.errors import InvalidArgumentError, OutOfMemoryError
from kernelbay.types import MemoryStats

from . import _driver, native
from .native import SMALL
from .native import size_class as round_size

__all__ = ["DeviceAllocator", "allocator", "set_memory_limit", "ExternalPointer"]

SLAB = 64 * 1024
DEFAULT_FRACTION = 0.9


class ExternalPointer(int):
    """A device pointer adopted from another library; keeps the owner alive (``.owner``)."""

    owner: Any
    device: Any


class DeviceAllocator:
    """The caching allocator of one device.

    Cached blocks and the counters live in a pool (:mod:`.native`: C where it can be built,
    else Python) whose calls are atomic; a request the pool cannot serve from its cache, and
    the small-block slots, are served here under ``lock``.
    """

    def __init__(self, index: int, total_memory: int) -> None:
        self.index = index
        self.lock = threading.Lock()
        self.small_free: list[int] = []
        self.small_live: set[int] = set()
        self.slabs: list[int] = []
        self.total = total_memory
        self.pool = native.make_pool(int(total_memory * DEFAULT_FRACTION) if total_memory else None)
        _pools[index] = self.pool  # what the direct allocate and free read (see _direct)
        self.deferred: deque[tuple[list[Any], int, int]] = deque()  # (events, ptr, size), in record order
        self.deferred_bytes = 0
        self.events: list[Any] = []  # spare events for deferral
        # cumulative counts for memory_stats().counters (kernelbay profile prints them)
        self.counters = {
            "cross_stream_frees": 0,
            "cross_stream_events": 0,
            "cross_stream_bytes": 0,
            "misses_while_set_aside": 0,
            "event_waits": 0,
        }

    @property
    def active(self) -> int:
        return self.pool.active

    @property
    def peak(self) -> int:
        return self.pool.peak

    @property
    def cached(self) -> int:
        return self.pool.cached

    @property
    def limit(self) -> int | None:
        return self.pool.limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        self.pool.limit = value

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
        active, peak, cached = self.pool.stats()
        return OutOfMemoryError(
            f"cuda:{self.index}: out of memory allocating {size} bytes ({why}): active {active}, "
            f"cached {cached}, peak {peak}, limit {self.limit} bytes. Free arrays you no longer "
            "need, or raise the limit with kernelbay_cuda.set_memory_limit()"
        )

    # --- allocate / free ------------------------------------------------------------

    def malloc(self, nbytes: int) -> int:
        """A block of at least ``nbytes``: from the cache when one of its size class is there."""
        return self.pool.malloc(nbytes) or self.malloc_slow(nbytes)

    def malloc_on(self, nbytes: int, home: int) -> int:
        """A block whose home is user stream ``home`` (a CUstream handle)."""
        return self.pool.malloc_on(nbytes, home) or self.malloc_slow(nbytes, home)

    def malloc_slow(self, nbytes: int, home: int = 0) -> int:
        """A small slot, or a new block from the driver (the pool's cache had none)."""
        take = self.pool.malloc_on if home else None
        if self.deferred:
            self.counters["misses_while_set_aside"] += 1
            self.reclaim()
            p = take(nbytes, home) if take else self.pool.malloc(nbytes)
            if p:
                return p
        if nbytes <= SMALL:
            return self._small()
        size = round_size(nbytes)
        with self.lock:
            p = take(nbytes, home) if take else self.pool.malloc(nbytes)  # another thread may have freed one
            if p:
                return p
            lim = self.pool.limit
            if lim is not None:
                active, _, cached = self.pool.stats()
                if active + size > lim:
                    self._release_cache_locked()
                    raise self._oom(size, f"the memory limit of {lim} bytes would be exceeded")
                if active + cached + size > lim:
                    self._release_cache_locked()
            p = self._raw_alloc(size)
            self.pool.adopt(p, size, home)
        return p

    def _small(self) -> int:
        with self.lock:
            if not self.small_free:
                slab = self._raw_alloc(SLAB)
                self.slabs.append(slab)
                self.small_free.extend(range(slab + SLAB - SMALL, slab - 1, -SMALL))
            p = self.small_free.pop()
            self.small_live.add(p)
        self.pool.add_active(SMALL)
        return p

    def free(self, ptr: int) -> None:
        r = self.pool.free(ptr)
        if r:
            self.free_slow(ptr, r)

    def free_slow(self, ptr: int, r: int) -> None:
        """After the pool's ``free`` returned ``r``: a small slot (-1), a block to give back (> 0),
        or a block other streams used (-2: set aside behind their events)."""
        if r == -2:
            self.defer(ptr)
            return
        if r > 0:
            with self.lock:
                self._raw_free(ptr)
            return
        with self.lock:
            if ptr not in self.small_live:
                return
            self.small_live.discard(ptr)
            self.small_free.append(ptr)
        self.pool.add_active(-SMALL)

    # --- stream-ordered reuse --------------------------------------------------------

    def defer(self, ptr: int) -> None:
        """Free ``ptr`` once the work queued before now on each stream that used it is done: an
        event is recorded on each (:func:`note_use`), and the block is set aside until they complete."""
        lib = _driver.libcuda()
        _driver.ensure_current(self.index)
        uses = self.pool.take_uses(ptr) or [0]
        evs = []
        for s in uses:
            with self.lock:
                ev = self.events.pop() if self.events else None
            if ev is None:
                ev = ctypes.c_void_p()
                _driver.check(lib.cuEventCreate(ctypes.byref(ev), 2), "cuEventCreate", self.index)  # no timing
            _driver.check(lib.cuEventRecord(ev, ctypes.c_void_p(s) if s else None), "cuEventRecord", self.index)
            evs.append(ev)
        size = self.pool.size_of(ptr) or SMALL
        with self.lock:
            self.deferred.append((evs, ptr, size))
            self.deferred_bytes += size
            c = self.counters
            c["cross_stream_frees"] += 1
            c["cross_stream_events"] += len(evs)
            c["cross_stream_bytes"] += size
        self.reclaim()

    def reclaim(self, wait: bool = False) -> None:
        """Give set-aside blocks whose event has completed back to the cache (all, with ``wait``)."""
        lib = _driver.libcuda()
        while True:
            with self.lock:
                if not self.deferred:
                    return
                evs, ptr, size = self.deferred[0]
                if wait:
                    self.counters["event_waits"] += 1
                for ev in evs:
                    rc = lib.cuEventSynchronize(ev) if wait else lib.cuEventQuery(ev)
                    if rc != 0:  # not ready (600), or a failed context: keep it aside
                        return
                self.deferred.popleft()
                self.deferred_bytes -= size
                self.events.extend(evs)
            r = self.pool.free(ptr)
            if r:
                self.free_slow(ptr, r)

    def size_of(self, ptr: int) -> int | None:
        return self.pool.size_of(ptr)

    # --- cache and stats ------------------------------------------------------------

    def _release_cache_locked(self) -> None:
        for p in self.pool.take_cached():
            self._raw_free(p)

    def clear_cache(self) -> None:
        if self.deferred and _driver.dead_reason(self.index) is None:
            _driver.ensure_current(self.index)
            self.reclaim(wait=True)
        with self.lock:
            self._release_cache_locked()

    def stats(self) -> MemoryStats:
        active, peak, cached = self.pool.stats()
        d = self.deferred_bytes  # freed, waiting for a stream: cached, not active
        return MemoryStats(
            active=active - d, peak=peak, cached=cached + d, limit=self.pool.limit, counters=dict(self.counters)
        )

    def reset_peak(self) -> None:
        self.pool.reset_peak()


_allocators = OnceMap()  # device index -> DeviceAllocator
_pools: dict[int, Any] = {}  # device index -> its allocator's pool


def allocator(device: Any) -> DeviceAllocator:
    return _allocators.get_or_make(device.index, _new_allocator, device)


def _new_allocator(device: Any) -> DeviceAllocator:
    return DeviceAllocator(device.index, device.properties.get("total_memory", 0))


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
    """The ``kernelbay_allocate`` hook: a block whose home is the stream current for ``device``
    in this thread (``with stream:``), else the legacy default stream."""
    a = _allocators.get(device.index)
    if a is None:
        a = allocator(device)
    if _core_streams.intercept:  # some thread is inside `with stream:` (or capturing a graph)
        s = _core_streams.current_stream(device)
        h = getattr(getattr(s, "handle", None), "handle", 0) if s is not None else 0
        if h:
            return a.malloc_on(nbytes, h)
    return a.pool.malloc(nbytes) or a.malloc_slow(nbytes)


def note_uses(device: Any, objs: Any, s: ctypes.c_void_p | None) -> None:
    """Work queued on CUstream ``s`` (None: the legacy default stream) uses the kernelbay blocks
    among ``objs`` (buffers, arrays; anything else is skipped): where that work is not ordered
    with a block's home stream, freeing the block waits for it (an event on ``s``)."""
    a = _allocators.get(device.index)
    if a is None:
        return
    pool = a.pool
    sv = (s.value or 0) if s is not None else 0
    if not pool.may_track(sv):
        return
    for o in objs:
        h = getattr(o, "handle", None)
        if type(h) is int and getattr(o, "device", None) == device:
            pool.note_use(h, sv)


def free(device: Any, handle: Any) -> None:
    """The ``kernelbay_free`` hook (never raises)."""
    if type(handle) is not int:
        if isinstance(handle, ExternalPointer):
            handle.owner = None
        return
    a = _allocators.get(device.index)
    if a is not None:
        try:
            r = a.pool.free(handle)
            if r:
                a.free_slow(handle, r)
        except Exception:
            pass


# --- user streams ---------------------------------------------------------------------------


def stream_opened(device: Any, handle: int, blocking: bool) -> None:
    """A user stream was made: tell the pool whether it is ordered with the legacy default stream."""
    allocator(device).pool.set_blocking(handle, blocking)


def stream_closing(index: int, handle: int) -> bool:
    """A user stream is closing: ``True`` when blocks have it as their home (the caller then
    synchronises it and calls :func:`stream_closed` before destroying it)."""
    a = _allocators.get(index)
    return a is not None and bool(a.pool.has_home(handle))


#: Bumped at every stream close: uses noted for a stream are forgotten then (see graphs).
closed_streams = 0


def stream_closed(index: int, handle: int) -> None:
    """A closing stream's work is done: its blocks now belong to the legacy default stream."""
    global closed_streams
    closed_streams += 1
    a = _allocators.get(index)
    if a is not None:
        a.pool.rehome(handle)


def _free_rest(device: Any, handle: Any, r: Any = None) -> None:
    """The direct free's fallback: the whole hook, or (``r`` given) what follows the pool's
    ``free`` returning ``r != 0`` (a small slot, a block to give back, a block other streams used)."""
    if r is None:
        free(device, handle)
        return
    a = _allocators.get(device.index)
    if a is not None:
        try:
            a.free_slow(handle, r)
        except Exception:
            pass


def _direct(kind: int, fallback: Any) -> Any:
    def make() -> Any:
        mod = native.module()
        if mod is None or not hasattr(mod, "Direct"):
            return None
        return mod.Direct(kind, _pools, fallback, vars(_core_streams))

    return make


# The hooks as C callables (hookspecs.py, *Direct*): a cache hit or a plain free runs no Python
# frame; everything else calls the hooks above, so both paths behave the same.
allocate.kernelbay_direct = _direct(0, allocate)  # type: ignore[attr-defined]
free.kernelbay_direct = _direct(1, _free_rest)  # type: ignore[attr-defined]
