"""Block-strided loops with an unrolled inner loop (llm.c's softmax kernel7): ``#pragma unroll``
kept as g++'s (fission_unroll.py), 64-bit indices ``i + u*blockDim.x`` on the strided loop's
chunked path and the clamp a guard makes redundant dropped (fission_index.py), gathers where
``-march=native`` leaves the tuning generic (flags.py). Each shape the rewrite must not take stays
as written, and every kernel gives the fiber runner's bits."""

from __future__ import annotations

from pathlib import Path

import attrs
import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import _driver, analysis, flags

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"

# kernel7's shape: loads clamped to the row, stores under the guard, a sum; then loops whose
# indices must stay unsigned: u from -1 (i - blockDim.x wraps to near 2^32, and min(C - 1, .)
# of that is C - 1), an unsigned loop variable, a clamp no guard makes redundant (stays), and a
# loop without a constant trip count (not unrolled).
K = r"""
#define PARTS 4
__global__ void k(const float* x, float* y, float* out, int C) {
    __shared__ float s[1024];
    const int U = 2 * 4;
    const float* row = x + blockIdx.x * C;
    float* dst = y + blockIdx.x * C;
    float acc = 0.0f, wrapped = 0.0f, plain = 0.0f, clamped = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x * U) {
        float r[U];
        #pragma unroll
        for (int u = 0; u < U; u++) {
            r[u] = row[min(C - 1, i + u*blockDim.x)];
        }
        #pragma unroll
        for (int u = 0; u < U; u++) {
            if (i + u*blockDim.x < C) {
                dst[min(C - 1, i + u*blockDim.x)] = expf(r[u]);
                acc += r[u];
            }
        }
        #pragma unroll
        for (int u = -1; u < 3; u++) {
            wrapped += row[min(C - 1, i + u*blockDim.x)];
        }
        #pragma unroll
        for (int u = 0; u < PARTS; u++) {
            clamped += row[min(C - 1, i + blockDim.x*u)] * 0.5f;
        }
        #pragma unroll
        for (int u = 0; u < C % 5; u++) {
            plain += row[min(C - 1, i + u*blockDim.x)];
        }
    }
    for (unsigned i = threadIdx.x; i < C; i += blockDim.x * 2) {
        #pragma unroll
        for (int u = 0; u < 2; u++) {
            plain += row[min(C - 1, i + u*blockDim.x)];
        }
    }
    s[threadIdx.y * blockDim.x + threadIdx.x] = acc + wrapped + plain + clamped;
    __syncthreads();
    out[blockIdx.x * blockDim.x * blockDim.y + threadIdx.y * blockDim.x + threadIdx.x] =
        s[(threadIdx.y * blockDim.x + threadIdx.x + 1) % (blockDim.x * blockDim.y)];
}
"""


def _plan(text: str, name: str = "k", headers: dict[str, str] | None = None) -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name=name, headers=headers or {}), [name])


def _body(text: str, name: str) -> str:
    at = text.index(f"void {name}(")
    return text[at : text.index("\n}", at)]


def test_what_is_rewritten_and_what_stays():
    plan = _plan(K)
    assert plan.runners == {"k": "run_blocks"}, plan.why
    body = _body(plan.text, "k")
    # the constant loops unrolled (U, PARTS, 2); C % 5 trips is no constant (nor, here, a
    # negative start)
    assert body.count("KB_UNROLL(8)") == 2
    assert body.count("KB_UNROLL(4)") == 1
    assert body.count("KB_UNROLL(2)") == 1
    assert body.count("KB_UNROLL(") == 4
    # the load clamp stays (64-bit on the chunked path, as written on the other)
    j = "((long long)(i) + (long long)(u) * (long long)blockDim.x)"
    assert f"row[(kb_fast ? min((long long)(C) - 1, {j}) : (min(C - 1, i + u*blockDim.x)))]" in body
    assert f"row[(kb_fast ? min((long long)(C) - 1, {j}) : (min(C - 1, i + blockDim.x*u)))]" in body
    # under `if (J < C)` the clamp is redundant: a contiguous store
    assert f"if ((kb_fast ? {j} < C : (i + u*blockDim.x < C)))" in body
    assert f"dst[(kb_fast ? {j} : (min(C - 1, i + u*blockDim.x)))]" in body
    # u from -1 (its i - blockDim.x wraps), C % 5 trips, the unsigned i: as written
    assert body.count("kb_fast ?") == 4
    assert body.count("row[min(C - 1, i + u*blockDim.x)]") == 3


@pytest.mark.parametrize(("block", "c"), [(256, 768), (96, 1000), (64, 50), ((16, 6), 300)], ids=str)
def test_the_fiber_runners_bits(cpu, block, c):
    at = K.index("{", K.index("__global__")) + 1
    per = int(np.prod(block))
    grid = 3
    x = np.random.default_rng(9).standard_normal(grid * c).astype(np.float32)
    outs = []
    for text in (K, K[:at] + KEEP_FIBERS + K[at:]):
        y = kb.asarray(np.full(grid * c, -1, np.float32), device=cpu)
        out = kb.asarray(np.zeros(grid * per, np.float32), device=cpu)
        k = kb.compile(kb.Source(text, lang="cuda", name="k"), cpu)
        k.launch(grid, block, (kb.asarray(x, device=cpu), y, out, np.int32(c)))
        outs.append((k.handle.fibers, y.numpy(), out.numpy()))
    assert not outs[0][0] and outs[1][0]
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    np.testing.assert_array_equal(outs[0][2], outs[1][2])
    np.testing.assert_allclose(outs[0][1], np.exp(x.astype(np.float64)), rtol=2e-7)


def test_unroll_only_before_a_loop_that_stays_whole():
    # a pragma before a loop around a barrier (several regions) or at a region's top level goes
    text = r"""
__global__ void k(float* y, int c) {
    __shared__ float s[256];
    #pragma unroll
    for (int r = 0; r < 4; r++) { s[threadIdx.x] = r; __syncthreads(); y[threadIdx.x] += s[0]; }
    #pragma unroll
    for (int r = 0; r < 4; r++) y[threadIdx.x] += r;
    if (threadIdx.x < c) {
        #pragma unroll 2
        for (int r = 0; r < c; r++) y[threadIdx.x] += r;
    }
    __syncthreads();
}
"""
    plan = _plan(text)
    assert plan.runners == {"k": "run_blocks"}, plan.why
    assert _body(plan.text, "k").count("KB_UNROLL(") == 1
    assert "KB_UNROLL(2) for (int r = 0; r < c; r++)" in plan.text


def test_llm_c_softmax_kernel7(cpu):
    text = (CORPUS / "llm_c" / "softmax_forward.cu").read_text()
    headers = {"common.h": (CORPUS / "llm_c" / "common.h").read_text()}
    name = "softmax_forward_kernel7"
    plan = _plan(text, name, headers)
    assert plan.runners[name] == "run_blocks", plan.why
    body = _body(plan.text, name)
    assert body.count("KB_UNROLL(8)") == 5 and body.count("kb_fast ?") == 7
    at = text.index("{", text.index(f"void {name}(")) + 1
    rows, c = 37, 1000
    x = np.random.default_rng(3).standard_normal((rows, c)).astype(np.float32) * 3
    got = []
    for t in (text, text[:at] + KEEP_FIBERS + text[at:]):
        out = kb.zeros(rows * c, "float32", device=cpu)
        k = kb.compile(kb.Source(t, lang="cuda", name=name, headers=headers), cpu)
        k.launch(rows, 128, (out, kb.asarray(x.ravel(), device=cpu), np.int32(rows), np.int32(c)), shared_mem=32)
        got.append(out.numpy())
    np.testing.assert_array_equal(got[0], got[1])
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(got[0].reshape(rows, c), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)


def test_gathers_only_for_native_builds_left_generic():
    tc = _driver.toolchain()
    on, off = attrs.evolve(tc, gathers=True), attrs.evolve(tc, gathers=False)
    assert "-mtune-ctrl=use_gather" in flags.flags([], on, "cuda")
    assert "-mtune-ctrl=use_gather" not in flags.flags([], off, "cuda")
    for opts in (["-march=x86-64-v3"], ["-mno-native"], ["-mtune=znver2"], ["-mtune-ctrl=^use_gather"]):
        assert "-mtune-ctrl=use_gather" not in flags.flags(opts, on, "cuda"), opts
