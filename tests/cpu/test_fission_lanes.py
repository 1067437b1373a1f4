"""Loops over a warp's lanes as vector loops over each warp's lanes (kernelbay_cpu/fission_lanes.py),
and the locals every lane of a warp holds alike computed once per warp: the fiber runner's bits
where no multiply-add is contracted differently (partial warps, rows not a multiple of 32, 2-D
blocks, which run each thread's loop), look-alike locals that differ between lanes kept per
lane, loops the pattern must not take kept in their region, and llm.c's online softmax kernel8
within 8 ulp of the fiber runner (docs/decisions.md: floating-point contraction)."""

from __future__ import annotations

from pathlib import Path

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"

# A warp per row: `row` depends on the thread only through tid / warpSize (the warp's), `h`,
# `q`, `f` and `r` look alike but differ between the lanes of a warp: computed once per warp
# they would give wrong sums. Adds only (no multiply-add to contract), so the bits must match.
WARP_ROWS = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(float* y, const float* x, int rows, int c) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    const int perBlock = (blockDim.x + warpSize - 1) / warpSize;  // a partial warp has a row too
    int tid = threadIdx.x;
    int lane = tid % 32;
    int row = blockIdx.x * perBlock + tid / warpSize;
    int other = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    int h = 2 * tid / 32;
    int q = threadIdx.x / 16;
    float f = (float)tid / 32;
    int r = (tid + 16) / 32;
    if (row >= rows) return;
    const float* in = x + row * c;
    float* out = y + row * c;
    float acc = 0.0f;
    for (int i = lane; i < c; i += warpSize) {
        acc += in[i];
        out[i] = in[i] + (float)(h + 3 * q + 5 * r + 7 * other) + f;
    }
    acc = cg::reduce(warp, acc, cg::plus<float>());
    for (int i = warp.thread_rank(); i < c; i += warp.size()) out[i] += acc;
}
"""


def _plan(text: str, name: str = "k", headers: dict[str, str] | None = None) -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name=name, headers=headers or {}), [name])


def _both(cpu, text: str, args, grid, block, name: str = "k", headers=None, out: int = 1, loops: bool = True):
    """The outputs (args[:out], as numpy) of the loop path (``loops``: or the runner the plan
    gives) and of the fiber runner."""
    at = text.index("{", text.index("__global__ void " + name)) + 1
    got = []
    for t in (text, text[:at] + KEEP_FIBERS + text[at:]):
        a = [kb.asarray(v, device=cpu) if isinstance(v, np.ndarray) else v for v in args]
        k = kb.compile(kb.Source(t, lang="cuda", name=name, headers=headers or {}), cpu)
        k.launch(grid, block, tuple(a))
        got.append((k.handle.fibers, [v.numpy() for v in a[:out]]))
    assert got[0][0] != loops and got[1][0]
    return got[0][1], got[1][1]


def test_warp_uniform_locals_are_computed_once_per_warp():
    plan = _plan(WARP_ROWS)
    assert plan.runners == {"k": "run_blocks"}, plan.why
    assert plan.text.count("KB_LANES_LIVE_BEGIN(int, ( c), 32)") == 2
    warp = plan.text[plan.text.index("struct kb_W {") :]
    members = warp[: warp.index("}")]
    for name in ("perBlock", "row", "other", "in", "out"):
        assert f" {name};" in members, name
    for name in ("tid", "lane", "h", "q", "f", "r"):
        assert f" {name};" not in members, name


@pytest.mark.parametrize(("block", "c"), [(256, 768), (96, 100), (48, 7), (80, 33), ((32, 3), 45)], ids=str)
def test_lane_loops_give_the_fiber_runners_bits(cpu, block, c):
    grid = 3
    # one row per warp (a partial warp's too: with blockDim.x / warpSize rows per block, the last
    # warp of one block and the first of the next would share a row, a race between blocks)
    warps = -(-block // 32) if isinstance(block, int) else 1
    rows = grid * warps - 1  # the last warp's row past the end: it returns
    x = np.random.default_rng(7).standard_normal(rows * c).astype(np.float32)
    y = np.full(rows * c, -1, np.float32)
    (a,), (b,) = _both(cpu, WARP_ROWS, (y, x, np.int32(rows), np.int32(c)), grid, block)
    np.testing.assert_array_equal(a, b)
    # every element written where each row has a whole warp (a partial warp's lanes cover only
    # their columns of each 32; a 2-D block's warps do not name rows as threadIdx.x / 32 does)
    if isinstance(block, int) and block % 32 == 0:
        assert (a != -1).all()


# Lane loops the pattern must not take: each stays the thread's loop in its region.
NOT_LANES = [
    "for (int i = lane; i < c; i += warpSize) { s[lane] += in[i]; }",  # writes shared memory
    "for (int i = lane; i < c; i += warpSize) atomicExch(out + i, in[i]);",  # a call with side effects
    "for (int i = lane; i < c; i += warpSize) { if (in[i] > 2.0f) break; out[i] = 1.0f; }",
    "for (int i = lane; i < c - lane; i += warpSize) out[i] = in[i];",  # a bound per lane
    "for (int i = lane; i < c; i += 16) out[i] = in[i];",  # not the warp's step
    "for (int i = lane + 1; i < c; i += warpSize) out[i] = in[i];",  # not the lane
    "for (int i = threadIdx.x % 16; i < c; i += warpSize) out[i] = in[i];",
    "for (int i = lane; i < c; i += warpSize) mine[i] = in[i];",  # a pointer of each lane's own
    "for (int i = lane; i < c; i += warpSize) { out[i] = in[i]; i += 0; }",  # i written
]
NOT_LANES_KERNEL = r"""
__global__ void k(float* y, const float* x, int c) {
    __shared__ float s[256];
    int tid = threadIdx.x;
    int lane = tid % 32;
    s[tid] = 0.0f;
    __syncthreads();
    const float* in = x + (tid / 32) * c;
    float* out = y + (tid / 32) * c;
    float* mine = y + tid * c;
    LOOP
    __syncthreads();
    y[tid] += s[tid];
}
"""


@pytest.mark.parametrize("loop", NOT_LANES, ids=range(len(NOT_LANES)))
def test_loops_the_pattern_cannot_prove_keep_their_region(cpu, loop):
    text = NOT_LANES_KERNEL.replace("LOOP", loop)
    plan = _plan(text)
    assert plan.runners == {"k": "run_blocks"}, plan.why
    assert "KB_LANES" not in plan.text
    c = 40
    x = np.random.default_rng(8).standard_normal(64 * c).astype(np.float32)
    y = np.zeros(64 * c, np.float32)
    (a,), (b,) = _both(cpu, text, (y, x, np.int32(c)), 1, 64)
    np.testing.assert_array_equal(a, b)


def test_a_lane_loop_between_barriers_only(cpu):
    # no warp operation: the block's loops count an unsigned thread index
    text = NOT_LANES_KERNEL.replace("LOOP", "for (int i = lane; i < c; i += warpSize) out[i] = in[i] + 2.0f;")
    plan = _plan(text)
    assert "KB_FISSION_BEGIN " in plan.text and plan.text.count("KB_LANES_BEGIN(") == 1
    for block, c in ((64, 40), (80, 31)):
        x = np.random.default_rng(8).standard_normal(3 * c).astype(np.float32)
        y = np.zeros(3 * c + 80, np.float32)
        (a,), (b,) = _both(cpu, text, (y, x, np.int32(c)), 1, block)
        np.testing.assert_array_equal(a, b)


def test_a_shuffle_inside_the_loop_keeps_it_out_of_the_pattern(cpu):
    text = r"""
__global__ void k(float* y, const float* x, int c) {
    int lane = threadIdx.x % 32;
    const float* in = x + (threadIdx.x / 32) * c;
    float v = 0.0f;
    for (int i = lane; i < c; i += warpSize) v += __shfl_xor_sync(0xffffffffu, in[i], 1);
    y[threadIdx.x] = v;
}
"""
    plan = _plan(text)
    assert "KB_LANES" not in plan.text
    c = 64  # every lane runs the loop as often: the shuffle is legal
    x = np.random.default_rng(9).standard_normal(2 * c).astype(np.float32)
    loops = plan.runners["k"] == "run_blocks"
    (a,), (b,) = _both(cpu, text, (np.zeros(64, np.float32), x, np.int32(c)), 1, 64, loops=loops)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("rows", "c"), [(257, 768), (40, 300)], ids=str)
def test_llm_c_online_softmax_kernel8_agrees_with_fibers_within_8_ulp(cpu, rows, c):
    text = (CORPUS / "llm_c" / "softmax_forward.cu").read_text()
    headers = {"common.h": (CORPUS / "llm_c" / "common.h").read_text()}
    name = "softmax_forward_online_kernel8"
    plan = _plan(text, name, headers)
    body = plan.text[plan.text.index(f"void {name}(") :]
    assert body.count("KB_LANES_LIVE_BEGIN(") == 2 and "kb_w.x;" in body
    x = np.random.default_rng(10).standard_normal(rows * c).astype(np.float32) * 3
    y = np.zeros(rows * c, np.float32)
    grid = (rows * 32 + 255) // 256  # the last block's warps past the rows return
    (a,), (b,) = _both(cpu, text, (y, x, np.int32(rows), np.int32(c)), grid, 256, name, headers)
    # the vector loop may fuse `sumval * expf(..) + expf(..)` into one FMA (g++'s default
    # -ffp-contract=fast; nvcc's --fmad=true), the fiber runner's scalar loop does not
    np.testing.assert_array_max_ulp(a, b, maxulp=8)
    e = np.exp(x.reshape(rows, c).astype(np.float64) - x.reshape(rows, c).max(1, keepdims=True))
    np.testing.assert_allclose(a.reshape(rows, c), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)


FAULT = r"""
__global__ void k(float* y, const float* x, int c, long long far) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const float* in = x + row * c;
    float* out = y + row * c;
    float m = 0.0f;
    for (int i = lane; i < c; i += warpSize) m = fmaxf(m, in[i]);
    m += __shfl_xor_sync(0xffffffffu, m, 1);
    for (int i = lane; i < c; i += warpSize) out[i + (row == 3 && i == 37 ? far : 0)] = in[i] - m;
}
"""


def test_a_fault_in_a_lane_loop_names_the_lane(cpu):
    plan = _plan(FAULT)
    assert plan.text.count("KB_LANES_BEGIN(") == 2
    k = kb.compile(kb.Source(FAULT, "cuda", name="k"), cpu)
    assert not k.handle.fibers
    x = kb.asarray(np.ones(16 * 64, np.float32), device=cpu)
    y = kb.zeros(16 * 64, "float32", device=cpu)
    # row 3 is warp 3 of block 0; i = 37 is lane 5's second column
    with pytest.raises(kb.LaunchError, match=r"faulted on cpu: block \(0,0,0\), thread \(101,0,0\)"):
        k.launch(2, 256, (y, x, np.int32(64), np.int64(1 << 40)))
    k.launch(2, 256, (y, x, np.int32(64), np.int64(0)))
    np.testing.assert_array_equal(y.numpy(), np.full(16 * 64, -1.0, np.float32))  # 1 - (1 + 1)
