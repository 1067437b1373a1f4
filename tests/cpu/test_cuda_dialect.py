"""CUDA C++ as real projects write it, compiled and launched on the cpu backend and compared with
numpy: declaration qualifiers, cache-hint loads and stores, integer min/max and atomics with
CUDA's implicit conversions, math and bit builtins, host headers in device files, and refusals by
name. (fp16/bf16: test_cuda_half.py; tiles, shuffles and barriers: test_cuda_groups.py.) The
kernels are written for these tests in the idioms of public CUDA projects."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest


def _k(cpu, src: str, name: str = "k"):
    return kb.compile(kb.Source(src, lang="cuda", name=name), cpu)


QUALIFIERS = r"""
#include <stdio.h>
#include <cstdio>
#include <iostream>
#include <algorithm>
#include <memory>
#include <cassert>
#include <cuda_runtime.h>
#include <cuda.h>
#include <cublas_v2.h>
#include <device_launch_parameters.h>
#include <math_constants.h>
#define HOST_DEVICE __host__ __device__
__device__ inline float a1(float x) { return x + 1.0f; }
inline __device__ float a2(float x) { return x + 2.0f; }
static __device__ float a3(float x) { return x + 3.0f; }
__forceinline__ __device__ float a4(float x) { return x + 4.0f; }
__device__ __forceinline__ float a5(float x) { return x + 5.0f; }
__host__ __device__ constexpr float a6(float x) { return x + 6.0f; }
__noinline__ __device__ float a7(float x) { return x + 7.0f; }
__device__ __noinline__ float a8(float x) { return x + 8.0f; }
template <int N> __device__ float a9(float x) { return x + N; }
HOST_DEVICE inline float a10(float x) { return x + 10.0f; }
static __device__ __forceinline__ float a11(float x) { return x + 11.0f; }
__device__ int counter;
__constant__ float scale = 2.0f;
extern "C" __global__ void __launch_bounds__(256, 2) k(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = scale * (a1(v) + a2(v) + a3(v) + a4(v) + a5(v) + a6(v) + a7(v) + a8(v) + a9<9>(v) + a10(v)
                        + a11(v)) + CUDART_PI_F * 0.0f;
    }
}
"""


def test_every_qualifier_combination_nvcc_accepts_compiles_and_runs(cpu):
    x = np.arange(300, dtype=np.float32)
    y = kb.asarray(np.zeros(300, np.float32), device=cpu)
    _k(cpu, QUALIFIERS).launch(2, 256, (kb.asarray(x, device=cpu), y, np.int32(300)))
    np.testing.assert_array_equal(y.numpy(), 2 * (11 * x + 66))


CACHE_HINTS = r"""
__global__ void k(const float* x, const float4* v, float* y, float4* w, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = __ldg(x + i) + __ldcs(x + i) + __ldcg(x + i) + __ldca(x + i) + __ldlu(x + i) + __ldcv(x + i);
    __stcs(y + i, s);
    __stcg(y + n + i, s + 1.0f);
    __stwb(y + 2 * n + i, s + 2.0f);
    __stwt(y + 3 * n + i, s + 3.0f);
    float4 a = __ldcs(v + i), b = __ldg(v + i), c = __ldcg(v + i);
    __stcs(w + i, make_float4(a.x + b.x + c.x, a.y, a.z + c.z, a.w * b.w));
    __stcg(w + n + i, __ldlu(v + i));
}
"""


def test_cache_hint_loads_and_stores_of_scalars_and_vectors(cpu):
    n = 100
    x = np.linspace(-1, 1, n, dtype=np.float32)
    v = np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32)
    y = kb.asarray(np.zeros(4 * n, np.float32), device=cpu)
    w = kb.asarray(np.zeros((2 * n, 4), np.float32), device=cpu)
    _k(cpu, CACHE_HINTS).launch(1, 128, (kb.asarray(x, device=cpu), kb.asarray(v, device=cpu), y, w, np.int32(n)))
    s = 6 * x
    np.testing.assert_allclose(y.numpy(), np.concatenate([s, s + 1, s + 2, s + 3]), rtol=1e-6, atol=1e-6)
    want = np.stack([3 * v[:, 0], v[:, 1], 2 * v[:, 2], v[:, 3] * v[:, 3]], axis=1)
    np.testing.assert_allclose(w.numpy()[:n], want, rtol=1e-6)
    np.testing.assert_array_equal(w.numpy()[n:], v)


MIN_MAX_ATOMICS = r"""
__global__ void k(int* out, unsigned* u, unsigned long long* q, float* f, double* d, int* s) {
    int t = threadIdx.x;
    unsigned un = 5;
    // CUDA's mixed-signedness overloads compare as unsigned: min(-1, 5u) is 5u.
    if (t == 0) {
        out[0] = (int)min(-1, un);
        out[1] = (int)max(t, 3u);
        out[2] = (int)min(threadIdx.x, 7);
        out[3] = (int)max(2LL, 9ULL);
        out[4] = (int)(min(1.5f, 2.0) * 2.0);
    }
    atomicAdd(u, 1);              // unsigned*, int
    atomicAdd(q, 2);              // unsigned long long*, int
    atomicMax(q + 1, t);          // unsigned long long*, int
    atomicAdd(f, 0.5f);
    atomicAdd(d, 0.25);
    atomicAdd_block(u + 1, 1u);
    atomicAdd_system(u + 2, 1u);
    atomicSub(s, 1);
    atomicMin(s + 1, -t);
    atomicMax_system(s + 2, t);
    atomicAnd(u + 3, ~(1u << (t % 32)));
    atomicOr(u + 4, 1u << (t % 32));
    atomicXor(u + 5, 1u);
    atomicInc(u + 6, 9u);
    atomicDec(u + 7, 9u);
    atomicExch_block(s + 3, 42);
    atomicCAS(s + 4, 0, t + 1);   // one thread wins
    atomicCAS_system(q + 2, 0, 7);
}
"""


def test_integer_min_max_and_atomics_convert_as_cuda_declares(cpu):
    n = 64
    out = kb.asarray(np.zeros(5, np.int32), device=cpu)
    u = kb.asarray(np.array([0, 0, 0, 0xFFFFFFFF, 0, 0, 0, 0], np.uint32), device=cpu)
    q = kb.asarray(np.zeros(3, np.uint64), device=cpu)
    f = kb.asarray(np.zeros(1, np.float32), device=cpu)
    d = kb.asarray(np.zeros(1, np.float64), device=cpu)
    s = kb.asarray(np.array([0, 0, 0, 0, 0], np.int32), device=cpu)
    _k(cpu, MIN_MAX_ATOMICS).launch(1, n, (out, u, q, f, d, s))
    assert out.numpy().tolist() == [5, 3, 0, 9, 3]
    uu = u.numpy()
    assert uu[:3].tolist() == [n, n, n]
    assert uu[3] == 0 and uu[4] == 0xFFFFFFFF and uu[5] == 0
    # atomicInc wraps to 0 past 9, atomicDec wraps to 9 below 0: 64 of each from 0.
    inc = dec = 0
    for _ in range(n):
        inc = 0 if inc >= 9 else inc + 1
        dec = 9 if dec == 0 or dec > 9 else dec - 1
    assert uu[6] == inc and uu[7] == dec
    assert q.numpy().tolist() == [2 * n, n - 1, 7]
    assert f.numpy()[0] == 0.5 * n and d.numpy()[0] == 0.25 * n
    ss = s.numpy()
    assert ss[0] == -n and ss[1] == -(n - 1) and ss[2] == n - 1 and ss[3] == 42 and 1 <= ss[4] <= n


BUILTINS = r"""
__global__ void k(const unsigned* a, const unsigned* b, const float* x, int* o, float* g, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned p = a[i], q = b[i];
    int* r = o + 16 * i;
    r[0] = __popc(p);
    r[1] = __popcll(((unsigned long long)p << 32) | q);
    r[2] = __clz((int)p);
    r[3] = __ffs((int)p);
    r[4] = (int)__brev(p);
    r[5] = (int)__funnelshift_l(p, q, i);
    r[6] = (int)__funnelshift_r(p, q, i);
    r[7] = __dp4a((int)p, (int)q, 3);
    r[8] = (int)__byte_perm(p, q, 0x5140 + i);
    r[9] = __mul24((int)p, (int)q);
    r[10] = (int)__umulhi(p, q);
    r[11] = (int)__sad((int)p, (int)q, 1u);
    r[12] = __float2int_rn(x[i]);
    r[13] = __float2int_rz(x[i]);
    r[14] = __float2int_ru(x[i]);
    r[15] = __float2int_rd(x[i]);
    float v = x[i];
    float s, c;
    sincosf(v, &s, &c);
    float* h = g + 12 * i;
    h[0] = __expf(v); h[1] = __logf(fabsf(v) + 1.0f); h[2] = __sinf(v); h[3] = __cosf(v);
    h[4] = __powf(fabsf(v), 1.5f); h[5] = rsqrtf(fabsf(v) + 1.0f); h[6] = __fdividef(v, 3.0f);
    h[7] = __saturatef(v); h[8] = __fmaf_rn(v, v, 1.0f); h[9] = exp10f(v * 0.1f) + fdividef(s, 2.0f);
    h[10] = c + __int_as_float(__float_as_int(v)) + __uint_as_float(__float_as_uint(v));
    h[11] = __fadd_rn(v, 1.0f) + __fmul_rn(v, 2.0f);
}
"""


def test_math_and_bit_builtins_match_their_definitions(cpu):
    rng = np.random.default_rng(1)
    n = 64
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    a[0] = 0
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    x[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]
    o = kb.asarray(np.zeros(16 * n, np.int32), device=cpu)
    g = kb.asarray(np.zeros(12 * n, np.float32), device=cpu)
    _k(cpu, BUILTINS).launch(
        1, n, (kb.asarray(a, device=cpu), kb.asarray(b, device=cpu), kb.asarray(x, device=cpu), o, g, np.int32(n))
    )
    r = o.numpy().reshape(n, 16).astype(np.int64) & 0xFFFFFFFF
    for i in range(n):
        p, q = int(a[i]), int(b[i])
        assert r[i, 0] == bin(p).count("1")
        assert r[i, 1] == bin(p).count("1") + bin(q).count("1")
        assert r[i, 2] == 32 - p.bit_length()
        assert r[i, 3] == ((p & -p).bit_length() if p else 0)
        assert r[i, 4] == int(f"{p:032b}"[::-1], 2)
        wide = (q << 32) | p
        assert r[i, 5] == ((wide << (i & 31)) >> 32) & 0xFFFFFFFF
        assert r[i, 6] == (wide >> (i & 31)) & 0xFFFFFFFF
        sb = lambda v, k: ((v >> (8 * k)) & 0xFF) - (256 if (v >> (8 * k)) & 0x80 else 0)
        assert r[i, 7] == (sum(sb(p, k) * sb(q, k) for k in range(4)) + 3) & 0xFFFFFFFF
        sel = 0x5140 + i
        want = 0
        for k in range(4):
            byte = (wide >> (8 * ((sel >> (4 * k)) & 7))) & 0xFF
            want |= byte << (8 * k)
        assert r[i, 8] == want
        s24 = lambda v: (v & 0xFFFFFF) - (1 << 24 if v & 0x800000 else 0)
        assert r[i, 9] == (s24(p) * s24(q)) & 0xFFFFFFFF
        assert r[i, 10] == (p * q) >> 32
        ip, iq = p - (1 << 32 if p >> 31 else 0), q - (1 << 32 if q >> 31 else 0)
        assert r[i, 11] == (abs(ip - iq) + 1) & 0xFFFFFFFF
    xs = x.astype(np.float64)
    to32 = lambda v: v.astype(np.int64) & 0xFFFFFFFF
    np.testing.assert_array_equal(r[:, 12], to32(np.rint(xs)))  # ties to even: 0.5 -> 0, 2.5 -> 2
    np.testing.assert_array_equal(r[:, 13], to32(np.trunc(xs)))
    np.testing.assert_array_equal(r[:, 14], to32(np.ceil(xs)))
    np.testing.assert_array_equal(r[:, 15], to32(np.floor(xs)))
    h = g.numpy().reshape(n, 12)
    ax = np.abs(x)
    expect = np.stack(
        [
            np.exp(x),
            np.log(ax + 1),
            np.sin(x),
            np.cos(x),
            ax**1.5,
            1 / np.sqrt(ax + 1),
            x / 3,
            np.clip(x, 0, 1),
            x * x + 1,
            10 ** (x * 0.1) + np.sin(x) / 2,
            np.cos(x) + 2 * x,
            (x + 1) + 2 * x,
        ],
        axis=1,
    ).astype(np.float32)
    np.testing.assert_allclose(h, expect, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("snippet", "what", "line"),
    [
        ("#include <cub/cub.cuh>\n", r"CUB \(<cub/\.\.\.>\)", 2),
        ("#include <cuda/barrier>\n", r"libcu\+\+ synchronisation \(<cuda/barrier>", 2),
        ("__device__ void f(float* s, const float* g) {\n  cub::WarpReduce<float> r; }\n", r"CUB \(cub::\)", 3),
        (
            "__device__ void f(float* s, const float* g, void* b) {\n"
            "  cuda::memcpy_async(s, g, 4, *(cuda::barrier<cuda::thread_scope_block>*)b); }\n",
            r"cuda::barrier, cuda::memcpy_async",
            3,
        ),
        ("#include <mma.h>\n__device__ void f() { nvcuda::wmma::fragment<int> a; }\n", r"tensor-core", 2),
    ],
)
def test_cub_and_libcudacxx_are_refused_by_name_and_line(cpu, snippet, what, line):
    src = "\n" + snippet + "__global__ void k(float* y) { y[0] = 1.0f; }\n"
    with pytest.raises(kb.CompileError, match=rf"cannot run this kernel: it uses .*{what}.* at kernel.cu:{line}"):
        _k(cpu, src)


def test_an_include_in_a_comment_is_not_refused(cpu):
    src = "// #include <cub/cub.cuh>\n/* #include <cuda/barrier> */\n__global__ void k(float* y) { y[0] = 1.0f; }\n"
    y = kb.asarray(np.zeros(1, np.float32), device=cpu)
    _k(cpu, src).launch(1, 1, (y,))
    assert y.numpy()[0] == 1.0


LLM_STYLE = r"""
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <nvtx3/nvToolsExt.h>
#include <cuda_profiler_api.h>
// As llm.c's kernels do: __nv_bfloat16 after including only cuda_runtime.h, an error-checking
// helper calling the runtime, and unqualified isfinite.
typedef __nv_bfloat16 floatX;
inline void check(cudaError_t e) { if (e != cudaSuccess) { printf("%s\n", cudaGetErrorString(e)); exit(1); } }
__global__ void k(const floatX* x, float* y, int n, cudaDataType_t t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = (float)x[i];
    if (!isfinite(v)) __trap();
    y[i] = v * (t == CUDA_R_16BF ? 2.0f : 0.0f);
}
"""


def test_host_headers_of_llm_style_files_compile_and_trap_is_a_launch_error(cpu):
    x = np.array([1.0, -2.5, 3.0, np.inf], np.float32)
    xb = (x.view(np.uint32) >> 16).astype(np.uint16)  # exact in bfloat16
    y = kb.asarray(np.zeros(4, np.float32), device=cpu)
    k = _k(cpu, LLM_STYLE)
    k.launch(1, 32, (kb.asarray(xb, device=cpu), y, np.int32(3), np.int32(14)))
    assert y.numpy()[:3].tolist() == [2.0, -5.0, 6.0]
    with pytest.raises(kb.LaunchError, match=r"__trap\(\)"):
        k.launch(1, 32, (kb.asarray(xb, device=cpu), y, np.int32(4), np.int32(14)))


def test_inline_next_to_device_is_dropped_and_nothing_else():
    from kernelbay_cpu.rewrites import rewrite_inline

    src = (
        "#define HD __host__ __device__\n"
        "#define INL __inline__\n"
        "__device__ inline float a();\n"
        "inline __device__ float b();\n"
        "HD inline float c();\n"
        "static __device__ INL float d();\n"
        "inline float host_only();\n"
        "inline namespace v1 {}\n"
        "static inline __global__ void k();\n"
    )
    out = rewrite_inline(src, [])
    assert out.splitlines() == [
        "#define HD __host__ __device__",
        "#define INL __inline__",
        "__device__        float a();",
        "       __device__ float b();",
        "HD        float c();",
        "static __device__     float d();",
        "inline float host_only();",
        "inline namespace v1 {}",
        "static        __global__ void k();",
    ]
    assert len(out) == len(src)


def test_qualifiers_in_source_headers_compile(cpu):
    head = "#pragma once\n#define DEV_INLINE __device__ __forceinline__\n__device__ inline float twice(float x) { return 2 * x; }\nDEV_INLINE float thrice(float x) { return 3 * x; }\n"
    src = '#include "util.cuh"\n__global__ inline void k(float* y) { y[threadIdx.x] = twice(1.0f) + thrice(1.0f); }\n'
    y = kb.asarray(np.zeros(4, np.float32), device=cpu)
    kb.compile(kb.Source(src, lang="cuda", name="k", headers={"util.cuh": head}), cpu).launch(1, 4, (y,))
    assert y.numpy().tolist() == [5.0] * 4


def test_module_globals_are_read_and_written_from_the_host() -> None:
    # cudaMemcpyToSymbol's job: __constant__ taps filled before a launch, a __device__ counter
    # read back after it, a 2-D initialised table; a namespace's or a function's are not globals.
    src = r"""
    __constant__ float taps[4];
    static __device__ int counter = 5;
    __device__ __constant__ double tab[2][3] = {{1, 2, 3}, {4, 5, 6}};
    namespace inner { __device__ int hidden; }
    __device__ float helper(int x);
    __global__ void k(float* y) {
        int i = threadIdx.x;
        y[i] = taps[i] + (float)tab[1][i % 3];
        if (i == 0) counter += 1;
    }
    """
    k = kb.compile(kb.Source(src, "cuda", name="k"), "cpu")
    k.set_global("taps", np.array([10, 20, 30, 40], np.float32))
    assert k.global_nbytes("taps") == 16 and k.global_nbytes("tab") == 48
    np.testing.assert_array_equal(k.get_global("tab", "float64", (2, 3)), [[1, 2, 3], [4, 5, 6]])
    y = kb.zeros(4, device="cpu")
    k.launch(1, 4, (y,))
    np.testing.assert_array_equal(y.numpy(), [14, 25, 36, 44])
    assert int(k.get_global("counter", "int32")[0]) == 6
    for missing in ("hidden", "helper"):
        with pytest.raises(kb.InvalidArgumentError, match="has no global"):
            k.get_global(missing, "int32")
    with pytest.raises(kb.InvalidArgumentError, match="overruns it"):
        k.set_global("taps", np.zeros(8, np.float32))
