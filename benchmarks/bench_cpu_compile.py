"""Cold compiles of typical kernels on the cpu backend against a bare ``g++ -O2 -shared`` of the
same kernel text, side by side (interleaved) in one run.

kernelbay: ``kb.compile`` of a source the disk cache has not seen (a unique comment), in a fresh
cache directory, with what every compile with these flags shares already built there: the
precompiled prelude and the runner object (kernelbay_cpu/pch.py, runners.py; the state of any
machine after its first compile). Their one-time cost is the first row: the first compile in the
empty cache, which builds both. Bare g++: the same kernel text after a 12-line shim header (the
CUDA keywords as macros, ``__global__`` an external function, threadIdx and kin as thread-locals,
no-op barriers), ``g++ -O2 -shared -fPIC``, the least a compile of this text costs (the goal's
yardstick, issue #25); and the same with kernelbay's own default flags (``-O3 -march=native
-fopenmp ...``), so that the cost of the prelude, the runners and the Python side shows apart
from the cost of the flags.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from ._timing import goal, record, stats

SUITE = "cpu"

COLD = "compile: cold (cache miss) of a typical kernel"
FIRST = "compile: first ever (empty cache: builds the precompiled prelude too)"

# __global__ is a plain external function, so the compile generates the kernel's code as
# kernelbay's does (an `inline` kernel, as this shim had until 2026-11-29, is never odr-used and
# never compiled: the bare side then timed parsing <cmath> and the link only).
SHIM = r"""
#include <cmath>
#define __global__ extern "C"
#define __device__ inline
#define __shared__ static thread_local
struct kb_u3 { unsigned x, y, z; };
static thread_local kb_u3 threadIdx, blockIdx, blockDim, gridDim;
inline void __syncthreads() {}
inline float __shfl_down_sync(unsigned, float v, int) { return v; }
inline float atomicAdd(float* p, float v) { float o = *p; *p += v; return o; }
"""

KERNELS = {
    "gelu": r"""
__device__ float gelu(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); }
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = gelu(x[i]);
}
""",
    "adamw": r"""
__global__ void k(float* p, const float* g, float* m, float* v, float lr, float b1, float b2, float eps, float wd,
                  float c1, float c2, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    p[i] -= lr * ((m[i] / c1) / (sqrtf(v[i] / c2) + eps) + wd * p[i]);
}
""",
    "block_sum": r"""
__global__ void k(const float* x, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, s[0]);
}
""",
    "warp_sum": r"""
__global__ void k(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
""",
}


BARE_FLAGS = ["-O2", "-shared", "-fPIC"]


def _kb_flags() -> list[str]:
    """kernelbay's default flags for a cuda source, less its prelude's own defines."""
    from kernelbay_cpu import _driver
    from kernelbay_cpu.flags import flags

    return [f for f in flags((), _driver.toolchain(), "cuda") if not f.startswith("-D")]


def _bare(text: str, fl: list[str]) -> float:
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "k.cpp"), "w") as f:
            f.write(SHIM + text)
        cxx = os.environ.get("CXX", "g++").split()
        t0 = time.perf_counter()
        subprocess.run([*cxx, *fl, "k.cpp", "-o", "k.so"], cwd=d, check=True)
        return time.perf_counter() - t0


def _kb(kb, dev, text: str, tag: str) -> float:
    t0 = time.perf_counter()
    kb.compile(kb.Source(f"{text}\n// {tag} {time.time_ns()}\n", lang="cuda", name="k"), dev)
    return time.perf_counter() - t0


def run(quick: bool) -> list[dict]:
    import kernelbay as kb

    reps = 1 if quick else 3
    old = os.environ.get("KERNELBAY_CACHE_DIR")
    recs: list[dict] = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["KERNELBAY_CACHE_DIR"] = cache
        try:
            dev = kb.device("cpu")
            first = _kb(kb, dev, KERNELS["gelu"], "first")
            recs.append(record(FIRST, "kernelbay", stats([first * 1e3]), unit="ms"))
            kb_fl = _kb_flags()
            kb_s: list[float] = []
            bare_s: list[float] = []
            same_s: list[float] = []
            for _ in range(reps):
                for name, text in KERNELS.items():
                    kb_s.append(_kb(kb, dev, text, name) * 1e3)
                    bare_s.append(_bare(text, BARE_FLAGS) * 1e3)
                    same_s.append(_bare(text, kb_fl) * 1e3)
        finally:
            if old is None:
                os.environ.pop("KERNELBAY_CACHE_DIR", None)
            else:
                os.environ["KERNELBAY_CACHE_DIR"] = old
    recs.append(record(COLD, "kernelbay (precompiled prelude built)", stats(kb_s), unit="ms"))
    recs.append(record(COLD, "bare g++ -O2 -shared of the same text", stats(bare_s), unit="ms"))
    recs.append(record(COLD, "bare g++ with kernelbay's flags, same text", stats(same_s), unit="ms"))
    recs.append(
        record(
            COLD,
            "kernelbay ÷ bare g++, per kernel (median of ratios)",
            stats([a / b for a, b in zip(kb_s, bare_s, strict=True)]),
            unit="x",
        )
    )
    recs.append(
        record(
            COLD,
            "kernelbay ÷ bare g++ with kernelbay's flags, per kernel",
            stats([a / b for a, b in zip(kb_s, same_s, strict=True)]),
            unit="x",
        )
    )
    return recs


def goals(records: list[dict]) -> list[dict]:
    med = {(r["group"], r["name"]): r["median"] for r in records if "median" in r}
    out = []
    kb_ms = med.get((COLD, "kernelbay (precompiled prelude built)"))
    ratio = med.get((COLD, "kernelbay ÷ bare g++, per kernel (median of ratios)"))
    if kb_ms is not None:
        out.append(goal("cpu: cold compile of a typical kernel ≤ 1.0 s median", kb_ms / 1e3, 1.0))
    if ratio is not None:
        out.append(goal("cpu: cold compile ≤ 2× a bare g++ -O2 -shared of the same text", ratio, 2.0))
    return out


def main() -> None:
    recs = run(False)
    for r in recs:
        print(
            f"{r['group'][:50]:50} {r['name']:56} {r['median']:9.2f} {r['unit']} (p10 {r['p10']:.2f}, p90 {r['p90']:.2f})"
        )
    for g in goals(recs):
        print(g)


if __name__ == "__main__":
    main()
