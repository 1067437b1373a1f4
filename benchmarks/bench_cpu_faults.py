"""What fault recovery costs a cpu launch (issue #26): a tiny launch (1 block of 32 threads, 4
arguments) and saxpy 2^20, each in fresh processes with the cpu runtime on (the default: faults
become LaunchErrors, Ctrl-C and KERNELBAY_CPU_TIMEOUT stop running blocks) and off
(``KERNELBAY_CPU_RUNTIME=0``: none of that, nor the fault report), interleaved, one thread.

The runtime's whole per-launch cost is an upper bound on what fault recovery added: goal <= 5%.
"""

from __future__ import annotations

import os
import sys

from ._timing import goal, record, stats, subprocess_samples

SUITE = "cpu"

TINY = "cpu launch with fault recovery: tiny kernel (1 block of 32), host time per launch"
SAXPY = "cpu launch with fault recovery: saxpy 2^20 float32, per launch"

CHILD = r"""
import sys, time, numpy as np, kernelbay as kb
dev = kb.device("cpu")
src = '''extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}'''
k = kb.compile(kb.Source(src, "cuda", name="saxpy"), dev)
n, calls = int(sys.argv[1]), int(sys.argv[2])
x, y = kb.zeros(n, "float32", device=dev), kb.zeros(n, "float32", device=dev)
args = (x, y, np.float32(2), np.int32(n))
grid = max(1, n // 256) if n > 32 else 1
block = 256 if n > 32 else 32
for _ in range(max(10, calls // 10)):
    k.launch(grid, block, args)
best = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(calls):
        k.launch(grid, block, args)
    best.append((time.perf_counter() - t) / calls)
print(sorted(best)[2])
"""


def _cases(n: int, calls: int) -> dict[str, tuple[list[str], dict[str, str]]]:
    base = {**os.environ, "KERNELBAY_CPU_THREADS": "1"}
    base.pop("KERNELBAY_CPU_RUNTIME", None)
    cmd = [sys.executable, "-c", CHILD, str(n), str(calls)]
    return {
        "runtime on (default)": (cmd, base),
        "runtime off (KERNELBAY_CPU_RUNTIME=0)": (cmd, {**base, "KERNELBAY_CPU_RUNTIME": "0"}),
    }


def run(quick: bool) -> list[dict]:
    repeat, warmup = (1, 0) if quick else (15, 1)  # quick: the smoke test's one process a side
    recs = []
    for group, n, calls in ((TINY, 32, 2000 if quick else 20000), (SAXPY, 1 << 20, 20 if quick else 200)):
        for name, s in subprocess_samples(_cases(n, calls), repeat=repeat, warmup=warmup, timeout=600).items():
            recs.append(record(group, name, stats(s)))
    return recs


def goals(records: list[dict]) -> list[dict]:
    med = {(r["group"], r["name"]): r["median"] for r in records if "median" in r}
    out = []
    for group, what in ((TINY, "tiny launch"), (SAXPY, "saxpy 2^20")):
        on, off = med.get((group, "runtime on (default)")), med.get((group, "runtime off (KERNELBAY_CPU_RUNTIME=0)"))
        if on and off:
            out.append(goal(f"cpu: {what} with fault recovery ≤ 1.05× without the runtime", on / off, 1.05))
    return out
