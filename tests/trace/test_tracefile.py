"""The folded trace's whole-run totals, from synthetic records: every launch counted per kernel
(one kernel, a few, many; failed ones apart) whether its chunk left the ring or not."""

from __future__ import annotations

import random

from kernelbay.tracing import records, tracefile
from kernelbay.tracing.records import SIZE, Field


class _Kernel:
    def __init__(self, name: str) -> None:
        self.name = name


class _Dev:
    backend = "fake"

    def __str__(self) -> str:
        return "fake:0"


def _record(**fields) -> list:
    """One flat record: the fields named (Field names, lower case), None elsewhere."""
    rec = [None] * SIZE
    for name, v in fields.items():
        rec[Field[name.upper()]] = v
    return rec


def _launch(k, t0, dt, err=None, span=None):
    s0, s1 = span if span else (None, None)
    return _record(kind="launch", t0=t0, t1=t0 + dt, thread=1, key=k, a=1, b=1, c=0, m0=s0, m1=s1, error=err)


def test_totals_count_every_call_per_kernel_across_dropped_chunks() -> None:
    rng = random.Random(7)
    dev = _Dev()
    reg = {id(dev): dev}
    log = tracefile.Log(max_events=40, pid=1, chunk=16, reg=reg)
    kernels = [_Kernel(f"k{i}") for i in range(12)]
    want: dict[str, list[int]] = {}
    failed = 0
    t = 1000
    for n_kernels in (1, 3, 12, 1, 12):  # one kernel per chunk, a few (compress), many (loop)
        flat: list = []
        for _ in range(16):
            k = kernels[rng.randrange(n_kernels)]
            dt = rng.randrange(1, 50)
            t += 100
            if rng.random() < 0.1:
                flat += _launch(k, t, dt, err="LaunchError: no")
                failed += 1
                continue
            timed = rng.random() < 0.5
            flat += _launch(k, t, dt, span=(t + 1, t + 1 + dt) if timed else None)
            w = want.setdefault(k.name, [0, 0, 0, 0])
            w[0] += 1
            w[1] += dt
            w[2] += timed
            w[3] += dt if timed else 0
        flat += _record(kind="copy", t0=t, t1=t + 10, thread=1, key=id(dev), a="HtoD", b=64, m0=t, m1=t + 5)
        log.fold(flat, {})
    log.finish()
    s = log.summary()
    assert s["calls"] == 5 * 17 and s["dropped_records"] == 5 * 17 - 40
    assert s["failures"] == {"launch": failed}
    got = {n: [k["count"], k["host_ns"], k["device_count"], k["device_ns"]] for n, k in s["kernels"].items()}
    assert got == want
    assert s["copies"]["HtoD"]["count"] == 5 and s["copies"]["HtoD"]["bytes"] == 5 * 64


def test_the_record_fields_are_one_definition() -> None:
    # Field's values are the indices: 0..SIZE-1, once each, and NAMES (the C wrapper's) follows.
    assert [int(f) for f in sorted(Field)] == list(range(SIZE)) == list(range(len(records.NAMES)))
    assert tuple(f.name for f in sorted(Field)) == records.NAMES


class _BatchTimer:
    """A device timer whose span of marks (m0, m1) is (10 * m0, 10 * m1)."""

    def mark(self, device, stream):
        return None

    def span(self, m0, m1):
        return None

    def resolve(self, starts, ends, host_t0s):
        return [10 * m for m in starts], [10 * m for m in ends]


def test_fold_resolves_marks_with_the_timer_of_each_records_backend() -> None:
    # Launch records hold their kernel (its device names the backend); copies a device id.
    dev, other = _Dev(), _Dev()
    other.backend = "untimed"
    kernel = _Kernel("k")
    kernel.device = dev
    reg = {id(dev): dev, id(other): other}
    log = tracefile.Log(max_events=40, pid=1, chunk=16, reg=reg)
    flat = _launch(kernel, 100, 5, span=(1, 2))
    flat += _record(kind="copy", t0=100, t1=110, thread=1, key=id(dev), a="HtoD", b=8, m0=3, m1=4)
    flat += _record(kind="copy", t0=100, t1=110, thread=1, key=id(other), a="HtoD", b=8)
    log.fold(flat, {"fake": _BatchTimer(), "untimed": None})
    ((_chunk, spans),) = log.ring
    assert spans == ([10, 30, None], [20, 40, None])
