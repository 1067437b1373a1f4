"""A small program for the trace tests: compiles, copies, launches and synchronises on one
device, from the main thread and a worker thread, then checks its own result.

    python workload.py DEVICE [LAUNCHES] [--raise]

Counts it produces (the tests check them): 2 compiles of the kernel (the second a memory hit),
LAUNCHES launches on the main thread and 1 on a worker thread named "worker", 3 allocations
(x, y, z), copies: HtoD 2 (x, y), DtoD 1 (the result into the other array), DtoH 1, and
2 synchronizes.
``--raise`` raises after the work, to show the trace is written all the same.
"""

from __future__ import annotations

import sys
import threading

import kernelbay as kb
import numpy as np

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
N = 256


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def main(argv: list[str]) -> int:
    dev = kb.device(argv[1])
    launches = int(argv[2]) if len(argv) > 2 and not argv[2].startswith("-") else 3
    if dev.backend == "tpu":
        src = kb.Source(add_kernel, lang="pallas", name="add", meta={"outputs": ("o_ref",)})
    else:
        src = kb.Source(SAXPY, lang="cuda", name="saxpy")
    k = kb.compile(src, device=dev)
    k = kb.compile(src, device=dev)  # the same source again: an in-memory hit
    xs = np.arange(N, dtype=np.float32)
    x = kb.asarray(xs, device=dev)
    y = kb.asarray(np.ones(N, np.float32), device=dev)
    z = kb.empty(N, np.float32, device=dev)
    if dev.backend == "tpu":

        def launch() -> None:
            k.launch(grid=1, args=(x, y, z))
    else:

        def launch() -> None:
            k.launch(grid=1, block=N, args=(x, y, np.float32(1.0), np.int32(N)))

    for _ in range(launches):
        launch()
    t = threading.Thread(target=launch, name="worker")
    t.start()
    t.join()
    dev.synchronize()
    if dev.backend == "tpu":  # z = x + y: copy it into y, read y
        kb.copy(y, z)
        out = kb.copy(np.empty(N, np.float32), y)
        want = xs + 1
    else:  # y += x per launch: copy y into z, read z
        kb.copy(z, y)
        out = kb.copy(np.empty(N, np.float32), z)
        want = 1 + (launches + 1) * xs
    dev.synchronize()
    if not np.allclose(out, want):
        print(f"wrong result: {out[:4]} instead of {want[:4]}", file=sys.stderr)
        return 2
    if "--raise" in argv:
        raise RuntimeError("the workload raises on purpose")
    print("workload ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
