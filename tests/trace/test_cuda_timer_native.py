"""The cuda backend's C event timer (_timer.c) without a GPU: driven through a stand-in driver
whose functions are ctypes callbacks and whose "device clock" runs 1 ms behind the host's."""

from __future__ import annotations

import ctypes
import itertools
import time

import pytest

pytest.importorskip("kernelbay_cuda", reason="kernelbay-cuda is not installed")

import kernelbay as kb
from kernelbay.streams import Stream as KbStream
from kernelbay_cuda import native, timing
from kernelbay_cuda.streams import _StreamHandle

LAG_NS = 1_000_000
CTX = 0x7700
NOT_READY = 600

_P = ctypes.c_void_p
_CREATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_P), ctypes.c_uint)
_ONE = ctypes.CFUNCTYPE(ctypes.c_int, _P)
_RECORD = ctypes.CFUNCTYPE(ctypes.c_int, _P, _P)
_ELAPSED = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_float), _P, _P)
_CTX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_P))


class FakeDriver:
    """cuEvent* and cuCtxGetCurrent over dicts; the first query of each recording says "not
    ready", so resolve() waits through cuEventSynchronize."""

    def __init__(self) -> None:
        self.ids = itertools.count(0x1000, 0x10)
        self.times: dict[int, int] = {}
        self.created = 0
        self.records: list[tuple[int, int]] = []
        self.synced: list[int] = []
        self.pending: set[int] = set()
        self.ctx = CTX
        self.fail_record = False

        def create(out, flags):
            self.created += 1
            out[0] = next(self.ids)
            return 0

        def record(ev, stream):
            if self.fail_record:
                return 1
            self.times[ev] = time.perf_counter_ns() - LAG_NS
            self.records.append((ev, stream or 0))
            self.pending.add(ev)
            return 0

        def query(ev):
            return NOT_READY if ev in self.pending else 0

        def sync(ev):
            self.synced.append(ev)
            self.pending.clear()
            return 0

        def elapsed(out, a, b):
            out[0] = (self.times[b] - self.times[a]) / 1e6
            return 0

        def ctx_get(out):
            out[0] = self.ctx
            return 0

        self.funcs = [
            _CREATE(create),
            _RECORD(record),
            _ONE(query),
            _ONE(sync),
            _ELAPSED(elapsed),
            _CTX(ctx_get),
        ]

    def addresses(self) -> list[int]:
        return [ctypes.cast(f, _P).value for f in self.funcs]

    def reference(self) -> tuple[int, int]:
        """A completed reference event and the host time it was recorded at."""
        out = (_P * 1)()
        self.funcs[0](ctypes.cast(out, ctypes.POINTER(_P)), 0)
        ev = out[0]
        self.times[ev] = time.perf_counter_ns() - LAG_NS
        return ev, self.times[ev] + LAG_NS


@pytest.fixture
def nat():
    mod = native.module()
    if mod is None or not hasattr(mod, "Timer"):
        pytest.skip(f"the native helpers are unavailable here: {native.status()}")
    return mod


@pytest.fixture
def setup(nat):
    drv = FakeDriver()
    slow_calls: list[tuple] = []

    def slow(device, stream):
        slow_calls.append((device, stream))
        return "slow"

    t = nat.Timer(slow, _StreamHandle, KbStream)
    t.set_driver(*drv.addresses())
    t.add_device(0, *drv.reference())
    return t, drv, slow_calls


def _cuda_stream(handle: int) -> _StreamHandle:
    s = _StreamHandle.__new__(_StreamHandle)  # no driver: only the handle matters to the timer
    s.handle = handle
    return s


def test_marks_resolve_onto_the_host_clock_in_order_and_events_are_reused(setup) -> None:
    t, drv, slow_calls = setup
    dev = kb.Device("cuda", 0, "fake")
    for _round in range(3):
        m0s, m1s, t0s, t1s = [], [], [], []
        for _ in range(100):
            t0 = time.perf_counter_ns()
            m0s.append(t.mark(dev, None))
            m1s.append(t.mark(dev, None))
            t0s.append(t0)
            t1s.append(time.perf_counter_ns())
        begins, ends = t.resolve(m0s, m1s, t0s)
        for b, e, t0, t1 in zip(begins, ends, t0s, t1s):
            # The 1 ms origin difference is gone; each span within its call, clamped to its start.
            assert t0 <= b <= e <= t1 + 50_000
        assert all(a[1] <= b[0] for a, b in zip(zip(begins, ends), zip(begins[1:], ends[1:])))
    assert slow_calls == []
    # 1 reference + four batches of 64 (200 marks in flight at most), then reused round after round.
    assert drv.created == 1 + 256
    assert drv.synced  # "not ready" was waited for
    assert t.free_events(0) == 256


def test_streams_are_resolved_in_c_and_everything_else_goes_to_the_slow_path(setup) -> None:
    t, drv, slow_calls = setup
    dev = kb.Device("cuda", 0, "fake")
    cs = _cuda_stream(0xABC)
    ks = KbStream.__new__(KbStream)
    object.__setattr__(ks, "handle", _cuda_stream(0xDEF))
    marks = [t.mark(dev, None), t.mark(dev, cs), t.mark(dev, ks)]
    assert all(isinstance(m, int) for m in marks)
    assert [s for _, s in drv.records[-3:]] == [0, 0xABC, 0xDEF]
    foreign = object()
    assert t.mark(dev, foreign) == "slow"
    drv.ctx = 0x1234  # another context current: Python makes the right one current
    assert t.mark(dev, None) == "slow"
    assert t.mark(kb.Device("cuda", 1, "fake"), None) == "slow"  # a device not set up
    assert slow_calls == [(dev, foreign), (dev, None), (kb.Device("cuda", 1, "fake"), None)]
    drv.ctx = CTX
    begins, ends = t.resolve(marks, [t.mark(dev, None) for _ in marks], [None] * 3)
    assert None not in begins and None not in ends


def test_unknown_marks_give_none_and_every_mark_goes_back(setup) -> None:
    t, drv, _ = setup
    dev = kb.Device("cuda", 0, "fake")
    a, b = t.mark(dev, None), t.mark(dev, None)
    free = t.free_events(0)
    assert t.resolve([a, None, None], [None, b, None], [0, 0, 0]) == ([None] * 3, [None] * 3)
    assert t.free_events(0) == free + 2
    drv.fail_record = True
    assert t.mark(dev, None) is None  # a failed record: no span, the event stays in the pool
    assert t.free_events(0) == free + 2
    with pytest.raises(ValueError, match="not a mark of this timer"):
        t.resolve([10**6], [None], [0])
    with pytest.raises(ValueError, match="differ in length"):
        t.resolve([None], [], [])


def test_before_set_up_every_mark_goes_to_the_slow_path(nat) -> None:
    calls = []
    t = nat.Timer(lambda d, s: calls.append(s) or 7, _StreamHandle, KbStream)
    assert t.mark(kb.Device("cuda", 0, "fake"), None) == 7 and calls == [None]
    with pytest.raises(ValueError, match="not set up"):
        t.record(0, 0)


def test_the_backend_timer_uses_the_c_mark_where_the_helpers_are_built(nat) -> None:
    t = timing.Timer()
    assert type(t.mark).__name__ == "builtin_function_or_method" and t.resolve is not None
