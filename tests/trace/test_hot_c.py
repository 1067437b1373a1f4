"""The tracer's C launch wrapper (kernelbay/tracing/hot.c) against its Python twin: the same
records, read by field name (records.Field), in every mode (host spans, synchronous backend,
marked by a device timer), the same behaviour when the launch raises or a mark does, a record
layout handed over from Python, and a clock that is perf_counter_ns's."""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import pytest
from kernelbay.tracing import hot
from kernelbay.tracing.records import CHUNK, LAUNCH, NAMES, SIZE, Field

mod = hot.c_module()
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
    """The wrapper protocol (hot.Recorder), and nothing more of a Tracer."""

    def __init__(self, timer: Any = None) -> None:
        self.chunk = CHUNK
        self.buf: list[Any] = []
        self.the_timer = timer
        self.folds = 0
        self.reg: dict[int, Any] = {}

    def timer(self, b: Any) -> Any:
        return self.the_timer

    def fold(self) -> None:
        self.folds += 1
        self.buf.clear()

    def ref(self, obj: Any) -> Any:
        return None if obj is None else id(obj)


def inner(kernel: Any, grid: Any, block: Any, args: Any, shm: int, stream: Any) -> Any:
    if args == "boom":
        raise ValueError("bad launch")
    return ("launched", grid)


def records(buf: list[Any]) -> list[dict[str, Any]]:
    """The records in ``buf``, each as {field name: value}."""
    assert len(buf) % SIZE == 0
    return [{f.name: buf[i + f] for f in Field} for i in range(0, len(buf), SIZE)]


def both(timer_factory: Any) -> list[tuple[Tr, Any, Any]]:
    out = []
    for use_c in (True, False):
        timer = timer_factory()
        tr = Tr(timer)
        out.append((tr, timer, hot.make_launch(tr, inner, None, use_c=use_c)))
    return out


def test_the_c_wrapper_is_the_one_made() -> None:
    tr = Tr()
    assert type(hot.make_launch(tr, inner, None)) is mod.Launch
    assert callable(hot.make_launch(tr, inner, None, use_c=False))


@pytest.mark.parametrize("mode", ["host", "sync", "marked"])
def test_same_records_as_the_python_wrapper(mode: str) -> None:
    factory = {"host": lambda: None, "sync": lambda: Timer(synchronous=True), "marked": Timer}[mode]
    k, stream = Kern(), object()
    got = []
    for tr, _timer, w in both(factory):
        before = time.perf_counter_ns()
        assert w(k, (2,), 64, (1, 2), 16, stream) == ("launched", (2,))
        after = time.perf_counter_ns()
        (r,) = records(tr.buf)
        assert r["KIND"] == LAUNCH and r["KEY"] is k and r["A"] == (2,) and r["B"] == 64 and r["C"] == 16
        assert r["D"] is stream and r["ERROR"] is None and r["THREAD"] == threading.get_ident()
        assert before <= r["T0"] <= r["T1"] <= after
        got.append((r["M0"], r["M1"]) if mode != "sync" else (r["M0"] == r["T0"], r["M1"] == r["T1"]))
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
    (r,) = records(tr.buf)
    assert r["M0"] is None and r["M1"] is None


@pytest.mark.parametrize("timed", [False, True])
def test_a_launch_that_raises_is_recorded_and_its_error_kept(timed: bool) -> None:
    for tr, timer, w in both(Timer if timed else lambda: None):
        with pytest.raises(ValueError, match="bad launch") as info:
            w(Kern(), 3, 32, "boom", 0, None)
        # the launch's own traceback, down to inner
        assert "inner" in "".join(traceback.format_tb(info.value.__traceback__))
        (r,) = records(tr.buf)
        assert r["KIND"] == LAUNCH and r["KEY"].__class__ is Kern and r["A"] == 3 and r["B"] == 32
        assert r["ERROR"] == "ValueError: bad launch"
        if timed:
            assert timer.given_back == [(1, None)]  # the start mark, given back


def test_fold_runs_past_the_limit() -> None:
    for tr, _timer, w in both(lambda: None):
        for _ in range(CHUNK + 1):
            w(Kern(), 1, 1, (), 0, None)
        assert tr.folds == 1


def test_fold_follows_the_tracers_own_chunk() -> None:
    # Tracer.chunk is tracer.CHUNK when the tracer is made: tests lower it to fold often.
    for use_c in (True, False):
        tr = Tr()
        tr.chunk = 3
        w = hot.make_launch(tr, inner, None, use_c=use_c)
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
    assert len(recs) == 8000 and all(r["KIND"] == LAUNCH and r["KEY"] is k for r in recs)
    assert len({r["THREAD"] for r in recs}) == 4  # each thread's own id


def test_the_clock_is_perf_counter_ns() -> None:
    for _ in range(5):
        a = time.perf_counter_ns()
        c = mod.clock_ns()
        b = time.perf_counter_ns()
        if a <= c <= b:
            return
    pytest.fail(f"the C clock {c} is not between two perf_counter_ns reads {a}, {b}")


def test_the_c_wrapper_places_fields_by_the_layout_it_is_handed() -> None:
    # Another order, and a field the C code does not know (left None): the C side follows.
    names = ("EXTRA", *reversed(NAMES))
    buf: list[Any] = []
    k, stream = Kern(), object()
    w = mod.Launch(inner, buf, 1000, lambda: None, lambda *a: None, 1, None, LAUNCH, names)
    w(k, 4, 8, (), 16, stream)
    r = dict(zip(names, buf))
    assert len(buf) == len(names) and r["EXTRA"] is None and r["ERROR"] is None
    assert r["KIND"] == LAUNCH and r["KEY"] is k and (r["A"], r["B"], r["C"], r["D"]) == (4, 8, 16, stream)
    assert r["M0"] == r["T0"] <= r["T1"] == r["M1"] and r["THREAD"] == threading.get_ident()


def test_bad_construction_is_refused() -> None:
    def make(mode: int = 0, mark: Any = None, names: Any = NAMES) -> Any:
        return mod.Launch(inner, [], 10, lambda: None, lambda *a: None, mode, mark, LAUNCH, names)

    with pytest.raises(ValueError, match="mode"):
        make(2)
    with pytest.raises(ValueError, match="has no M1"):
        make(names=tuple(n for n in NAMES if n != "M1"))
    with pytest.raises(ValueError, match="named twice"):
        make(names=(*NAMES, "T0"))
    with pytest.raises(TypeError, match="names"):
        make(names=(*NAMES, 3))
    with pytest.raises(TypeError, match="takes"):
        make()(1, 2, 3)
