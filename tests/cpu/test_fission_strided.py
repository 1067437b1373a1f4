"""Block-strided loops as regions of their own (kernelbay_cpu/fission_strided.py) and locals every
thread holds alike as the block's (fission_state.py: block_vars): the bits are the fiber runner's
for 1-D blocks (one vector loop over i), blocks whose size does not divide the row, 2-D blocks
a step other than blockDim.x (each thread's loop, as written), a float end (i < c + 0.5f reaches
c); llm.c's softmax kernel2 gives numpy's answer."""

from __future__ import annotations

from pathlib import Path

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

STRIDED = r"""
__global__ void k(const float* x, float* y, int n, int c) {
    __shared__ float s[1024];
    int tid = threadIdx.x;
    int at = threadIdx.y * blockDim.x + threadIdx.x;
    int per = blockDim.x * blockDim.y;
    const float* row = x + blockIdx.x * c;
    float acc = 0.0f;
    for (int i = tid; i < c; i += blockDim.x) acc += row[i] * (float)(i % 7);
    s[at] = acc;
    __syncthreads();
    row = x + ((blockIdx.x + 1) % gridDim.x) * c;
    float m = -1e30f;
    for (unsigned i = threadIdx.x; i < c; i = i + blockDim.x) {
        m = fmaxf(m, row[i]);
        y[blockIdx.x * c + i] = expf(row[i]) + s[at];
    }
    __syncthreads();
    for (int i = tid; i < c; i += 2 * blockDim.x) y[blockIdx.x * c + i] += 1.0f;
    for (int i = tid; i < c + 0.5f; i += blockDim.x) acc += 0.25f;
    const float* early = x;
    float first = early[at];
    early = x + 1;
    y[gridDim.x * c + blockIdx.x * per + at] = acc + m + first + early[0];
}
"""

KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"


def _plan(text: str, name: str = "k", headers: dict[str, str] | None = None) -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name=name, headers=headers or {}), [name])


def test_strided_loops_are_regions_and_uniform_locals_the_blocks():
    plan = _plan(STRIDED)
    assert plan.runners == {"k": "run_blocks"}, plan.why
    assert plan.text.count("KB_STRIDED_BEGIN(") == 4
    assert "KB_STRIDED_BEGIN(unsigned, i," in plan.text
    # row is written only as the block's, where no thread of the region read it before
    assert "const float* row{};" in plan.text and "row[KB_FISSION_MAX_THREADS]" not in plan.text
    # early is read before its second write, in the same region: each thread's own
    assert "const float* early[KB_FISSION_MAX_THREADS];" in plan.text


@pytest.mark.parametrize(("block", "c"), [(256, 768), (96, 1000), (48, 7), ((16, 6), 300)], ids=str)
def test_strided_loops_give_the_fiber_runners_bits(cpu, block, c):
    at = STRIDED.index("{", STRIDED.index("__global__")) + 1
    per = int(np.prod(block))
    grid = 5
    x = np.random.default_rng(4).standard_normal(grid * c + per).astype(np.float32)
    outs = []
    for text in (STRIDED, STRIDED[:at] + KEEP_FIBERS + STRIDED[at:]):
        y = kb.asarray(np.full(grid * c + grid * per, -1, np.float32), device=cpu)
        k = kb.compile(kb.Source(text, lang="cuda", name="k"), cpu)
        k.launch(grid, block, (kb.asarray(x, device=cpu), y, np.int32(grid * c), np.int32(c)))
        outs.append((k.handle.fibers, y.numpy()))
    assert not outs[0][0] and outs[1][0]
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    assert (outs[0][1] != -1).all()


def test_other_loops_stay_in_their_region():
    for loop in (
        "for (int i = tid; i < d; i += blockDim.x) { y[i] = 1.0f; i += 0; }",  # i written
        "for (int i = tid + 1; i < d; i += blockDim.x) y[i] = 1.0f;",  # not the thread's index
        "for (int i = tid; i <= d; i += blockDim.x) y[i] = 1.0f;",
        "for (int i = tid; i < d; i += blockDim.x) { y[i] = 1.0f; d = 0; }",  # the end written
        "for (int i = tid; i < y[0]; i += blockDim.x) y[i] = 1.0f;",  # an end that may differ
    ):
        plan = _plan(
            f"__global__ void k(float* y, int c) {{ int tid = threadIdx.x; int d = c; {loop} __syncthreads(); }}"
        )
        assert plan.runners == {"k": "run_blocks"}, plan.why
        assert "KB_STRIDED_BEGIN" not in plan.text, loop
    plan = _plan(
        "__global__ void k(float* y, int c) { int tid = threadIdx.x; int d = c; "
        "for (int i = tid; i < d; i += blockDim.x) y[i] = 1.0f; __syncthreads(); }"
    )
    assert "KB_STRIDED_BEGIN" in plan.text


def test_llm_c_softmax_kernel2_runs_its_row_loops_as_strided_regions(cpu):
    text = (CORPUS / "llm_c" / "softmax_forward.cu").read_text()
    headers = {"common.h": (CORPUS / "llm_c" / "common.h").read_text()}
    name = "softmax_forward_kernel2"
    plan = _plan(text, name, headers)
    assert plan.runners[name] == "run_blocks", plan.why
    assert plan.text.count("KB_STRIDED_BEGIN(") >= 4
    rows, c = 33, 200
    x = np.random.default_rng(6).standard_normal((rows, c)).astype(np.float32) * 4
    out = kb.zeros(rows * c, "float32", device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name=name, headers=headers), cpu)
    k.launch(rows, 64, (out, kb.asarray(x.ravel(), device=cpu), np.int32(rows), np.int32(c)), shared_mem=64 * 4)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy().reshape(rows, c), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-8)


# Loops over a tile's lanes (a warp per row, llm.c's layernorm kernel3 and online softmax), each
# thread's own, in regions between warp operations (the row pointer computed from the thread's
# linear index is each lane's: no lane loop, fission_lanes.py); a block-strided loop stepping by
# two blocks.
LANES = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* y, int n, int c) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int lane = threadIdx.x % 32;
    int at = threadIdx.y * blockDim.x + threadIdx.x;
    int w = (blockIdx.x * blockDim.x * blockDim.y + at) / 32;
    const float* row = x + w * c;
    float acc = 0.0f, m = -1e30f;
    for (int i = lane; i < c; i += warpSize) { acc += row[i] * (float)(i % 5); m = fmaxf(m, row[i]); }
    acc = cg::reduce(warp, acc, cg::plus<float>());
    for (int i = warp.thread_rank(); i < c; i += warp.size()) y[w * c + i] = expf(row[i] - m) + acc;
    for (int i = threadIdx.x % 16; i < c; i += 16) acc += row[i];
    for (int i = lane; i < c + 0.5f; i += 64) acc += 0.5f;
    for (int i = threadIdx.x; i < c; i += 2 * blockDim.x) acc += row[i];
    y[n + blockIdx.x * blockDim.x * blockDim.y + at] = acc + m;
}
"""


@pytest.mark.parametrize(("block", "c"), [(256, 768), (96, 100), (48, 7), ((16, 6), 40)], ids=str)
def test_lane_loops_give_the_fiber_runners_bits(cpu, block, c):
    at = LANES.index("{", LANES.index("__global__")) + 1
    per = int(np.prod(block))
    grid = 3
    warps = (grid * per + 31) // 32
    x = np.random.default_rng(5).standard_normal(warps * c).astype(np.float32)
    outs = []
    for text in (LANES, LANES[:at] + KEEP_FIBERS + LANES[at:]):
        y = kb.asarray(np.full(warps * c + grid * per, -1, np.float32), device=cpu)
        k = kb.compile(kb.Source(text, lang="cuda", name="k"), cpu)
        k.launch(grid, block, (kb.asarray(x, device=cpu), y, np.int32(warps * c), np.int32(c)))
        outs.append((k.handle.fibers, y.numpy()))
    assert not outs[0][0] and outs[1][0]
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
