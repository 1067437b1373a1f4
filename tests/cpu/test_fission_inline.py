"""Helper device functions with warp operations inlined at their call sites
(kernelbay_cpu/fission_inline.py): llm.c's softmax kernel3 and kernel4 (``warpReduceMax`` in the
file, ``warpReduceSum`` in common.h) now run on the loop path with the fiber runner's bits and
numpy's answer; helpers whose inlining could change the meaning stay calls. Calls inside an
expression (``v = warpReduceSum(v) / C;``) and inside ``if``/``else`` blocks are inlined too, where
running the helper first keeps the meaning: llm.c's layernorm kernel6 runs as loops."""

from __future__ import annotations

import re
from pathlib import Path

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis
from kernelbay_cpu.fission_inline import inline_helpers
from kernelbay_cpu.reach import Program

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
    assert "sum32(" not in body  # `sum32(v) * 2.0f` too: the call is run first, its value used in place
    assert re.search(r"float d = \(\(float\)\(kb_h\d+_v\)\) \* 2\.0f;", body)
    assert "scaled(v)" in body  # it reads the global `scale`, which the kernel declares too
    assert "twice(v)" in body  # two returns
    assert "pair(c)" in body  # two locals in one declaration
    assert (
        "float a =" in body
        and "float kb_h" in body
        and body.count("\n") == HELPERS[HELPERS.index("__global__") :].count("\n")
    )


EXPRESSIONS = r"""
__device__ float sum32(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ float pick(float a, float b) { return a > b ? a : b; }
__global__ void k(const float* x, float* y, int n) {
    float v = x[threadIdx.x];
    float e = fmaxf(1.0f, sum32(v)) / n;
    e += sum32(v * 2.0f);
    if (n > 3) {
        v = sum32(v) - 1.0f;
    } else if (n > 1) {
        v = sum32(v) + 1.0f;
    } else {
        v = sum32(v);
    }
    bool f = n > 2 && sum32(v) > 0.0f;
    float g = n > 2 ? sum32(v) : 0.0f;
    float h = (e += 1.0f, sum32(v));
    float i = sum32(v) + sum32(e);
    float j = n++ + sum32(v);
    float l = sizeof(float) * sum32(v);
    y[threadIdx.x] = v + e + f + g + h + i + j + l;
}
"""


def test_calls_inside_expressions_and_if_blocks_are_inlined_where_the_helper_may_run_first():
    body = inline_helpers(EXPRESSIONS)
    body = body[body.index("__global__") :]
    assert body.count("\n") == EXPRESSIONS[EXPRESSIONS.index("__global__") :].count("\n")
    lines = body.splitlines()
    # inlined: inside another call's arguments, a compound assignment, each branch of an if/else chain
    assert re.search(r"float e = fmaxf\(1\.0f, \(\(float\)\(kb_h\d+_v\)\)\) / n;", lines[2])
    assert "e += ((float)(kb_h" in lines[3]
    assert all("sum32(" not in ln and "kb_h" in ln for ln in (lines[5], lines[7], lines[9]))
    # kept: evaluated only on a condition (&&, ?:), ordered by a comma operator, two calls in
    # one statement, a write beside the call, an unevaluated operand
    for ln in lines[11:17]:
        assert "sum32(" in ln and "kb_h" not in ln, ln


def test_an_inlined_expression_call_runs_as_loops_with_the_fiber_runners_bits(cpu):
    src = EXPRESSIONS.replace("bool f = n > 2 && sum32(v) > 0.0f;", "bool f = n > 2;")
    for old in ("n > 2 ? sum32(v) : 0.0f", "(e += 1.0f, sum32(v))", "sum32(v) + sum32(e)", "n++ + sum32(v)"):
        src = src.replace(old, "0.0f")
    src = src.replace("sizeof(float) * sum32(v)", "0.0f")
    assert _plan(src, "k", {}).runners == {"k": "run_blocks"}
    at = src.index("{", src.index("void k(")) + 1
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    outs = []
    for t in (src, src[:at] + KEEP_FIBERS + src[at:]):
        y = kb.zeros(64, "float32", device=cpu)
        k = kb.compile(kb.Source(t, lang="cuda", name="k"), cpu)
        k.launch(1, 64, (kb.asarray(x, device=cpu), y, np.int32(5)))
        outs.append((k.handle.fibers, y.numpy()))
    assert not outs[0][0] and outs[1][0]
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    w = x.reshape(2, 32).astype(np.float64)
    e = np.maximum(1.0, w.sum(1, keepdims=True)) / 5 + (2 * w).sum(1, keepdims=True)
    v = (w.sum(1, keepdims=True) - 1.0) * np.ones_like(w)
    np.testing.assert_allclose(outs[0][1], (v + e + 1.0).ravel(), rtol=1e-5, atol=1e-5)


def test_llm_c_layernorm_kernel6_runs_as_loops_with_the_fiber_runners_bits(cpu):
    """``v = warpReduceSum(v) / C;`` inlined, ``x128* s_in`` (a pointer to a type common.h names)
    stored per thread; 37 rows, so the last block's warps past the rows take the early return."""
    name = "layernorm_forward_kernel6"
    text = (CORPUS / "llm_c" / "layernorm_forward.cu").read_text()
    headers = {"common.h": (CORPUS / "llm_c" / "common.h").read_text()}
    plan = _plan(text, name, headers)
    assert plan.runners == {name: "run_blocks"}, plan.why
    at = text.index("{", text.index(f"void {name}(")) + 1
    rng = np.random.default_rng(6)
    n, c = 37, 256
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((n, c), c, c))
    outs = []
    for t in (text, text[:at] + KEEP_FIBERS + text[at:]):
        out, mean, rstd = (kb.zeros(s, "float32", device=cpu) for s in (n * c, n, n))
        k = kb.compile(kb.Source(t, lang="cuda", name=name, headers=headers), cpu)
        args = (out, mean, rstd, *(kb.asarray(a.ravel(), device=cpu) for a in (x, w, b)), np.int32(n), np.int32(c))
        k.launch((n + 3) // 4, (32, 4), args, shared_mem=(2 + 4) * c * 4)
        outs.append((k.handle.fibers, [a.numpy() for a in (out, mean, rstd)]))
    assert not outs[0][0] and outs[1][0]
    for got, want in zip(outs[0][1], outs[1][1], strict=True):
        np.testing.assert_array_equal(got, want)
    x64 = x.astype(np.float64)
    m = x64.mean(1, keepdims=True)
    s = 1 / np.sqrt(((x64 - m) ** 2).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(outs[0][1][0].reshape(n, c), (x64 - m) * s * w + b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[0][1][1], m.ravel(), rtol=1e-5, atol=1e-6)


THREAD_HELPERS = r"""
__device__ unsigned flat_tid() { return threadIdx.y * blockDim.x + threadIdx.x; }
__device__ float mirrored(const float* s, unsigned n) {
    unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
    return s[n - 1 - t];
}
__global__ void k(const float* x, float* y) {
    __shared__ float s[128];
    unsigned t = flat_tid();
    unsigned i = blockIdx.x * 128 + t;
    s[t] = x[i];
    __syncthreads();
    float v = mirrored(s, 128) * 2.0f;
    y[i] = v;
}
__global__ void k2(const float* x, float* y) {
    __shared__ float s[128];
    s[flat_tid()] = x[blockIdx.x * 128 + flat_tid()];
    __syncthreads();
    y[blockIdx.x * 128 + flat_tid()] = s[127 - flat_tid()];
}
"""


def test_helpers_reading_threadidx_inlined_run_as_loops_with_the_fiber_runners_bits(cpu):
    """A helper that reads threadIdx, inlined, reads the loop path's per-thread index; called
    where a call is not inlined (``s[flat_tid()] = ...``) it keeps its kernel on fibers."""
    plan = analysis.plan_cuda(kb.Source(THREAD_HELPERS, lang="cuda", name="k"), ["k", "k2"])
    assert plan.runners == {"k": "run_blocks", "k2": "run_fibers"}, plan.why
    assert plan.why["k2"].endswith("not as loops: a function it calls reads threadIdx")
    x = np.random.default_rng(4).standard_normal(3 * 128).astype(np.float32)
    want = (x.reshape(3, 128)[:, ::-1] * 2).ravel()
    at = THREAD_HELPERS.index("{", THREAD_HELPERS.index("void k(")) + 1
    for t, fibers in ((THREAD_HELPERS, False), (THREAD_HELPERS[:at] + KEEP_FIBERS + THREAD_HELPERS[at:], True)):
        y = kb.zeros(3 * 128, "float32", device=cpu)
        k = kb.compile(kb.Source(t, lang="cuda", name="k"), cpu)
        k.launch(3, (32, 4), (kb.asarray(x, device=cpu), y))
        assert k.handle.fibers == fibers
        np.testing.assert_array_equal(y.numpy(), want)


def test_helpers_with_volatile_or_template_shapes_keep_their_kernels_on_fibers():
    """What is not inlined, and why those kernels keep fibers: the scan sample's helpers take a
    ``volatile uint*`` and a ``cg::thread_block`` and call each other (and their ``cg::sync(cta)``
    is a block operation reach.py sees in a callee); reduce7's ``warpReduceSum<T>`` is a template,
    whose shuffles inside ``if (tid < shmem_extent)`` take a ballot's mask."""
    scan = (CORPUS / "cuda_samples" / "scan.cu").read_text()
    headers = {"scan_common.h": (CORPUS / "cuda_samples" / "scan_common.h").read_text()}
    assert inline_helpers(scan, list(headers.values())) == scan
    plan = _plan(scan, "scanExclusiveShared", headers)
    assert plan.runners == {"scanExclusiveShared": "run_fibers"}
    assert plan.why["scanExclusiveShared"].endswith(
        "not as loops: a block operation outside the kernel's body (a function it calls, a macro, file scope)"
    )
    red = (CORPUS / "cuda_samples" / "reduction_kernel.cu").read_text()
    assert "mySum = warpReduceSum<T>(mask, mySum);" in inline_helpers(red)


def test_reach_sees_a_namespace_collective_on_a_group_passed_to_a_helper():
    text = """
    namespace cg = cooperative_groups;
    __device__ void step(cg::thread_block g, float* s) { s[0] = 1.0f; cg::sync(g); }
    __device__ float total(cg::thread_block_tile<32> w, float v) { return cg::reduce(w, v, cg::plus<float>()); }
    __global__ void k(float* s) { step(cg::this_thread_block(), s); }
    __global__ void k2(float* s) { s[0] = total(cg::tiled_partition<32>(cg::this_thread_block()), 1.0f); }
    """
    prog = Program([("kernel.cu", text)])
    for name in ("k", "k2"):
        fname, fn = prog.kernel(name)
        assert prog.reach(fname, fn).block_outside, name
