"""What the cuda device timer costs, call by call (the figures in docs/profiling.md).

Run from the repository root on a machine with an NVIDIA GPU:
``PYTHONPATH=. python tools/probe_cuda_timer.py``. Times one ``mark`` (a cuEventRecord through
the C timer), the batch ``resolve`` per launch, and launches with and without their two marks.
"""

import time

import kernelbay as kb
import numpy as np
from kernelbay_cuda import timing

from benchmarks import _kernels

dev = kb.device("cuda")
t = timing.Timer()
print("native timer:", t._native is not None)
m = t.mark(dev, None)
dev.synchronize()
N = 20000
t0 = time.perf_counter_ns()
ms = [t.mark(dev, None) for _ in range(N)]
t1 = time.perf_counter_ns()
print(f"mark alone: {(t1 - t0) / N:.0f} ns each, none None: {all(x is not None for x in ms)}")
dev.synchronize()
if t._native is not None:
    st, en = ms[0::2], ms[1::2]
    t0 = time.perf_counter_ns()
    r = t.resolve(st, en, [time.perf_counter_ns()] * len(st))
    t1 = time.perf_counter_ns()
    print("resolve: %.0f ns per pair" % ((t1 - t0) / len(st)))
k = _kernels.saxpy_kernel("cuda", dev)
n = 1
x = kb.asarray(np.ones(n, np.float32), device=dev)
y = kb.zeros(n, "float32", device=dev)
args = (x, y, np.float32(0.5), np.int32(n))
raw = k._binding.launch


def plain():
    raw(k, 1, 1, args, 0, None)


def marked():
    a = t.mark(dev, None)
    raw(k, 1, 1, args, 0, None)
    b = t.mark(dev, None)
    return a, b


for batch in (100, 5000):
    res = {}
    for name, f in (("plain", plain), ("marked", marked)):
        best = []
        for _rep in range(15):
            dev.synchronize()
            t0 = time.perf_counter_ns()
            out = [f() for _ in range(batch)]
            t1 = time.perf_counter_ns()
            best.append((t1 - t0) / batch)
            dev.synchronize()
            if name == "marked" and t._native is not None:
                t.resolve([a for a, b in out], [b for a, b in out], [0] * batch)
        best.sort()
        res[name] = best[len(best) // 2]
    plain_us, marked_us = res["plain"] / 1e3, res["marked"] / 1e3
    print(f"batch {batch:5d}: plain {plain_us:.2f} us, with two marks {marked_us:.2f} us per launch (median of 15)")
# GPU-side: time 5000 plain vs marked launches including the synchronize
for name, f in (("plain", plain), ("marked", marked)):
    dev.synchronize()
    t0 = time.perf_counter_ns()
    out = [f() for _ in range(5000)]
    dev.synchronize()
    t1 = time.perf_counter_ns()
    print(f"5000 {name} launches incl. sync: {(t1 - t0) / 5000 / 1e3:.2f} us each")
    if name == "marked" and t._native is not None:
        t.resolve([a for a, b in out], [b for a, b in out], [0] * 5000)
