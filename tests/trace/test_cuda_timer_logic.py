"""The cuda backend's device timer without a GPU: its event pool and clock mapping, against a
stand-in for libcuda whose "device clock" runs 1 ms behind the host's."""

from __future__ import annotations

import itertools
import time

import pytest

pytest.importorskip("kernelbay_cuda", reason="kernelbay-cuda is not installed")

import kernelbay as kb
from kernelbay_cuda import timing

LAG_NS = 1_000_000


class FakeLibcuda:
    """cuEvent* and cuStreamCreate over a dict: an event's time is the host clock when recorded
    minus LAG_NS (a device clock with another origin)."""

    def __init__(self) -> None:
        self.ids = itertools.count(0x1000, 0x10)
        self.times: dict[int, int] = {}
        self.created = 0
        self.records: list[tuple[int, int]] = []

    def cuStreamCreate(self, ref, flags):
        ref._obj.value = next(self.ids)
        return 0

    def cuEventCreate(self, ref, flags):
        self.created += 1
        ref._obj.value = next(self.ids)
        return 0

    def cuEventRecord(self, ev, stream):
        self.times[ev] = time.perf_counter_ns() - LAG_NS
        self.records.append((ev, stream))
        return 0

    def cuEventSynchronize(self, ev):
        return 0

    def cuEventElapsedTime(self, ref, a, b):
        ref._obj.value = (self.times[b] - self.times[a]) / 1e6
        return 0


@pytest.fixture
def timer(monkeypatch):
    monkeypatch.setattr(timing._driver, "ensure_current", lambda index: None)
    monkeypatch.setattr(timing.native, "module", lambda: None)  # the Python timer (KERNELBAY_NATIVE=0)
    t = timing.Timer()
    t._lib = FakeLibcuda()
    return t


class _Stream:
    handle = 0xABC


def test_spans_map_onto_the_host_clock_and_events_are_reused(timer) -> None:
    dev = kb.Device("cuda", 0, "fake")
    for _round in range(3):
        marks = []
        for _ in range(4):
            t0 = time.perf_counter_ns()
            m0 = timer.mark(dev, None)
            m1 = timer.mark(dev, _Stream())
            t1 = time.perf_counter_ns()
            marks.append((m0, m1, t0, t1))
        for m0, m1, t0, t1 in marks:
            s0, s1 = timer.span(m0, m1)
            # The 1 ms origin difference is gone: within the reference's window of the host's.
            assert t0 - 50_000 <= s0 <= s1 <= t1 + 50_000
    # 5 reference tries (4 of them go to the pool), 8 events in flight at most: 4 more made,
    # then reused round after round.
    assert timer._lib.created == 5 + 4
    assert {s for _, s in timer._lib.records[5:]} == {0, 0xABC}


def test_a_mark_that_fails_gives_no_span_and_no_error(timer, monkeypatch) -> None:
    dev = kb.Device("cuda", 0, "fake")
    m0 = timer.mark(dev, None)
    monkeypatch.setattr(timer._lib, "cuEventRecord", lambda ev, s: 1)
    assert timer.mark(dev, None) is None
    assert timer.span(m0, None) is None
    assert m0 in timer._pool[0]  # recycled
