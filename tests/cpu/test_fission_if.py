"""Barriers and warp operations inside ``if`` under barrier loop fission (kernelbay_cpu/fission_if.py):
an ``if`` whose condition every thread computes alike (a template parameter, a kernel
parameter) around barriers and warp operations, and ``if (tid < 32)`` / ``if
(cta.thread_rank() < 64)`` / ``if (threadIdx.x < warpSize)`` around warp operations, run on the
loop path and, kept on fibers by a ``volatile`` local (which the loop path never takes), on the
fiber runner, with the same bits. Conditions that may differ within a warp keep fibers."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

# Block-uniform conditions: a template parameter (with an else), a kernel parameter, one inside the other.
UNIFORM = r"""
template <int B>
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    __shared__ float s[1024];
    const unsigned t = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    const int g = blockIdx.x * nt + t;
    float v = g < n ? x[g] : 0.0f;
    s[t] = v;
    __syncthreads();
    if (B >= 64) {
        float o = s[(t + 1) % nt];
        __syncthreads();
        s[t] = v + o;
        __syncthreads();
        v = s[(t + 3) % nt];
    } else {
        v += __shfl_xor_sync(0xffffffffu, v, 1);
    }
    if (n > 100) {
        for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
        if (B < 64)
            v -= __shfl_sync(0xffffffffu, v, 3);
    }
    if (n < 0) v = 0.0f;
    else if (n > 100) v += __shfl_up_sync(0xffffffffu, v, 1);
    else v -= __shfl_up_sync(0xffffffffu, v, 2);
    unsigned b = __ballot_sync(0xffffffffu, v > 0.0f);
    if (g < n) { y[4 * g] = v; y[4 * g + 1] = s[t]; y[4 * g + 2] = 0.0f; y[4 * g + 3] = 0.0f; u[2 * g] = b; }
}
"""

# Warp-uniform conditions: the reduction sample's last warp (a tile's shuffles in a loop bounded by
# its size()), kernel_tuner's `if (ti < 32)` with __shfl_down_sync, a ballot and a tile reduce.
WARPS = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
template <int B>
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    __shared__ float s[1024];
    cg::thread_block cta = cg::this_thread_block();
    cg::thread_block_tile<32> tile32 = cg::tiled_partition<32>(cta);
    unsigned int tid = threadIdx.x;
    const int g = blockIdx.x * cta.size() + cta.thread_rank();
    float v = g < n ? x[g] : 0.0f;
    float w = v, r = v;
    unsigned b = 0;
    s[cta.thread_rank()] = v;
    cta.sync();
    if (cta.thread_rank() < 32) {
        if (B >= 64)
            v += s[(tid + 32) % blockDim.x];
        for (int offset = tile32.size() / 2; offset > 0; offset /= 2) {
            v += tile32.shfl_down(v, offset);
        }
    }
    if (tid < 64) {
        w = s[tid] * 2.0f;
        for (unsigned int o = 16; o > 0; o >>= 1) {
            w += __shfl_down_sync(0xffffffff, w, o);
        }
        b = __ballot_sync(0xffffffffu, w > 0.0f);
    }
    if (threadIdx.x < warpSize) r = cg::reduce(tile32, r, cg::plus<float>());
    if (g < n) { y[4 * g] = v; y[4 * g + 1] = w; y[4 * g + 2] = r; y[4 * g + 3] = s[tid]; u[2 * g] = b; }
}
"""

KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"


def _plan(text: str, name: str = "k<64>") -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name=name), [name])


def _on_fibers(text: str) -> str:
    at = text.index("{", text.index("__global__")) + 1
    return text[:at] + " " + KEEP_FIBERS + text[at:]


def _launch(cpu, text: str, name: str, n: int, block):
    per = int(np.prod(block))
    blocks = (n + per - 1) // per
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    y = kb.asarray(np.full(4 * n, -1, np.float32), device=cpu)
    u = kb.asarray(np.full(2 * n, 7, np.uint32), device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name=name), cpu)
    k.launch(blocks, block, (kb.asarray(x, device=cpu), y, u, n))
    return k, y.numpy(), u.numpy()


@pytest.mark.parametrize("text", [UNIFORM, WARPS], ids=["block-uniform", "warp-uniform"])
@pytest.mark.parametrize("name", ["k<64>", "k<32>"])
@pytest.mark.parametrize("block", [256, 96, 48, (32, 4)], ids=str)
@pytest.mark.parametrize("n", [3000, 50])
def test_ifs_around_split_points_run_as_loops_with_the_fiber_runners_bits(cpu, text, name, block, n):
    assert _plan(text, name).runners == {name: "run_blocks"}, _plan(text, name).why
    assert _plan(_on_fibers(text), name).runners == {name: "run_fibers"}
    loops, y, u = _launch(cpu, text, name, n, block)
    fibers, y2, u2 = _launch(cpu, _on_fibers(text), name, n, block)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(u, u2)
    assert (y[: 4 * n : 4] != -1).all()


def test_a_partial_warp_outside_the_if_is_no_error_when_checked_as_on_fibers(cpu, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    src = WARPS.replace("if (tid < 64)", "if (tid < 32)")
    loops, y, u = _launch(cpu, src, "k<32>", 48, 48)  # warp 1 (16 lanes) never reaches the shuffles
    fibers, y2, u2 = _launch(cpu, _on_fibers(src), "k<32>", 48, 48)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(u, u2)
    # by rank, in a block of two dimensions: warp 1 (16 lanes) never reaches them either
    src = WARPS.replace("if (tid < 64)", "if (cta.thread_rank() < 32)").replace(
        "if (threadIdx.x < warpSize)", "if (cta.thread_rank() < 32)"
    )
    loops, y, u = _launch(cpu, src, "k<32>", 96, (16, 3))
    fibers, y2, u2 = _launch(cpu, _on_fibers(src), "k<32>", 96, (16, 3))
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(u, u2)
    # where it does, both report it
    for text in (WARPS, _on_fibers(WARPS)):
        with pytest.raises(kb.LaunchError, match=r"warp 1 has only 16 lanes"):
            _launch(cpu, text, "k<32>", 48, 48)


def test_threadidx_x_against_32_in_rows_that_are_not_whole_warps_is_a_launch_error(cpu):
    # blockDim (48, 2): warp 1 holds x 32..47 of row 0 (false) and x 0..15 of row 1 (true); on a
    # GPU the shuffle inside would hang or read garbage, and both runners fail the launch.
    src = WARPS.replace("if (tid < 64)", "if (tid < 32)")
    assert _plan(src, "k<32>").runners == {"k<32>": "run_blocks"}
    with pytest.raises(kb.LaunchError, match=r"the lanes of warp 1 disagree on the test of threadIdx.x against 32"):
        _launch(cpu, src, "k<32>", 96, (48, 2))
    with pytest.raises(kb.LaunchError):
        _launch(cpu, _on_fibers(src), "k<32>", 96, (48, 2))
    # rows of whole warps, or rows no longer than the bound: every warp agrees
    for block in [(64, 2), (32, 3), (16, 4)]:
        _, y, _ = _launch(cpu, src, "k<32>", 256, block)
        _, y2, _ = _launch(cpu, _on_fibers(src), "k<32>", 256, block)
        np.testing.assert_array_equal(y, y2)


@pytest.mark.parametrize(
    "body",
    [
        "if (tid < 16) v = __shfl_sync(0xffffu, v, 0);",  # half a warp, its own mask: valid CUDA
        "if (x[g] > 0.0f) v = tile16.shfl(v, 0);",  # a tile of 16 alone: valid CUDA
        "if (tid < 64) v += 1.0f; if (x[g] > 0.0f) __syncthreads();",
        # full masks, but a warp operation after it (the reduce), which the lanes that fail it may
        # meet the others at on fibers
        "if (x[g] > 0.0f) v = __shfl_sync(0xffffffffu, v, 0);",
    ],
)
def test_ifs_whose_condition_may_differ_within_a_warp_keep_fibers_unless_the_warp_must_agree(body):
    src = WARPS.replace(
        "cg::thread_block_tile<32> tile32",
        "cg::thread_block_tile<16> tile16 = cg::tiled_partition<16>(cta); cg::thread_block_tile<32> tile32",
    ).replace("if (threadIdx.x < warpSize)", body + " if (threadIdx.x < warpSize)")
    plan = _plan(src)
    assert plan.runners == {"k<64>": "run_fibers"}
    assert "not as loops" in plan.why["k<64>"] and "condition may differ between threads" in plan.why["k<64>"], plan.why


# A warp per row, `if (row < rows)`: the test each thread's, whole warps agreeing at run time
# (kernel_tuner's spmv); W 16 puts two rows in a warp, and the last row's warp may disagree.
ROWS = r"""
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    int t = blockIdx.x * blockDim.x * blockDim.y + threadIdx.y * blockDim.x + threadIdx.x;
    int row = t / W;
    int lane = t % 32;
    float v = 0.0f;
    if (row < n / 64) {
        for (int j = lane; j < 64; j += 32) v += x[row * 64 + j];
        for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffff, v, s);
        unsigned b = __ballot_sync(0xffffffffu, v > 0.0f);
        if (lane == 0) { y[4 * row] = v; u[2 * row] = b; }
    }
    if (t < n) y[4 * t + 1] = v;
}
"""


@pytest.mark.parametrize("block", [256, 96, 48, (32, 4)], ids=str)
def test_a_test_each_thread_decides_runs_as_loops_where_whole_warps_agree(cpu, block):
    src = "#define W 32\n" + ROWS
    assert _plan(src, "k").runners == {"k": "run_blocks"}, _plan(src, "k").why
    loops, y, u = _launch(cpu, src, "k", 3000, block)
    fibers, y2, u2 = _launch(cpu, _on_fibers(src), "k", 3000, block)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(u, u2)
    assert (y[: 4 * 46 : 4] != -1).all()


def test_a_warp_whose_lanes_disagree_on_such_a_test_is_a_launch_error_on_both_runners(cpu):
    src = "#define W 16\n" + ROWS  # 45 rows: threads 0..719 pass, warp 22 is split at lane 16
    assert _plan(src, "k").runners == {"k": "run_blocks"}
    with pytest.raises(
        kb.LaunchError,
        match=r"block \(2,0,0\): thread \(192,0,0\) passes the test of the if at kernel.cu:8 and thread \(208,0,0\) "
        r"of its warp does not",
    ):
        _launch(cpu, src, "k", 2880, 256)
    with pytest.raises(kb.LaunchError, match=r"block \(2,0,0\)"):
        _launch(cpu, _on_fibers(src), "k", 2880, 256)
    _, y, _ = _launch(cpu, src, "k", 2944, 256)  # 46 rows: warp 23 ends the last one
    _, y2, _ = _launch(cpu, _on_fibers(src), "k", 2944, 256)
    np.testing.assert_array_equal(y, y2)


@pytest.mark.parametrize(
    "body, why",
    [
        ("if (tid < 32) { v += 1.0f; __syncthreads(); }", "a barrier inside an if of the thread's index"),
        ("if (tid < 32) { v += 1.0f; __syncwarp(); }", "__syncwarp inside an if of the thread's index"),
        ("if (tid < 32) v = __shfl_sync(~0u, v, 0); else v = 0.0f;", "with an else"),
        ("if (tid < 64) { if (tid < 32) v = __shfl_sync(~0u, v, 0); }", "two ifs of the thread's index"),
        ("if (tid < 32) v = __shfl_sync(~0u, v, 0); if (v > 9.0f) return;", "returns early"),
    ],
)
def test_other_shapes_inside_a_warp_uniform_if_keep_fibers(body, why):
    src = WARPS.replace("if (threadIdx.x < warpSize)", body + " if (threadIdx.x < warpSize)")
    plan = _plan(src)
    assert plan.runners == {"k<64>": "run_fibers"}
    assert "not as loops" in plan.why["k<64>"] and why in plan.why["k<64>"], plan.why


# A block's size() bounding a loop around barriers; the bound first (`32u > tid`), an unsigned literal.
SPELLINGS = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float s[1024];
    const unsigned tid = threadIdx.x;
    float v = x[blockIdx.x * blockDim.x + tid];
    s[tid] = v;
    for (unsigned st = block.size() / 2; st >= 32; st /= 2) {
        block.sync();
        if (tid < st) s[tid] = v = v + s[tid + st];
    }
    block.sync();
    if (32u > tid) {
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    if (tid < 32u) v += __shfl_sync(0xffffffffu, v, 5);
    y[4 * (blockIdx.x * blockDim.x + tid)] = v;
}
"""


@pytest.mark.parametrize("block", [256, 64], ids=str)
def test_other_spellings_of_the_bound_and_a_blocks_size_run_as_loops(cpu, block):
    assert _plan(SPELLINGS, "k").runners == {"k": "run_blocks"}, _plan(SPELLINGS, "k").why
    loops, y, _ = _launch(cpu, SPELLINGS, "k", 4 * block, block)
    fibers, y2, _ = _launch(cpu, _on_fibers(SPELLINGS), "k", 4 * block, block)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    assert (y[::4] != -1).all()
