"""The native helper's staging threads (``_stage.c``'s ``Stager``) without a GPU: the driver
functions it calls are ctypes callbacks standing in for it, with host memory as the "device".
Every sub must arrive once, in the right place, in both directions, across back-to-back runs,
a first run right after the threads start, fewer subs than threads, and a ring of slots reused
many times in one run. :class:`LazyDriver` runs the DMAs only when an event is waited for (as a
real stream may), so a slot reused, or read, before its DMA was waited for shows up as wrong data."""

from __future__ import annotations

import ctypes
import mmap
import threading
from typing import Any

import numpy as np
import pytest
from kernelbay_cuda import native

_i, _vp, _sz, _u64, _uint = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint


#: the C signatures of the six driver functions a Stager calls, in the order of its `fns`
_SIGNATURES = (
    ctypes.CFUNCTYPE(_i, _vp),  # cuCtxSetCurrent
    ctypes.CFUNCTYPE(_i, _vp, _vp, _uint),  # cuStreamWaitEvent
    ctypes.CFUNCTYPE(_i, _u64, _vp, _sz, _vp),  # cuMemcpyHtoDAsync_v2
    ctypes.CFUNCTYPE(_i, _vp, _u64, _sz, _vp),  # cuMemcpyDtoHAsync_v2
    ctypes.CFUNCTYPE(_i, _vp, _vp),  # cuEventRecord
    ctypes.CFUNCTYPE(_i, _vp),  # cuEventSynchronize
)
CTX, WAIT, H2D, D2H, RECORD, SYNC = range(6)


class FakeDriver:
    """cuCtxSetCurrent, cuStreamWaitEvent, cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2,
    cuEventRecord and cuEventSynchronize, synchronous: a "device pointer" is a host address."""

    def set(self, i: int, fn: Any) -> Any:
        """Make ``fn`` driver function ``i`` (CTX ... SYNC); returns the callback it replaced."""
        old = self.keep[i]
        self.keep[i] = _SIGNATURES[i](fn)
        self.fns = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in self.keep)
        return old

    def __init__(self) -> None:
        self.calls = {"h2d": 0, "d2h": 0, "record": 0, "sync": 0, "ctx": 0, "wait": 0}
        self.fail_at: int | None = None  # the n-th memcpy returns this code

        def ctx(c):
            self.calls["ctx"] += 1
            return 0

        def wait(s, e, f):
            self.calls["wait"] += 1
            return 0

        def h2d(dst, src, n, s):
            self.calls["h2d"] += 1
            if self.fail_at is not None and self.calls["h2d"] == self.fail_at:
                return 700  # CUDA_ERROR_ILLEGAL_ADDRESS
            ctypes.memmove(dst, src, n)
            return 0

        def d2h(dst, src, n, s):
            self.calls["d2h"] += 1
            ctypes.memmove(dst, src, n)
            return 0

        def record(e, s):
            self.calls["record"] += 1
            return 0

        def sync(e):
            self.calls["sync"] += 1
            return 0

        self.keep: list[Any] = [None] * 6
        for i, fn in enumerate((ctx, wait, h2d, d2h, record, sync)):
            self.set(i, fn)


def _run(st: Any, *args: Any) -> Any:
    """st.run(*args) with a deadline: a run whose threads missed the job would wait forever."""
    out: list[Any] = []

    def call() -> None:
        try:
            out.append(("value", st.run(*args)))
        except BaseException as exc:
            out.append(("raised", exc))

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "Stager.run did not return within 30 s: its threads missed the job"
    kind, v = out[0]
    if kind == "raised":
        raise v
    return v


class LazyDriver(FakeDriver):
    """The DMAs queue up and run, in order, when an event recorded after them is synchronised
    (or at :meth:`flush`, the end of the stream): a stager that reuses a slot before the DMA
    that reads it ran, or copies a D2H slot out before its DMA ran, moves stale bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[tuple] = []
        self.lock = threading.Lock()
        self.dmas: list[tuple[str, int, int]] = []  # (kind, device address, bytes), in queue order

        def h2d(dst, src, n, s):
            with self.lock:
                self.calls["h2d"] += 1
                self.dmas.append(("h2d", dst, n))
                self.queue.append(("copy", dst, src, n))
            return 0

        def d2h(dst, src, n, s):
            with self.lock:
                self.calls["d2h"] += 1
                self.dmas.append(("d2h", src, n))
                self.queue.append(("copy", dst, src, n))
            return 0

        def record(e, s):
            with self.lock:
                self.calls["record"] += 1
                self.queue.append(("event", e))
            return 0

        def sync(e):
            with self.lock:
                self.calls["sync"] += 1
                last = max((i for i, q in enumerate(self.queue) if q == ("event", e)), default=-1)
                self._run_until(last + 1)
            return 0

        for i, fn in ((H2D, h2d), (D2H, d2h), (RECORD, record), (SYNC, sync)):
            self.set(i, fn)

    def _run_until(self, k: int) -> None:
        for q in self.queue[:k]:
            if q[0] == "copy":
                ctypes.memmove(q[1], q[2], q[3])
        del self.queue[:k]

    def flush(self) -> None:
        with self.lock:
            self._run_until(len(self.queue))


@pytest.fixture
def stager_type():
    mod = native.module()
    if mod is None or not hasattr(mod, "Stager"):
        pytest.skip(f"the native helpers are unavailable here: {native.status()}")
    return mod.Stager


class Ring:
    """The page-locked slots (here plain host memory) and one event per slot."""

    def __init__(self, nslots: int, piece: int) -> None:
        self.keep = [np.empty(piece, np.uint8) for _ in range(nslots)]
        self.slots = tuple(b.ctypes.data for b in self.keep)
        self.events = tuple(range(100, 100 + nslots))


STREAM, DMA, PRE, DONE = 7, 8, 9, 10


def _copy(st, drv, ring, h2d, dev, host, nbytes, sub, piece) -> int:
    st.setup(drv.fns, 1, DMA, PRE, DONE, sub, piece, ring.slots, ring.events)  # (the ring's position stays)
    return _run(st, h2d, STREAM, dev.ctypes.data, host.ctypes.data, nbytes)


@pytest.mark.parametrize(
    ("threads", "nbytes", "sub", "piece", "nslots"),
    [
        (4, 100_003, 1024, 4096, 8),  # 25 pieces through 8 slots: the ring turns three times
        (3, 7000, 1000, 1000, 4),  # a sub per piece
        (8, 200_001, 512, 2048, 3),  # 98 pieces through 3 slots
        (2, 5000, 4096, 8192, 2),  # one piece, two subs
        (12, 3000, 4096, 4096, 2),  # one sub: the caller alone
        (5, 64 * 1024, 256, 1024, 64),  # more slots than pieces
    ],
)
@pytest.mark.parametrize("nt", [0, 3])
@pytest.mark.parametrize("lazy", [False, True])
def test_every_byte_arrives_in_both_directions(stager_type, threads, nbytes, sub, piece, nslots, nt, lazy) -> None:
    """Plain and non-temporal host copies; the driver synchronous, or lazy (DMAs run only when
    waited for): the stager must wait for a slot's DMA before reusing (H2D) or reading (D2H) it."""
    drv = LazyDriver() if lazy else FakeDriver()
    ring = Ring(nslots, piece)
    rng = np.random.default_rng(nbytes)
    for _ in range(3):  # a new Stager each time: its first run comes right after its threads start
        st = stager_type(threads)
        st.nt = nt
        for _ in range(4):  # back to back on the same threads and slots
            host = rng.integers(0, 255, nbytes, dtype=np.uint8)
            dev = np.zeros(nbytes, np.uint8)
            assert _copy(st, drv, ring, True, dev, host, nbytes, sub, piece) == 0
            if lazy:
                drv.flush()  # the stream's end
            np.testing.assert_array_equal(dev, host)
            back = np.zeros(nbytes, np.uint8)
            assert _copy(st, drv, ring, False, dev, back, nbytes, sub, piece) == 0
            np.testing.assert_array_equal(back, host)  # D2H: in the host array when run returns
    pieces = -(-nbytes // piece)
    assert drv.calls["h2d"] == drv.calls["d2h"] == 3 * 4 * pieces  # one DMA per piece
    # one thread asks the driver about a piece's DMA (or its slot's last one); the others wait for its answer
    assert drv.calls["sync"] == 2 * 3 * 4 * pieces
    assert st.threads == threads and st.nt == nt


def test_a_run_orders_itself_on_the_callers_stream(stager_type) -> None:
    """An event recorded on the caller's stream first and waited for by the DMA stream; each
    piece one DMA of its whole length on the DMA stream, in order; at the end the caller's stream
    made to wait for an event recorded on the DMA stream after the last DMA."""
    seen: list[tuple] = []
    drv = LazyDriver()

    def rec(e, s):
        seen.append(("record", e, s))
        return record(e, s)

    def wt(s, e, f):
        seen.append(("wait", s, e))
        return wait(s, e, f)

    record, wait = drv.set(RECORD, rec), drv.set(WAIT, wt)
    st = stager_type(3)
    ring = Ring(2, 1000)
    host = np.arange(4500, dtype=np.uint8)
    dev = np.zeros_like(host)
    for h2d in (True, False):
        seen.clear()
        drv.dmas.clear()
        buf = host if h2d else np.zeros_like(host)
        assert _copy(st, drv, ring, h2d, dev, buf, 4500, 250, 1000) == 0
        drv.flush()
        np.testing.assert_array_equal(dev if h2d else buf, host)
        assert seen[:2] == [("record", PRE, STREAM), ("wait", DMA, PRE)]
        assert seen[-2:] == [("record", DONE, DMA), ("wait", STREAM, DONE)]
        kind = "h2d" if h2d else "d2h"
        got = sorted(drv.dmas)
        want = [(kind, dev.ctypes.data + off, min(1000, 4500 - off)) for off in range(0, 4500, 1000)]
        assert got == sorted(want)  # each piece once, whole
    with pytest.raises(ValueError, match="0 to 3"):
        st.nt = 4


def test_a_failed_driver_call_is_reported_and_the_threads_go_on(stager_type) -> None:
    drv = FakeDriver()
    st = stager_type(4)
    ring = Ring(4, 1024)
    host = np.random.default_rng(3).integers(0, 255, 50_000, dtype=np.uint8)
    dev = np.zeros_like(host)
    drv.fail_at = 3  # the third DMA fails: the others stop, nobody waits forever for its piece
    assert _copy(st, drv, ring, True, dev, host, host.nbytes, 256, 1024) == 700
    drv.fail_at = None
    assert _copy(st, drv, ring, True, dev, host, host.nbytes, 256, 1024) == 0
    np.testing.assert_array_equal(dev, host)
    args = (1, DMA, PRE, DONE)
    with pytest.raises(ValueError, match="one event per slot"):
        st.setup(drv.fns, *args, 256, 1024, ring.slots, ring.events[:3])
    with pytest.raises(ValueError, match="six addresses"):
        st.setup(drv.fns[:5], *args, 256, 1024, ring.slots, ring.events)
    with pytest.raises(ValueError, match="multiple of sub"):
        st.setup(drv.fns, *args, 300, 1024, ring.slots, ring.events)
    with pytest.raises(ValueError, match="nbytes must be > 0"):
        _run(st, True, STREAM, dev.ctypes.data, host.ctypes.data, 0)
    with pytest.raises(TypeError, match="run.h2d, stream, dptr, hptr, nbytes"):
        st.run(True, STREAM, dev.ctypes.data, host.ctypes.data)
    # a refused setup changed nothing: the last good one still holds
    assert _run(st, True, STREAM, dev.ctypes.data, host.ctypes.data, host.nbytes) == 0
    np.testing.assert_array_equal(dev, host)
    with pytest.raises(RuntimeError, match="before Stager.setup"):
        _run(stager_type(2), True, STREAM, dev.ctypes.data, host.ctypes.data, host.nbytes)


@pytest.mark.parametrize("lazy", [False, True])
def test_d2h_into_memory_never_touched(stager_type, lazy) -> None:
    """A destination whose pages were never touched (a fresh anonymous mapping, as a large
    ``np.empty`` is) is faulted in by 2 MiB blocks first, from an address inside a block."""
    n, start = 5 * (1 << 20) + 12_345, 4096 * 7 + 100
    drv = LazyDriver() if lazy else FakeDriver()
    ring = Ring(8, 1 << 16)
    st = stager_type(4)
    host = np.random.default_rng(7).integers(0, 255, n, dtype=np.uint8)
    dev = host.copy()  # the "device" array
    for _ in range(2):
        m = mmap.mmap(-1, start + n + 4096)
        back = np.frombuffer(m, np.uint8)[start : start + n]
        assert _copy(st, drv, ring, False, dev, back, n, 1 << 14, 1 << 16) == 0
        np.testing.assert_array_equal(back, host)
        assert not np.frombuffer(m, np.uint8)[:start].any() and not np.frombuffer(m, np.uint8)[start + n :].any()
        del back
        m.close()


def test_runs_of_changing_sizes_wake_only_their_threads(stager_type) -> None:
    """Runs back to back whose number of taking-part threads changes every time (one sub: the
    caller alone; two subs: one thread; many: all): a thread woken late for a run it has no part
    in must not take the next run's job for its own (the run would wait forever or lose a sub)."""
    drv = FakeDriver()
    ring = Ring(4, 4096)
    st = stager_type(6)
    rng = np.random.default_rng(11)
    for i in range(300):
        nbytes = (1000, 3000, 40_000, 1_500, 9_000)[i % 5]
        host = rng.integers(0, 255, nbytes, dtype=np.uint8)
        dev = np.zeros(nbytes, np.uint8)
        assert _copy(st, drv, ring, True, dev, host, nbytes, 1024, 4096) == 0
        back = np.zeros(nbytes, np.uint8)
        assert _copy(st, drv, ring, False, dev, back, nbytes, 1024, 4096) == 0
        np.testing.assert_array_equal(back, host)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork() on this platform")
def test_a_forked_child_gets_threads_of_its_own(stager_type) -> None:
    """The parent's threads are not in a fork()ed child: its first run starts new ones."""
    import os

    drv = FakeDriver()
    ring = Ring(4, 4096)
    st = stager_type(4)
    host = np.random.default_rng(5).integers(0, 255, 50_000, dtype=np.uint8)
    dev = np.zeros_like(host)
    assert _copy(st, drv, ring, True, dev, host, host.nbytes, 1024, 4096) == 0  # the parent's threads run
    pid = os.fork()
    if pid == 0:  # pragma: no cover -- the child's verdict is its exit status
        code = 1
        try:
            import signal

            signal.alarm(20)  # a child that hangs dies instead
            back = np.zeros_like(host)
            ok = _copy(st, drv, ring, False, dev, back, host.nbytes, 1024, 4096) == 0
            code = 0 if ok and (back == host).all() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    back = np.zeros_like(host)
    assert _copy(st, drv, ring, False, dev, back, host.nbytes, 1024, 4096) == 0  # the parent's go on
    np.testing.assert_array_equal(back, host)


def test_each_run_starts_where_the_last_one_left_the_ring(stager_type) -> None:
    """A run's first piece goes through the slot after the last run's last one (a DMA into a slot
    the host read from in the run before was measured at half the engine's rate); data stays
    right with the driver lazy, so a slot is still reused only after its last DMA."""
    drv = LazyDriver()
    used: list[int] = []

    def logged(dst, src, n, s):
        used.append(dst)
        return d2h(dst, src, n, s)

    d2h = drv.set(D2H, logged)
    ring = Ring(5, 1000)
    st = stager_type(3)
    rng = np.random.default_rng(2)
    pieces = [1, 2, 3, 1, 4, 2]
    for k in pieces:
        host = rng.integers(0, 255, k * 1000, dtype=np.uint8)
        dev = np.zeros_like(host)
        assert _copy(st, drv, ring, True, dev, host, host.nbytes, 500, 1000) == 0  # H2D turns the ring too
        back = np.zeros_like(host)
        assert _copy(st, drv, ring, False, dev, back, host.nbytes, 500, 1000) == 0
        np.testing.assert_array_equal(back, host)
    slot = {a: i for i, a in enumerate(ring.slots)}
    got = [slot[a] for a in used]
    want, first = [], 0
    for k in pieces:
        first += k  # the H2D run before
        want += [(first + p) % 5 for p in range(k)]
        first += k
    assert got == want
