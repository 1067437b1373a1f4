"""CUDA math on the cpu through glibc's vector math (libmvec): the functions kb_cpu_cuda.h declares
SIMD-callable stay within CUDA's documented error bounds (CUDA Math API, single precision), and a
kernel calling them becomes a vector loop (issue #25: gelu was 0.3x numpy, a scalar tanhf per
element)."""

from __future__ import annotations

import math

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import _driver, flags

SRC = r"""
extern "C" __global__ void apply(const float* x, float* y, int n, int which) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = which == 0 ? tanhf(v) : which == 2 ? sinf(v) : which == 3 ? cosf(v) : erff(v);
    }
}
"""

# name, which, inputs, reference in float64, CUDA's bound in ulp
CASES = [
    ("tanhf", 0, (-10.0, 10.0), np.tanh, 2),
    ("tanhf small", 0, (1e-6, 2.0), np.tanh, 2),
    ("sinf small", 2, (1e-6, 2.0), np.sin, 2),
    ("erff small", 4, (1e-6, 2.0), np.vectorize(math.erf), 2),
    ("sinf", 2, (-100.0, 100.0), np.sin, 2),
    ("cosf", 3, (-100.0, 100.0), np.cos, 2),
    ("erff", 4, (-5.0, 5.0), np.vectorize(math.erf), 2),
]


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    w = want.astype(np.float32)
    step = np.spacing(np.abs(w)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / step


@pytest.mark.parametrize(("name", "which", "span", "ref", "bound"), CASES, ids=[c[0] for c in CASES])
def test_each_function_is_within_cudas_bound(cpu, name, which, span, ref, bound):
    n = 1 << 18
    lo, hi = span
    x = (np.geomspace(lo, hi, n) if lo > 0 else np.linspace(lo, hi, n)).astype(np.float32)
    xs, ys = kb.asarray(x, device=cpu), kb.zeros(n, "float32", device=cpu)
    kb.compile(kb.Source(SRC, "cuda", name="apply"), cpu).launch(n // 256, 256, (xs, ys, np.int32(n), np.int32(which)))
    worst = float(_ulps(ys.numpy(), ref(x.astype(np.float64))).max())
    assert worst <= bound, f"{name}: {worst:.2f} ulp, CUDA's bound is {bound}"


def test_kernels_use_the_vector_math_library_where_it_exists(cpu):
    k = kb.compile(kb.Source(SRC, "cuda", name="apply"), cpu)
    x = kb.asarray(np.linspace(0.1, 1, 512, dtype=np.float32), device=cpu)
    k.launch(2, 256, (x, kb.zeros(512, "float32", device=cpu), np.int32(512), np.int32(0)))
    with open("/proc/self/maps") as f:
        mapped = "libmvec" in f.read()
    assert mapped == flags.libmvec(_driver.toolchain())
