"""Real CUDA-style and C++ kernels, compiled by the system compiler, checked against numpy."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest

SAXPY = r"""
__global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def test_saxpy(cpu):
    n = 100_003
    rng = np.random.default_rng(1)
    xs, ys = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    k = kb.compile(kb.Source(SAXPY, lang="cuda", name="saxpy"), cpu)
    x, y = kb.asarray(xs, device=cpu), kb.asarray(ys, device=cpu)
    k.launch(grid=-(-n // 256), block=256, args=(x, y, np.float32(3.0), np.int32(n)))
    # -O3 -march=native contracts a * x + y into one FMA (as nvcc does): one rounding, not two
    np.testing.assert_allclose(y.numpy(), np.float32(3.0) * xs + ys, rtol=1e-6, atol=1e-6)


def test_python_numbers_convert_when_unambiguous(cpu):
    n = 1000
    k = kb.compile(kb.Source(SAXPY, lang="cuda", name="saxpy"), cpu)
    x = kb.asarray(np.arange(n, dtype=np.float32), device=cpu)
    y = kb.zeros(n, device=cpu)
    k.launch(grid=4, block=256, args=(x, y, 0.5, n))
    np.testing.assert_array_equal(y.numpy(), np.arange(n, dtype=np.float32) * 0.5)


def test_unnamed_source_with_one_kernel(cpu):
    k = kb.compile(kb.Source(SAXPY, lang="cuda"), cpu)
    x, y = kb.asarray(np.ones(8, np.float32), device=cpu), kb.zeros(8, device=cpu)
    k.launch(1, 8, (x, y, np.float32(2), np.int32(8)))
    np.testing.assert_array_equal(y.numpy(), np.full(8, 2, np.float32))


ELEMENTWISE_2D = r"""
__global__ void add_scaled(const double* a, const double* b, double* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        int i = r * cols + c;
        out[i] = a[i] * (r + 1) + b[i] * gridDim.x - blockDim.y;
    }
}
"""


def test_elementwise_2d_grid_2d_blocks(cpu):
    rows, cols = 203, 157
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((rows, cols)), rng.standard_normal((rows, cols))
    block = (16, 8)
    grid = (-(-cols // block[0]), -(-rows // block[1]))
    k = kb.compile(kb.Source(ELEMENTWISE_2D, lang="cuda", name="add_scaled"), cpu)
    out = kb.zeros((rows, cols), "float64", device=cpu)
    k.launch(grid, block, (kb.asarray(a, device=cpu), kb.asarray(b, device=cpu), out, np.int32(rows), np.int32(cols)))
    want = a * (np.arange(rows)[:, None] + 1) + b * grid[0] - block[1]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)


HISTOGRAM = r"""
__global__ void histogram(const unsigned char* data, unsigned int* bins, int n) {
    int stride = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        atomicAdd(&bins[data[i] % 16], 1u);
}
"""


def test_histogram_with_atomic_add(cpu):
    n = 1 << 21  # many blocks on every core hitting 16 bins: a lost update would show
    data = np.random.default_rng(3).integers(0, 256, n).astype(np.uint8)
    k = kb.compile(kb.Source(HISTOGRAM, lang="cuda", name="histogram"), cpu)
    bins = kb.zeros(16, "uint32", device=cpu)
    k.launch(grid=512, block=128, args=(kb.asarray(data, device=cpu), bins, np.int32(n)))
    np.testing.assert_array_equal(bins.numpy(), np.bincount(data % 16, minlength=16))


FLOAT_SUM = r"""
__global__ void total(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
    if (i < n) atomicMax((int*)out + 1, (int)x[i]);
}
"""


def test_float_atomic_add_and_int_atomic_max(cpu):
    n = 1 << 16
    xs = np.ones(n, np.float32)
    xs[1234] = 77
    k = kb.compile(kb.Source(FLOAT_SUM, lang="cuda", name="total"), cpu)
    out = kb.zeros(2, "float32", device=cpu)
    k.launch(n // 64, 64, (kb.asarray(xs, device=cpu), out, np.int32(n)))
    got = out.numpy()
    assert got[0] == np.float32(n - 1 + 77)
    assert got[1:].view(np.int32)[0] == 77


TEMPLATE = r"""
template <typename T>
__global__ void scale(T* x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + T(1) / T(3);
}
"""


@pytest.mark.parametrize(("ctype", "dtype"), [("float", np.float32), ("double", np.float64)])
def test_template_instantiations(cpu, ctype, dtype):
    n = 1000
    src = kb.Source(TEMPLATE, lang="cuda", name=f"scale<{ctype}>", name_expressions=("scale<float>", "scale<double>"))
    k = kb.compile(src, cpu)
    xs = np.linspace(-1, 1, n).astype(dtype)
    x = kb.asarray(xs, device=cpu)
    k.launch(4, 256, (x, dtype(2.5), np.int32(n)))
    want = xs * dtype(2.5) + dtype(1) / dtype(3)
    np.testing.assert_allclose(
        x.numpy(), want, rtol=1e-6 if dtype == np.float32 else 1e-14, atol=1e-7 if dtype == np.float32 else 1e-15
    )
    assert x.numpy().dtype == dtype


def test_template_parameter_size_is_checked(cpu):
    k = kb.compile(kb.Source(TEMPLATE, lang="cuda", name="scale<double>"), cpu)
    x = kb.zeros(4, "float64", device=cpu)
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 1 .* 8-byte"):
        k.launch(1, 4, (x, np.float32(2), np.int32(4)))


DEVICE_HELPER = r"""
__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ float clampf(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

__global__ void activate(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = clampf(sigmoid(x[i]), 0.1f, 0.9f) + max(i % 3, 1) + sqrtf(4.0f);
}
"""


def test_device_helper_functions(cpu):
    n = 5000
    xs = np.linspace(-6, 6, n).astype(np.float32)
    k = kb.compile(kb.Source(DEVICE_HELPER, lang="cuda", name="activate"), cpu)
    y = kb.zeros(n, device=cpu)
    k.launch(-(-n // 128), 128, (kb.asarray(xs, device=cpu), y, np.int32(n)))
    want = np.clip(1 / (1 + np.exp(-xs)), 0.1, 0.9) + np.maximum(np.arange(n) % 3, 1) + 2
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)


CXX_KERNEL = r"""
#include <cstdint>
// A c++ kernel: called once per block; it runs the block's threads itself.
void axpb(float* y, const float* x, float a, float b, std::int64_t n) {
    const std::int64_t start = (std::int64_t)kb::blockIdx().x * kb::blockDim().x;
    const std::int64_t end = start + kb::blockDim().x < n ? start + kb::blockDim().x : n;
    for (std::int64_t i = start; i < end; ++i) y[i] = a * x[i] + b;
}
"""


def test_cxx_kernel_runs_once_per_block(cpu):
    n = 10_001
    xs = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    k = kb.compile(kb.Source(CXX_KERNEL, lang="c++", name="axpb"), cpu)
    y = kb.zeros(n, device=cpu)
    k.launch(-(-n // 1000), 1000, (y, kb.asarray(xs, device=cpu), 2.0, -1.0, n))
    np.testing.assert_allclose(y.numpy(), 2 * xs - 1, rtol=1e-6)


THROWS = r"""
#include <stdexcept>
void boom(int* flag) {
    if (kb::blockIdx().x == 3) throw std::runtime_error("block 3 says no");
    flag[kb::blockIdx().x] = 1;
}
"""


def test_cxx_exception_becomes_launch_error(cpu):
    k = kb.compile(kb.Source(THROWS, lang="c++", name="boom"), cpu)
    flags = kb.zeros(8, "int32", device=cpu)
    with pytest.raises(kb.LaunchError, match="block 3 says no"):
        k.launch(8, 1, (flags,))
    # the next launch starts clean
    k2 = kb.compile(kb.Source(THROWS, lang="c++", name="boom"), cpu)
    with pytest.raises(kb.LaunchError):
        k2.launch(4, 1, (flags,))
    k.launch(3, 1, (flags,))
    assert flags.numpy()[:3].tolist() == [1, 1, 1]


def test_struct_parameter_takes_matching_numpy_scalar(cpu):
    src = r"""
    struct Pair { int a; float b; };
    __global__ void put(Pair p, float* out) { out[0] = p.a + p.b; }
    """
    k = kb.compile(kb.Source(src, lang="cuda", name="put"), cpu)
    out = kb.zeros(1, device=cpu)
    pair = np.array([(3, 0.5)], dtype=[("a", "<i4"), ("b", "<f4")])[0]
    k.launch(1, 1, (pair, out))
    assert out.numpy()[0] == 3.5
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 0 .* 8-byte"):
        k.launch(1, 1, (3, out))
