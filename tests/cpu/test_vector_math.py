"""CUDA math on the cpu through glibc's vector math (libmvec): the functions kb_cpu_cuda.h declares
SIMD-callable stay within CUDA's documented error bounds (CUDA Math API, single precision), and a
kernel calling them becomes a vector loop (issue #25: gelu was 0.3x numpy, a scalar tanhf per
element). kb_cpu_cuda.h's own inline expf, fmaxf and fminf: the same bound, libm's answers."""

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


def test_the_libmvec_answer_is_kept_with_the_toolchain_probe(tmp_path, monkeypatch):
    # A warm process reads it from the probe's cache entry: no library loaded to ask (~0.2 ms of
    # a fresh process's first compile); a new C library version asks again.
    import kernelbay.cache

    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path))
    asked: list[str] = []
    real = _driver.has_libmvec

    def spy(version: str) -> bool:
        asked.append(version)
        return real(version)

    monkeypatch.setattr(_driver, "has_libmvec", spy)
    first = _driver._probe()
    assert asked and first.libmvec == real(first.version)
    again = _driver._probe()
    assert len(asked) == 1 and again == first  # from the cache entry
    monkeypatch.setattr(_driver, "_libc", lambda: "glibc 9.99")
    assert _driver._probe().libmvec == first.libmvec and len(asked) == 2  # another libc: asked anew
    monkeypatch.setenv("KERNELBAY_CPU_VECMATH", "0")
    assert flags.libmvec(first) is False
    assert kernelbay.cache.default_cache().directory == str(tmp_path.resolve())


MINMAX = r"""
__global__ void k(const float* a, const float* b, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[4 * i] = fmaxf(a[i], b[i]); y[4 * i + 1] = fminf(a[i], b[i]); y[4 * i + 2] = std::fmaxf(a[i], b[i]);
                 y[4 * i + 3] = __expf(a[i]) == std::expf(a[i]) || a[i] != a[i] ? expf(a[i]) : -1.0f; }
}
"""


def test_fmaxf_fminf_and_expf_give_libms_answers_nan_and_infinity_included(cpu):
    special = np.array([np.nan, np.inf, -np.inf, 0.0, 1.5, -2.0, 100.0, -200.0], np.float32)
    a = np.repeat(special, len(special))
    b = np.tile(special, len(special))
    a = np.concatenate([a, np.random.default_rng(1).standard_normal(1000).astype(np.float32)])
    b = np.concatenate([b, np.random.default_rng(2).standard_normal(1000).astype(np.float32)])
    n = len(a)
    y = kb.zeros(4 * n, "float32", device=cpu)
    k = kb.compile(kb.Source(MINMAX, "cuda", name="k"), cpu)
    k.launch((n + 127) // 128, 128, (kb.asarray(a, device=cpu), kb.asarray(b, device=cpu), y, np.int32(n)))
    got = y.numpy().reshape(n, 4)
    np.testing.assert_array_equal(got[:, 0], np.fmax(a, b))
    np.testing.assert_array_equal(got[:, 1], np.fmin(a, b))
    np.testing.assert_array_equal(got[:, 2], np.fmax(a, b))
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.exp(a.astype(np.float64)).astype(np.float32)
    fin = np.isfinite(want) & (want > 1e-30)
    np.testing.assert_allclose(got[fin, 3], want[fin], rtol=3e-7)
    assert np.isnan(got[np.isnan(a), 3]).all() and (got[a == np.inf, 3] == np.inf).all()


EXP = r"""
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = expf(x[i]);
}
"""


@pytest.mark.parametrize("span", [(-103.0, 88.7), (1e-6, 2.0), (-2.0, -1e-6)], ids=str)
def test_expf_is_within_cudas_bound(cpu, span):
    n = 1 << 18
    lo, hi = span
    x = np.geomspace(lo, hi, n) if lo > 0 else -np.geomspace(-lo, -hi, n) if hi < 0 else np.linspace(lo, hi, n)
    x = x.astype(np.float32)
    y = kb.zeros(n, "float32", device=cpu)
    kb.compile(kb.Source(EXP, "cuda", name="k"), cpu).launch(n // 256, 256, (kb.asarray(x, device=cpu), y, np.int32(n)))
    worst = float(_ulps(y.numpy(), np.exp(x.astype(np.float64))).max())
    assert worst <= 1, f"expf: {worst:.2f} ulp (kb_cpu_cuda.h: 0.58 over every float; CUDA's bound is 2)"
