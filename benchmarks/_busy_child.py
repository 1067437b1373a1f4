"""One timed process of bench_cpu_busy: ``python -m benchmarks._busy_child CASE N REPS`` prints
the per-call microseconds of REPS calls as a JSON list (CASE: saxpy, tiny, numpy)."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

SAXPY = r"""
__global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""


def main() -> None:
    case, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    if case == "numpy":

        def step() -> None:
            y.__iadd__(np.float32(2.0) * x)

    else:
        import kernelbay as kb

        dev = kb.device("cpu")
        k = kb.compile(kb.Source(SAXPY, lang="cuda", name="saxpy"), dev)
        dx, dy = kb.asarray(x, device=dev), kb.asarray(y, device=dev)
        grid = (n + 255) // 256 if case == "saxpy" else 1
        block = 256 if case == "saxpy" else 32

        def step() -> None:
            k.launch(grid, block, (dx, dy, np.float32(2.0), n))
            dev.synchronize()

    for _ in range(20):
        step()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        out.append((time.perf_counter() - t0) * 1e6)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
