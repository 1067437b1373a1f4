"""Cooperative-groups tiles of 64..1024 threads, scans, and the warp and barrier patterns GPUs
run although CUDA leaves them undefined (partial-mask reductions, block halves meeting at two
__syncthreads), on the cpu backend; KERNELBAY_CPU_CHECK reports those patterns instead. The
kernels are written for these tests in the idioms of NVIDIA's samples and public GEMM tutorials."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest


def _k(cpu, src: str, name: str = "k"):
    return kb.compile(kb.Source(src, lang="cuda", name=name), cpu)


TILES = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
namespace cg = cooperative_groups;
template <unsigned TILE>
__global__ void k(const float* x, float* sum, float* mx, float* inc, float* exc) {
    __shared__ cg::block_tile_memory<1024> scratch;
    cg::thread_block block = cg::this_thread_block(scratch);
    cg::thread_block_tile<TILE> tile = cg::tiled_partition<TILE>(block);
    const unsigned i = blockIdx.x * blockDim.x + block.thread_rank();
    const float v = x[i];
    float s = cg::reduce(tile, v, cg::plus<float>());
    float m = cg::reduce(tile, v, cg::greater<float>());
    float a = cg::inclusive_scan(tile, v);
    float b = cg::exclusive_scan(tile, v, cg::plus<float>());
    tile.sync();
    if (tile.thread_rank() == 0) {
        sum[i / TILE] = s;
        mx[i / TILE] = m;
    }
    inc[i] = a;
    exc[i] = b;
}
"""


@pytest.mark.parametrize("tile", [16, 32, 64, 128, 256])
def test_tiles_reduce_and_scan_like_numpy(cpu, tile):
    block, grid = 256, 2
    n = block * grid
    x = np.random.default_rng(tile).integers(-50, 50, n).astype(np.float32)
    sums = kb.asarray(np.zeros(n // tile, np.float32), device=cpu)
    maxs = kb.asarray(np.zeros(n // tile, np.float32), device=cpu)
    inc = kb.asarray(np.zeros(n, np.float32), device=cpu)
    exc = kb.asarray(np.zeros(n, np.float32), device=cpu)
    k = kb.compile(kb.Source(TILES, lang="cuda", name_expressions=[f"k<{tile}>"]), cpu)
    k.launch(grid, block, (kb.asarray(x, device=cpu), sums, maxs, inc, exc))
    t = x.reshape(-1, tile)
    np.testing.assert_array_equal(sums.numpy(), t.sum(axis=1))
    np.testing.assert_array_equal(maxs.numpy(), t.max(axis=1))
    cs = np.cumsum(t, axis=1)
    np.testing.assert_array_equal(inc.numpy(), cs.ravel())
    np.testing.assert_array_equal(exc.numpy(), (cs - t).ravel())


def test_a_tile_sync_not_every_thread_reaches_is_a_launch_error(cpu):
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(float* y) {
    auto tile = cg::tiled_partition<64>(cg::this_thread_block());
    if (threadIdx.x == 70) return;
    tile.sync();
    y[threadIdx.x] = 1.0f;
}
"""
    y = kb.asarray(np.zeros(128, np.float32), device=cpu)
    with pytest.raises(kb.LaunchError, match=r"waits in a cooperative_groups tile's sync at kernel.cu:7"):
        _k(cpu, src).launch(1, 128, (y,))


# The final stage of a shared-memory reduction as NVIDIA's reduction sample writes it: the first
# warp reduces the per-warp sums with a mask of the lanes that hold one, so lane 0 reads lanes
# 16, 8 and 4, which the mask leaves out; on a GPU they add nothing.
PARTIAL_MASK = r"""
template <class T>
__device__ __forceinline__ T warp_sum(unsigned mask, T v) {
    for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(mask, v, offset);
    return v;
}
template <unsigned BLOCK>
__global__ void k(const float* __restrict__ in, float* __restrict__ out, unsigned n) {
    __shared__ float partial[32];
    const unsigned tid = threadIdx.x;
    const unsigned tail = BLOCK & 31;
    const unsigned mask = 0xffffffffu >> (tail ? 32 - tail : 0);
    float v = 0;
    for (unsigned i = blockIdx.x * BLOCK + tid; i < n; i += BLOCK * gridDim.x) v += in[i];
    v = warp_sum(mask, v);
    if (tid % 32 == 0) partial[tid / 32] = v;
    __syncthreads();
    const unsigned warps = BLOCK / 32 > 0 ? BLOCK / 32 : 1;
    const unsigned holders = __ballot_sync(mask, tid < warps);
    if (tid < warps) {
        v = partial[tid];
        v = warp_sum(holders, v);
    }
    if (tid == 0) out[blockIdx.x] = v;
}
"""


@pytest.mark.parametrize("block", [16, 64, 256])
def test_partial_mask_reduction_sums_as_on_a_gpu(cpu, block):
    n, grid = 10_000, 3
    x = np.random.default_rng(block).integers(0, 100, n).astype(np.float32)
    out = kb.asarray(np.zeros(grid, np.float32), device=cpu)
    k = kb.compile(kb.Source(PARTIAL_MASK, lang="cuda", name_expressions=[f"k<{block}>"]), cpu)
    k.launch(grid, block, (kb.asarray(x, device=cpu), out, np.uint32(n)))
    assert out.numpy().sum() == x.sum()


def test_partial_mask_reduction_is_reported_when_checked(cpu, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    k = kb.compile(kb.Source(PARTIAL_MASK, lang="cuda", name_expressions=["k<256>"]), cpu)
    x = kb.asarray(np.ones(1024, np.float32), device=cpu)
    out = kb.asarray(np.zeros(1, np.float32), device=cpu)
    with pytest.raises(
        kb.LaunchError, match=r"in __shfl_down_sync at kernel.cu:4 reads lane 16, which mask 0x000000ff"
    ):
        k.launch(1, 256, (x, out, np.uint32(1024)))


# A double-buffered SGEMM in the style of public GEMM tutorials: while one half of the block
# computes on one shared buffer, the other half loads the next tile into the other buffer; the
# halves meet at two different __syncthreads, which a GPU's bar.sync counts as one barrier.
SPLIT_GEMM = r"""
#define T 16
__global__ void k(const float* A, const float* B, float* C, int n) {
    __shared__ float As[2][T][T], Bs[2][T][T];
    const int tx = threadIdx.x % T, ty = threadIdx.x / T % T;
    const bool loader = threadIdx.x >= T * T;   // the second half of the block loads
    const int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
    float acc = 0;
    const int tiles = n / T;
    if (loader) {
        As[0][ty][tx] = A[row * n + tx];
        Bs[0][ty][tx] = B[ty * n + col];
    }
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        if (loader) {
            if (t + 1 < tiles) {
                As[cur ^ 1][ty][tx] = A[row * n + (t + 1) * T + tx];
                Bs[cur ^ 1][ty][tx] = B[((t + 1) * T + ty) * n + col];
            }
            __syncthreads();
        } else {
            for (int e = 0; e < T; ++e) acc += As[cur][ty][e] * Bs[cur][e][tx];
            __syncthreads();
        }
    }
    if (!loader) C[row * n + col] = acc;
}
"""


def test_block_halves_meeting_at_different_barriers_run_as_on_a_gpu(cpu):
    n = 64
    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, (n, n)).astype(np.float32)
    b = rng.integers(-3, 4, (n, n)).astype(np.float32)
    c = kb.asarray(np.zeros((n, n), np.float32), device=cpu)
    _k(cpu, SPLIT_GEMM).launch(
        (n // 16, n // 16), 512, (kb.asarray(a, device=cpu), kb.asarray(b, device=cpu), c, np.int32(n))
    )
    np.testing.assert_array_equal(c.numpy(), a @ b)


def test_block_halves_meeting_at_different_barriers_are_reported_when_checked(cpu, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    n = 32
    z = kb.asarray(np.zeros((n, n), np.float32), device=cpu)
    with pytest.raises(
        kb.LaunchError,
        match=r"reached the barrier at kernel.cu:\d+ while \d+ other threads wait at the barrier at kernel.cu:\d+",
    ):
        _k(cpu, SPLIT_GEMM).launch(
            (2, 2), 512, (z, z, kb.asarray(np.zeros((n, n), np.float32), device=cpu), np.int32(n))
        )
