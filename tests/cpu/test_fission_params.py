"""Barrier loop fission of kernels that assign their parameters (each CUDA thread has its own
copy: here a per-thread local made from the argument), of loops bounded by template parameters
and constant macros, and of ``uint`` locals: the kernels below run on the loop path and, kept on
fibers by a ``volatile`` local (which the loop path never takes), on the fiber runner, with the
same bits."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

# sgemm_cuda's shape: pointers bumped by each thread's own offset before the loop and by a tile
# inside a loop bounded by a template parameter; a count parameter changed per thread.
BUMPS = r"""
#define TILE 32
#define HALF (TILE / 2)
template <const int STEPS>
__global__ void k(const float* __restrict__ x, float* y, int n, const uint stride) {
    __shared__ float s[TILE * 8];
    const uint t = threadIdx.x;
    x += blockIdx.x * blockDim.x + t;
    y += blockIdx.x * blockDim.x;
    n -= t % 3;
    float acc = 0.0f;
    for (int step = 0; step < STEPS; ++step) {
        s[t] = x[0] * (step + 1) + n;
        __syncthreads();
        acc += s[(t + HALF) % blockDim.x];
        x += stride;
        n += 1;
        __syncthreads();
    }
    y[t] = acc + n;
}
"""

KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"


def _plan(text: str, name: str = "k<4>") -> analysis.Plan:
    return analysis.plan_cuda(kb.Source(text, lang="cuda", name=name), [name])


def _on_fibers(text: str) -> str:
    at = text.index("{", text.index("__global__")) + 1
    return text[:at] + " " + KEEP_FIBERS + text[at:]


def _launch(cpu, text: str, block: int, blocks: int):
    n = block * blocks
    x = np.random.default_rng(5).standard_normal(n * 5).astype(np.float32)
    y = kb.asarray(np.full(n, -7, np.float32), device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name="k<4>"), cpu)
    k.launch(blocks, block, (kb.asarray(x, device=cpu), y, 1000, n))
    return k, y.numpy()


@pytest.mark.parametrize("block", [256, 96], ids=str)
def test_assigned_parameters_are_each_threads_own(cpu, block):
    plan = _plan(BUMPS)
    assert plan.runners == {"k<4>": "run_blocks"}, plan.why
    assert "kb_arg_x" in plan.text and "kb_arg_n" in plan.text and "kb_arg_y" in plan.text
    assert "kb_arg_stride" not in plan.text  # read only: the call's own
    loops, y = _launch(cpu, BUMPS, block, 3)
    fibers, y2 = _launch(cpu, _on_fibers(BUMPS), block, 3)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    assert (y != -7).all()


def test_a_reference_parameter_assigned_keeps_fibers():
    text = """
__global__ void k(int* y, int n) {
    __shared__ int s[64];
    int& r = n;
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    int* p[1] = {y};
    p[0] += 1;
    y[threadIdx.x] = s[63 - threadIdx.x] + r;
}
"""
    assert _plan(text, "k").runners == {"k": "run_fibers"}
    arr = "__global__ void k(int y[4]) { y += 1; __syncthreads(); y[threadIdx.x] = 1; }"
    plan = _plan(arr, "k")
    assert plan.runners == {"k": "run_fibers"}
    assert "of a type the loop path does not copy per thread" in plan.why["k"]


# kernel_tuner's shape: the body's conditionals decided by the build's -D options and the file's
# own #defines (under conditionals of their own); `#pragma unroll` before loops the split moves.
DIRECTIVES = r"""
#ifndef use_smem
#define use_smem 0
#endif
#if use_smem == 1
#define WIDTH (block_size_x / 2)
#else
#define WIDTH 16
#endif
__global__ void k(const float* x, float* y, int n, int m) {
    __shared__ float s[block_size_x];
    int t = threadIdx.x;
    float v = x[blockIdx.x * block_size_x + t];
#pragma unroll
    for (int i = 0; i < 3; i++) v += i;
#if use_smem == 1 && defined(block_size_x)
    s[t] = v * 2;
#elif use_smem == 2
    s[t] = undefined_here;
#else
    s[t] = v;
#endif
    __syncthreads();
    #pragma unroll
    for (int i = 0; i < 2; i++) v += s[(t + WIDTH + i) % block_size_x];
    y[blockIdx.x * block_size_x + t] = v;
}
"""


def _launch_opts(cpu, text: str, options: tuple[str, ...]):
    x = np.random.default_rng(6).standard_normal(512).astype(np.float32)
    y = kb.asarray(np.full(512, -7, np.float32), device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name="k", options=options), cpu)
    k.launch(512 // 128, 128, (kb.asarray(x, device=cpu), y, 512, 0))
    return k, y.numpy()


@pytest.mark.parametrize("smem", ["-Duse_smem=1", "-Duse_smem=0", "-Uuse_smem"])
def test_conditionals_decided_by_the_builds_defines(cpu, smem):
    opts = ("-Dblock_size_x=128", smem)
    src = kb.Source(DIRECTIVES, lang="cuda", name="k", options=opts)
    plan = analysis.plan_cuda(src, ["k"])
    assert plan.runners == {"k": "run_blocks"}, plan.why
    assert plan.text.count("\n") == DIRECTIVES.count("\n") and "undefined_here" not in plan.text
    loops, y = _launch_opts(cpu, DIRECTIVES, opts)
    fibers, y2 = _launch_opts(cpu, _on_fibers(DIRECTIVES), opts)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    assert (y != -7).all()


@pytest.mark.parametrize(
    "cond, why",
    [
        ("SOME_HEADER_MACRO > 1", "a preprocessor condition the build's defines do not decide (line 16)"),
        ("use_smem ? 1 : 0", "a preprocessor condition the build's defines do not decide (line 16)"),
        ("use_smem & 1 == 1", "a preprocessor condition the build's defines do not decide (line 16)"),
    ],
)
def test_conditionals_not_decided_here_keep_fibers(cond, why):
    text = DIRECTIVES.replace("#if use_smem == 1 && defined(block_size_x)", f"#if {cond}")
    plan = analysis.plan_cuda(kb.Source(text, lang="cuda", name="k", options=("-Dblock_size_x=128",)), ["k"])
    assert plan.runners == {"k": "run_fibers"} and why in plan.why["k"], plan.why
    define = DIRECTIVES.replace("    __syncthreads();", "#define LATE 1\n    __syncthreads();")
    plan = analysis.plan_cuda(kb.Source(define, lang="cuda", name="k", options=("-Dblock_size_x=128",)), ["k"])
    assert plan.runners == {"k": "run_fibers"} and "a #define line inside the kernel body" in plan.why["k"]


# sgemm's register tiles: local arrays of constant sizes (a template parameter, a macro), zeroed
# or not initialised, one inside the uniform loop, living across barriers.
ARRAYS = r"""
#define TY 2
template <const int TM>
__global__ void k(const float* x, float* y, int n, const uint stride) {
    __shared__ float s[256];
    const uint t = threadIdx.x;
    float acc[TY][TM] = {0.0};
    int idx[TM];
    for (int i = 0; i < TM; ++i) idx[i] = (t * 7 + i) % blockDim.x;
    for (int step = 0; step < 3; ++step) {
        float reg[TM] = {};
        s[t] = x[blockIdx.x * blockDim.x + t] + step;
        __syncthreads();
        for (int i = 0; i < TM; ++i) reg[i] = s[idx[i]];
        for (int j = 0; j < TY; ++j)
            for (int i = 0; i < TM; ++i) acc[j][i] += reg[i] * (j + 1);
        __syncthreads();
    }
    float sum = 0.0f;
    for (int j = 0; j < TY; ++j)
        for (int i = 0; i < TM; ++i) sum += acc[j][i] * (i + 1);
    y[blockIdx.x * blockDim.x + t] = sum;
}
"""


@pytest.mark.parametrize("block", [256, 96], ids=str)
def test_local_arrays_are_each_threads_own(cpu, block):
    plan = _plan(ARRAYS)
    assert plan.runners == {"k<4>": "run_blocks"}, plan.why
    assert plan.text.count("::kb_cpu::fis::scratch(") == 3
    loops, y = _launch(cpu, ARRAYS, block, 3)
    fibers, y2 = _launch(cpu, _on_fibers(ARRAYS), block, 3)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    assert (y != -7).all()


@pytest.mark.parametrize(
    "decl, why",
    [
        ("float acc[TY][TM] = {1.0f};", "a local array with an initializer other than zeros"),
        ("float acc[TY][n];", "a local array whose size is not a constant the loop path reads"),
    ],
)
def test_other_local_arrays_keep_fibers(decl, why):
    plan = _plan(ARRAYS.replace("float acc[TY][TM] = {0.0};", decl))
    assert plan.runners == {"k<4>": "run_fibers"} and why in plan.why["k<4>"], plan.why


# cuda-samples' locals: CUDA vector types (written member by member, as a struct), `uchar`, and a
# pointer declared `bool        *p` (no space after the star).
VECTORS = r"""
typedef unsigned char uchar;
template <const int TM>
__global__ void k(const float* x, float* y, int n, const uint stride) {
    __shared__ float s[256];
    __shared__ uchar flags[256];
    const uint t = threadIdx.x;
    float4 v = reinterpret_cast<const float4*>(x)[blockIdx.x * blockDim.x + t];
    float2 w;
    w.x = v.x + v.y;
    w.y = v.z * v.w;
    uchar           *mine = flags + t;
    *mine = (uchar)(t & 3);
    s[t] = w.x;
    __syncthreads();
    v.x += s[(t + 1) % blockDim.x];
    w.y -= flags[(t + 5) % blockDim.x];
    y[blockIdx.x * blockDim.x + t] = v.x + v.w + w.y + *mine;
}
"""


@pytest.mark.parametrize("block", [256, 96], ids=str)
def test_vector_type_locals_are_each_threads_own(cpu, block):
    plan = _plan(VECTORS)
    assert plan.runners == {"k<4>": "run_blocks"}, plan.why
    assert "float4 v[KB_FISSION_MAX_THREADS]" in plan.text and "float2 w[KB_FISSION_MAX_THREADS]" in plan.text
    loops, y = _launch(cpu, VECTORS, block, 3)
    fibers, y2 = _launch(cpu, _on_fibers(VECTORS), block, 3)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    assert (y != -7).all()


def test_a_member_of_a_parameter_written_makes_a_copy_or_keeps_fibers():
    vec = "__global__ void k(float* y, float4 v) { v.x += threadIdx.x; __syncthreads(); y[threadIdx.x] = v.x; }"
    plan = _plan(vec, "k")
    assert plan.runners == {"k": "run_blocks"} and "kb_arg_v" in plan.text, plan.why
    struct = "struct P { float a; };\n" + vec.replace("float4 v", "P v").replace(".x", ".a")
    plan = _plan(struct, "k")  # a struct parameter: not copied, so fibers
    assert plan.runners == {"k": "run_fibers"}
    assert "of a type the loop path does not copy per thread" in plan.why["k"], plan.why


# bitonicSort's shape: a uniform loop around a uniform loop of barriers, a block `{ }` around
# another loop of barriers, the same local declared in both loops (one array serves both), a
# local named `size` (no cooperative-groups method) computed from the outer loop's variable.
NESTED = r"""
#define LIMIT 256U
template <const int TM>
__global__ void k(const float* x, float* y, int n, const uint stride0) {
    __shared__ float s[LIMIT];
    const uint t = threadIdx.x;
    s[t] = x[blockIdx.x * blockDim.x + t];
    for (uint size = 2; size < blockDim.x; size <<= 1) {
        uint dir = (t & (size / 2)) != 0;
        for (uint stride = size / 2; stride > 0; stride >>= 1) {
            __syncthreads();
            uint pos = (t + stride) % blockDim.x;
            float a = s[t], b = s[pos];
            __syncthreads();
            s[t] = dir ? a + 0.5f * b : a - 0.25f * b;
        }
    }
    {
        for (uint stride = 1; stride < 4; stride <<= 1) {
            __syncthreads();
            uint pos = (t + 3 * stride) % blockDim.x;
            float a = s[pos];
            __syncthreads();
            s[t] += a;
        }
    }
    __syncthreads();
    y[blockIdx.x * blockDim.x + t] = s[(t + 1) % blockDim.x];
}
"""


@pytest.mark.parametrize("block", [256, 96], ids=str)
def test_nested_loops_blocks_and_locals_declared_in_sibling_loops(cpu, block):
    plan = _plan(NESTED)
    assert plan.runners == {"k<4>": "run_blocks"}, plan.why
    assert plan.text.count("pos[KB_FISSION_MAX_THREADS]") == 1
    loops, y = _launch(cpu, NESTED, block, 3)
    fibers, y2 = _launch(cpu, _on_fibers(NESTED), block, 3)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    assert (y != -7).all()


def test_a_local_shadowing_a_per_thread_one_keeps_fibers():
    text = NESTED.replace(
        "    {\n        for (uint stride = 1;", "    uint pos = t;\n    {\n        for (uint stride = 1;"
    )
    plan = _plan(text)
    assert plan.runners == {"k<4>": "run_fibers"} and "pos declared twice" in plan.why["k<4>"], plan.why


# finite-difference's lPencils shape: a region's loops declare `sj` again (their own scope) under
# the name of a per-thread local of the kernel; renamed there, the per-thread one untouched.
SHADOW = r"""
template <const int TM>
__global__ void k(const float* x, float* y, int n, const uint stride) {
    __shared__ float s[256 + 8];
    const uint t = threadIdx.x;
    int sj = t + 4;
    for (int j = t; j < 256; j += blockDim.x) {
        int sj = j + 4;
        s[sj] = x[blockIdx.x * 256 + j];
    }
    sj += (int)(t % 3);
    __syncthreads();
    for (int j = t; j < 256; j += blockDim.x) {
        int sj = j + 4;
        { float sj2 = s[sj]; y[blockIdx.x * 256 + j] = sj2 + s[(sj + 1) % 256 + 4]; }
    }
    __syncthreads();
    for (int sj = 0; sj < 1; ++sj) y[blockIdx.x * 256 + t] += (float)sj;
    y[blockIdx.x * 256 + t] += s[sj % 256 + 4] * 0.5f;
}
"""


@pytest.mark.parametrize("block", [256, 96], ids=str)
def test_a_local_declared_again_inside_a_regions_loop_is_its_own(cpu, block):
    plan = _plan(SHADOW)
    assert plan.runners == {"k<4>": "run_blocks"}, plan.why
    assert "sj_kb_in" in plan.text and "int sj[KB_FISSION_MAX_THREADS]" in plan.text
    x = np.random.default_rng(8).standard_normal(3 * 256).astype(np.float32)
    out = []
    for text in (SHADOW, _on_fibers(SHADOW)):
        y = kb.asarray(np.full(3 * 256, -7, np.float32), device=cpu)
        k = kb.compile(kb.Source(text, lang="cuda", name="k<4>"), cpu)
        k.launch(3, block, (kb.asarray(x, device=cpu), y, 0, 0))
        out.append((k.handle.fibers, y.numpy()))
    assert not out[0][0] and out[1][0]
    np.testing.assert_array_equal(out[0][1], out[1][1])


# kernel_tuner matmul's shape: the loop around barriers counts a local declared before it.
OUTER_VAR = r"""
template <const int TM>
__global__ void k(const float* x, float* y, int n, const uint stride) {
    __shared__ float s[256];
    const uint t = threadIdx.x;
    int step, j;
    float acc = 0.0f;
    for (step = 0; step < 3; step++) {
        s[t] = x[blockIdx.x * blockDim.x + t] + step;
        __syncthreads();
        for (j = 0; j < 2; j++) acc += s[(t + j + step) % blockDim.x];
        __syncthreads();
    }
    y[blockIdx.x * blockDim.x + t] = acc + step + j;
}
"""


@pytest.mark.parametrize("block", [256, 96], ids=str)
def test_a_loop_counting_a_local_declared_before_it(cpu, block):
    plan = _plan(OUTER_VAR)
    assert plan.runners == {"k<4>": "run_blocks"}, plan.why
    assert "int step{};" in plan.text and "int j[KB_FISSION_MAX_THREADS]" in plan.text
    loops, y = _launch(cpu, OUTER_VAR, block, 3)
    fibers, y2 = _launch(cpu, _on_fibers(OUTER_VAR), block, 3)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    written = OUTER_VAR.replace("float acc = 0.0f;", "float acc = 0.0f; if (t == 3) step = 1;")
    assert "without its own variable" in _plan(written).why["k<4>"]


# simpleVote's VoteAnyKernel3 shape: a vote in an if's condition (every thread that reaches the
# if votes; the branch is the thread's own), a `bool        *p` local; the shared array declared
# `extern float __shared__` (the type first).
VOTE_IF = r"""
template <const int TM>
__global__ void k(const float* x, float* y, int n, const uint stride) {
    extern float __shared__ s[];
    const uint t = threadIdx.x;
    float v = x[blockIdx.x * blockDim.x + t];
    s[t] = v;
    __syncthreads();
    if (__all_sync(0xffffffffu, v > -1.5f)) {
        v += 10.0f;
    } else if (t % 2) {
        v -= 1.0f;
    }
    if (__any_sync(0xffffffffu, s[(t + 1) % blockDim.x] > 2.0f) && t % 3 == 0) v *= 2.0f;
    y[blockIdx.x * blockDim.x + t] = v;
}
"""


@pytest.mark.parametrize("block", [256, 96], ids=str)
def test_a_vote_in_an_if_condition_and_extern_type_shared(cpu, block):
    plan = _plan(VOTE_IF)
    assert plan.runners == {"k<4>": "run_blocks"}, plan.why
    x = np.random.default_rng(9).standard_normal(3 * block).astype(np.float32)
    out = []
    for text in (VOTE_IF, _on_fibers(VOTE_IF)):
        y = kb.asarray(np.full(3 * block, -7, np.float32), device=cpu)
        k = kb.compile(kb.Source(text, lang="cuda", name="k<4>"), cpu)
        k.launch(3, block, (kb.asarray(x, device=cpu), y, 0, 0), shared_mem=block * 4)
        out.append((k.handle.fibers, y.numpy()))
    assert not out[0][0] and out[1][0]
    np.testing.assert_array_equal(out[0][1], out[1][1])
    assert (out[0][1] != -7).all()
    in_body = VOTE_IF.replace("        v -= 1.0f;", "        v -= __any_sync(0xffffffffu, v > 0.0f);")
    assert "warp operation inside an if whose condition may differ between threads" in _plan(in_body).why["k<4>"]


def test_a_use_that_reads_like_a_declaration_is_not_renamed():
    # `else sj = 3;` and `a > sj;` inside a region's loop are the per-thread local's own uses
    for use in ("if (j) y[0] = 1; else sj = 3;", "int q = j > sj; y[q] = 1;"):
        text = (
            "__global__ void k(float* y) { __shared__ float s[64]; int sj = threadIdx.x; sj += 1;"
            " __syncthreads(); for (int j = 0; j < 2; j++) { " + use + " } y[threadIdx.x] = s[sj % 64]; }"
        )
        plan = _plan(text, "k")
        assert "sj_kb_in" not in plan.text
        assert plan.runners == {"k": "run_fibers"} and "sj declared twice" in plan.why["k"], plan.why
