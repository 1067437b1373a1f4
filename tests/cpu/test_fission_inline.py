"""Helper device functions with warp operations inlined at their call sites
(kernelbay_cpu/fission_inline.py): llm.c's softmax kernel3 and kernel4 (``warpReduceMax`` in the
file, ``warpReduceSum`` in common.h) now run on the loop path with the fiber runner's bits and
numpy's answer; helpers whose inlining could change the meaning stay calls."""

from __future__ import annotations

import re
from pathlib import Path

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis
from kernelbay_cpu.fission_inline import inline_helpers

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"


def _plan(text: str, name: str, headers: dict[str, str]) -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name=name, headers=headers), [name])


@pytest.mark.parametrize(("name", "block"), [("softmax_forward_kernel3", 32), ("softmax_forward_kernel4", 128)])
def test_llm_c_softmax_with_warp_helpers_runs_as_loops(cpu, name, block):
    text = (CORPUS / "llm_c" / "softmax_forward.cu").read_text()
    headers = {"common.h": (CORPUS / "llm_c" / "common.h").read_text()}
    plan = _plan(text, name, headers)
    assert plan.runners == {name: "run_blocks"}, plan.why
    at = text.index("{", text.index(f"void {name}(")) + 1
    rows, c = 37, 300
    x = np.random.default_rng(8).standard_normal((rows, c)).astype(np.float32) * 3
    outs = []
    for t in (text, text[:at] + KEEP_FIBERS + text[at:]):
        out = kb.zeros(rows * c, "float32", device=cpu)
        k = kb.compile(kb.Source(t, lang="cuda", name=name, headers=headers), cpu)
        k.launch(
            rows, block, (out, kb.asarray(x.ravel(), device=cpu), np.int32(rows), np.int32(c)), shared_mem=2 * block * 4
        )
        outs.append((k.handle.fibers, out.numpy()))
    assert not outs[0][0] and outs[1][0]
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(outs[0][1].reshape(rows, c), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-8)


HELPERS = r"""
__device__ int scale;
__device__ float sum32(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ float scaled(float v) {
    float w = v * scale;
    for (int o = 16; o > 0; o /= 2) w += __shfl_xor_sync(0xffffffffu, w, o);
    return w;
}
__device__ float pair(float v) {
    float a = v, b = 1.0f;
    for (int o = 16; o > 0; o /= 2) a += __shfl_xor_sync(0xffffffffu, a, o);
    return a + b;
}
__device__ float twice(float v) {
    if (v > 0.0f) return __shfl_xor_sync(0xffffffffu, v, 1);
    return v;
}
__global__ void k(const float* x, float* y, int n) {
    float v = x[threadIdx.x];
    float o = 1.0f;
    v = sum32(v);
    float a = sum32(v + o);
    int scale = 2;
    float b = scaled(v);
    b += scale;
    float c = twice(v);
    c = pair(c);
    float d = sum32(v) * 2.0f;
    y[threadIdx.x] = v + a + b + c + d;
}
"""


def test_only_whole_statement_calls_of_single_return_helpers_reading_nothing_the_kernel_declares():
    text = inline_helpers(HELPERS)
    body = text[text.index("__global__") :]
    assert len(re.findall(r"kb_h\d+_v", body)) > 0
    assert body.count("sum32(") == 1  # `sum32(v) * 2.0f` is not a whole right side
    assert "scaled(v)" in body  # it reads the global `scale`, which the kernel declares too
    assert "twice(v)" in body  # two returns
    assert "pair(c)" in body  # two locals in one declaration
    assert (
        "float a =" in body
        and "float kb_h" in body
        and body.count("\n") == HELPERS[HELPERS.index("__global__") :].count("\n")
    )
