"""Regions only some threads act in (kernelbay_cpu/fission_ranges.py): a region whose one effect
is ``if (<thread index test>) ...`` loops over the threads that may pass the test; the bits are
the fiber runner's for 1-D blocks (the ranges), blocks whose last warp is partial and 2-D blocks
(every thread, as before). A warp operation's result read into a local that a later statement
reads keeps the whole block."""

from __future__ import annotations

import re

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

RANGES = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* y, int n) {
    __shared__ float s[1024];
    __shared__ float sums[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<8> eighth = cg::tiled_partition<8>(block);
    const int tid = threadIdx.x;
    int lane = threadIdx.x & 31;
    int at = threadIdx.y * blockDim.x + threadIdx.x;
    int t = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    float v = t < n ? x[t] : 0.0f;
    s[at] = v;
    if (at < 32) sums[at] = 0.0f;
    __syncthreads();
    for (int w = 1; w < 70; w *= 3) {
        if (tid < w && !(tid == 5)) s[tid] += 1.0f;
        __syncthreads();
    }
    float r = __shfl_xor_sync(0xffffffffu, v, 1);
    if (lane == 3) sums[at / 32] += r;
    __syncthreads();
    float q = __shfl_down_sync(0xffffffffu, v, 2);
    if ((unsigned)threadIdx.x <= 7u) s[tid] -= q;
    __syncthreads();
    float e = eighth.shfl_up(v, 1);
    if (eighth.thread_rank() == 2) s[at] *= e;
    __syncthreads();
    if (block.thread_rank() == blockDim.x - 1) sums[31] = 2.0f;
    __syncthreads();
    if (lane == 40 && tid > 2) s[0] = 0.0f;
    __syncthreads();
    if (tid == -1) s[1] = 0.0f;
    __syncthreads();
    if (!tid) sums[30] = 3.0f;
    __syncthreads();
    if (lane < 2 || tid == 9) sums[29] = 4.0f;
    __syncthreads();
    int neg = n - 100000;
    if (threadIdx.x < neg) sums[28] += 5.0f;
    __syncthreads();
    if (tid < 2.5f) s[at] += 0.5f;
    __syncthreads();
    if (t < n) { y[3 * t] = s[at]; y[3 * t + 1] = sums[lane]; y[3 * t + 2] = q; }
}
"""

# A block's sum whose second warp reduction only thread 0 reads: the warps' sums are loaded and
# reduced for warp 0 only. `u` is read by every thread after its reduction: all warps reduce it.
DEMAND = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* y, int n) {
    __shared__ float sums[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int t = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    float v = t < n ? x[t] : 0.0f;
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (warp.thread_rank() == 0) sums[warp.meta_group_rank()] = v;
    __syncthreads();
    float w = warp.thread_rank() < warp.meta_group_size() ? sums[warp.thread_rank()] : 0.0f;
    w = cg::reduce(warp, w, cg::plus<float>());
    if (block.thread_rank() == 0) y[3 * n + blockIdx.x] = w;
    __syncthreads();
    float u = fmaxf(v, 0.5f);
    u = cg::reduce(warp, u, cg::greater<float>());
    if (threadIdx.x == 1) y[3 * n + gridDim.x + blockIdx.x] = u;
    if (t < n) { y[3 * t] = u; y[3 * t + 1] = v; y[3 * t + 2] = 0.0f; }
}
"""

KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"


def _plan(text: str) -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name="k"), ["k"])


def _launch(cpu, text: str, n: int, block):
    per = int(np.prod(block))
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    y = kb.asarray(np.full(3 * n + 2 * ((n + per - 1) // per), -1, np.float32), device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name="k"), cpu)
    k.launch((n + per - 1) // per, block, (kb.asarray(x, device=cpu), y, n))
    return k, y.numpy()


def test_only_regions_whose_skipped_threads_do_nothing_loop_over_ranges():
    plan = _plan(RANGES)
    assert plan.runners == {"k": "run_blocks"}, plan.why
    steps = []
    for m in re.finditer(r"KB_REGION_RANGE_BEGIN\(", plan.text):
        args = plan.text[m.end() : m.end() + 400]
        depth, cut = 0, []
        for k, ch in enumerate(args):
            depth += ch == "("
            if ch == ")":
                if depth == 0:
                    cut.append(k)
                    break
                depth -= 1
            if ch == "," and depth == 0:
                cut.append(k)
        step = args[cut[1] + 1 : cut[2]].strip()
        steps.append(step if step == "1" else re.search(r", (\d+)\)$", step).group(1))
    # tid < w, lane == 3, eighth's rank 2, block rank blockDim.x - 1, the two that name no thread,
    # !tid, a negative int bound, a float bound (not `lane < 2 || tid == 9`)
    assert sorted(steps) == ["1", "1", "1", "1", "1", "1", "32", "32", "8"], steps
    # q is read after its region: every thread reads its result there.
    assert "<= 7u) s[tid] -= q" in plan.text
    assert not re.search(r"KB_REGION_RANGE_BEGIN\([^)]*\)[^;]*;[^;]*fis::result[^;]*;\s*if \(\(unsigned\)", plan.text)


def test_a_warp_operation_only_a_range_reads_runs_on_the_range_s_warps():
    plan = _plan(DEMAND)
    assert plan.runners == {"k": "run_blocks"}, plan.why
    # the warps' sums: loaded and reduced for warp 0 only; u: reduced by every warp
    assert plan.text.count("kb_fb.only(") == 1
    assert re.search(
        r"KB_REGION_RANGE_BEGIN\([^;]*~31LL, 1\)[^;]*;[^;]*;[^;]*; w\[kb_t\] = warp\.thread_rank", plan.text
    )
    assert re.search(r"reduce<32, kb_T\d>\(kb_fb, kb_l0, cg::greater", plan.text)


@pytest.mark.parametrize("text", [RANGES, DEMAND], ids=["ranges", "demand"])
@pytest.mark.parametrize("block", [256, 96, 48, (16, 6)], ids=str)
def test_ranges_give_the_fiber_runners_bits(cpu, text, block):
    at = text.index("{", text.index("__global__")) + 1
    fibers_text = text[:at] + KEEP_FIBERS + text[at:]
    n = 1500
    loops, y = _launch(cpu, text, n, block)
    fibers, y2 = _launch(cpu, fibers_text, n, block)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    assert (y[: 3 * n] != -1).all() and (text is RANGES or (y != -1).all())
