"""The allocator's pool (native and pure Python) and the allocator's bookkeeping above it.

No GPU needed: the pool only keeps integers, and the allocator's driver calls are replaced by
a fake device memory that records every allocation and free.
"""

from __future__ import annotations

import threading

import pytest
from kernelbay.errors import OutOfMemoryError
from kernelbay_cuda import allocator as A
from kernelbay_cuda import native

MiB = 1 << 20


@pytest.fixture(params=["native", "python"])
def make(request):
    if request.param == "native":
        mod = native.module()
        if mod is None:
            pytest.skip(f"the native helpers are unavailable here: {native.status()}")
        return mod.Pool
    return native.PyPool


def test_native_helpers_build_here() -> None:
    # Where Python's headers and a C compiler exist (this CI machine, the GPU machines), the
    # native pool must actually be in use; elsewhere the reason is reported.
    import os
    import sysconfig

    from kernelbay.native import disabled

    if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) and not disabled():
        assert native.status() == "native"
    else:
        assert native.status().startswith("python (")


@pytest.mark.parametrize(
    ("nbytes", "size"),
    [(9, 16), (16, 16), (17, 32), (1000, 1024), (16383, 16384), (16384, 16384), (16385, 32768), (MiB + 1, MiB + 16384)],
)
def test_size_classes(make, nbytes, size) -> None:
    p = make(-1)
    assert native.size_class(nbytes) == size
    p.adopt(0x1000, size)
    assert p.free(0x1000) == 0
    assert p.malloc(nbytes) == 0x1000  # a request of that class reuses the block
    assert p.malloc(nbytes) == 0  # and only once


def test_miss_small_and_unknown(make) -> None:
    p = make(-1)
    assert p.malloc(MiB) == 0
    assert p.malloc(8) == 0 and p.malloc(0) == 0  # small requests are the caller's
    assert p.free(0xDEAD) == -1
    assert p.size_of(0xDEAD) is None


def test_counters(make) -> None:
    p = make(-1)
    p.adopt(0x1000, MiB)
    p.adopt(0x2000, 2 * MiB)
    assert p.stats() == (3 * MiB, 3 * MiB, 0)
    assert p.size_of(0x2000) == 2 * MiB
    assert p.free(0x1000) == 0
    assert p.stats() == (2 * MiB, 3 * MiB, MiB)
    assert (p.active, p.peak, p.cached) == (2 * MiB, 3 * MiB, MiB)
    p.reset_peak()
    assert p.peak == 2 * MiB
    p.add_active(8)
    assert p.stats() == (2 * MiB + 8, 2 * MiB + 8, MiB)
    p.add_active(-8)
    assert p.malloc(MiB) == 0x1000
    assert p.stats() == (3 * MiB, 3 * MiB, 0)


def test_limit_sends_blocks_back(make) -> None:
    p = make(4 * MiB)
    assert p.limit == 4 * MiB
    p.adopt(0x1000, 2 * MiB)
    p.adopt(0x2000, MiB)
    p.adopt(0x3000, MiB // 2)
    assert p.free(0x3000) == 0  # freeing never adds to active + cached: kept
    p.limit = 2 * MiB  # lowered below what is held
    assert p.free(0x1000) == 2 * MiB  # keeping it would pass the limit: the caller frees it
    assert p.free(0x2000) == 0  # 1.5 MiB cached: within the limit
    assert p.stats() == (0, 3 * MiB + MiB // 2, MiB + MiB // 2)
    p.limit = None
    assert p.limit is None
    with pytest.raises((ValueError, TypeError)):
        p.limit = -5


def test_take_cached(make) -> None:
    p = make(-1)
    for i, size in enumerate([MiB, MiB, 64, 32768]):
        p.adopt(0x1000 * (i + 1), size)
        p.free(0x1000 * (i + 1))
    assert sorted(p.take_cached()) == [0x1000, 0x2000, 0x3000, 0x4000]
    assert p.cached == 0 and p.take_cached() == []
    assert p.malloc(MiB) == 0


def test_threads_never_share_a_block(make) -> None:
    p = make(-1)
    blocks = [0x10000 * (i + 1) for i in range(64)]
    for b in blocks:
        p.adopt(b, MiB)
        p.free(b)
    held: set[int] = set()
    guard = threading.Lock()
    errors: list[str] = []

    def work() -> None:
        for _ in range(3000):
            b = p.malloc(MiB)
            if not b:
                continue
            with guard:
                if b in held:
                    errors.append(f"{b:#x} handed out twice")
                held.add(b)
            with guard:
                held.discard(b)
            assert p.free(b) == 0

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert p.stats()[0] == 0 and p.cached == 64 * MiB
    assert sorted(p.take_cached()) == blocks


class FakeMemory:
    """Stands in for cuMemAlloc/cuMemFree: hands out addresses, fails past ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.live: dict[int, int] = {}
        self.next = 0x7F0000000000
        self.allocs = 0

    def alloc(self, al: A.DeviceAllocator, size: int) -> int:
        if sum(self.live.values()) + size > self.capacity:
            al._release_cache_locked()
            if sum(self.live.values()) + size > self.capacity:
                raise al._oom(size, "the device has no more free memory")
        p = self.next
        self.next += size
        self.live[p] = size
        self.allocs += 1
        return p

    def free(self, ptr: int) -> None:
        del self.live[ptr]


@pytest.fixture(params=["native", "python"])
def fake(request, monkeypatch):
    if request.param == "native" and native.module() is None:
        pytest.skip(f"the native helpers are unavailable here: {native.status()}")
    if request.param == "python":
        monkeypatch.setattr(native, "_state", [None, "turned off by the test"])
    mem = FakeMemory(64 * MiB)
    al = A.DeviceAllocator(0, 64 * MiB)  # limit: 90% of it
    monkeypatch.setattr(al, "_raw_alloc", lambda size: mem.alloc(al, size), raising=False)
    monkeypatch.setattr(al, "_raw_free", mem.free, raising=False)
    return al, mem


def test_allocator_reuses_blocks(fake) -> None:
    al, mem = fake
    a = al.malloc(MiB)
    al.free(a)
    assert al.malloc(MiB - 100) == a
    assert mem.allocs == 1
    assert al.stats().active == MiB and al.stats().cached == 0


def test_allocator_small_slots(fake) -> None:
    al, mem = fake
    ps = [al.malloc(4) for _ in range(10)]
    assert len(set(ps)) == 10 and mem.allocs == 1  # one slab
    assert al.stats().active == 80
    for p in ps:
        al.free(p)
    assert al.stats().active == 0
    assert al.malloc(8) in ps


def test_allocator_limit_and_oom(fake) -> None:
    al, mem = fake
    limit = al.limit
    assert limit == int(64 * MiB * 0.9)
    blocks = [al.malloc(16 * MiB) for _ in range(3)]
    for b in blocks:
        al.free(b)
    assert al.stats().cached == 48 * MiB
    # A new size class that does not fit next to the cache: the cache is released first.
    big = al.malloc(40 * MiB)
    assert al.stats().cached == 0 and len(mem.live) == 1
    with pytest.raises(OutOfMemoryError, match=r"active 41943040, cached 0, peak \d+, limit 60397977"):
        al.malloc(30 * MiB)
    al.free(big)
    al.clear_cache()
    assert mem.live == {} and al.stats().cached == 0


def test_set_memory_limit_releases_the_cache(fake) -> None:
    al, mem = fake
    b = al.malloc(8 * MiB)
    al.free(b)

    class Dev:
        index = 0

    A._allocators[0], saved = al, A._allocators.get(0)
    try:
        old = A.set_memory_limit(Dev(), 4 * MiB)
        assert old == int(64 * MiB * 0.9)
        assert mem.live == {} and al.limit == 4 * MiB
    finally:
        if saved is None:
            A._allocators.pop(0, None)
        else:
            A._allocators[0] = saved


class FakeEvents:
    """Stands in for the driver's events: an event completes when the test says so."""

    def __init__(self) -> None:
        self.done: dict[int, bool] = {}

    def cuEventCreate(self, ref, flags) -> int:  # the driver's names
        ref._obj.value = len(self.done) + 1
        self.done[ref._obj.value] = False
        return 0

    def cuEventRecord(self, ev, stream) -> int:
        self.done[ev.value] = False
        return 0

    def cuEventQuery(self, ev) -> int:
        return 0 if self.done[ev.value] else 600  # CUDA_ERROR_NOT_READY

    def cuEventSynchronize(self, ev) -> int:
        self.done[ev.value] = True
        return 0

    def finish(self) -> None:
        for e in self.done:
            self.done[e] = True


def test_stream_ordered_reuse_waits_for_the_event(fake, monkeypatch) -> None:
    # While a user stream lives, a freed block is set aside behind an event (counted as cached)
    # and goes back to the pool -- native or Python -- only once the event has completed.
    from kernelbay_cuda import _driver

    al, mem = fake
    ev = FakeEvents()
    monkeypatch.setattr(_driver, "libcuda", lambda: ev)
    monkeypatch.setattr(_driver, "ensure_current", lambda index: None)
    monkeypatch.setattr(_driver, "dead_reason", lambda index: None)
    a = al.malloc(MiB)
    al.defer(a)
    assert al.stats().active == 0 and al.stats().cached == MiB
    b = al.malloc(MiB)  # the event has not completed: a new block, not a
    assert b != a and mem.allocs == 2
    ev.finish()
    assert al.malloc(MiB) == a  # reclaimed on the way
    assert al.stats().active == 2 * MiB and al.stats().cached == 0
    al.defer(b)
    al.clear_cache()  # waits for the set-aside blocks, then releases the cache
    assert al.deferred_bytes == 0 and b not in mem.live and a in mem.live
