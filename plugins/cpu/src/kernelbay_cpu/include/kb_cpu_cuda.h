// kernelbay CPU backend: the prelude that makes CUDA C++ kernel source compile for the host.
// Blocks run in parallel on the host's cores. A kernel without barriers, shared memory or warp
// operations runs a block's threads one after another (kb_cpu::run_threads); one with them runs
// each thread as a fiber (kb_cpu::run_fibers, kb_cpu_fiber.h). kernelbay_cpu.compiler picks the
// runner from the source, and refuses what neither can run (textures, asm, device launches).
#pragma once
// Device assert(): the shim assert.h beside this file redefines it, when this is set, to report
// and stop the block (kb_cpu::assert_fail) rather than abort the process.
#define KB_CPU_DEVICE_ASSERT 1
#include "kb_cpu_launch.h"
#include "kb_cpu_fiber.h"
#include "kb_cpu_sync.h"
#include "kb_cpu_yield.h"

#include <algorithm>
#include <cassert>
#include <ctime>
#include <climits>
#include <limits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <type_traits>

// __device__ is `inline`, so the unused device functions of a header cost no code generation;
// kernelbay_cpu.analysis drops the user's own `inline` next to it or to __global__ (`__device__ inline`, `inline
// __device__`, `HD inline` with `#define HD __host__ __device__`), so that every combination nvcc
// accepts compiles. __forceinline__ is `always_inline` without `inline`, as it comes with
// __device__. __noinline__ is no macro (libstdc++ spells __attribute__((__noinline__))): the
// analysis rewrites it in the user's files. __global__ is `inline` too, deduplicated alike.
#define __global__ inline
#define __device__ inline
#define __host__
#define __forceinline__ __attribute__((always_inline))
#define __cudart_builtin__
#define __constant__
// One instance per block: every fiber of a block runs on the OS thread that runs the block.
#define __shared__ __attribute__((aligned(16))) thread_local
#define __align__(n) __attribute__((aligned(n)))
#define __managed__
#define __launch_bounds__(...)
#define __grid_constant__
#ifndef __CUDA_ARCH__
#define KERNELBAY_CPU 1
#endif

using kb_cpu::dim3;
using kb_cpu::uint3;
// Unqualified on purpose: in a kernel body wrapped in KB_THREADS_BEGIN/END they name the locals
// declared there; elsewhere the thread_locals the runners set (kb_cpu_launch.h).
#define threadIdx (static_cast<const ::kb_cpu::uint3&>(kb_threadIdx))
#define blockIdx (static_cast<const ::kb_cpu::uint3&>(kb_blockIdx))
#define blockDim (static_cast<const ::kb_cpu::dim3&>(kb_blockDim))
#define gridDim (static_cast<const ::kb_cpu::dim3&>(kb_gridDim))

// The fast path. kernelbay_cpu.compiler wraps the body of each __global__ function of a kernel
// without barriers, shared memory or warp operations (and whose source reads threadIdx only in
// kernel bodies) in KB_THREADS_BEGIN ... KB_THREADS_END, on the lines of its braces. The kernel
// is then called once per block and runs the block's threads as a loop whose index the compiler
// sees: the geometry is loop-invariant locals, threadIdx the loop variables, and threads with
// no barrier between them are independent (CUDA gives them no order), which the loop pragma
// tells the vectoriser. `return` in the body leaves the lambda: that thread only.
#if defined(__clang__)
#define KB_SIMD _Pragma("clang loop vectorize(assume_safety)")
#else
#define KB_SIMD _Pragma("GCC ivdep")
#endif
// CUDA's `#pragma unroll` before a loop that stays whole on the loop path (fission_unroll.py).
#define KB_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define KB_UNROLL(n) KB_PRAGMA(unroll n)
#else
#define KB_UNROLL(n) KB_PRAGMA(GCC unroll n)
#endif
#define KB_THREADS_BEGIN                                                            \
    const ::kb_cpu::dim3 kb_blockDim = ::kb_blockDim, kb_gridDim = ::kb_gridDim;    \
    ::kb_cpu::uint3 kb_blockIdx = ::kb_blockIdx; /* steps over the call's span */   \
    auto kb_thread = [&](const ::kb_cpu::uint3 kb_threadIdx) __attribute__((always_inline)) {
#define KB_THREAD_LOOP(X_LOOP)                                \
    for (unsigned kb_z = 0; kb_z < kb_blockDim.z; ++kb_z)     \
        for (unsigned kb_y = 0; kb_y < kb_blockDim.y; ++kb_y) \
            X_LOOP
// Two copies of the x loop. The first runs for any usual grid (fewer than 2^21 - 1 blocks in x,
// 2^21 in y and z, so that blockIdx.x * blockDim.x + blockDim.x stays below 2^31): its bounds tell the compiler that blockIdx * blockDim + threadIdx cannot wrap, and
// it counts the global index blockIdx.x * blockDim.x + threadIdx.x itself, so a guard such as
// `if (i < n)` compares the loop variable and the compiler splits the loop there and vectorises
// the part before it without masked stores (slow on some CPUs). The second serves larger grids.
#define KB_X_FAST                                                                               \
    KB_SIMD for (int kb_g = kb_base; kb_g < kb_base + (int)kb_blockDim.x; ++kb_g)              \
        kb_thread(::kb_cpu::uint3{(unsigned)(kb_g - kb_base), kb_y, kb_z});
// The second also runs a faulting block again (::kb_diag), its threads one at a time, each
// named in ::kb_threadIdx before its code runs (kb_cpu_launch.cpp): the same loop with a step of
// one thread, not a third copy of the kernel's body to compile.
#define KB_X_PLAIN                                                                                \
    for (unsigned kb_x0 = 0; kb_x0 < kb_blockDim.x; kb_x0 += kb_step) {                           \
        if (kb_one) ::kb_cpu::diag_thread(kb_x0, kb_y, kb_z);                                    \
        KB_SIMD for (unsigned kb_x = kb_x0; kb_x < kb_x0 + kb_step; ++kb_x)                       \
            kb_thread(::kb_cpu::uint3{kb_x, kb_y, kb_z});                                         \
    }
// A call runs the blocks the runner offers (::kb_span: consecutive in x, kb_cpu_launch.cpp), each
// named in ::kb_blockIdx before it runs; one when a faulting block runs again.
#define KB_THREADS_END                                                                             \
    };                                                                                             \
    const bool kb_one = __builtin_expect(::kb_diag, 0); /* a faulting block again, to name its thread */ \
    const unsigned kb_last = kb_blockIdx.x + (kb_one ? 1u : ::kb_cpu::take_span());               \
    unsigned* const kb_named = ::kb_cpu::block_slot();                                             \
    for (;;) {                                                                                     \
        if (!kb_one && kb_blockIdx.x < 2097151u && kb_blockIdx.y < 2097152u && kb_blockIdx.z < 2097152u && \
            kb_blockDim.x <= 1024u && kb_blockDim.y <= 1024u && kb_blockDim.z <= 64u) {            \
            const int kb_base = (int)(kb_blockIdx.x * kb_blockDim.x);                              \
            KB_THREAD_LOOP(KB_X_FAST)                                                              \
        } else {                                                                                   \
            const unsigned kb_step = kb_one ? 1u : kb_blockDim.x;                                  \
            KB_THREAD_LOOP(KB_X_PLAIN)                                                             \
        }                                                                                          \
        if (++kb_blockIdx.x == kb_last) break;                                                     \
        ::kb_cpu::at_block(kb_named, kb_blockIdx.x);                                               \
    }

// --- vector types -------------------------------------------------------------------------
#define KB_VEC(KbT, N2, N3, N4)                                                   \
    struct N2 { KbT x, y; };                                                      \
    struct N3 { KbT x, y, z; };                                                   \
    struct alignas(sizeof(KbT) * 4 <= 16 ? sizeof(KbT) * 4 : 16) N4 { KbT x, y, z, w; }; \
    inline N2 make_##N2(KbT x, KbT y) { return N2{x, y}; }                          \
    inline N3 make_##N3(KbT x, KbT y, KbT z) { return N3{x, y, z}; }                  \
    inline N4 make_##N4(KbT x, KbT y, KbT z, KbT w) { return N4{x, y, z, w}; }
KB_VEC(float, float2, float3, float4)
KB_VEC(double, double2, double3, double4)
KB_VEC(int, int2, int3, int4)
KB_VEC(unsigned int, uint2, uint3_, uint4)
KB_VEC(signed char, char2, char3, char4)
KB_VEC(unsigned char, uchar2, uchar3, uchar4)
KB_VEC(short, short2, short3, short4)
KB_VEC(unsigned short, ushort2, ushort3, ushort4)
KB_VEC(long long, longlong2, longlong3, longlong4)
KB_VEC(unsigned long long, ulonglong2, ulonglong3, ulonglong4)
#undef KB_VEC
struct char1 { signed char x; };
struct uchar1 { unsigned char x; };
struct int1 { int x; };
struct uint1 { unsigned int x; };
struct float1 { float x; };
inline char1 make_char1(signed char x) { return char1{x}; }
inline uchar1 make_uchar1(unsigned char x) { return uchar1{x}; }
inline int1 make_int1(int x) { return int1{x}; }
inline uint1 make_uint1(unsigned int x) { return uint1{x}; }
inline float1 make_float1(float x) { return float1{x}; }
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }

// --- math ---------------------------------------------------------------------------------
// Vector math: where glibc's libmvec has them (kernelbay_cpu/flags.py defines KB_CPU_LIBMVEC and
// links it), these are declared SIMD-callable, so the loop over a block's threads stays a vector
// loop (8 lanes of tanhf per call with AVX2 instead of one): gelu about 10x faster. Only the
// functions whose libmvec error is within CUDA's documented bound (CUDA Math API, single
// precision): tanhf 2 ulp (libmvec about 1), sinf/cosf 2 (1.9), erff 2 (1.9 with AVX2), measured by
// tests/cpu/test_vector_math.py. expf, logf, expm1f and log1pf stay scalar (libmvec's exceed
// CUDA's bound for them: logf 3.8 ulp near 1), and atanf (2.0: no margin).
#if defined(KB_CPU_LIBMVEC)
extern "C" {
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
#pragma omp declare simd notinbranch
float sinf(float) noexcept;
#pragma omp declare simd notinbranch
float cosf(float) noexcept;
// erff only where GCC calls the AVX2 (or narrower) variants: libmvec's AVX-512 erff (16 lanes,
// chosen when the target has AVX-512F) reaches 4.0 ulp, over CUDA's 2.
#if !defined(__AVX512F__)
#pragma omp declare simd notinbranch
#endif
float erff(float) noexcept;
}
#endif
// fmaxf, fminf and expf inline, so that a loop calling them stays a vector loop: libm's fmaxf is a
// call g++ does not inline (it keeps NaN rules: the number of a NaN and a number), and libmvec's
// expf exceeds CUDA's bound (2.64 ulp; CUDA: 2). fmaxf/fminf give libm's bits: x > y ? x : y
// (maxss), the other argument where one is a NaN. expf: 2^k * 2^r with k = round(x / ln 2), in
// double precision, 2^r by its Taylor polynomial of degree 7 (relative error 5e-9, |r| <= 1/2):
// at most 0.58 ulp over every float (checked exhaustively against exp in double; glibc's scalar
// expf: 0.5), inf for x > 88.72, 0 below -103.97, NaN for NaN. tests/cpu/test_vector_math.py
// checks the bound. Calls are spelled as written (macros below): `std::expf(x)` works too.
// Two selects, not `(y != y || x > y) ? x : y`: the `||` is a branch that g++ fails to
// if-convert where the argument is itself a select (a warp's shfl_down tree, llm.c's
// warpReduceMax), and that loop over the lanes stayed scalar. Same bits.
inline float kb_cuda_fmaxf(float x, float y) { const float m = x > y ? x : y; return y != y ? x : m; }
inline float kb_cuda_fminf(float x, float y) { const float m = x < y ? x : y; return y != y ? x : m; }
inline double kb_cuda_fmax(double x, double y) { const double m = x > y ? x : y; return y != y ? x : m; }
inline double kb_cuda_fmin(double x, double y) { const double m = x < y ? x : y; return y != y ? x : m; }
inline float kb_cuda_expf(float xf) {
    const double x = xf == xf ? (xf > 89.0f ? 89.0 : xf < -104.0f ? -104.0 : (double)xf) : 0.0;
    const double z = x * 1.4426950408889634;  // x / ln 2
    const double t = z + 0x1.8p52;             // k = round(z) in t's low bits
    long long bits;
    std::memcpy(&bits, &t, 8);
    const double r = (z - (t - 0x1.8p52)) * 0.6931471805599453;
    double p = 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const long long scale_bits = (bits - 0x4338000000000000LL + 1023) << 52;  // 2^k
    double scale;
    std::memcpy(&scale, &scale_bits, 8);
    const float y = (float)(p * scale);
    return xf == xf ? y : xf;
}
namespace std {
using ::kb_cuda_expf;
using ::kb_cuda_fmaxf;
using ::kb_cuda_fminf;
}  // namespace std
#define fmaxf(...) kb_cuda_fmaxf(__VA_ARGS__)
#define fminf(...) kb_cuda_fminf(__VA_ARGS__)
#define expf(...) kb_cuda_expf(__VA_ARGS__)
// <cmath> brings sqrtf, expf, fabsf, fminf, fmaxf, ... into the global namespace; CUDA also
// declares the classification functions there (an unqualified isfinite(x) in a kernel).
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
// Mixed signedness: CUDA's overloads compare as the unsigned type (min(-1, 1u) is 1u).
inline unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
inline unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
inline unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
inline unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }
inline unsigned long long min(long long a, unsigned long long b) { return min((unsigned long long)a, b); }
inline unsigned long long min(unsigned long long a, long long b) { return min(a, (unsigned long long)b); }
inline unsigned long long max(long long a, unsigned long long b) { return max((unsigned long long)a, b); }
inline unsigned long long max(unsigned long long a, long long b) { return max(a, (unsigned long long)b); }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return kb_cuda_fminf(a, b); }
inline float max(float a, float b) { return kb_cuda_fmaxf(a, b); }
inline double min(double a, double b) { return kb_cuda_fmin(a, b); }
inline double max(double a, double b) { return kb_cuda_fmax(a, b); }
inline double min(float a, double b) { return kb_cuda_fmin((double)a, b); }
inline double min(double a, float b) { return kb_cuda_fmin(a, (double)b); }
inline double max(float a, double b) { return kb_cuda_fmax((double)a, b); }
inline double max(double a, float b) { return kb_cuda_fmax(a, (double)b); }
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return kb_cuda_expf(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline unsigned int __float_as_uint(float f) { unsigned int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __drcp_rn(double a) { return 1.0 / a; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float fdividef(float x, float y) { return x / y; }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline double exp10(double x) { return std::pow(10.0, x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void sincos(double x, double* s, double* c) { *s = std::sin(x); *c = std::cos(x); }
inline float sinpif(float x) { return std::sin(3.14159265358979323846f * x); }
inline float cospif(float x) { return std::cos(3.14159265358979323846f * x); }
inline double sinpi(double x) { return std::sin(3.14159265358979323846 * x); }
inline double cospi(double x) { return std::cos(3.14159265358979323846 * x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752); }
inline float saturatef(float x) { return __saturatef(x); }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline int __double2hiint(double d) { return (int)(__double_as_longlong(d) >> 32); }
inline int __double2loint(double d) { return (int)__double_as_longlong(d); }
inline double __hiloint2double(int hi, int lo) {
    return __longlong_as_double((long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo));
}
// Float to integer in each rounding mode: round to nearest even, toward zero, up, down; out of
// range and NaN saturate as the GPU's cvt does (NaN gives 0).
namespace kb_cpu {
template <class KbI, class KbF>
inline KbI cvt_int(KbF x, int mode) {
    if (x != x) return 0;
    KbF r = mode == 0 ? std::nearbyint(x) : mode == 1 ? std::trunc(x) : mode == 2 ? std::ceil(x) : std::floor(x);
    if (r <= (KbF)std::numeric_limits<KbI>::min()) return std::numeric_limits<KbI>::min();
    if (r >= (KbF)std::numeric_limits<KbI>::max()) return std::numeric_limits<KbI>::max();
    return (KbI)r;
}
}  // namespace kb_cpu
#define KB_CVT(KbF, suffix, KbI, mode) \
    inline KbI __##KbF##2##suffix(KbF x) { return kb_cpu::cvt_int<KbI>(x, mode); }
#define KB_CVTS(KbF)                                                                                \
    KB_CVT(KbF, int_rn, int, 0) KB_CVT(KbF, int_rz, int, 1) KB_CVT(KbF, int_ru, int, 2) KB_CVT(KbF, int_rd, int, 3) \
    KB_CVT(KbF, uint_rn, unsigned, 0) KB_CVT(KbF, uint_rz, unsigned, 1) KB_CVT(KbF, uint_ru, unsigned, 2)       \
    KB_CVT(KbF, uint_rd, unsigned, 3) KB_CVT(KbF, ll_rn, long long, 0) KB_CVT(KbF, ll_rz, long long, 1)         \
    KB_CVT(KbF, ll_ru, long long, 2) KB_CVT(KbF, ll_rd, long long, 3)                                        \
    KB_CVT(KbF, ull_rn, unsigned long long, 0) KB_CVT(KbF, ull_rz, unsigned long long, 1)                    \
    KB_CVT(KbF, ull_ru, unsigned long long, 2) KB_CVT(KbF, ull_rd, unsigned long long, 3)
KB_CVTS(float)
KB_CVTS(double)
#undef KB_CVTS
#undef KB_CVT
inline float __int2float_rn(int i) { return (float)i; }
inline float __uint2float_rn(unsigned i) { return (float)i; }
inline float __ll2float_rn(long long i) { return (float)i; }
inline float __ull2float_rn(unsigned long long i) { return (float)i; }
inline double __int2double_rn(int i) { return (double)i; }
inline double __uint2double_rn(unsigned i) { return (double)i; }
inline double __ll2double_rn(long long i) { return (double)i; }
inline double __ull2double_rn(unsigned long long i) { return (double)i; }
inline float __double2float_rn(double d) { return (float)d; }
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned int __funnelshift_l(unsigned lo, unsigned hi, unsigned sh) {
    const unsigned long long v = ((unsigned long long)hi << 32 | lo) << (sh & 31);
    return (unsigned)(v >> 32);
}
inline unsigned int __funnelshift_lc(unsigned lo, unsigned hi, unsigned sh) {
    return sh >= 32 ? hi : __funnelshift_l(lo, hi, sh);
}
inline unsigned int __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (sh & 31));
}
inline unsigned int __funnelshift_rc(unsigned lo, unsigned hi, unsigned sh) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (sh > 32 ? 32 : sh));
}
inline unsigned int __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (((s >> (4 * i)) & 7) * 8)) & 0xff) << (8 * i);
    return r;
}
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
inline unsigned int __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 0xff) * ((b >> (8 * i)) & 0xff);
    return c;
}
inline int __dp2a_lo(int a, int b, int c) {
    for (int i = 0; i < 2; ++i) c += (int)(short)(a >> (16 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
inline int __dp2a_hi(int a, int b, int c) {
    for (int i = 0; i < 2; ++i) c += (int)(short)(a >> (16 * i)) * (int)(signed char)(b >> (8 * (i + 2)));
    return c;
}
inline int __mul24(int a, int b) { return (int)((long long)((a << 8) >> 8) * ((b << 8) >> 8)); }
inline unsigned int __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned int __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned int __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }
inline unsigned int __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
inline unsigned int __uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
inline unsigned int __urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }
inline void __nanosleep(unsigned) {}
// A GPU ends the kernel with an error ("unspecified launch failure"): here a LaunchError.
[[noreturn]] inline void __trap() { kb_cpu::stop("the kernel called __trap()"); }
[[noreturn]] inline void __brkpt() { kb_cpu::stop("the kernel called __brkpt()"); }
// A cycle counter stands in for the SM clock: nanoseconds of the monotonic clock.
inline long long clock64() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

// Cache-hint loads and stores (ld.global.nc/.cs/.cg/.ca/.lu/.cv, st.global.cs/.cg/.wb/.wt): the
// CPU has one memory, so each is a plain load or store, of any type (scalars, float4, ...).
template <class KbT> inline KbT __ldg(const KbT* p) { return *p; }
template <class KbT> inline KbT __ldcs(const KbT* p) { return *p; }
template <class KbT> inline KbT __ldcg(const KbT* p) { return *p; }
template <class KbT> inline KbT __ldca(const KbT* p) { return *p; }
template <class KbT> inline KbT __ldlu(const KbT* p) { return *p; }
template <class KbT> inline KbT __ldcv(const KbT* p) { return *p; }
template <class KbT> inline void __stcs(KbT* p, KbT v) { *p = v; }
template <class KbT> inline void __stcg(KbT* p, KbT v) { *p = v; }
template <class KbT> inline void __stwb(KbT* p, KbT v) { *p = v; }
template <class KbT> inline void __stwt(KbT* p, KbT v) { *p = v; }

// --- atomics (the blocks of a grid run on several cores: these are real atomics) -----------
namespace kb_cpu {
template <class KbT, class KbOp>
inline KbT atomic_update(KbT* addr, KbOp op) {
    KbT old, desired;
    __atomic_load(addr, &old, __ATOMIC_RELAXED);
    do {
        desired = op(old);
    } while (!__atomic_compare_exchange(addr, &old, &desired, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
}
template <class KbT>
inline KbT atomic_update_fp(KbT* addr, KbT val, int what) {
    // floating point has no fetch_add builtin: compare-and-swap on the value's bits.
    KbT old, desired;
    __atomic_load(addr, &old, __ATOMIC_RELAXED);
    do {
        desired = what == 0 ? old + val : what == 1 ? old - val : what == 2 ? std::fmin(old, val) : what == 3 ? std::fmax(old, val) : val;
    } while (!__atomic_compare_exchange(addr, &old, &desired, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
}
}  // namespace kb_cpu

// The value operands are not deduced: as with CUDA's overloads, atomicAdd(unsigned*, int) or
// atomicMax(unsigned long long*, 0) convert the value to the pointee type.
namespace kb_cpu {
template <class KbT>
struct same {
    using type = KbT;
};
template <class KbT>
using same_t = typename same<KbT>::type;
}  // namespace kb_cpu

template <class KbT>
inline KbT atomicAdd(KbT* a, kb_cpu::same_t<KbT> v) {
    if constexpr (std::is_integral<KbT>::value) return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
    else return kb_cpu::atomic_update(a, [v](KbT o) { return KbT(o + v); });
}
template <class KbT>
inline KbT atomicSub(KbT* a, kb_cpu::same_t<KbT> v) {
    if constexpr (std::is_integral<KbT>::value) return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);
    else return kb_cpu::atomic_update(a, [v](KbT o) { return KbT(o - v); });
}
template <class KbT>
inline KbT atomicMin(KbT* a, kb_cpu::same_t<KbT> v) {
    if constexpr (std::is_floating_point<KbT>::value) return kb_cpu::atomic_update_fp(a, v, 2);
    else return kb_cpu::atomic_update(a, [v](KbT o) { return v < o ? v : o; });
}
template <class KbT>
inline KbT atomicMax(KbT* a, kb_cpu::same_t<KbT> v) {
    if constexpr (std::is_floating_point<KbT>::value) return kb_cpu::atomic_update_fp(a, v, 3);
    else return kb_cpu::atomic_update(a, [v](KbT o) { return v > o ? v : o; });
}
template <class KbT>
inline KbT atomicExch(KbT* a, kb_cpu::same_t<KbT> v) {
    KbT old;
    __atomic_exchange(a, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
template <class KbT>
inline KbT atomicCAS(KbT* a, kb_cpu::same_t<KbT> compare, kb_cpu::same_t<KbT> v) {
    __atomic_compare_exchange(a, &compare, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;  // holds the old value either way
}
template <class KbT>
inline KbT atomicAnd(KbT* a, kb_cpu::same_t<KbT> v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }
template <class KbT>
inline KbT atomicOr(KbT* a, kb_cpu::same_t<KbT> v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }
template <class KbT>
inline KbT atomicXor(KbT* a, kb_cpu::same_t<KbT> v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }
inline unsigned int atomicInc(unsigned int* a, unsigned int v) {
    return kb_cpu::atomic_update(a, [v](unsigned int o) { return o >= v ? 0u : o + 1; });
}
inline unsigned int atomicDec(unsigned int* a, unsigned int v) {
    return kb_cpu::atomic_update(a, [v](unsigned int o) { return (o == 0 || o > v) ? v : o - 1; });
}
// Scopes: the CPU's atomics are coherent for every thread of the process.
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicSub_block atomicSub
#define atomicSub_system atomicSub
#define atomicMin_block atomicMin
#define atomicMin_system atomicMin
#define atomicMax_block atomicMax
#define atomicMax_system atomicMax
#define atomicExch_block atomicExch
#define atomicExch_system atomicExch
#define atomicCAS_block atomicCAS
#define atomicCAS_system atomicCAS
#define atomicAnd_block atomicAnd
#define atomicAnd_system atomicAnd
#define atomicOr_block atomicOr
#define atomicOr_system atomicOr
#define atomicXor_block atomicXor
#define atomicXor_system atomicXor
#define atomicInc_block atomicInc
#define atomicInc_system atomicInc
#define atomicDec_block atomicDec
#define atomicDec_system atomicDec

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// --- block barriers (fiber runner only) ------------------------------------------------------
inline void __syncthreads(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    kb_cpu::barrier(kb_cpu::BAR_SYNC, 0, line, file);
}
inline int __syncthreads_count(int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return kb_cpu::barrier(kb_cpu::BAR_COUNT, p, line, file);
}
inline int __syncthreads_and(int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return kb_cpu::barrier(kb_cpu::BAR_AND, p, line, file);
}
inline int __syncthreads_or(int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return kb_cpu::barrier(kb_cpu::BAR_OR, p, line, file);
}

// --- warp intrinsics: a rendezvous of the lanes the mask names ---------------------------------
constexpr int warpSize = 32;

namespace kb_cpu {
template <class KbT>
inline std::uint64_t to_bits(KbT v) {
    static_assert(sizeof(KbT) <= 8, "warp shuffles move values of at most 8 bytes");
    std::uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(KbT));
    return b;
}
template <class KbT>
inline KbT from_bits(std::uint64_t b) {
    KbT v;
    std::memcpy(&v, &b, sizeof(KbT));
    return v;
}
template <class KbT>
inline KbT shfl(int op, unsigned mask, KbT v, int arg, int width, int line, const char* file) {
    return from_bits<KbT>(warp_op(op, mask, to_bits(v), arg, width, line, file));
}
// Cooperative groups' tile shuffles take any trivially copyable type (CUDA moves a larger one in
// pieces: cuda-samples' shfl_integral_image shuffles uint4); the raw __shfl_*_sync do not.
template <class KbT>
inline KbT shfl_any(int op, unsigned mask, KbT v, int arg, int width, int line, const char* file) {
    if constexpr (sizeof(KbT) <= 8) {
        return shfl(op, mask, v, arg, width, line, file);
    } else {
        static_assert(std::is_trivially_copyable<KbT>::value, "cooperative groups shuffle trivially copyable values");
        unsigned char b[sizeof(KbT)];
        std::memcpy(b, &v, sizeof(KbT));
        for (std::size_t o = 0; o < sizeof(KbT); o += 8) {
            const std::size_t n = sizeof(KbT) - o < 8 ? sizeof(KbT) - o : 8;
            std::uint64_t c = 0;
            std::memcpy(&c, b + o, n);
            c = warp_op(op, mask, c, arg, width, line, file);
            std::memcpy(b + o, &c, n);
        }
        KbT r;
        std::memcpy(&r, b, sizeof(KbT));
        return r;
    }
}
}  // namespace kb_cpu

inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    kb_cpu::warp_op(kb_cpu::W_SYNC, mask, 0, 0, 32, line, file);
}
template <class KbT>
inline KbT __shfl_sync(unsigned mask, KbT v, int src, int width = warpSize, int line = __builtin_LINE(),
                     const char* file = __builtin_FILE()) {
    return kb_cpu::shfl(kb_cpu::W_SHFL, mask, v, src, width, line, file);
}
template <class KbT>
inline KbT __shfl_up_sync(unsigned mask, KbT v, unsigned d, int width = warpSize, int line = __builtin_LINE(),
                        const char* file = __builtin_FILE()) {
    return kb_cpu::shfl(kb_cpu::W_UP, mask, v, (int)d, width, line, file);
}
template <class KbT>
inline KbT __shfl_down_sync(unsigned mask, KbT v, unsigned d, int width = warpSize, int line = __builtin_LINE(),
                          const char* file = __builtin_FILE()) {
    return kb_cpu::shfl(kb_cpu::W_DOWN, mask, v, (int)d, width, line, file);
}
template <class KbT>
inline KbT __shfl_xor_sync(unsigned mask, KbT v, int lane_mask, int width = warpSize, int line = __builtin_LINE(),
                         const char* file = __builtin_FILE()) {
    return kb_cpu::shfl(kb_cpu::W_XOR, mask, v, lane_mask, width, line, file);
}
inline unsigned __ballot_sync(unsigned mask, int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return (unsigned)kb_cpu::warp_op(kb_cpu::W_BALLOT, mask, p != 0, 0, 32, line, file);
}
inline int __any_sync(unsigned mask, int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return __ballot_sync(mask, p, line, file) != 0;
}
inline int __all_sync(unsigned mask, int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return __ballot_sync(mask, !p, line, file) == 0;  // lanes past a partial warp take no part
}
inline int __uni_sync(unsigned mask, int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return __ballot_sync(mask, p, line, file) == 0 || __ballot_sync(mask, !p, line, file) == 0;
}
// The lanes of the calling warp executing this call together with it (see the plugin README).
#if defined(__has_builtin)
#if __has_builtin(__builtin_COLUMN)
#define KB_COLUMN __builtin_COLUMN()
#endif
#endif
#ifndef KB_COLUMN
#define KB_COLUMN 0  // g++ has no __builtin_COLUMN: two calls on one line share a site
#endif
inline unsigned __activemask(int line = __builtin_LINE(), const char* file = __builtin_FILE(), int column = KB_COLUMN) {
    return (unsigned)kb_cpu::warp_op(kb_cpu::W_ACTIVE, 0, 0, column, 32, line, file);
}
template <class KbT>
inline unsigned __match_any_sync(unsigned mask, KbT v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return (unsigned)kb_cpu::warp_op(kb_cpu::W_MATCH_ANY, mask, kb_cpu::to_bits(v), 0, 32, line, file);
}
template <class KbT>
inline unsigned __match_all_sync(unsigned mask, KbT v, int* pred, int line = __builtin_LINE(),
                                 const char* file = __builtin_FILE()) {
    const unsigned r = (unsigned)kb_cpu::warp_op(kb_cpu::W_MATCH_ALL, mask, kb_cpu::to_bits(v), 0, 32, line, file);
    *pred = r != 0;
    return r;
}
#define KB_REDUCE(name, KbT, op)                                                                          \
    inline KbT name(unsigned mask, KbT v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) { \
        return (KbT)kb_cpu::warp_op(op, mask, (std::uint32_t)v, 0, 32, line, file);                       \
    }
KB_REDUCE(__reduce_add_sync, unsigned, kb_cpu::W_ADD)
KB_REDUCE(__reduce_add_sync, int, kb_cpu::W_ADD)
KB_REDUCE(__reduce_min_sync, unsigned, kb_cpu::W_MIN_U)
KB_REDUCE(__reduce_min_sync, int, kb_cpu::W_MIN_S)
KB_REDUCE(__reduce_max_sync, unsigned, kb_cpu::W_MAX_U)
KB_REDUCE(__reduce_max_sync, int, kb_cpu::W_MAX_S)
KB_REDUCE(__reduce_and_sync, unsigned, kb_cpu::W_AND)
KB_REDUCE(__reduce_or_sync, unsigned, kb_cpu::W_OR)
KB_REDUCE(__reduce_xor_sync, unsigned, kb_cpu::W_XOR_R)
#undef KB_REDUCE

// --- the CUDA runtime's plain types ------------------------------------------------------------
// nvcc includes cuda_runtime.h in every .cu file, so device files use its plain types (cudaError_t
// in an error-checking helper beside the kernels) without including it; the stand-in
// cuda_runtime.h beside this file adds the half types. Of the host API, only the error queries
// that such helpers call are here (kernelbay never runs a kernel file's host code).
enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
typedef enum cudaError cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "cuda error"; }
inline const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaError"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }

// Barrier loop fission's loops and lane arrays: in the precompiled prelude, not parsed per kernel.
#include "kb_cpu_fission.h"
