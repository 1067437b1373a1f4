"""Barrier loop fission (kernelbay_cpu/fission.py): kernels with __syncthreads() at the top level
(or in a uniform top-level for loop) run as loops over the block's threads, with numpy's answers;
every other shape keeps the fiber runner."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

TREE_SUM = r"""
__global__ void k(const float* x, float* partial, int n) {
    __shared__ float s[256];
    const int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}
"""

# Locals that live across a barrier, a 2-D block, a pointer local, a string literal naming one.
REVERSE_2D = r"""
__global__ void k(const int* x, int* y, int n) {
    __shared__ int tile[8][16];
    const int* src = x + blockIdx.x * 128;
    int tx = threadIdx.x, ty = threadIdx.y;
    int mine = src[ty * 16 + tx] * 2;  /* "mine" in a comment */
    tile[ty][tx] = mine;
    __syncthreads();
    int other = tile[7 - ty][15 - tx];
    const char* label = "mine, tx";
    y[blockIdx.x * 128 + ty * 16 + tx] = other + mine + (label[0] == 'm');
}
"""


def _runner(text: str) -> str:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name="k"), ["k"]).runners["k"]


def test_tree_reduction_runs_as_loops_with_numpys_sum(cpu):
    assert _runner(TREE_SUM) == "run_blocks"
    n = 100_003
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    blocks = (n + 255) // 256
    k = kb.compile(kb.Source(TREE_SUM, lang="cuda", name="k"), cpu)
    assert not k.handle.fibers
    p = kb.asarray(np.zeros(blocks, np.float32), device=cpu)
    k.launch(blocks, 256, (kb.asarray(x, device=cpu), p, n))
    want = np.pad(x, (0, blocks * 256 - n)).reshape(blocks, 256).astype(np.float64).sum(1)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-4, atol=1e-4)


def test_locals_across_a_barrier_in_a_2d_block(cpu):
    assert _runner(REVERSE_2D) == "run_blocks"
    x = np.arange(3 * 128, dtype=np.int32)
    y = kb.asarray(np.zeros_like(x), device=cpu)
    kb.compile(kb.Source(REVERSE_2D, lang="cuda", name="k"), cpu).launch(
        3, (16, 8), (kb.asarray(x, device=cpu), y, 384)
    )
    b = x.reshape(3, 8, 16) * 2
    np.testing.assert_array_equal(y.numpy().reshape(3, 8, 16), b[:, ::-1, ::-1] + b + 1)


def test_the_rewrite_keeps_line_numbers_and_diagnostics_point_at_the_users_line(cpu):
    text = analysis.plan_cuda(kb.Source(TREE_SUM, lang="cuda", name="k"), ["k"]).text
    assert text.count("\n") == TREE_SUM.count("\n") and "KB_REGION_BEGIN" in text
    broken = TREE_SUM.replace("partial[blockIdx.x] = s[0];", "partial[blockIdx.x] = s[0] + undefined_name;")
    with pytest.raises(kb.CompileError) as e:
        kb.compile(kb.Source(broken, lang="cuda", name="k"), cpu)
    assert e.value.lines == {12}


@pytest.mark.parametrize(
    "body",
    [
        # a barrier inside a branch
        "if (threadIdx.x < 16) { __syncthreads(); } y[threadIdx.x] = 1;",
        # a jump
        "if (threadIdx.x >= 8) goto end; __syncthreads(); y[threadIdx.x] = 1; end: ;",
        # a thread may spin on another's store: only fibers run both
        "while (atomicAdd(y, 0) < 3) {} __syncthreads(); y[threadIdx.x] = 1;",
        # a break out of a loop around a barrier (threads would leave it at different trips)
        "for (int j = 0; j < 4; ++j) { if (y[j] == threadIdx.x) break; __syncthreads(); } y[threadIdx.x] = 1;",
        # a return with a value: a lambda's, whose return the loop path would take for the thread's
        "auto f = [](int a) { return a; }; __syncthreads(); y[threadIdx.x] = f(1);",
        # a lambda's own return;
        "if (threadIdx.x < 8) { [&]() { if (y[0]) return; y[1] = 2; }(); } __syncthreads(); y[threadIdx.x] = 1;",
        # a declaration of a type not handled, living across the barrier
        "auto v = threadIdx.x; __syncthreads(); y[threadIdx.x] = v;",
        # a loop whose trip count differs between threads
        "for (int j = 0; j < threadIdx.x; ++j) { __syncthreads(); } y[threadIdx.x] = 1;",
        # a warp operation inside a branch
        "__syncthreads(); if (threadIdx.x < 16) y[threadIdx.x] = __shfl_sync(0xffffu, 1, 0);",
        # a warp operation whose mask differs between threads
        "unsigned m = threadIdx.x < 16 ? 0xffffu : 0xffff0000u; y[threadIdx.x] = __shfl_sync(m, 1, 0);",
    ],
)
def test_other_shapes_keep_fibers(body):
    assert _runner("__global__ void k(int* y) { " + body + " }") == "run_fibers"


def test_a_barrier_behind_a_macro_or_a_function_keeps_fibers():
    macro = "#define SYNC() __syncthreads()\n__global__ void k(int* y) { SYNC(); y[threadIdx.x] = 1; }"
    helper = "__device__ void sync() { __syncthreads(); }\n__global__ void k(int* y) { sync(); y[threadIdx.x] = 1; }"
    assert _runner(macro) == "run_fibers"
    assert _runner(helper) == "run_fibers"


def test_index_locals_are_recomputed_and_changed_ones_stored_per_thread(cpu):
    text = analysis.plan_cuda(kb.Source(TREE_SUM, lang="cuda", name="k"), ["k"]).text
    assert "int const t = threadIdx.x;" in text  # recomputed in each region: the loop index
    changed = r"""
__global__ void k(int* y, int n) {
    int v = threadIdx.x;
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    v *= 3;
    __syncthreads();
    if (w < 300) y[w] = v + n;
}
"""
    plan = analysis.plan_cuda(kb.Source(changed, lang="cuda", name="k"), ["k"])
    assert plan.runners == {"k": "run_blocks"}
    assert "int v[KB_FISSION_MAX_THREADS]" in plan.text and "int w[KB_FISSION_MAX_THREADS]" not in plan.text
    y = kb.asarray(np.zeros(300, np.int32), device=cpu)
    kb.compile(kb.Source(changed, lang="cuda", name="k"), cpu).launch(3, 128, (y, 7))
    np.testing.assert_array_equal(y.numpy(), 3 * (np.arange(300) % 128) + 7)
