"""Warp operations under barrier loop fission (kernelbay_cpu/fission.py, kb_cpu_fission.h): the
kernels below run on the loop path, and, kept on fibers by a ``volatile`` local (which the loop
path never takes), on the fiber runner; both give the same bits, for full blocks, blocks whose
last warp is partial and 2-D blocks. Checked mode reports what the fiber runner reports, word
for word; the corpus's llm.c layernorm (cooperative groups) runs on the loop path with numpy's
answer."""

from __future__ import annotations

from pathlib import Path

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

# Every shuffle, vote and width, an offset that differs per lane, two operations in one statement.
WARPS = r"""
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    int t = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    int lane = (threadIdx.y * blockDim.x + threadIdx.x) % 32;
    float v = t < n ? x[t] : 0.0f;
    float d = v;
    for (int off = 16; off > 0; off /= 2) d += __shfl_down_sync(0xffffffffu, d, off);
    float s = v;
    for (int off = 1; off < warpSize; off *= 2) {
        float o = __shfl_up_sync(0xffffffffu, s, off);
        if (lane >= off) s += o;
    }
    float r = __shfl_sync(0xffffffffu, v, (lane * 7 + 3) % 32);
    float h = __shfl_xor_sync(0xffffffffu, v, 1, 8) * 2.0f + __shfl_xor_sync(0xffffffffu, v, 4, 8);
    __syncwarp();
    unsigned b = __ballot_sync(0xffffffffu, v > 0.0f);
    int a = __any_sync(0xffffffffu, v > 2.0f), al = __all_sync(0xffffffffu, v > -3.0f);
    if (t < n) {
        y[4 * t] = d; y[4 * t + 1] = s; y[4 * t + 2] = r; y[4 * t + 3] = h;
        u[2 * t] = b; u[2 * t + 1] = a * 2 + al;
    }
}
"""

# Cooperative groups: tiles of 32, 16, 8, 4 and 1 threads, reduce with two operators, tile votes.
GROUPS = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    __shared__ float sums[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    auto half = cg::tiled_partition<16>(block);
    cg::thread_block_tile<8> eighth = cg::tiled_partition<8>(block);
    int t = blockIdx.x * block.size() + block.thread_rank();
    float v = t < n ? x[t] : 0.0f;
    float w = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0) sums[warp.meta_group_rank()] = w;
    block.sync();
    float all = warp.thread_rank() < warp.meta_group_size() ? sums[warp.thread_rank()] : 0.0f;
    all = cg::reduce(warp, all, cg::plus<float>());
    auto quarter = cg::tiled_partition<4>(block);
    auto one = cg::tiled_partition<1>(block);
    float m = cg::reduce(eighth, v, cg::greater<float>()) + cg::reduce(half, v, cg::plus<float>())
        - cg::reduce(quarter, v, cg::plus<float>()) * cg::reduce(one, v, cg::plus<float>());
    float d = half.shfl_down(v, 3) + half.shfl_xor(v, 5) + half.shfl(v, 2) - half.shfl_up(v, 1);
    warp.sync();
    unsigned b = half.ballot(v > 0.0f);
    bool any = eighth.any(v > 1.0f), each = half.all(v > -2.0f);
    if (t < n) {
        y[4 * t] = w; y[4 * t + 1] = all; y[4 * t + 2] = m; y[4 * t + 3] = d;
        u[2 * t] = b; u[2 * t + 1] = any * 2 + each;
    }
}
"""

# Dynamic shared memory and a block-wide sum: warp shuffles, then the warps' sums.
DYNAMIC = r"""
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    extern __shared__ float warp_sums[];
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32;
    float v = t < n ? x[t] : 0.0f;
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    float w = lane < (blockDim.x + 31) / 32 ? warp_sums[lane] : 0.0f;
    for (int off = 16; off > 0; off /= 2) w += __shfl_down_sync(0xffffffffu, w, off);
    if (t < n) { y[4 * t] = v; y[4 * t + 1] = w; y[4 * t + 2] = 0.0f; y[4 * t + 3] = 0.0f; u[2 * t] = lane; }
}
"""

# Warp reductions written as loops of shuffles (one split point each, kb_cpu::fis::steps): a
# butterfly and trees toward lane 0, from offsets 16, 8 and 1, with other operators and types.
REDUCTIONS = r"""
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    int t = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    float v = t < n ? x[t] : 0.0f;
    float s = v, hi = v, p = 1.0f + v / 64.0f;
    unsigned bits = t < n ? 1u << (t % 32) : 0u;
    int c = t % 7;
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    for (int off = 8; off >= 1; off >>= 1) {
        hi = fmaxf(hi, __shfl_down_sync(0xFFFFFFFF, hi, off));
    }
    for (unsigned off = 16; off != 0; off = off / 2) p *= __shfl_down_sync(~0u, p, off);
    for (int off = 1; off > 0; off /= 2) bits |= __shfl_xor_sync(0xffffffffu, bits, off, 32);
    for (int off = 16; off > 0; off /= 2) c -= __shfl_xor_sync(0xffffffff, c, off);
    if (t < n) { y[4 * t] = s; y[4 * t + 1] = hi; y[4 * t + 2] = p; y[4 * t + 3] = v; u[2 * t] = bits; u[2 * t + 1] = c; }
}
"""

KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"


def _plan(text: str, name: str = "k", headers: dict[str, str] | None = None) -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name=name, headers=headers or {}), [name])


def _on_fibers(text: str) -> str:
    at = text.index("{", text.index("__global__")) + 1
    return text[:at] + " " + KEEP_FIBERS + text[at:]


def _launch(cpu, text: str, n: int, block, shared: int = 0):
    per = int(np.prod(block))
    blocks = (n + per - 1) // per
    x = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    y = kb.asarray(np.full(4 * n, -1, np.float32), device=cpu)
    u = kb.asarray(np.full(2 * n, 7, np.uint32), device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name="k"), cpu)
    k.launch(blocks, block, (kb.asarray(x, device=cpu), y, u, n), shared_mem=shared)
    return k, y.numpy(), u.numpy()


@pytest.mark.parametrize("text", [WARPS, GROUPS, DYNAMIC, REDUCTIONS], ids=["warps", "groups", "dynamic", "reductions"])
@pytest.mark.parametrize("block", [256, 96, 48, (16, 6)], ids=str)
def test_warp_operations_run_as_loops_with_the_fiber_runners_bits(cpu, text, block):
    if text is DYNAMIC and not isinstance(block, int):
        pytest.skip("the kernel reads threadIdx.x only")
    assert _plan(text).runners == {"k": "run_blocks"}, _plan(text).why
    assert _plan(_on_fibers(text)).runners == {"k": "run_fibers"}
    n = 3000
    shared = 32 * 4 if text is DYNAMIC else 0
    loops, y, u = _launch(cpu, text, n, block, shared)
    fibers, y2, u2 = _launch(cpu, _on_fibers(text), n, block, shared)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(u, u2)
    assert (y != -1).all()


def test_a_reduction_loop_is_one_split_point():
    text = _plan(REDUCTIONS).text
    assert text.count("::kb_cpu::fis::steps<32, ::kb_cpu::W_XOR") == 3
    assert text.count("::kb_cpu::fis::steps<32, ::kb_cpu::W_DOWN") == 2
    assert "fis::shuffle" not in text


def test_a_warp_sum_is_the_sum_of_the_warps_lanes(cpu):
    n = 1000
    _, y, _ = _launch(cpu, DYNAMIC, n, 128, 16)
    x = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    warps = np.pad(x, (0, 1024 - n)).reshape(-1, 32).astype(np.float64).sum(1)
    np.testing.assert_allclose(y[0::4], np.repeat(warps, 32)[:n], rtol=1e-5, atol=1e-5)
    blocks = np.pad(x, (0, 1024 - n)).reshape(-1, 128).astype(np.float64).sum(1)
    firsts = np.arange(0, n, 128)
    np.testing.assert_allclose(y[1::4][firsts], blocks, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "body, why",
    [
        (
            "if (threadIdx.x < 16) y[threadIdx.x] = __shfl_down_sync(0xffffu, 1.0f, 1);",
            "inside an if whose condition may differ",
        ),
        ("unsigned m = threadIdx.x % 2 ? 1u : 2u; y[threadIdx.x] = __shfl_sync(m, 1.0f, 0);", "mask"),
        ("y[threadIdx.x] = __shfl_sync(0xffffffffu, __shfl_sync(0xffffffffu, 1.0f, 1), 0);", "another's"),
        ("for (int i = 0; i < threadIdx.x; ++i) y[i] = __shfl_sync(0xffffffffu, 1.0f, 0);", "trip count"),
        ("for (int j = 0; j < 2; ++j) { if (y[j] > 0.0f) continue; y[j] = __shfl_sync(~0u, 1.0f, 0); }", "continue"),
        ("y[threadIdx.x] = __reduce_add_sync(0xffffffffu, 1);", "__reduce_"),
    ],
)
def test_other_warp_shapes_keep_fibers_and_the_note_says_why(body, why):
    plan = _plan("__global__ void k(float* y) { " + body + " }")
    assert plan.runners == {"k": "run_fibers"}
    assert "not as loops" in plan.why["k"] and why in plan.why["k"]


def test_a_shuffle_past_a_partial_warp_is_a_launch_error_when_checked_as_on_fibers(cpu, monkeypatch):
    src = """
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    float v = x[threadIdx.x];
    float d = __shfl_down_sync(0xffffffffu, v, 4);
    y[threadIdx.x] = d;
}
"""
    loop = """
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    float v = x[threadIdx.x];
    for (int off = 4; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    y[threadIdx.x] = v;
}
"""
    assert _plan(src).runners == {"k": "run_blocks"}
    _, y, _ = _launch(cpu, src, 20, 20)
    x = np.random.default_rng(7).standard_normal(20).astype(np.float32)
    np.testing.assert_array_equal(y[:20], np.concatenate([x[4:20], np.zeros(4, np.float32)]))
    _, y, _ = _launch(cpu, loop, 20, 20)
    _, y2, _ = _launch(cpu, _on_fibers(loop), 20, 20)
    np.testing.assert_array_equal(y, y2)
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    for text in (src, _on_fibers(src), loop, _on_fibers(loop)):
        with pytest.raises(
            kb.LaunchError,
            match=r"block \(0,0,0\): __shfl_down_sync at kernel.cu:\d has mask 0xffffffff, but warp 0 has only "
            r"20 lanes \(blockDim has 20 threads\)",
        ):
            _launch(cpu, text, 20, 20)


def test_a_mask_that_leaves_out_the_calling_lane_is_the_fiber_runners_error(cpu):
    src = """
__global__ void k(const float* x, float* y, unsigned* u, int n) {
    y[threadIdx.x] = __shfl_sync(0x0000ffffu, x[threadIdx.x], 0);
}
"""
    assert _plan(src).runners == {"k": "run_blocks"}
    for text in (src, _on_fibers(src)):
        with pytest.raises(
            kb.LaunchError,
            match=r"block \(0,0,0\): thread \(16,0,0\) \(lane 16\) calls __shfl_sync at kernel.cu:3 with mask "
            r"0x0000ffff, which does not name the calling lane",
        ):
            _launch(cpu, text, 32, 32)


def test_llm_c_layernorm_with_cooperative_groups_runs_as_loops(cpu):
    text = (CORPUS / "llm_c" / "layernorm_forward.cu").read_text()
    headers = {"common.h": (CORPUS / "llm_c" / "common.h").read_text()}
    name = "layernorm_forward_kernel5"
    plan = _plan(text, name, headers)
    assert plan.runners == {name: "run_blocks"}, plan.why
    rows, c = 37, 96
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (rows * c, c, c))
    out, mean, rstd = (kb.asarray(np.zeros(s, np.float32), device=cpu) for s in (rows * c, rows, rows))
    k = kb.compile(kb.Source(text, lang="cuda", name=name, headers=headers), cpu)
    assert not k.handle.fibers
    args = (out, mean, rstd, *(kb.asarray(a, device=cpu) for a in (x, w, b)), rows, c)
    k.launch(rows, 64, args)
    xr = x.reshape(rows, c).astype(np.float64)
    m, s = xr.mean(1), 1 / np.sqrt(xr.var(1) + 1e-5)
    np.testing.assert_allclose(mean.numpy(), m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd.numpy(), s, rtol=1e-4)
    want = (xr - m[:, None]) * s[:, None] * w + b
    np.testing.assert_allclose(out.numpy().reshape(rows, c), want, rtol=1e-4, atol=1e-4)
