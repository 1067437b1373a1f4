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


class RecordingEvents(FakeEvents):
    """FakeEvents that also remember which stream each event was recorded on."""

    def __init__(self) -> None:
        super().__init__()
        self.recorded: list[int] = []

    def cuEventRecord(self, ev, stream) -> int:
        self.recorded.append(getattr(stream, "value", stream) or 0)
        return super().cuEventRecord(ev, stream)


@pytest.fixture
def streams(fake, monkeypatch):
    from kernelbay_cuda import _driver

    al, mem = fake
    ev = RecordingEvents()
    monkeypatch.setattr(_driver, "libcuda", lambda: ev)
    monkeypatch.setattr(_driver, "ensure_current", lambda index: None)
    monkeypatch.setattr(_driver, "dead_reason", lambda index: None)
    S1, S2, NB = 0x1111, 0x2222, 0x3333  # two blocking user streams and a non-blocking one
    al.pool.set_blocking(S1, True)
    al.pool.set_blocking(S2, True)
    return al, mem, ev, (S1, S2, NB)


def test_a_block_freed_on_its_own_stream_is_reused_there_with_no_event(streams) -> None:
    al, mem, ev, (S1, _S2, _NB) = streams
    a = al.malloc_on(MiB, S1)
    al.pool.note_use(a, S1)  # work on its own stream: nothing to note
    al.free(a)
    assert ev.recorded == [] and al.stats().cached == MiB and al.stats().active == 0
    assert al.malloc_on(MiB, S1) == a and mem.allocs == 1
    assert ev.recorded == []


def test_blocks_of_the_default_stream_serve_blocking_streams_but_not_others(streams) -> None:
    al, mem, ev, (S1, S2, NB) = streams
    a = al.malloc(MiB)
    al.free(a)
    # S1 is ordered with the legacy default stream: the block is its at once.
    assert al.malloc_on(MiB, S1) == a
    al.free(a)  # now a block of S1's: S2 (not ordered with S1) does not get it
    b = al.malloc_on(MiB, S2)
    assert b != a and mem.allocs == 2
    al.free(b)
    # A non-blocking stream is ordered with nothing: never another stream's block.
    c = al.malloc_on(MiB, NB)
    assert c not in (a, b) and mem.allocs == 3
    assert ev.recorded == []
    assert al.stats().cached == 2 * MiB and al.stats().active == MiB


def test_a_block_used_on_another_stream_waits_for_that_stream(streams) -> None:
    # allocate on s1, use on s2, free, allocate on s1 while s2 still runs: not the same block.
    al, mem, ev, (S1, S2, _NB) = streams
    a = al.malloc_on(MiB, S1)
    al.pool.note_use(a, S2)
    al.free(a)
    assert ev.recorded == [S2]  # one event, on the stream that used it
    assert al.stats().active == 0 and al.stats().cached == MiB  # set aside: cached, exactly
    b = al.malloc_on(MiB, S1)
    assert b != a and mem.allocs == 2
    ev.finish()  # s2's work is done
    al.free(b)
    assert al.malloc_on(MiB, S1) in (a, b)
    assert al.stats().active == MiB and al.stats().cached == MiB


def test_every_use_off_the_home_stream_is_noted(streams) -> None:
    # CUDA orders the legacy default stream with blocking streams, but not transitively: a block
    # the default stream frees may go to a blocking stream that is not ordered with a third one.
    al, _mem, ev, (S1, _S2, NB) = streams
    d = al.malloc(MiB)  # home: the legacy default stream
    al.pool.note_use(d, 0)
    al.free(d)
    assert ev.recorded == []
    d = al.malloc(MiB)
    al.pool.note_use(d, S1)
    al.pool.note_use(d, S1)  # once per stream
    al.pool.note_use(d, NB)
    s = al.malloc_on(MiB, S1)
    al.pool.note_use(s, 0)
    al.free(d)
    al.free(s)
    assert sorted(ev.recorded) == sorted([S1, NB, 0])


def test_closing_a_stream_gives_its_blocks_to_the_default_stream(streams) -> None:
    al, _mem, ev, (S1, S2, NB) = streams
    a = al.malloc_on(MiB, S1)
    b = al.malloc_on(2 * MiB, S1)
    al.free(a)
    d = al.malloc(4 * MiB)
    al.pool.note_use(d, NB)
    assert al.pool.has_home(S1) and al.pool.has_home(NB) and not al.pool.has_home(S2)
    assert al.pool.rehome(S1) and al.pool.rehome(NB)  # after each stream's work finished
    assert al.pool.homed == 0
    assert al.malloc(MiB) == a  # S1's cached block is the default stream's now
    al.free(b)
    al.free(d)  # NB's use was forgotten with NB: no event
    assert ev.recorded == []
    assert al.malloc(2 * MiB) == b


def test_memory_stats_count_frees_that_waited_on_other_streams(streams) -> None:
    al, _mem, _ev, (S1, S2, NB) = streams
    a = al.malloc_on(MiB, S1)
    al.pool.note_use(a, S2)
    al.pool.note_use(a, NB)
    al.free(a)
    al.malloc_on(MiB, S1)  # misses the cache: a is set aside
    c = al.stats().counters
    assert c["cross_stream_frees"] == 1 and c["cross_stream_events"] == 2
    assert c["cross_stream_bytes"] == MiB and c["misses_while_set_aside"] == 1
    al.clear_cache()
    assert al.stats().counters["event_waits"] == 1


def test_the_direct_hooks_behave_as_the_hooks(streams, monkeypatch) -> None:
    # allocate/free as C callables (hookspecs: *Direct*): hits and plain frees in C, the rest
    # through the Python hooks, with the same results and the same exact statistics.
    al, mem, ev, (_S1, S2, _NB) = streams
    monkeypatch.setattr(A, "_allocators", {0: al})
    monkeypatch.setattr(A, "_pools", {0: al.pool})
    alloc, free = A.allocate.kernelbay_direct(), A.free.kernelbay_direct()
    if native.module() is None:
        assert alloc is None and free is None  # the pure-Python hooks stay
        return
    assert (alloc.kind, free.kind) == (0, 1)

    class Dev:
        index = 0

    dev = Dev()
    a = alloc(dev, MiB)  # a miss: the hook allocates
    assert mem.allocs == 1 and al.stats().active == MiB
    free(dev, a)
    assert al.stats().cached == MiB and al.stats().active == 0
    assert alloc(dev, MiB - 100) == a and mem.allocs == 1  # a hit, in C
    slots = [alloc(dev, 4) for _ in range(3)]  # small requests: the hook's slots
    assert len(set(slots)) == 3 and al.stats().active == MiB + 24
    for p in slots:
        free(dev, p)  # the pool says "not mine": the hook's rest frees the slot
    assert al.stats().active == MiB
    al.pool.note_use(a, S2)  # used on another stream: the free records an event there
    free(dev, a)
    assert ev.recorded == [S2] and al.stats().active == 0
    free(dev, 0xDEAD)  # unknown and foreign handles never raise
    free(dev, object())
    assert alloc(dev, MiB) != a  # set aside until S2's work is done
    with pytest.raises(TypeError):
        alloc(dev, "lots")  # the hook's own error, through the fallback


def test_the_direct_allocate_takes_the_current_stream_as_home(streams, monkeypatch) -> None:
    # Inside `with stream:` the hook gives a block of that stream's own (malloc_on); the direct
    # callable reads the same thread state (kernelbay.streams) in C.
    from kernelbay import streams as core_streams

    al, mem, _ev, (S1, _S2, _NB) = streams
    monkeypatch.setattr(A, "_allocators", {0: al})
    monkeypatch.setattr(A, "_pools", {0: al.pool})
    alloc = A.allocate.kernelbay_direct()
    if alloc is None:
        pytest.skip(f"the native helpers are unavailable here: {native.status()}")

    class Dev:
        index = 0

    class Handle:
        handle = S1

    class FakeStream:
        handle = Handle()

    dev = Dev()
    state = core_streams._ThreadState()
    monkeypatch.setattr(core_streams._local, "s", state, raising=False)
    monkeypatch.setattr(core_streams, "intercept", 1)
    # `with stream:` bumps streams.epoch, which the C side's cached lookup depends on: so does this test
    monkeypatch.setattr(core_streams, "epoch", core_streams.epoch + 1)
    a = al.malloc_on(MiB, S1)
    al.free(a)  # cached for S1
    assert alloc(dev, MiB) != a  # no current stream in this thread: a block of the default stream
    state.current[dev] = [FakeStream()]
    core_streams.epoch += 1
    assert alloc(dev, MiB) == a and mem.allocs == 2  # S1 is current: its own cached block, in C
    al.free(a)
    assert A.allocate(dev, MiB) == a  # the Python hook makes the same choice
    al.free(a)
    state.current[dev] = [object()]  # not a stream kernelbay knows: the hook decides, the same way
    core_streams.epoch += 1
    assert alloc(dev, MiB) != a and mem.allocs == 3  # S1's cached block stays S1's


def test_the_direct_allocate_keeps_each_threads_current_stream_apart(streams, monkeypatch) -> None:
    # The C side keeps its last current-stream lookup while streams.epoch, the thread and the
    # device stay the same: two threads inside different `with stream:` blocks, allocating in
    # turn with no epoch change between, each get a block of their own stream.
    import threading

    from kernelbay import streams as core_streams

    al, _mem, _ev, (S1, S2, _NB) = streams
    monkeypatch.setattr(A, "_allocators", {0: al})
    monkeypatch.setattr(A, "_pools", {0: al.pool})
    alloc, free = A.allocate.kernelbay_direct(), A.free.kernelbay_direct()
    if alloc is None:
        pytest.skip(f"the native helpers are unavailable here: {native.status()}")

    class Dev:
        index = 0

    class Handle:
        def __init__(self, h: int) -> None:
            self.handle = h

    class FakeStream:
        def __init__(self, h: int) -> None:
            self.handle = Handle(h)

    dev = Dev()
    mine = {}
    for s in (S1, S2):
        mine[s] = al.malloc_on(MiB, s)
        al.free(mine[s])  # one cached block per stream
    monkeypatch.setattr(core_streams, "intercept", 1)
    monkeypatch.setattr(core_streams, "epoch", core_streams.epoch + 1)
    turns = [threading.Semaphore(0), threading.Semaphore(0)]
    got: dict[int, list[int]] = {S1: [], S2: []}

    def run(me: int, s: int) -> None:
        state = core_streams._ThreadState()
        state.current[dev] = [FakeStream(s)]
        core_streams._local.s = state
        for _ in range(4):
            turns[me].acquire()
            p = alloc(dev, MiB)
            got[s].append(p)
            free(dev, p)
            turns[1 - me].release()

    threads = [threading.Thread(target=run, args=(0, S1)), threading.Thread(target=run, args=(1, S2))]
    for t in threads:
        t.start()
    turns[0].release()
    for t in threads:
        t.join(10)
    assert got == {S1: [mine[S1]] * 4, S2: [mine[S2]] * 4}
    assert alloc(dev, MiB) not in (mine[S1], mine[S2])  # this thread has no current stream
