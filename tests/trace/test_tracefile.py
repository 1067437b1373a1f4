"""The folded trace's whole-run totals, from synthetic records: every launch counted per kernel
(one kernel, a few, many; failed ones apart) whether its chunk left the ring or not."""

from __future__ import annotations

import random

from kernelbay import _trace, _tracefile


class _Kernel:
    def __init__(self, name: str) -> None:
        self.name = name


class _Dev:
    backend = "fake"

    def __str__(self) -> str:
        return "fake:0"


def _launch(k, t0, dt, err=None, span=None):
    s0, s1 = span if span else (None, None)
    return ("launch", t0, t0 + dt, 1, k, 1, 1, 0, None, s0, s1, err)


def test_totals_count_every_call_per_kernel_across_dropped_chunks() -> None:
    rng = random.Random(7)
    dev = _Dev()
    reg = {id(dev): dev}
    log = _tracefile.Log(max_events=40, pid=1, chunk=16, reg=reg)
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
        flat += ("copy", t, t + 10, 1, id(dev), "HtoD", 64, None, None, t, t + 5, None)
        log.fold(flat, {})
    log.finish()
    s = log.summary()
    assert s["calls"] == 5 * 17 and s["dropped_records"] == 5 * 17 - 40
    assert s["failures"] == {"launch": failed}
    got = {n: [k["count"], k["host_ns"], k["device_count"], k["device_ns"]] for n, k in s["kernels"].items()}
    assert got == want
    assert s["copies"]["HtoD"]["count"] == 5 and s["copies"]["HtoD"]["bytes"] == 5 * 64


def test_flat_records_hold_twelve_items() -> None:
    assert _trace.FIELDS == _tracefile.F == 12
