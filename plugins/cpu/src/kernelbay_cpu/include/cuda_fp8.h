// kernelbay CPU backend: cuda_fp8.h -- __nv_fp8_e4m3 and __nv_fp8_e5m2 (and their x2/x4 packs)
// with the GPU's conversions: from float and double round to nearest even; the constructors
// saturate to the largest finite value (__NV_SATFINITE), __nv_cvt_* do what the argument says
// (__NV_NOSAT: e4m3 overflows to NaN, e5m2 to infinity); NaN gives 0x7f. Included only by
// kernels that include it.
#pragma once
#include "cuda_bf16.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

namespace kb_cpu {
// E4M3: bias 7, no infinity, largest finite 448 (0x7e). E5M2: bias 15, largest finite 57344 (0x7b).
inline unsigned char to_fp8(double a_in, bool satfinite, bool e4m3) {
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const double maxf = e4m3 ? 448.0 : 57344.0;
    const unsigned char sign = std::signbit(a_in) ? 0x80 : 0;
    if (a_in != a_in) return 0x7f;
    double a = std::fabs(a_in);
    if (a == INFINITY) return satfinite ? (unsigned char)(sign | (e4m3 ? 0x7e : 0x7b)) : (unsigned char)(sign | (e4m3 ? 0x7f : 0x7c));
    int e;
    std::frexp(a, &e);
    --e;  // a = 1.m * 2^e
    const int emin = 1 - bias;
    const double quantum = std::ldexp(1.0, (e < emin ? emin : e) - mbits);
    const double v = std::nearbyint(a / quantum) * quantum;  // exact scaling; ties to even
    if (v > maxf)
        return satfinite ? (unsigned char)(sign | (e4m3 ? 0x7e : 0x7b)) : (unsigned char)(sign | (e4m3 ? 0x7f : 0x7c));
    if (v == 0) return sign;
    std::frexp(v, &e);
    --e;
    unsigned code;
    if (e < emin) code = (unsigned)std::ldexp(v, mbits - emin);  // subnormal
    else code = (unsigned)((e + bias) << mbits) | ((unsigned)std::ldexp(v, mbits - e) - (1u << mbits));
    return (unsigned char)(sign | code);
}
inline float from_fp8(unsigned char c, bool e4m3) {
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const bool neg = c & 0x80;
    const unsigned ex = (c & 0x7f) >> mbits, m = c & ((1u << mbits) - 1);
    float v;
    if (e4m3 && (c & 0x7f) == 0x7f) return NAN;
    if (!e4m3 && ex == 31) return m ? NAN : (neg ? -INFINITY : INFINITY);
    if (ex == 0) v = std::ldexp((float)m, 1 - bias - mbits);
    else v = std::ldexp((float)((1u << mbits) | m), (int)ex - bias - mbits);
    return neg ? -v : v;
}
}  // namespace kb_cpu

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t s, __nv_fp8_interpretation_t t) {
    return kb_cpu::to_fp8(x, s == __NV_SATFINITE, t == __NV_E4M3);
}
inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(double x, __nv_saturation_t s, __nv_fp8_interpretation_t t) {
    return kb_cpu::to_fp8(x, s == __NV_SATFINITE, t == __NV_E4M3);
}
inline __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(__half_raw x, __nv_saturation_t s, __nv_fp8_interpretation_t t) {
    return kb_cpu::to_fp8(kb_cpu::h2f(x.x), s == __NV_SATFINITE, t == __NV_E4M3);
}
inline __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw x, __nv_saturation_t s,
                                                      __nv_fp8_interpretation_t t) {
    return kb_cpu::to_fp8(kb_cpu::bf2f(x.x), s == __NV_SATFINITE, t == __NV_E4M3);
}
inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x, __nv_fp8_interpretation_t t) {
    return __half_raw{kb_cpu::f2h(kb_cpu::from_fp8(x, t == __NV_E4M3))};  // exact: fp8 values are halves
}

#define KB_FP8(NAME, E4M3)                                                                        \
    struct alignas(1) NAME {                                                                      \
        __nv_fp8_storage_t __x;                                                                   \
        NAME() = default;                                                                         \
        explicit NAME(float f) : __x(kb_cpu::to_fp8(f, true, E4M3)) {}                            \
        explicit NAME(double d) : __x(kb_cpu::to_fp8(d, true, E4M3)) {}                           \
        explicit NAME(__half h) : __x(kb_cpu::to_fp8(__half2float(h), true, E4M3)) {}             \
        explicit NAME(__nv_bfloat16 h) : __x(kb_cpu::to_fp8(__bfloat162float(h), true, E4M3)) {}  \
        explicit NAME(int i) : __x(kb_cpu::to_fp8((double)i, true, E4M3)) {}                      \
        explicit operator float() const { return kb_cpu::from_fp8(__x, E4M3); }                   \
        explicit operator double() const { return kb_cpu::from_fp8(__x, E4M3); }                  \
        explicit operator __half() const { return __half(kb_cpu::from_fp8(__x, E4M3)); }          \
        explicit operator __nv_bfloat16() const { return __nv_bfloat16(kb_cpu::from_fp8(__x, E4M3)); } \
    };
KB_FP8(__nv_fp8_e4m3, true)
KB_FP8(__nv_fp8_e5m2, false)
#undef KB_FP8

struct alignas(2) __nv_fp8x2_e4m3 {
    __nv_fp8x2_storage_t __x;
};
struct alignas(2) __nv_fp8x2_e5m2 {
    __nv_fp8x2_storage_t __x;
};
struct alignas(4) __nv_fp8x4_e4m3 {
    __nv_fp8x4_storage_t __x;
};
struct alignas(4) __nv_fp8x4_e5m2 {
    __nv_fp8x4_storage_t __x;
};
