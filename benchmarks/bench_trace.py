"""What tracing costs (docs/profiling.md): per launch, and the size of a 100k-launch trace.

* Per launch: the backend's launch function as the core binds it with tracing off, against
  the same function chained behind the tracer's positional form (exactly what ``k.launch``
  calls while a trace records), with host spans only and with device spans; batches
  interleaved, the cost is the median of the paired per-batch differences. The tracer's
  folding of records into the timeline runs inside the timed batches, so its share is counted.
* Size: the trace file written for 100,000 launches (``--quick``: 2,000, scaled).

``bench_trace_gpu.py`` runs the same on cuda (``SUITE = "gpu"``).
"""

from __future__ import annotations

import os
import tempfile

from . import _kernels
from ._timing import find, goal, interleaved_samples, paired_diff, record, skipped, stats

SUITE = "cpu"

LAUNCH = "trace: one launch (4-arg kernel, 1 block)"
ADDED = "trace: what tracing adds per launch (paired difference)"
SIZE = "trace: file size of a 100k-launch run"


def launch_rows(quick: bool, backend: str, dev, block: int = 256, n: int = 256) -> list[dict]:
    import kernelbay as kb
    import numpy as np
    from kernelbay.tracing import hot, tracer

    k = _kernels.saxpy_kernel(backend, dev)
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y = kb.asarray(np.zeros(n, np.float32), device=dev)
    args = (x, y, np.float32(0.5), np.int32(n))
    b = k._binding
    raw = b.launch  # tracing off: the backend's own function, as the core binds it
    with tempfile.TemporaryDirectory() as tmp:
        host_tr = tracer.Tracer(os.path.join(tmp, "h.json"), device_timing=False)
        dev_tr = tracer.Tracer(os.path.join(tmp, "d.json"), device_timing=True)
        host = hot.make_launch(host_tr, raw, b)
        timed = hot.make_launch(dev_tr, raw, b)
        cases = {
            "tracing off": lambda: raw(k, 1, block, args, 0, None),
            "tracing on, host spans": lambda: host(k, 1, block, args, 0, None),
        }
        if hot.c_module() is not None:
            # The Python wrapper (what runs with KERNELBAY_NATIVE=0 or no compiler), side by side.
            host_py = hot.make_launch(host_tr, raw, b, use_c=False)
            cases["tracing on, host spans (Python wrapper)"] = lambda: host_py(k, 1, block, args, 0, None)
        note = f"{backend} backend"
        extra: list = []  # further tracers of the cuda timers, folded at the end
        after_batch = dev.synchronize
        if dev_tr.timer(b) is not None:
            cases["tracing on, device spans"] = lambda: timed(k, 1, block, args, 0, None)
            if backend == "cuda":
                after_batch = _cuda_timer_cases(cases, extra, tmp, raw, b, k, block, args, dev_tr, dev)
                note += ", device spans by " + ("CUPTI" if dev_tr.running else "CUDA events")
        try:
            s = interleaved_samples(
                cases,
                number=200 if quick else 5000,
                repeat=3 if quick else 40,
                warmup=1 if quick else 3,
                after_batch=after_batch,
            )
        finally:
            if dev_tr.running:
                dev_tr.stop()
        host_tr.fold()
        dev_tr.fold()
        for tr in extra:
            tr.fold()
    out = [record(LAUNCH, name, stats(v), backend=backend, note=note) for name, v in s.items()]
    for name in cases:
        if name != "tracing off":
            out.append(record(ADDED, name, paired_diff(s[name], s["tracing off"]), backend=backend, note=note))
    if "tracing on, device spans" not in cases:
        out.append(skipped(ADDED, "tracing on, device spans", f"the {backend} backend has no device timer"))
    return out


def _cuda_timer_cases(cases: dict, extra: list, tmp: str, raw, b, k, block: int, args, dev_tr, dev):
    """The cuda timers side by side: "device spans" is the default timer (CUPTI where it works),
    beside it the C event timer (where the default is CUPTI) and the ctypes one (what
    ``KERNELBAY_NATIVE=0`` runs). CUPTI records every kernel of the process while its
    activities are on, so they are on only during the CUPTI case's batches (switched between
    batches, untimed), and that tracer records for real (its end closes the CUPTI timer, which
    turns them off). Returns the ``after_batch`` to use."""
    from kernelbay.tracing import hot, tracer
    from kernelbay_cuda import cupti, timing

    def add(name: str, timer) -> None:
        tr = tracer.Tracer(os.path.join(tmp, f"{len(extra)}.json"), device_timing=True)
        tr.timers[b.name] = timer  # this timer, not the one the backend would choose
        fn = hot.make_launch(tr, raw, b)
        cases[name] = lambda: fn(k, 1, block, args, 0, None)
        extra.append(tr)

    default = dev_tr.timer(b)
    if not isinstance(default, cupti.Timer):
        add("tracing on, device spans (ctypes timer)", timing.Timer(use_native=False))
        return dev.synchronize
    add("tracing on, device spans (event timer)", timing.Timer())
    add("tracing on, device spans (ctypes timer)", timing.Timer(use_native=False))
    dev_tr.start()  # recording: the CUPTI timer keeps its activities on through its folds
    mod = default._mod
    order = list(cases)
    nxt = [0]

    def after_batch() -> None:
        dev.synchronize()
        nxt[0] = (nxt[0] + 1) % len(order)
        if order[nxt[0]] == "tracing on, device spans":
            default.start()
        else:
            mod.cupti_disable()

    mod.cupti_disable()  # the first batch is "tracing off"
    return after_batch


def size_row(quick: bool, backend: str, dev, block: int = 256, n: int = 256) -> dict:
    import kernelbay as kb
    import numpy as np

    k = _kernels.saxpy_kernel(backend, dev)
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y = kb.asarray(np.zeros(n, np.float32), device=dev)
    args = (x, y, np.float32(0.5), np.int32(n))
    launches = 2_000 if quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.json")
        with kb.trace(path):
            for i in range(launches):
                k.launch(1, block, args)
                if i % 1000 == 999:
                    dev.synchronize()
            dev.synchronize()
        mb = os.path.getsize(path) / 1e6 * (100_000 / launches)
    return record(
        SIZE,
        "kernelbay",
        {"median": mb, "p10": mb, "p90": mb, "n": 1},
        unit="MB",
        backend=backend,
        note=f"{launches} launches with device spans" + (", scaled to 100k" if launches != 100_000 else ""),
    )


def run(quick: bool) -> list[dict]:
    import kernelbay as kb

    backend, why = _kernels.backend_for_host()
    if backend is None:
        return [skipped(LAUNCH, "tracing off", why)]
    dev = kb.device(backend)
    block = 256 if backend == "cpu" else 1
    n = 256 if backend == "cpu" else 1
    return launch_rows(quick, backend, dev, block, n) + [size_row(quick, backend, dev, block, n)]


def goals(records: list[dict]) -> list[dict]:
    out = []
    for name in ("tracing on, host spans", "tracing on, device spans"):
        r = find(records, ADDED, name)
        if r and r.get("median") is not None:
            out.append(
                goal(f"{name} adds ≤ 1 µs per launch ({r.get('backend')} backend)", r["median"], 1.0) | {"unit": "µs"}
            )
    r = find(records, SIZE, "kernelbay")
    if r and r.get("median") is not None:
        out.append(goal("a 100k-launch trace is under 100 MB", r["median"], 100.0) | {"unit": "MB"})
    return out
