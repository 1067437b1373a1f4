"""Early returns, break, continue and while loops under barrier loop fission
(kernelbay_cpu/fission_exit.py): the kernels below run on the loop path and, kept on fibers by a
``volatile`` local (which the loop path never takes), on the fiber runner, with the same bits;
what the fiber runner refuses (a warp operation naming a lane that returned, a barrier some
threads reach after others returned) the loop path refuses with the same message."""

from __future__ import annotations

import re

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

# Whole warps return at different points: before a butterfly, between it and a shuffle, between
# that and a cooperative-groups reduce; a 2-D block's warps are its linear index's.
WARPS_RETURN = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* y, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int lin = threadIdx.y * blockDim.x + threadIdx.x;
    int t = blockIdx.x * blockDim.x * blockDim.y + lin;
    int w = t / 32;
    int lane = lin % 32;
    float v = t < n ? x[t] : 0.0f;
    if (w % 4 == 0) return;
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (t < n) y[3 * t] = v;
    if (w % 4 == 1) {
        if (t < n) y[3 * t + 1] = -2.0f;
        return;
    }
    float m = __shfl_sync(0xffffffffu, v * lane, 3);
    if (t < n) y[3 * t + 1] = m;
    if (w % 4 == 2) return;
    float r = cg::reduce(warp, m + lane, cg::plus<float>());
    if (t < n) y[3 * t + 2] = r;
}
"""

# llm.c's shape: a warp per row, `if (idx >= N) return;` before the reduce; the rows past N
# are a partial last block.
ROWS = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* y, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (idx >= n / 32) {
        return;
    }
    const float* row = x + idx * 32;
    float s = 0.0f;
    for (int i = warp.thread_rank(); i < 32; i += warp.size()) s += row[i];
    s = cg::reduce(warp, s, cg::plus<float>{});
    float m = s / 32;
    float d = row[warp.thread_rank()] - m;
    float q = cg::reduce(warp, d * d, cg::plus<float>{});
    y[3 * (idx * 32 + warp.thread_rank())] = m;
    y[3 * (idx * 32 + warp.thread_rank()) + 1] = q;
}
"""

# Loops of one region: break, continue, while and do loops, a switch's break, inside a uniform
# loop around barriers; a return in the last region.
LOOPS = r"""
__global__ void k(const float* x, float* y, int n) {
    __shared__ float s[256];
    int tid = threadIdx.x + threadIdx.y * blockDim.x;
    int t = blockIdx.x * blockDim.x * blockDim.y + tid;
    float v = t < n ? x[t] : 0.0f;
    int steps = 0;
    while (v > 0.5f && steps < 5) { v *= 0.5f; ++steps; }
    do { v += 0.25f; ++steps; } while (steps % 3 != 0);
    s[tid] = v;
    for (int r = 0; r < 3; ++r) {
        __syncthreads();
        float acc = 0.0f;
        for (int j = 0; j < 8; ++j) {
            if (j == r + 4) break;
            if ((j + tid) % 3 == 0) continue;
            switch (j % 4) {
            case 0: acc += 1.0f; break;
            case 1: acc -= s[(tid + j) % (blockDim.x * blockDim.y)]; break;
            default: acc *= 0.5f;
            }
        }
        float next = s[(tid + 1) % (blockDim.x * blockDim.y)];
        __syncthreads();
        s[tid] = acc + next;
    }
    __syncthreads();
    if (t >= n) return;
    float o = s[(tid + 5) % (blockDim.x * blockDim.y)];
    if (o < 0.0f) return;
    y[3 * t] = o + steps;
}
"""

KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"


def _plan(text: str) -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name="k"), ["k"])


def _on_fibers(text: str) -> str:
    at = text.index("{", text.index("__global__")) + 1
    return text[:at] + " " + KEEP_FIBERS + text[at:]


def _launch(cpu, text: str, n: int, block, blocks: int | None = None):
    per = int(np.prod(block))
    blocks = blocks or (n + per - 1) // per
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    y = kb.asarray(np.full(3 * n, -7, np.float32), device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name="k"), cpu)
    k.launch(blocks, block, (kb.asarray(x, device=cpu), y, n))
    return k, y.numpy()


@pytest.mark.parametrize("text", [WARPS_RETURN, ROWS, LOOPS], ids=["warps-return", "rows", "loops"])
@pytest.mark.parametrize("block", [256, 96, (16, 6)], ids=str)
def test_returns_and_loops_run_as_loops_with_the_fiber_runners_bits(cpu, text, block):
    assert _plan(text).runners == {"k": "run_blocks"}, _plan(text).why
    n = 2000
    blocks = 3 + (n + 32 * 3 - 1) // 96 if text is ROWS else None  # blocks whose every warp returns
    loops, y = _launch(cpu, text, n, block, blocks)
    fibers, y2 = _launch(cpu, _on_fibers(text), n, block, blocks)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    assert (y != -7).any() and (y == -7).any()


def test_rows_of_returning_warps_have_numpys_answer(cpu):
    n = 32 * 37
    _, y = _launch(cpu, ROWS, n, 128, 12)  # 48 warps for 37 rows
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32).reshape(-1, 32).astype(np.float64)
    m = x.mean(1)
    np.testing.assert_allclose(y[0::3].reshape(-1, 32), np.repeat(m[:, None], 32, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y[1::3].reshape(-1, 32)[:, 0], ((x - m[:, None]) ** 2).sum(1), rtol=1e-4, atol=1e-4)


def test_a_return_only_in_the_last_region_needs_no_flags():
    text = _plan(LOOPS).text
    assert "KB_FISSION_LIVE" not in text and "KB_RETURN" not in text
    text = _plan(WARPS_RETURN).text
    assert "KB_FISSION_LIVE" in text and text.count("KB_RETURN") == 3 and "KB_REGION_BEGIN" not in text


@pytest.mark.parametrize(
    "cond, message",
    [
        # lanes 0-4 returned before lane 5 calls: the fiber runner names the first
        ("lane < 5", r"__shfl_xor_sync at kernel.cu:8 has mask 0xffffffff naming lane 0 \(thread \(0,0,0\)\), "),
        # lanes 5-31 return after lanes 0-4 wait: the wait no lane ends
        ("lane >= 5", r"thread \(0,0,0\) waits in __shfl_xor_sync at kernel.cu:8 with mask 0xffffffff, but not"),
        # lanes 16-31 return; a mask of lanes 0-15 names only lanes that reach it
        ("lane >= 16", None),
    ],
)
def test_threads_of_one_warp_returning_before_a_warp_operation(cpu, cond, message):
    src = f"""
__global__ void k(const float* x, float* y, int n) {{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32;
    float v = x[t];
    if ({cond}) return;
    y[3 * t] = v;
    v += __shfl_xor_sync(HALF, v, 1);
    y[3 * t + 1] = v;
}}
"""
    src = src.replace("HALF", "0xffffu" if message is None else "0xffffffffu")
    assert _plan(src).runners == {"k": "run_blocks"}
    if message is None:
        np.testing.assert_array_equal(_launch(cpu, src, 128, 64)[1], _launch(cpu, _on_fibers(src), 128, 64)[1])
        return
    for text in (src, _on_fibers(src)):
        with pytest.raises(kb.LaunchError, match=message):
            _launch(cpu, text, 64, 64)


def test_a_barrier_after_some_threads_returned_fails_as_on_fibers_and_not_after_all_returned(cpu):
    src = """
__global__ void k(const float* x, float* y, int n) {
    __shared__ float s[64];
    if (threadIdx.x >= LIMIT) return;
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = s[LIMIT - 1 - threadIdx.x];
}
"""
    for limit, blocks in ((60, 1), (64, 1)):
        text = src.replace("LIMIT", str(limit))
        assert _plan(text).runners == {"k": "run_blocks"}
        if limit < 64:
            for t in (text, _on_fibers(text)):
                with pytest.raises(kb.LaunchError, match=r"60 of 64 threads wait at the barrier at kernel.cu:6, but "):
                    _launch(cpu, t, 64, 64, blocks)
        else:
            np.testing.assert_array_equal(_launch(cpu, text, 64, 64)[1], _launch(cpu, _on_fibers(text), 64, 64)[1])
    every = src.replace("if (threadIdx.x >= LIMIT) return;", "if (blockIdx.x == 1) return;").replace("LIMIT", "64")
    _, y = _launch(cpu, every, 64, 64, 2)  # the second block returns whole: nobody waits
    np.testing.assert_array_equal(y[:64], np.random.default_rng(3).standard_normal(64).astype(np.float32)[::-1])


def test_returning_warps_in_checked_mode_give_the_fiber_runners_bits(cpu, monkeypatch):
    # checked mode: sanitizers, and every read of a lane the mask does not name reported
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    _, y = _launch(cpu, WARPS_RETURN, 600, 96)
    _, y2 = _launch(cpu, _on_fibers(WARPS_RETURN), 600, 96)
    np.testing.assert_array_equal(y, y2)


# Warps return inside a loop around warp operations, each at its own trip; the regions before the
# return in the loop's body skip them on the trips after.
LOOP_RETURN = r"""
__global__ void k(const float* x, float* y, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int w = t / 32;
    float v = t < n ? x[t] : 0.0f;
    for (int r = 0; r < 4; ++r) {
        if (t < n) y[3 * t] = v + r;
        if (w % 5 == r) {
            if (t < n) y[3 * t + 1] = (float)r;
            return;
        }
        v += __shfl_xor_sync(0xffffffffu, v, 1 << r);
    }
    if (t < n) y[3 * t + 2] = v;
}
"""


@pytest.mark.parametrize("block", [256, 96], ids=str)
def test_returns_inside_a_loop_around_warp_operations(cpu, block):
    assert _plan(LOOP_RETURN).runners == {"k": "run_blocks"}, _plan(LOOP_RETURN).why
    assert "KB_FISSION_LIVE" in _plan(LOOP_RETURN).text
    _, y = _launch(cpu, LOOP_RETURN, 1000, block)
    _, y2 = _launch(cpu, _on_fibers(LOOP_RETURN), 1000, block)
    np.testing.assert_array_equal(y, y2)


def test_llm_c_softmax_kernel7_with_threads_past_the_row_fails_as_on_fibers(cpu):
    # C < blockDim: the threads past the row return, the others meet __syncthreads without them
    from pathlib import Path

    llmc = Path(__file__).resolve().parents[1] / "corpus" / "llm_c"
    text, hdr = (llmc / "softmax_forward.cu").read_text(), {"common.h": (llmc / "common.h").read_text()}
    at = text.index("{", text.index("void softmax_forward_kernel7(")) + 1
    msgs = []
    for t in (text, text[:at] + KEEP_FIBERS + text[at:]):
        k = kb.compile(kb.Source(t, lang="cuda", name="softmax_forward_kernel7", headers=hdr), cpu)
        out = kb.asarray(np.zeros(4 * 64, np.float32), device=cpu)
        inp = kb.asarray(np.ones(4 * 64, np.float32), device=cpu)
        with pytest.raises(kb.LaunchError) as e:
            k.launch(4, 128, (out, inp, 4, 64), shared_mem=2 * 128 // 32 * 4)
        # the blocks run on several threads: which block reports first differs run to run
        msgs.append(re.sub(r"block \(\d+,\d+,\d+\)", "block (b)", str(e.value)))
    assert msgs[0] == msgs[1] and "exited without reaching it" in msgs[0]
