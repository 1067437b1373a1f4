"""What tracing costs on cuda: the rows of ``bench_trace.py`` with a GPU (``SUITE = "gpu"``).

Per launch: the cuda backend's launch function with tracing off, against the same function
behind the tracer's positional form with host spans only and with device spans: by the default
timer (CUPTI's activity records where they work, ``kernelbay_cuda.cupti``), and beside it by the
C event timer (two CUDA events recorded per launch) and the ctypes one; batches interleaved,
paired differences (CUPTI's activities on only during its own batches). Size: the trace of
100,000 launches with device spans (default timer).
"""

from __future__ import annotations

from ._timing import find, goal, skipped
from .bench_trace import ADDED, LAUNCH, SIZE, launch_rows, size_row

SUITE = "gpu"


def run(quick: bool) -> list[dict]:
    import kernelbay as kb

    try:
        dev = kb.device("cuda")
    except kb.KernelbayError as exc:
        return [skipped(LAUNCH, "tracing off", f"no cuda device: {str(exc).splitlines()[0]}")]
    return launch_rows(quick, "cuda", dev) + [size_row(quick, "cuda", dev)]


def goals(records: list[dict]) -> list[dict]:
    out = []
    for name in ("tracing on, host spans", "tracing on, device spans"):
        r = find(records, ADDED, name)
        if r and r.get("median") is not None:
            out.append(goal(f"{name} adds ≤ 1 µs per launch (cuda backend)", r["median"], 1.0) | {"unit": "µs"})
    r = find(records, SIZE, "kernelbay")
    if r and r.get("median") is not None:
        out.append(goal("a 100k-launch cuda trace is under 100 MB", r["median"], 100.0) | {"unit": "MB"})
    return out
