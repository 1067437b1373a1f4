"""The tracer's C launch wrapper (_tracehot.c) against its Python twin: the same records in
every mode (host spans, synchronous backend, marked by a device timer), the same behaviour
when the launch raises or a mark does, and a clock that is perf_counter_ns's."""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import pytest
from kernelbay import _tracehot
from kernelbay._tracerec import CHUNK, FIELDS, LAUNCH

mod = _tracehot.c_module()
pytestmark = pytest.mark.skipif(mod is None, reason="the C trace wrapper cannot be built here (see kernelbay info)")


class Dev:
    name = "dev"


class Kern:
    device = Dev()


class Timer:
    """A device timer whose marks count up; ``fail`` makes mark raise."""

    def __init__(self, synchronous: bool = False) -> None:
        self.synchronous = synchronous
        self.n = 0
        self.seen: list[tuple[Any, Any]] = []
        self.given_back: list[Any] = []
        self.fail = False

    def mark(self, device: Any, stream: Any) -> int:
        if self.fail:
            raise RuntimeError("mark broke")
        self.n += 1
        self.seen.append((device, stream))
        return self.n

    def span(self, m0: Any, m1: Any) -> None:
        self.given_back.append((m0, m1))


class Tr:
    """What the wrappers use of a Tracer."""

    def __init__(self, timer: Any = None) -> None:
        self.chunk = CHUNK
        self.buf: list[Any] = []
        self.timer = timer
        self.folds = 0
        self.reg: dict[int, Any] = {}

    def _timer(self, b: Any) -> Any:
        return self.timer

    def fold(self) -> None:
        self.folds += 1
        self.buf.clear()

    def _ref(self, obj: Any) -> Any:
        return None if obj is None else id(obj)


def inner(kernel: Any, grid: Any, block: Any, args: Any, shm: int, stream: Any) -> Any:
    if args == "boom":
        raise ValueError("bad launch")
    return ("launched", grid)


def records(buf: list[Any]) -> list[tuple]:
    return [tuple(buf[i : i + FIELDS]) for i in range(0, len(buf), FIELDS)]


def both(timer_factory: Any) -> list[tuple[Tr, Any, Any]]:
    out = []
    for use_c in (True, False):
        timer = timer_factory()
        tr = Tr(timer)
        out.append((tr, timer, _tracehot._make_launch(tr, inner, None, use_c=use_c)))
    return out


def test_the_c_wrapper_is_the_one_made() -> None:
    tr = Tr()
    assert type(_tracehot._make_launch(tr, inner, None)) is mod.Launch
    assert callable(_tracehot._make_launch(tr, inner, None, use_c=False))


@pytest.mark.parametrize("mode", ["host", "sync", "marked"])
def test_same_records_as_the_python_wrapper(mode: str) -> None:
    factory = {"host": lambda: None, "sync": lambda: Timer(synchronous=True), "marked": Timer}[mode]
    k, stream = Kern(), object()
    got = []
    for tr, _timer, w in both(factory):
        before = time.perf_counter_ns()
        assert w(k, (2,), 64, (1, 2), 16, stream) == ("launched", (2,))
        after = time.perf_counter_ns()
        (rec,) = records(tr.buf)
        kind, t0, t1, tid, kern, grid, block, shm, st, m0, m1, err = rec
        assert kind == LAUNCH and kern is k and grid == (2,) and block == 64 and shm == 16 and st is stream
        assert before <= t0 <= t1 <= after and tid == threading.get_ident() and err is None
        got.append((m0, m1) if mode != "sync" else (m0 == t0, m1 == t1))
    expected = {"host": (None, None), "sync": (True, True), "marked": (1, 2)}[mode]
    assert got == [expected, expected]


def test_marks_get_the_kernels_device_and_the_stream() -> None:
    for _tr, timer, w in both(Timer):
        k, stream = Kern(), object()
        w(k, 1, 1, (), 0, stream)
        assert timer.seen == [(k.device, stream), (k.device, stream)]


def test_a_mark_that_raises_leaves_the_launch_alone() -> None:
    tr, timer, w = both(Timer)[0]  # the C one: a failing mark gives None, the launch goes on
    timer.fail = True
    assert w(Kern(), 1, 1, (), 0, None) == ("launched", 1)
    assert records(tr.buf)[0][9:11] == (None, None)


@pytest.mark.parametrize("timed", [False, True])
def test_a_launch_that_raises_is_recorded_and_its_error_kept(timed: bool) -> None:
    for tr, timer, w in both(Timer if timed else lambda: None):
        with pytest.raises(ValueError, match="bad launch") as info:
            w(Kern(), 3, 32, "boom", 0, None)
        # the launch's own traceback, down to inner
        assert "inner" in "".join(traceback.format_tb(info.value.__traceback__))
        (rec,) = records(tr.buf)
        assert rec[0] == LAUNCH and rec[4].__class__ is Kern and rec[5] == 3
        assert rec[11] == "ValueError: bad launch"
        if timed:
            assert timer.given_back == [(1, None)]  # the start mark, given back


def test_fold_runs_past_the_limit() -> None:
    for tr, _timer, w in both(lambda: None):
        for _ in range(CHUNK + 1):
            w(Kern(), 1, 1, (), 0, None)
        assert tr.folds == 1


def test_fold_follows_the_tracers_own_chunk() -> None:
    # Tracer.chunk is _trace.CHUNK when the tracer is made: tests lower it to fold often.
    for use_c in (True, False):
        tr = Tr()
        tr.chunk = 3
        w = _tracehot._make_launch(tr, inner, None, use_c=use_c)
        for _ in range(4):
            w(Kern(), 1, 1, (), 0, None)
        assert tr.folds == 1


def test_records_of_threads_stay_whole() -> None:
    tr, _timer, w = both(lambda: None)[0]
    tr.fold = lambda: None  # keep everything
    k = Kern()
    alive = threading.Barrier(4)  # all four alive at once: four distinct thread ids

    def work() -> None:
        alive.wait()
        for _ in range(2000):
            w(k, 1, 1, (), 0, None)
        alive.wait()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = records(tr.buf)
    assert len(recs) == 8000 and all(r[0] == LAUNCH and r[4] is k for r in recs)
    assert len({r[3] for r in recs}) == 4  # each thread's own id


def test_the_clock_is_perf_counter_ns() -> None:
    for _ in range(5):
        a = time.perf_counter_ns()
        c = mod.clock_ns()
        b = time.perf_counter_ns()
        if a <= c <= b:
            return
    pytest.fail(f"the C clock {c} is not between two perf_counter_ns reads {a}, {b}")


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        mod.Launch(inner, [], 10, lambda: None, lambda *a: None, 2, None, LAUNCH)
    w = mod.Launch(inner, [], 10, lambda: None, lambda *a: None, 0, None, LAUNCH)
    with pytest.raises(TypeError, match="takes"):
        w(1, 2, 3)
