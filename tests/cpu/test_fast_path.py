"""The fast path (kernels without barriers, shared memory or warps): a kernel body runs as a loop
over the block's threads. Early returns, multi-dimensional blocks, device functions that read
threadIdx (which keep the per-thread runner), and huge grids all give numpy's answers."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

EARLY_RETURN = r"""
__global__ void k(int* y, int n);  // a declaration first: it has no body to wrap
__global__ void k(int* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;              // leaves this thread only
    if (i % 3 == 0) { y[i] = -1; return; }
    y[i] = i * 2;
}
"""


def test_early_return_ends_only_that_thread(cpu):
    n = 1000
    k = kb.compile(kb.Source(EARLY_RETURN, lang="cuda", name="k"), cpu)
    y = kb.asarray(np.full(1024, 7, np.int32), device=cpu)
    k.launch(4, 256, (y, n))
    i = np.arange(1024)
    want = np.where(i >= n, 7, np.where(i % 3 == 0, -1, i * 2))
    np.testing.assert_array_equal(y.numpy(), want)


THREE_D = r"""
__global__ void k(int* out, int nx, int ny, int nz) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < nx && y < ny && z < nz) out[(z * ny + y) * nx + x] = x + 100 * y + 10000 * z + gridDim.x * 1000000;
}
"""


def test_three_dimensional_blocks(cpu):
    nx, ny, nz = 13, 7, 5
    k = kb.compile(kb.Source(THREE_D, lang="cuda", name="k"), cpu)
    out = kb.asarray(np.zeros(nx * ny * nz, np.int32), device=cpu)
    k.launch((4, 3, 2), (4, 3, 3), (out, nx, ny, nz))
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    np.testing.assert_array_equal(out.numpy().reshape(nz, ny, nx), x + 100 * y + 10000 * z + 4 * 1000000)


DEVICE_READS_THREADIDX = r"""
__device__ int my_index() { return blockIdx.x * blockDim.x + threadIdx.x; }
__global__ void k(int* y) { y[my_index()] = my_index() * 3; }
"""


def test_device_function_reading_threadidx_keeps_the_per_thread_runner(cpu):
    src = kb.Source(DEVICE_READS_THREADIDX, lang="cuda", name="k")
    assert analysis.plan_cuda(src, ["k"]).runners == {"k": "run_threads"}
    assert analysis.plan_cuda(kb.Source(EARLY_RETURN, lang="cuda", name="k"), ["k"]).runners == {"k": "run_blocks"}
    k = kb.compile(src, cpu)
    y = kb.asarray(np.zeros(512, np.int32), device=cpu)
    k.launch(2, 256, (y,))
    np.testing.assert_array_equal(y.numpy(), np.arange(512) * 3)


def test_wrapping_keeps_line_numbers():
    src = kb.Source(EARLY_RETURN, lang="cuda", name="k")
    wrapped = analysis.plan_cuda(src, ["k"]).text
    assert wrapped.count("\n") == EARLY_RETURN.count("\n")
    assert wrapped.count("KB_THREADS_BEGIN") == 1


def test_grid_past_two_million_blocks(cpu):
    # blocks past 2^21 take the loop without the no-wrap bounds
    src = r"""
__global__ void k(unsigned* y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x >= 2097150u) y[i - 2097150u * 2u] = i;
}
"""
    k = kb.compile(kb.Source(src, lang="cuda", name="k"), cpu)
    y = kb.asarray(np.zeros(8, np.uint32), device=cpu)
    k.launch(2097154, 2, (y,))
    np.testing.assert_array_equal(y.numpy(), 2097150 * 2 + np.arange(8))


LAUNCH_BOUNDS = r"""
// __global__ void old(float* y) {}  (a comment, not a second kernel)
extern "C" __global__ void __launch_bounds__(256, 2) k(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""


def test_launch_bounds_kernel_found_without_a_name_and_wrapped(cpu):
    src = kb.Source(LAUNCH_BOUNDS, lang="cuda")
    wrapped = analysis.plan_cuda(src, analysis.entries(src)).text
    assert wrapped.count("KB_THREADS_BEGIN") == 1
    k = kb.compile(src, cpu)
    x = kb.asarray(np.arange(300, dtype=np.float32), device=cpu)
    y = kb.asarray(np.zeros(300, np.float32), device=cpu)
    k.launch(2, 256, (x, y, 300))
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(300, dtype=np.float32))


SQRT = r"""
__global__ void k(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = sqrtf(x[i]) + sqrt(x[i]);  // sqrtf, and the float overload of sqrt
}
"""


def test_sqrt_without_errno_is_still_correctly_rounded(cpu):
    # CUDA sources build with -fno-math-errno (sqrtf's loop vectorises): the values are IEEE's,
    # special cases included, exactly as numpy's correctly rounded float32 sqrt gives them.
    from kernelbay_cpu import _driver, flags

    tc = _driver.toolchain()
    assert "-fno-math-errno" in flags.flags([], tc, "cuda")
    assert "-fno-math-errno" not in flags.flags([], tc, "c++")
    assert "-fno-math-errno" not in flags.flags(["-fmath-errno"], tc, "cuda")
    rng = np.random.default_rng(1)
    special = [0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, 1e-40, 3.4e38, 2.0]
    x = np.concatenate([np.array(special, np.float32), rng.random(4000, np.float32) * 1e6]).astype(np.float32)
    n = x.size
    y = kb.zeros(n, "float32", device=cpu)
    kb.compile(kb.Source(SQRT, lang="cuda", name="k"), cpu).launch(
        (n + 255) // 256, 256, (y, kb.asarray(x, device=cpu), n)
    )
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x) + np.sqrt(x)
    np.testing.assert_array_equal(y.numpy(), want)


SPANS = r"""
__global__ void k(int* out, int* seen) {
    int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    out[i] = blockIdx.x + 1000 * blockIdx.y;
    atomicAdd(seen, 1);
}
__global__ void checked(int* y) {
    assert(blockIdx.x != 29 || threadIdx.x != 3);
    y[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}
__global__ void null_write(int* y) {
    int* p = blockIdx.x == 29 && threadIdx.x == 3 ? nullptr : y;
    p[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}
"""


def test_a_call_runs_a_span_of_blocks_each_once_with_its_own_index(cpu):
    # One call of a loop-path kernel runs up to 8192 threads' worth of consecutive blocks in x
    # (kb_cpu_launch.cpp, run_blocks_in): spans end at each row of the grid and at each chunk.
    k = kb.compile(kb.Source(SPANS, lang="cuda", name="k"), cpu)
    for grid, block in (((37, 3), 64), ((300, 1), 32), ((5, 2), 1024), ((129, 1), 1)):
        gx, gy = grid
        out = kb.asarray(np.full(gx * gy * block, -1, np.int32), device=cpu)
        seen = kb.zeros(1, "int32", device=cpu)
        k.launch(grid, block, (out, seen))
        by, bx = np.meshgrid(np.arange(gy), np.arange(gx), indexing="ij")
        np.testing.assert_array_equal(out.numpy(), np.repeat((bx + 1000 * by).ravel(), block))
        assert int(seen.numpy()[0]) == gx * gy * block


@pytest.mark.parametrize("name", ["checked", "null_write"])
def test_an_error_in_a_later_block_of_a_span_names_that_block(cpu, name):
    k = kb.compile(kb.Source(SPANS, lang="cuda", name=name), cpu)
    y = kb.zeros(40 * 32, "int32", device=cpu)
    with pytest.raises(kb.LaunchError) as e:
        k.launch(40, 32, (y,))
    assert "block (29,0,0), thread (3,0,0)" in str(e.value)
