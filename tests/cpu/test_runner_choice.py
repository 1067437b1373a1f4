"""The runner is chosen per kernel, from what that kernel reaches (its body, the functions it
calls and the macros it names, transitively), never from other text of the file or its headers."""

from __future__ import annotations

import logging

import kernelbay as kb
import numpy as np
from kernelbay_cpu import analysis

COMMON = r"""
#pragma once
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
template <typename T> __device__ T block_sum(T v) {
    __shared__ T partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? partial[lane] : T(0);
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
"""

KERNELS = r"""
#include "common.cuh"
#define SQUARE(x) ((x) * (x))
#define BARRIER() __syncthreads()
__device__ float gelu(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); }

__global__ void gelu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = gelu(x[i]);
}

__global__ void sum_k(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = block_sum(i < n ? x[i] : 0.0f);
    if (threadIdx.x == 0) atomicAdd(out, v);
}

// No barrier, though the file names cooperative_groups: the loop path.
__global__ void transpose_k(const float* a, float* b, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (c < cols) b[c * rows + r] = SQUARE(a[r * cols + c]);
}

// The barrier hides in a macro: fibers.
__global__ void rotate_k(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? y[i] : 0.0f;
    BARRIER();
    int j = blockIdx.x * blockDim.x + (threadIdx.x + 1) % blockDim.x;
    if (j < n && i < n) y[j] = v;
}
"""

NAMES = ["gelu_k", "sum_k", "transpose_k", "rotate_k"]


def _source() -> kb.Source:
    return kb.Source(
        KERNELS, lang="cuda", name=NAMES[0], name_expressions=tuple(NAMES[1:]), headers={"common.cuh": COMMON}
    )


def test_each_kernel_gets_its_own_runner():
    plan = analysis.plan_cuda(_source(), NAMES)
    assert plan.runners == {
        "gelu_k": "run_blocks",
        "sum_k": "run_fibers",
        "transpose_k": "run_blocks",
        "rotate_k": "run_fibers",
    }
    assert "common.cuh" in plan.why["sum_k"]
    assert "__syncthreads" in plan.why["rotate_k"]
    assert plan.text.count("KB_THREADS_BEGIN") == 2
    assert plan.text.count("\n") == KERNELS.count("\n")


def test_kernels_of_one_source_run_on_their_runners_with_right_answers(cpu, caplog):
    caplog.set_level(logging.INFO, logger="kernelbay.cpu")
    ks = {n: kb.compile(_named(n), cpu) for n in NAMES}
    n = 5000
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    dx = kb.asarray(x, device=cpu)
    y = kb.asarray(np.zeros(n, np.float32), device=cpu)
    ks["gelu_k"].launch((n + 255) // 256, 256, (dx, y, n))
    want = 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    out = kb.asarray(np.zeros(1, np.float32), device=cpu)
    ks["sum_k"].launch((n + 255) // 256, 256, (dx, out, n))
    np.testing.assert_allclose(out.numpy()[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)
    rows, cols = 3, 70
    b = kb.asarray(np.zeros(rows * cols, np.float32), device=cpu)
    ks["transpose_k"].launch((2, rows), 64, (dx, b, rows, cols))
    np.testing.assert_allclose(b.numpy().reshape(cols, rows), (x[: rows * cols].reshape(rows, cols) ** 2).T, rtol=1e-6)
    r = kb.asarray(np.arange(512, dtype=np.float32), device=cpu)
    ks["rotate_k"].launch(2, 256, (r, 512))
    want_r = np.arange(512, dtype=np.float32).reshape(2, 256)
    np.testing.assert_array_equal(r.numpy().reshape(2, 256), np.roll(want_r, 1, axis=1))
    fibers = {name: k.handle.fibers for name, k in ks.items()}
    assert fibers == {"gelu_k": False, "sum_k": True, "transpose_k": False, "rotate_k": True}
    logged = caplog.text
    assert "gelu_k runs on the loop path" in logged
    assert "sum_k runs on fibers (__shared__ at common.cuh:" in logged


def _named(name: str) -> kb.Source:
    others = tuple(n for n in NAMES if n != name)
    return kb.Source(KERNELS, lang="cuda", name=name, name_expressions=others, headers={"common.cuh": COMMON})


def test_a_file_scope_shared_array_counts_where_it_is_used():
    text = r"""
__shared__ float tile[256];
__global__ void uses(float* y) { tile[threadIdx.x] = y[threadIdx.x]; __syncwarp(); y[threadIdx.x] = tile[0]; }
__global__ void plain(float* y) { y[threadIdx.x] *= 2.0f; }
__global__ void reads(float* y) { y[threadIdx.x] = tile[threadIdx.x]; }
"""
    src = kb.Source(text, lang="cuda", name="uses", name_expressions=("plain", "reads"))
    runners = analysis.plan_cuda(src, ["uses", "plain", "reads"]).runners
    assert runners == {"uses": "run_fibers", "plain": "run_blocks", "reads": "run_fibers"}


def test_a_helper_reading_threadidx_keeps_only_its_callers_off_the_loop_path(cpu):
    text = r"""
__device__ int gid() { return blockIdx.x * blockDim.x + threadIdx.x; }
__global__ void via_helper(int* y) { y[gid()] = 3 * gid(); }
__global__ void direct(int* y) { int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = 5 * i; }
"""
    src = kb.Source(text, lang="cuda", name="via_helper", name_expressions=("direct",))
    assert analysis.plan_cuda(src, ["via_helper", "direct"]).runners == {
        "via_helper": "run_threads",
        "direct": "run_blocks",
    }
    for name, f in (("via_helper", 3), ("direct", 5)):
        k = kb.compile(kb.Source(text, lang="cuda", name=name, name_expressions=("via_helper", "direct")), cpu)
        y = kb.asarray(np.zeros(512, np.int32), device=cpu)
        k.launch(2, 256, (y,))
        np.testing.assert_array_equal(y.numpy(), f * np.arange(512))


def test_block_operations_in_a_class_send_every_kernel_to_fibers():
    # A member function's calls cannot be traced from a kernel: the whole text decides.
    text = r"""
struct Reducer { __device__ void sync() { __syncthreads(); } };
__global__ void plain(float* y) { y[threadIdx.x] *= 2.0f; }
"""
    plan = analysis.plan_cuda(kb.Source(text, lang="cuda", name="plain"), ["plain"])
    assert plan.runners == {"plain": "run_fibers"}
    assert "class" in plan.why["plain"]


def test_transitive_calls_and_templates_are_followed():
    text = r"""
template <int N> __device__ float leaf(float v) { return __shfl_xor_sync(0xffffffffu, v, N); }
__device__ float mid(float v) { return leaf<1>(v) + 1.0f; }
__device__ float calm(float v) { return v * 2.0f; }
__global__ void top(float* y) { y[threadIdx.x] = mid(y[threadIdx.x]); }
__global__ void quiet(float* y) { y[threadIdx.x] = calm(y[threadIdx.x]); }
"""
    src = kb.Source(text, lang="cuda", name="top", name_expressions=("quiet",))
    assert analysis.plan_cuda(src, ["top", "quiet"]).runners == {"top": "run_fibers", "quiet": "run_blocks"}
