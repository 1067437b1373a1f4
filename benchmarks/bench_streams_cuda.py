"""Streams and graphs on CUDA (gpu suite; the cpu and tpu rows are bench_streams.py).

* graph replay per kernel: a graph of 100 saxpy launches against CuPy's graph of the same
  kernels (stream capture of ``RawKernel`` launches), each replay waited for. Goal: <= 1.05x.
* a launch on a ``kb.Stream`` against ``stream=None``, host cost. Goal: <= 1.02x. Beside them,
  the same launch through the raw driver binding on stream 0 and on the kb.Stream's CUstream.
* two independent chains of 100 ~20 us kernels replayed as one graph, against the same chains
  made one serial chain (every step also writes one token buffer). Goal: <= 0.6x.
"""

from __future__ import annotations

from typing import Any

from . import _kernels
from ._timing import interleaved_samples, record, skipped, stats
from .bench_streams import _available
from .bench_streams import goals as _goals

SUITE = "gpu"

CUDA_GRAPH = "cuda: graph replay of 100 saxpy kernels (4096 floats), per kernel"
CUDA_STREAM = "cuda: saxpy launch host cost, kb.Stream vs stream=None"
CUDA_CHAINS = "cuda: two independent 100-kernel chains, graph replay + wait"

GPU_SPIN = r"""
extern "C" __global__ void spin(long long cycles, float* y) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    if (threadIdx.x == 0) y[blockIdx.x] += 1.0f;
}
"""


def run(quick: bool) -> list[dict]:
    dev, why = _available("cuda")
    if dev is None:
        return [skipped(g, "kernelbay", why) for g in (CUDA_GRAPH, CUDA_STREAM, CUDA_CHAINS)]
    import kernelbay as kb
    import numpy as np

    out: list[dict] = []
    k = _kernels.saxpy_kernel("cuda", dev)
    n = 4096
    x, y = kb.asarray(np.ones(n, np.float32), device=dev), kb.zeros(n, device=dev)
    args = (x, y, np.float32(0.5), np.int32(n))
    s = dev.stream()
    k.launch(16, 256, args, stream=s)
    k.launch(16, 256, args)
    cases = {"kb.Stream": lambda: k.launch(16, 256, args, stream=s), "stream=None": lambda: k.launch(16, 256, args)}
    cases.update(_driver_pair(k, x, y, n, s))
    st = interleaved_samples(
        cases,
        number=200 if quick else 5000,
        repeat=3 if quick else 30,
        warmup=1,
        after_batch=dev.synchronize,
    )
    out += [record(CUDA_STREAM, name, stats(v)) for name, v in st.items()]

    with dev.graph() as g:
        for _ in range(100):
            k.launch(16, 256, args)
    cases = {"kernelbay graph": lambda: g.replay()}
    try:
        import cupy as cp

        ck = cp.RawKernel(_kernels.SAXPY_CUDA, "saxpy")
        cx, cy = cp.ones(n, cp.float32), cp.zeros(n, cp.float32)
        cs = cp.cuda.Stream(non_blocking=True)
        with cs:
            cs.begin_capture()
            for _ in range(100):
                ck((16,), (256,), (cx, cy, np.float32(0.5), np.int32(n)))
            cgraph = cs.end_capture()
        cases["cupy graph"] = lambda: (cgraph.launch(cs), cs.synchronize())
        cases["kernelbay graph"] = lambda: (g.replay(), dev.synchronize())
    except Exception as exc:
        out.append(skipped(CUDA_GRAPH, "cupy graph", f"{type(exc).__name__}: {exc}"))
    st = interleaved_samples(
        cases, number=10 if quick else 100, repeat=3 if quick else 20, warmup=1, after_batch=dev.synchronize
    )
    out += [
        record(CUDA_GRAPH, name, {k2: (v / 100 if k2 != "n" else v) for k2, v in stats(v).items()})
        for name, v in st.items()
    ]

    spin = kb.compile(kb.Source(GPU_SPIN, "cuda", name="spin"), dev)
    cycles = np.int64(dev.properties.get("clock_khz", 1_000_000) * 0.02)  # about 20 us each
    a, b = kb.zeros(1, device=dev), kb.zeros(1, device=dev)
    with dev.graph() as par:
        for _ in range(100):
            spin.launch(1, 32, (cycles, a))
            spin.launch(1, 32, (cycles, b))
    token = kb.zeros(1, device=dev)  # every step writes it too: one serial chain
    with dev.graph() as ser:
        for _ in range(100):
            spin.launch(1, 32, (cycles, a), writes=(a, token))
            spin.launch(1, 32, (cycles, b), writes=(b, token))
    st = interleaved_samples(
        {
            "independent chains": lambda: (par.replay(), dev.synchronize()),
            "serialised": lambda: (ser.replay(), dev.synchronize()),
        },
        number=1,
        repeat=3 if quick else 20,
        warmup=1,
    )
    out += [record(CUDA_CHAINS, name, stats(v)) for name, v in st.items()]
    return out


def _driver_pair(k: Any, x: Any, y: Any, n: int, s: Any) -> dict[str, Any]:
    """The same launch through the raw driver binding with a prepacked parameter block, on the
    legacy default stream and on the kb.Stream's CUstream: what the driver itself costs more (or
    less) on a blocking user stream, beside kernelbay's two forms."""
    import ctypes

    try:
        from cuda.bindings import driver as d
    except ImportError:
        return {}
    fn = d.CUfunction(k.handle.function)
    vals = (ctypes.c_uint64(x.handle), ctypes.c_uint64(y.handle), ctypes.c_float(0.5), ctypes.c_int(n))
    ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in vals])
    addr = ctypes.addressof(ptrs)
    s0, su = d.CUstream(0), d.CUstream(s.handle.handle)
    keep = (vals, ptrs)  # alive as long as the lambdas
    return {
        "driver, stream 0": lambda _k=keep: d.cuLaunchKernel(fn, 16, 1, 1, 256, 1, 1, 0, s0, addr, 0),
        "driver, the kb.Stream's CUstream": lambda _k=keep: d.cuLaunchKernel(fn, 16, 1, 1, 256, 1, 1, 0, su, addr, 0),
    }


GOALS = [
    (CUDA_GRAPH, "kernelbay graph", "cupy graph", 1.05, "cuda: graph replay per kernel ≤ 1.05× CuPy's graph"),
    (CUDA_STREAM, "kb.Stream", "stream=None", 1.02, "cuda: launch on a kb.Stream ≤ 1.02× stream=None"),
    (CUDA_CHAINS, "independent chains", "serialised", 0.6, "cuda: two independent 100-kernel chains ≤ 0.6× serialised"),
]


def goals(records: list[dict]) -> list[dict]:
    return _goals(records, GOALS)
