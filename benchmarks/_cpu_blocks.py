"""Block-level kernels for the cpu benchmarks (shared memory, barriers, warp shuffles), in CUDA C++
for kernelbay and as numba.cuda kernels for numba's CUDA simulator, the peer a Python user has
for running such kernels without a GPU. The simulator runs in a child process (it is switched on
by NUMBA_ENABLE_CUDASIM=1 before numba is imported), which prints its timings as JSON."""

from __future__ import annotations

BLOCK_REDUCE = r"""
__global__ void block_reduce(const float* x, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) acc += x[i];
    s[t] = acc;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
"""

TILED_MATMUL = r"""
#define TILE 16
__global__ void matmul(const float* A, const float* B, float* C, int n) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * n + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * n + col] = acc;
}
"""

WARP_REDUCE = r"""
__global__ void warp_reduce(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) out[i / 32] = v;
}
"""

BARRIERS = r"""
__global__ void barriers(int* out, int iters) {
    __shared__ int s[256];
    int t = threadIdx.x, acc = 0;
    for (int k = 0; k < iters; ++k) {
        s[t] = k + t;
        __syncthreads();
        acc += s[(t + 1) & 255];
    }
    out[blockIdx.x * blockDim.x + t] = acc;
}
"""

#: The sizes both sides run: small, because the simulator runs one Python thread per CUDA thread.
SIM_SIZES = {"block_reduce": 4096, "matmul": 32, "warp_reduce": 4096}

SIM_CHILD = r"""
import json, os, sys, time
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
import numpy as np
from numba import cuda, float32

sizes = json.loads(sys.argv[1]); repeat = int(sys.argv[2])

@cuda.jit
def block_reduce(x, out, n):
    s = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    acc = float32(0)
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    while i < n:
        acc += x[i]
        i += cuda.gridDim.x * cuda.blockDim.x
    s[t] = acc
    cuda.syncthreads()
    k = cuda.blockDim.x // 2
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        cuda.syncthreads()
        k //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]

@cuda.jit
def matmul(A, B, C, n):
    As = cuda.shared.array((16, 16), float32)
    Bs = cuda.shared.array((16, 16), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.blockIdx.y * 16 + ty, cuda.blockIdx.x * 16 + tx
    acc = float32(0)
    for t in range(n // 16):
        As[ty, tx] = A[row, t * 16 + tx]
        Bs[ty, tx] = B[t * 16 + ty, col]
        cuda.syncthreads()
        for k in range(16):
            acc += As[ty, k] * Bs[k, tx]
        cuda.syncthreads()
    C[row, col] = acc

@cuda.jit
def warp_reduce(x, out, n):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    v = x[i] if i < n else float32(0)
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xffffffff, v, off)
        off //= 2
    if cuda.threadIdx.x % 32 == 0:
        out[i // 32] = v

rng = np.random.default_rng(0)
n = sizes["block_reduce"]; x = rng.standard_normal(n).astype(np.float32); o = np.zeros(n // 256, np.float32)
m = sizes["matmul"]; A = rng.standard_normal((m, m)).astype(np.float32); B = rng.standard_normal((m, m)).astype(np.float32)
C = np.zeros((m, m), np.float32)
w = sizes["warp_reduce"]; xw = rng.standard_normal(w).astype(np.float32); ow = np.zeros(w // 32, np.float32)
cases = {
    "block_reduce": lambda: block_reduce[n // 256, 256](x, o, n),
    "matmul": lambda: matmul[(m // 16, m // 16), (16, 16)](A, B, C, m),
    "warp_reduce": lambda: warp_reduce[w // 128, 128](xw, ow, w),
}
out = {}
for name, fn in cases.items():
    try:
        fn()  # compile and warm up
    except AttributeError as exc:  # an intrinsic this numba's simulator lacks (shfl_*_sync)
        out[name] = str(exc).split(": ", 1)[-1]
        continue
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    out[name] = ts
assert np.allclose(C, A @ B, atol=1e-3) and np.isclose(o.sum(), x.sum(), atol=1e-2)
print(json.dumps(out))
"""
