// kernelbay CPU backend: the prelude that makes CUDA C++ kernel source compile for the host.
// Blocks run in parallel on the host's cores. A kernel without barriers, shared memory or warp
// operations runs a block's threads one after another (kb_cpu::run_threads); one with them runs
// each thread as a fiber (kb_cpu::run_fibers, kb_cpu_fiber.h). kernelbay_cpu.compiler picks the
// runner from the source, and refuses what neither can run (textures, asm, device launches).
#pragma once
#include "kb_cpu_launch.h"
#include "kb_cpu_fiber.h"
#include "kb_cpu_sync.h"
#include "kb_cpu_yield.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define __global__ inline
#define __device__ inline
#define __host__
#define __forceinline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
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
#define KB_THREADS_BEGIN                                                            \
    const ::kb_cpu::dim3 kb_blockDim = ::kb_blockDim, kb_gridDim = ::kb_gridDim;    \
    const ::kb_cpu::uint3 kb_blockIdx = ::kb_blockIdx;                              \
    auto kb_thread = [&](const ::kb_cpu::uint3 kb_threadIdx) __attribute__((always_inline)) {
#define KB_THREAD_LOOP(X_LOOP)                                \
    for (unsigned kb_z = 0; kb_z < kb_blockDim.z; ++kb_z)     \
        for (unsigned kb_y = 0; kb_y < kb_blockDim.y; ++kb_y) \
            X_LOOP
// Two copies of the x loop. The first runs for any usual grid (fewer than 2^21 blocks per
// dimension): its bounds tell the compiler that blockIdx * blockDim + threadIdx cannot wrap, and
// it counts the global index blockIdx.x * blockDim.x + threadIdx.x itself, so a guard such as
// `if (i < n)` compares the loop variable and the compiler splits the loop there and vectorises
// the part before it without masked stores (slow on some CPUs). The second serves larger grids.
#define KB_X_FAST                                                                               \
    KB_SIMD for (int kb_g = kb_base; kb_g < kb_base + (int)kb_blockDim.x; ++kb_g)              \
        kb_thread(::kb_cpu::uint3{(unsigned)(kb_g - kb_base), kb_y, kb_z});
#define KB_X_PLAIN \
    KB_SIMD for (unsigned kb_x = 0; kb_x < kb_blockDim.x; ++kb_x) kb_thread(::kb_cpu::uint3{kb_x, kb_y, kb_z});
#define KB_THREADS_END                                                                      \
    };                                                                                      \
    if (kb_blockIdx.x < 2097152u && kb_blockIdx.y < 2097152u && kb_blockIdx.z < 2097152u && \
        kb_blockDim.x <= 1024u && kb_blockDim.y <= 1024u && kb_blockDim.z <= 64u) {         \
        const int kb_base = (int)(kb_blockIdx.x * kb_blockDim.x);                           \
        KB_THREAD_LOOP(KB_X_FAST)                                                           \
    } else {                                                                                \
        KB_THREAD_LOOP(KB_X_PLAIN)                                                          \
    }

// --- vector types -------------------------------------------------------------------------
#define KB_VEC(T, N2, N3, N4)                                                   \
    struct N2 { T x, y; };                                                      \
    struct N3 { T x, y, z; };                                                   \
    struct alignas(sizeof(T) * 4 <= 16 ? sizeof(T) * 4 : 16) N4 { T x, y, z, w; }; \
    inline N2 make_##N2(T x, T y) { return N2{x, y}; }                          \
    inline N3 make_##N3(T x, T y, T z) { return N3{x, y, z}; }                  \
    inline N4 make_##N4(T x, T y, T z, T w) { return N4{x, y, z, w}; }
KB_VEC(float, float2, float3, float4)
KB_VEC(double, double2, double3, double4)
KB_VEC(int, int2, int3, int4)
KB_VEC(unsigned int, uint2, uint3_, uint4)
#undef KB_VEC
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }

// --- math ---------------------------------------------------------------------------------
// <cmath> brings sqrtf, expf, fabsf, fminf, fmaxf, ... into the global namespace.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
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
template <class T>
inline T __ldg(const T* p) { return *p; }

// --- atomics (the blocks of a grid run on several cores: these are real atomics) -----------
namespace kb_cpu {
template <class T, class Op>
inline T atomic_update(T* addr, Op op) {
    T old = __atomic_load_n(addr, __ATOMIC_RELAXED);
    T desired;
    do {
        desired = op(old);
    } while (!__atomic_compare_exchange(addr, &old, &desired, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
}
template <class T>
inline T atomic_update_fp(T* addr, T val, int what) {
    // floating point has no fetch_add builtin: compare-and-swap on the value's bits.
    T old, desired;
    __atomic_load(addr, &old, __ATOMIC_RELAXED);
    do {
        desired = what == 0 ? old + val : what == 1 ? old - val : what == 2 ? std::fmin(old, val) : what == 3 ? std::fmax(old, val) : val;
    } while (!__atomic_compare_exchange(addr, &old, &desired, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
}
}  // namespace kb_cpu

template <class T>
inline T atomicAdd(T* a, T v) {
    if constexpr (std::is_floating_point<T>::value) return kb_cpu::atomic_update_fp(a, v, 0);
    else return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
template <class T>
inline T atomicSub(T* a, T v) {
    if constexpr (std::is_floating_point<T>::value) return kb_cpu::atomic_update_fp(a, v, 1);
    else return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);
}
template <class T>
inline T atomicMin(T* a, T v) {
    if constexpr (std::is_floating_point<T>::value) return kb_cpu::atomic_update_fp(a, v, 2);
    else return kb_cpu::atomic_update(a, [v](T o) { return v < o ? v : o; });
}
template <class T>
inline T atomicMax(T* a, T v) {
    if constexpr (std::is_floating_point<T>::value) return kb_cpu::atomic_update_fp(a, v, 3);
    else return kb_cpu::atomic_update(a, [v](T o) { return v > o ? v : o; });
}
template <class T>
inline T atomicExch(T* a, T v) {
    T old;
    __atomic_exchange(a, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
template <class T>
inline T atomicCAS(T* a, T compare, T v) {
    __atomic_compare_exchange(a, &compare, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;  // holds the old value either way
}
template <class T>
inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }
template <class T>
inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }
template <class T>
inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }
inline unsigned int atomicInc(unsigned int* a, unsigned int v) {
    return kb_cpu::atomic_update(a, [v](unsigned int o) { return o >= v ? 0u : o + 1; });
}
inline unsigned int atomicDec(unsigned int* a, unsigned int v) {
    return kb_cpu::atomic_update(a, [v](unsigned int o) { return (o == 0 || o > v) ? v : o - 1; });
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#define atomicExch_block atomicExch
#define atomicCAS_block atomicCAS

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
template <class T>
inline std::uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
    std::uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T from_bits(std::uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
template <class T>
inline T shfl(int op, unsigned mask, T v, int arg, int width, int line, const char* file) {
    return from_bits<T>(warp_op(op, mask, to_bits(v), arg, width, line, file));
}
}  // namespace kb_cpu

inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    kb_cpu::warp_op(kb_cpu::W_SYNC, mask, 0, 0, 32, line, file);
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = warpSize, int line = __builtin_LINE(),
                     const char* file = __builtin_FILE()) {
    return kb_cpu::shfl(kb_cpu::W_SHFL, mask, v, src, width, line, file);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = warpSize, int line = __builtin_LINE(),
                        const char* file = __builtin_FILE()) {
    return kb_cpu::shfl(kb_cpu::W_UP, mask, v, (int)d, width, line, file);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = warpSize, int line = __builtin_LINE(),
                          const char* file = __builtin_FILE()) {
    return kb_cpu::shfl(kb_cpu::W_DOWN, mask, v, (int)d, width, line, file);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize, int line = __builtin_LINE(),
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
    return __ballot_sync(mask, p, line, file) == mask;
}
inline int __uni_sync(unsigned mask, int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    const unsigned b = __ballot_sync(mask, p, line, file);
    return b == 0 || b == mask;
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
template <class T>
inline unsigned __match_any_sync(unsigned mask, T v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return (unsigned)kb_cpu::warp_op(kb_cpu::W_MATCH_ANY, mask, kb_cpu::to_bits(v), 0, 32, line, file);
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T v, int* pred, int line = __builtin_LINE(),
                                 const char* file = __builtin_FILE()) {
    const unsigned r = (unsigned)kb_cpu::warp_op(kb_cpu::W_MATCH_ALL, mask, kb_cpu::to_bits(v), 0, 32, line, file);
    *pred = r != 0;
    return r;
}
#define KB_REDUCE(name, T, op)                                                                          \
    inline T name(unsigned mask, T v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) { \
        return (T)kb_cpu::warp_op(op, mask, (std::uint32_t)v, 0, 32, line, file);                       \
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
