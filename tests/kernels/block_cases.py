"""CUDA kernels that use shared memory, barriers, warp intrinsics and cooperative groups, with inputs
and numpy references. The cpu tests check each against numpy; tests/cuda/test_cpu_parity.py runs
the same sources on a GPU and on the cpu and compares the two.

Each case is ``run(device) -> (got, expected, exact)``: the kernel's output as numpy, the numpy
reference, and whether the comparison is bit-exact (integers) or within float tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kernelbay as kb
import numpy as np

Result = tuple[np.ndarray, np.ndarray, bool]

TILED_MATMUL = r"""
#define TILE 16
__global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""

BLOCK_REDUCE = r"""
template <class T, int B>
__global__ void block_sum(const T* x, T* out, int n) {
    __shared__ T s[B];
    int t = threadIdx.x;
    T acc = 0;
    for (int i = blockIdx.x * B + t; i < n; i += gridDim.x * B) acc += x[i];
    s[t] = acc;
    __syncthreads();
    for (int k = B / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
"""

WARP_REDUCE = r"""
__device__ int warp_sum(int v) {
    for (int off = warpSize / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}
__global__ void warp_reduce(const int* x, int* out, int n) {
    __shared__ int partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    int v = warp_sum(i < n ? x[i] : 0);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (threadIdx.x < 32) {  // legal divergence: the whole first warp
        int w = threadIdx.x < blockDim.x / warpSize ? partial[threadIdx.x] : 0;
        w = warp_sum(w);
        if (threadIdx.x == 0) out[blockIdx.x] = w;
    }
}
"""

BLOCK_SCAN = r"""
__global__ void block_scan(const int* x, int* y, int n) {
    __shared__ int buf[2][256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    int src = 0;
    buf[0][t] = i < n ? x[i] : 0;
    __syncthreads();
    for (int off = 1; off < blockDim.x; off *= 2) {
        int v = buf[src][t];
        if (t >= off) v += buf[src][t - off];
        buf[1 - src][t] = v;
        src = 1 - src;
        __syncthreads();
    }
    if (i < n) y[i] = buf[src][t];
}
"""

HISTOGRAM = r"""
__global__ void histogram(const unsigned char* data, unsigned int* bins, int n) {
    __shared__ unsigned int local[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (local[b]) atomicAdd(&bins[b], local[b]);
}
"""

SOFTMAX = r"""
__global__ void softmax_rows(const float* x, float* y, int cols) {
    __shared__ float red[128];
    const float* row = x + (long)blockIdx.x * cols;
    float* out = y + (long)blockIdx.x * cols;
    int t = threadIdx.x;
    float m = __int_as_float(0xff800000);  // -inf, without <cmath> under NVRTC
    for (int c = t; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    red[t] = m;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) red[t] = fmaxf(red[t], red[t + k]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float s = 0.0f;
    for (int c = t; c < cols; c += blockDim.x) s += expf(row[c] - m);
    red[t] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        __syncthreads();
    }
    s = red[0];
    for (int c = t; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) / s;
}
"""

TRANSPOSE = r"""
#define TD 32
__global__ void transpose(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[TD][TD + 1];  // padded: no bank conflicts on a GPU
    int x = blockIdx.x * TD + threadIdx.x, y = blockIdx.y * TD + threadIdx.y;
    for (int j = 0; j < TD; j += blockDim.y)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TD + threadIdx.x;
    y = blockIdx.x * TD + threadIdx.y;
    for (int j = 0; j < TD; j += blockDim.y)
        if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}
"""

CG_REDUCE = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

__global__ void cg_reduce(const int* x, int* sums, int* maxes, int* mins, int* tile_sums, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
    int i = blockIdx.x * block.size() + block.thread_rank();
    int v = i < n ? x[i] : 0;
    int s = cg::reduce(tile, v, cg::plus<int>());
    int hi = cg::reduce(tile, v, cg::greater<int>());
    int lo = cg::reduce(tile, v, cg::less<int>());
    // the same sum by hand, with the tile's shfl_down
    int h = v;
    for (int off = tile.size() / 2; off > 0; off /= 2) h += tile.shfl_down(h, off);
    __shared__ int per_tile[64];
    if (tile.thread_rank() == 0) per_tile[tile.meta_group_rank()] = h;
    block.sync();
    int g = blockIdx.x * tile.meta_group_size() + tile.meta_group_rank();
    if (tile.thread_rank() == 0) {
        sums[g] = s;
        maxes[g] = hi;
        mins[g] = lo;
    }
    if (block.thread_rank() == 0) {
        int t = 0;
        for (unsigned k = 0; k < tile.meta_group_size(); ++k) t += per_tile[k];
        tile_sums[blockIdx.x] = t;
    }
    // a tile of 4 out of the tile of 16, and a tile whose size is known at run time
    cg::thread_block_tile<4> quad = cg::tiled_partition<4>(tile);
    if (quad.any(v < 0) != (cg::reduce(quad, v < 0 ? 1 : 0, cg::plus<int>()) > 0)) sums[g] = -1;
    cg::thread_group dyn = cg::tiled_partition(block, 8);
    dyn.sync();
}
"""

DYNAMIC_SHARED = r"""
extern __shared__ float buf[];
__global__ void reverse_blocks(const float* x, float* y, int n) {
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    buf[t] = base + t < n ? x[base + t] : 0.0f;
    __syncthreads();
    int src = blockDim.x - 1 - t;
    if (base + t < n) y[base + t] = buf[src] * 2.0f;
}
__global__ void two_arrays(const int* x, int* y) {
    extern __shared__ __align__(16) unsigned char smem[];
    int* a = reinterpret_cast<int*>(smem);
    int* b = a + blockDim.x;
    a[threadIdx.x] = x[threadIdx.x];
    b[threadIdx.x] = 10 * x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = a[blockDim.x - 1 - threadIdx.x] + b[threadIdx.x];
}
"""

WARP_VOTES = r"""
__global__ void warp_votes(const int* x, unsigned* out) {
    int t = threadIdx.x, lane = t & 31;
    int v = x[blockIdx.x * blockDim.x + t];
    unsigned* o = out + (blockIdx.x * blockDim.x + t) * 12;
    o[0] = __ballot_sync(0xffffffffu, v > 0);
    o[1] = __any_sync(0xffffffffu, v == 7);
    o[2] = __all_sync(0xffffffffu, v >= -100);
    o[3] = __match_any_sync(0xffffffffu, v & 3);
    int pred = 0;
    o[4] = __match_all_sync(0xffffffffu, t / 32, &pred);
    o[5] = pred;
    o[6] = __reduce_add_sync(0xffffffffu, (unsigned)v);
    o[7] = (unsigned)__reduce_max_sync(0xffffffffu, v);
    o[8] = __shfl_xor_sync(0xffffffffu, (unsigned)v, 5);
    o[9] = (unsigned)__shfl_up_sync(0xffffffffu, v, 3, 16);
    o[10] = (unsigned)__shfl_sync(0xffffffffu, v, lane + 1, 8);
    o[11] = 0;
    if (lane < 16) {  // legal divergence: the lower half of each warp, named by its mask
        o[11] = (unsigned)__shfl_down_sync(0x0000ffffu, v, 4, 16);  // width 16: no read outside the mask
        __syncwarp(0x0000ffffu);
    }
    int c = __syncthreads_count(v > 0), a = __syncthreads_and(v > -50), r = __syncthreads_or(v == 99);
    if (t == 0) {
        out[gridDim.x * blockDim.x * 12 + blockIdx.x * 3 + 0] = c;
        out[gridDim.x * blockDim.x * 12 + blockIdx.x * 3 + 1] = a;
        out[gridDim.x * blockDim.x * 12 + blockIdx.x * 3 + 2] = r;
    }
}
"""


def _src(text: str, name: str) -> kb.Source:
    return kb.Source(text, lang="cuda", name=name)


def tiled_matmul(dev: Any) -> Result:
    rng = np.random.default_rng(10)
    M, N, K = 70, 45, 50
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    k = kb.compile(_src(TILED_MATMUL, "matmul"), dev)
    c = kb.zeros(M * N, device=dev)
    k.launch(
        grid=(-(-N // 16), -(-M // 16)),
        block=(16, 16),
        args=(kb.asarray(a.ravel(), device=dev), kb.asarray(b.ravel(), device=dev), c, M, N, K),
    )
    return c.numpy().reshape(M, N), a @ b, False


def block_reduce(dev: Any, dtype: str = "float32") -> Result:
    rng = np.random.default_rng(11)
    n, blocks = 100_003, 24
    if dtype == "float32":
        x = rng.standard_normal(n).astype(np.float32)
        name = "block_sum<float, 128>"
    else:
        x = rng.integers(-1000, 1000, n).astype(np.int32)
        name = "block_sum<int, 128>"
    k = kb.compile(_src(BLOCK_REDUCE, name), dev)
    out = kb.asarray(np.zeros(blocks, x.dtype), device=dev)
    k.launch(grid=blocks, block=128, args=(kb.asarray(x, device=dev), out, n))
    return np.array([out.numpy().astype(np.float64).sum()]), np.array([x.astype(np.float64).sum()]), dtype != "float32"


def warp_reduce(dev: Any) -> Result:
    rng = np.random.default_rng(12)
    n, block = 10_000, 256
    x = rng.integers(-50, 50, n).astype(np.int32)
    grid = -(-n // block)
    k = kb.compile(_src(WARP_REDUCE, "warp_reduce"), dev)
    out = kb.asarray(np.zeros(grid, np.int32), device=dev)
    k.launch(grid=grid, block=block, args=(kb.asarray(x, device=dev), out, n))
    xp = np.concatenate([x, np.zeros(grid * block - n, np.int32)])
    return out.numpy(), xp.reshape(grid, block).sum(axis=1).astype(np.int32), True


def block_scan(dev: Any) -> Result:
    rng = np.random.default_rng(13)
    n, block = 5000, 256
    x = rng.integers(-20, 20, n).astype(np.int32)
    grid = -(-n // block)
    k = kb.compile(_src(BLOCK_SCAN, "block_scan"), dev)
    y = kb.asarray(np.zeros(n, np.int32), device=dev)
    k.launch(grid=grid, block=block, args=(kb.asarray(x, device=dev), y, n))
    xp = np.concatenate([x, np.zeros(grid * block - n, np.int32)]).reshape(grid, block)
    return y.numpy(), np.cumsum(xp, axis=1).ravel()[:n].astype(np.int32), True


def histogram(dev: Any) -> Result:
    rng = np.random.default_rng(14)
    n = 200_000
    data = rng.integers(0, 256, n).astype(np.uint8)
    data[:5000] = 7  # a hot bin: many threads of a block add to the same shared counter
    k = kb.compile(_src(HISTOGRAM, "histogram"), dev)
    bins = kb.asarray(np.zeros(256, np.uint32), device=dev)
    k.launch(grid=16, block=256, args=(kb.asarray(data, device=dev), bins, n))
    return bins.numpy(), np.bincount(data, minlength=256).astype(np.uint32), True


def softmax(dev: Any) -> Result:
    rng = np.random.default_rng(15)
    rows, cols = 37, 1000
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    k = kb.compile(_src(SOFTMAX, "softmax_rows"), dev)
    y = kb.zeros(rows * cols, device=dev)
    k.launch(grid=rows, block=128, args=(kb.asarray(x.ravel(), device=dev), y, cols))
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return y.numpy().reshape(rows, cols), e / e.sum(axis=1, keepdims=True), False


def transpose(dev: Any) -> Result:
    rng = np.random.default_rng(16)
    rows, cols = 100, 77
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    k = kb.compile(_src(TRANSPOSE, "transpose"), dev)
    y = kb.zeros(rows * cols, device=dev)
    k.launch(
        grid=(-(-cols // 32), -(-rows // 32)), block=(32, 8), args=(kb.asarray(x.ravel(), device=dev), y, rows, cols)
    )
    return y.numpy().reshape(cols, rows), x.T.copy(), True


def cg_reduce(dev: Any) -> Result:
    rng = np.random.default_rng(17)
    block, grid = 128, 9
    n = block * grid - 40
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    k = kb.compile(_src(CG_REDUCE, "cg_reduce"), dev)
    tiles = grid * block // 16
    bufs = [kb.asarray(np.zeros(tiles, np.int32), device=dev) for _ in range(3)]
    per_block = kb.asarray(np.zeros(grid, np.int32), device=dev)
    k.launch(grid=grid, block=block, args=(kb.asarray(x, device=dev), *bufs, per_block, n))
    xp = np.concatenate([x, np.zeros(grid * block - n, np.int32)]).reshape(tiles, 16)
    got = np.concatenate([b.numpy() for b in bufs] + [per_block.numpy()])
    want = np.concatenate([xp.sum(1), xp.max(1), xp.min(1), xp.reshape(grid, block).sum(1)]).astype(np.int32)
    return got, want, True


def dynamic_shared(dev: Any) -> Result:
    rng = np.random.default_rng(18)
    n, block = 1000, 64
    x = rng.standard_normal(n).astype(np.float32)
    grid = -(-n // block)
    k = kb.compile(_src(DYNAMIC_SHARED, "reverse_blocks"), dev)
    y = kb.zeros(n, device=dev)
    k.launch(grid=grid, block=block, args=(kb.asarray(x, device=dev), y, n), shared_mem=block * 4)
    xp = np.concatenate([x, np.zeros(grid * block - n, np.float32)]).reshape(grid, block)
    want = (xp[:, ::-1] * 2).ravel()[:n]
    k2 = kb.compile(kb.Source(DYNAMIC_SHARED, lang="cuda", name="two_arrays"), dev)
    xi = np.arange(96, dtype=np.int32) * 3 - 50
    yi = kb.asarray(np.zeros(96, np.int32), device=dev)
    k2.launch(grid=1, block=96, args=(kb.asarray(xi, device=dev), yi), shared_mem=2 * 96 * 4)
    got = np.concatenate([y.numpy(), yi.numpy().astype(np.float32)])
    return got, np.concatenate([want, (xi[::-1] + 10 * xi).astype(np.float32)]), True


def warp_votes_reference(x: np.ndarray, grid: int, block: int) -> np.ndarray:
    out = np.zeros((grid * block, 12), np.uint32)
    tail = np.zeros((grid, 3), np.uint32)
    for b in range(grid):
        xb = x[b * block : (b + 1) * block]
        tail[b] = [(xb > 0).sum(), (xb > -50).all(), (xb == 99).any()]
        for w in range(block // 32):
            v = xb[w * 32 : (w + 1) * 32]
            for lane in range(32):
                o = out[b * block + w * 32 + lane]
                o[0] = sum(1 << k for k in range(32) if v[k] > 0)
                o[1] = (v == 7).any()
                o[2] = (v >= -100).all()
                o[3] = sum(1 << k for k in range(32) if (v[k] & 3) == (v[lane] & 3))
                o[4], o[5] = 0xFFFFFFFF, 1
                o[6] = np.uint32(v.astype(np.int64).sum() & 0xFFFFFFFF)
                o[7] = np.int32(v.max()).view(np.uint32)
                o[8] = np.int32(v[lane ^ 5]).view(np.uint32)
                seg = lane & ~15
                o[9] = np.int32(v[lane - 3] if lane - seg >= 3 else v[lane]).view(np.uint32)
                o[10] = np.int32(v[(lane & ~7) + ((lane + 1) & 7)]).view(np.uint32)
                o[11] = np.int32(v[lane + 4] if lane < 12 else v[lane]).view(np.uint32) if lane < 16 else 0
    return np.concatenate([out.ravel(), tail.ravel()])


def warp_votes(dev: Any) -> Result:
    rng = np.random.default_rng(19)
    grid, block = 3, 96
    x = rng.integers(-60, 100, grid * block).astype(np.int32)
    x[5] = 7
    x[100] = 99
    k = kb.compile(_src(WARP_VOTES, "warp_votes"), dev)
    out = kb.asarray(np.zeros(grid * block * 12 + grid * 3, np.uint32), device=dev)
    k.launch(grid=grid, block=block, args=(kb.asarray(x, device=dev), out))
    return out.numpy(), warp_votes_reference(x, grid, block), True


CASES: dict[str, Callable[[Any], Result]] = {
    "tiled_matmul": tiled_matmul,
    "block_reduce_float": block_reduce,
    "block_reduce_int": lambda dev: block_reduce(dev, "int32"),
    "warp_reduce": warp_reduce,
    "block_scan": block_scan,
    "histogram": histogram,
    "softmax": softmax,
    "transpose": transpose,
    "cg_reduce": cg_reduce,
    "dynamic_shared": dynamic_shared,
    "warp_votes": warp_votes,
}
