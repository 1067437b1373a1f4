// kernelbay CPU backend: cuda_bf16.h -- __nv_bfloat16 and __nv_bfloat162 with the GPU's rounding.
// Conversions from float round to nearest even (or the mode their name says) bit for bit; NaN
// gives 0x7fff as on the GPU. Arithmetic is computed in float and rounded once, which for + - * /
// and sqrt of bfloat16 values is the correctly rounded result (24 bits >= 2 * 8 + 2).
#pragma once
#include "cuda_fp16.h"

namespace kb_cpu {
inline unsigned short f2bf(float f, int mode = RN) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    const bool neg = x >> 31;
    const std::uint32_t rem = x & 0xffffu, r = x >> 16;
    const bool inf = (x & 0x7fffffffu) == 0x7f800000u;
    bool up = mode == RN ? (rem > 0x8000u || (rem == 0x8000u && (r & 1))) : mode == RZ ? false
            : mode == RU ? (rem != 0 && !neg) : (rem != 0 && neg);
    return (unsigned short)(inf ? r : r + up);
}
inline float bf2f(unsigned short b) {
    const std::uint32_t x = (std::uint32_t)b << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
}  // namespace kb_cpu

struct __nv_bfloat16_raw {
    unsigned short x;
};
struct __nv_bfloat162_raw {
    unsigned short x, y;
};

struct alignas(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(kb_cpu::f2bf(f)) {}
    __nv_bfloat16(double d) : __x(kb_cpu::f2bf(kb_cpu::d2f_odd(d))) {}
    __nv_bfloat16(int i) : __x(kb_cpu::f2bf(kb_cpu::d2f_odd((double)i))) {}
    __nv_bfloat16(unsigned int i) : __x(kb_cpu::f2bf(kb_cpu::d2f_odd((double)i))) {}
    __nv_bfloat16(long long i) : __x(kb_cpu::f2bf(kb_cpu::d2f_odd((double)i))) {}
    __nv_bfloat16(unsigned long long i) : __x(kb_cpu::f2bf(kb_cpu::d2f_odd((double)i))) {}
    __nv_bfloat16(short i) : __x(kb_cpu::f2bf((float)i)) {}
    __nv_bfloat16(unsigned short i) : __x(kb_cpu::f2bf((float)i)) {}
    operator float() const { return kb_cpu::bf2f(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
    __nv_bfloat16& operator=(float f) { __x = kb_cpu::f2bf(f); return *this; }
    __nv_bfloat16& operator=(const __nv_bfloat16_raw& r) { __x = r.x; return *this; }
};
typedef __nv_bfloat16 nv_bfloat16;

struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
    __nv_bfloat162(const __nv_bfloat162_raw& r) : x(__nv_bfloat16_raw{r.x}), y(__nv_bfloat16_raw{r.y}) {}
    operator __nv_bfloat162_raw() const { return __nv_bfloat162_raw{x.__x, y.__x}; }
};
typedef __nv_bfloat162 nv_bfloat162;

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16_raw{kb_cpu::f2bf(f)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16_raw{kb_cpu::f2bf(f, kb_cpu::RN)}; }
inline __nv_bfloat16 __float2bfloat16_rz(float f) { return __nv_bfloat16_raw{kb_cpu::f2bf(f, kb_cpu::RZ)}; }
inline __nv_bfloat16 __float2bfloat16_ru(float f) { return __nv_bfloat16_raw{kb_cpu::f2bf(f, kb_cpu::RU)}; }
inline __nv_bfloat16 __float2bfloat16_rd(float f) { return __nv_bfloat16_raw{kb_cpu::f2bf(f, kb_cpu::RD)}; }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16_raw{kb_cpu::f2bf(kb_cpu::d2f_odd(d))}; }
inline float __bfloat162float(__nv_bfloat16 b) { return kb_cpu::bf2f(b.__x); }
inline __nv_bfloat162 __float2bfloat162_rn(float f) { return {__float2bfloat16(f), __float2bfloat16(f)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__float2bfloat16(f.x), __float2bfloat16(f.y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return {a, a}; }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __short_as_bfloat16(short s) { return __nv_bfloat16_raw{(unsigned short)s}; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { return __nv_bfloat16_raw{s}; }
inline int __bfloat162int_rn(__nv_bfloat16 h) { return kb_cpu::cvt_int<int>(__bfloat162float(h), 0); }
inline int __bfloat162int_rz(__nv_bfloat16 h) { return kb_cpu::cvt_int<int>(__bfloat162float(h), 1); }
inline __nv_bfloat16 __int2bfloat16_rn(int i) { return __double2bfloat16((double)i); }

#define KB_B(x) __bfloat162float(x)
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16(KB_B(a) + KB_B(b)); }
inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16(KB_B(a) - KB_B(b)); }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16(KB_B(a) * KB_B(b)); }
inline __nv_bfloat16 __hdiv(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16(KB_B(a) / KB_B(b)); }
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __double2bfloat16((double)KB_B(a) * KB_B(b) + KB_B(c));
}
inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { return __nv_bfloat16_raw{(unsigned short)(a.__x ^ 0x8000u)}; }
inline __nv_bfloat16 __habs(__nv_bfloat16 a) { return __nv_bfloat16_raw{(unsigned short)(a.__x & 0x7fffu)}; }
inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return std::fmax(KB_B(a), KB_B(b)); }
inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return std::fmin(KB_B(a), KB_B(b)); }
inline bool __hisnan(__nv_bfloat16 a) { return (a.__x & 0x7fffu) > 0x7f80u; }
inline bool __heq(__nv_bfloat16 a, __nv_bfloat16 b) { return KB_B(a) == KB_B(b); }
inline bool __hlt(__nv_bfloat16 a, __nv_bfloat16 b) { return KB_B(a) < KB_B(b); }
inline bool __hgt(__nv_bfloat16 a, __nv_bfloat16 b) { return KB_B(a) > KB_B(b); }
inline __nv_bfloat16 hsqrt(__nv_bfloat16 a) { return __float2bfloat16(std::sqrt(KB_B(a))); }
inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __float2bfloat16(std::exp(KB_B(a))); }
inline __nv_bfloat16 hlog(__nv_bfloat16 a) { return __float2bfloat16(std::log(KB_B(a))); }
inline __nv_bfloat16 hrsqrt(__nv_bfloat16 a) { return __float2bfloat16(1.0f / std::sqrt(KB_B(a))); }
inline __nv_bfloat16 htanh(__nv_bfloat16 a) { return __float2bfloat16(std::tanh(KB_B(a))); }
inline __nv_bfloat16 operator+(const __nv_bfloat16& a, const __nv_bfloat16& b) { return __hadd(a, b); }
inline __nv_bfloat16 operator-(const __nv_bfloat16& a, const __nv_bfloat16& b) { return __hsub(a, b); }
inline __nv_bfloat16 operator*(const __nv_bfloat16& a, const __nv_bfloat16& b) { return __hmul(a, b); }
inline __nv_bfloat16 operator/(const __nv_bfloat16& a, const __nv_bfloat16& b) { return __hdiv(a, b); }
inline __nv_bfloat16& operator+=(__nv_bfloat16& a, const __nv_bfloat16& b) { return a = __hadd(a, b); }
inline __nv_bfloat16& operator-=(__nv_bfloat16& a, const __nv_bfloat16& b) { return a = __hsub(a, b); }
inline __nv_bfloat16& operator*=(__nv_bfloat16& a, const __nv_bfloat16& b) { return a = __hmul(a, b); }
inline __nv_bfloat16& operator/=(__nv_bfloat16& a, const __nv_bfloat16& b) { return a = __hdiv(a, b); }
inline __nv_bfloat16 operator-(const __nv_bfloat16& a) { return __hneg(a); }
inline bool operator==(const __nv_bfloat16& a, const __nv_bfloat16& b) { return __heq(a, b); }
inline bool operator!=(const __nv_bfloat16& a, const __nv_bfloat16& b) { return !__heq(a, b); }
inline bool operator<(const __nv_bfloat16& a, const __nv_bfloat16& b) { return __hlt(a, b); }
inline bool operator>(const __nv_bfloat16& a, const __nv_bfloat16& b) { return __hgt(a, b); }
inline bool operator<=(const __nv_bfloat16& a, const __nv_bfloat16& b) { return !__hgt(a, b) && !__hisnan(a) && !__hisnan(b); }
inline bool operator>=(const __nv_bfloat16& a, const __nv_bfloat16& b) { return !__hlt(a, b) && !__hisnan(a) && !__hisnan(b); }
#undef KB_B

#define KB_B2(name, f) \
    inline __nv_bfloat162 name(__nv_bfloat162 a, __nv_bfloat162 b) { return {f(a.x, b.x), f(a.y, b.y)}; }
KB_B2(__hadd2, __hadd) KB_B2(__hsub2, __hsub) KB_B2(__hmul2, __hmul) KB_B2(__h2div, __hdiv)
KB_B2(__hmax2, __hmax) KB_B2(__hmin2, __hmin)
#undef KB_B2
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
inline __nv_bfloat162 operator+(const __nv_bfloat162& a, const __nv_bfloat162& b) { return __hadd2(a, b); }
inline __nv_bfloat162 operator-(const __nv_bfloat162& a, const __nv_bfloat162& b) { return __hsub2(a, b); }
inline __nv_bfloat162 operator*(const __nv_bfloat162& a, const __nv_bfloat162& b) { return __hmul2(a, b); }
inline __nv_bfloat162& operator+=(__nv_bfloat162& a, const __nv_bfloat162& b) { return a = __hadd2(a, b); }
inline __nv_bfloat162& operator*=(__nv_bfloat162& a, const __nv_bfloat162& b) { return a = __hmul2(a, b); }
