// kernelbay CPU backend: the prelude that makes CUDA C++ kernel source compile for the host.
// Blocks run in parallel on the host's cores; the threads of a block run one after another,
// so everything here is correct for that model. What cannot be (__syncthreads, __shared__,
// warp intrinsics) is refused before compiling, by kernelbay_cpu.compiler.
#pragma once
#include "kb_cpu_launch.h"

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
#define __managed__
#define __launch_bounds__(...)
#define __grid_constant__
#ifndef __CUDA_ARCH__
#define KERNELBAY_CPU 1
#endif

using kb_cpu::dim3;
using kb_cpu::uint3;
#define threadIdx (static_cast<const ::kb_cpu::uint3&>(::kb_cpu::cur_threadIdx))
#define blockIdx (static_cast<const ::kb_cpu::uint3&>(::kb_cpu::cur_blockIdx))
#define blockDim (static_cast<const ::kb_cpu::dim3&>(::kb_cpu::cur_blockDim))
#define gridDim (static_cast<const ::kb_cpu::dim3&>(::kb_cpu::cur_gridDim))

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
