// kernelbay CPU backend: cuda_fp16.h -- __half and __half2 with the GPU's rounding. Included only
// by kernels that include it (the prelude stays light). Conversions round to nearest even (or
// the mode their name says) bit for bit as the GPU's cvt; arithmetic is computed in float and
// rounded once: for + - * / and sqrt of halves that is the correctly rounded result (24 bits >=
// 2 * 11 + 2: double rounding is innocuous), which is what the GPU's half instructions give.
#pragma once
#include "kb_cpu_cuda.h"

namespace kb_cpu {
enum : int { RN, RZ, RU, RD };

// float to IEEE binary16 bits in rounding mode `mode`; NaN gives 0x7fff as on the GPU.
inline unsigned short f2h(float f, int mode = RN) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const unsigned short sign = (unsigned short)((x >> 16) & 0x8000u);
    const bool neg = sign != 0;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return 0x7fff;
    if (x == 0x7f800000u) return sign | 0x7c00u;
    std::uint64_t m, r, rem, half;
    if (x < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
        const int e = (int)(x >> 23);
        m = (x & 0x7fffffu) | (e ? 0x800000u : 0u);
        int shift = 126 - (e ? e : 1);
        if (shift > 40) shift = 40;
        r = m >> shift;
        rem = m & ((1ull << shift) - 1);
        half = 1ull << (shift - 1);
    } else {
        r = (x - 0x38000000u) >> 13;
        rem = x & 0x1fffu;
        half = 0x1000u;
    }
    bool up = mode == RN ? (rem > half || (rem == half && (r & 1))) : mode == RZ ? false
            : mode == RU ? (rem != 0 && !neg) : (rem != 0 && neg);
    r += up;
    if (r >= 0x7c00u) {  // overflow: infinity, or the largest finite half toward zero
        const bool to_inf = mode == RN || (mode == RU && !neg) || (mode == RD && neg);
        r = to_inf ? 0x7c00u : 0x7bffu;
    }
    return (unsigned short)(sign | r);
}

inline float h2f(unsigned short h) {
    const std::uint32_t sign = (std::uint32_t)(h & 0x8000u) << 16;
    std::uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
    if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);
    else if (e != 0) x = sign | ((e + 112) << 23) | (m << 13);
    else if (m == 0) x = sign;
    else {  // subnormal: normalise
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; --e; }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

// A double rounded to float by round-to-odd: a later rounding to a narrower format is then exact.
inline float d2f_odd(double d) {
    float f = (float)d;
    if ((double)f == d || d != d) return f;
    if (std::fabs((double)f) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    b |= 1;
    std::memcpy(&f, &b, 4);
    return f;
}
}  // namespace kb_cpu

struct __half_raw {
    unsigned short x;
};
struct __half2_raw {
    unsigned short x, y;
};

struct alignas(2) __half {
    unsigned short __x;
    __half() = default;
    __half(const __half_raw& r) : __x(r.x) {}
    __half(float f) : __x(kb_cpu::f2h(f)) {}
    __half(double d) : __x(kb_cpu::f2h(kb_cpu::d2f_odd(d))) {}
    __half(int i) : __x(kb_cpu::f2h((float)i)) {}
    __half(unsigned int i) : __x(kb_cpu::f2h((float)i)) {}
    __half(long long i) : __x(kb_cpu::f2h((float)i)) {}
    __half(unsigned long long i) : __x(kb_cpu::f2h((float)i)) {}
    __half(short i) : __x(kb_cpu::f2h((float)i)) {}
    __half(unsigned short i) : __x(kb_cpu::f2h((float)i)) {}
    operator float() const { return kb_cpu::h2f(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
    __half& operator=(float f) { __x = kb_cpu::f2h(f); return *this; }
    __half& operator=(const __half_raw& r) { __x = r.x; return *this; }
};
typedef __half half;
typedef __half __nv_half;

struct alignas(4) __half2 {
    __half x, y;
    __half2() = default;
    __half2(__half a, __half b) : x(a), y(b) {}
    __half2(const __half2_raw& r) : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
    operator __half2_raw() const { return __half2_raw{x.__x, y.__x}; }
};
typedef __half2 half2;
typedef __half2 __nv_half2;

// --- conversions ------------------------------------------------------------------------------
inline __half __float2half(float f) { return __half_raw{kb_cpu::f2h(f)}; }
inline __half __float2half_rn(float f) { return __half_raw{kb_cpu::f2h(f, kb_cpu::RN)}; }
inline __half __float2half_rz(float f) { return __half_raw{kb_cpu::f2h(f, kb_cpu::RZ)}; }
inline __half __float2half_ru(float f) { return __half_raw{kb_cpu::f2h(f, kb_cpu::RU)}; }
inline __half __float2half_rd(float f) { return __half_raw{kb_cpu::f2h(f, kb_cpu::RD)}; }
inline __half __double2half(double d) { return __half_raw{kb_cpu::f2h(kb_cpu::d2f_odd(d))}; }
inline float __half2float(__half h) { return kb_cpu::h2f(h.__x); }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __half2 __float2half2_rn(float f) { return __half2(__float2half(f), __float2half(f)); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__float2half(a), __float2half(b)); }
inline __half2 __float22half2_rn(float2 f) { return __half2(__float2half(f.x), __float2half(f.y)); }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
inline __half2 __half2half2(__half a) { return __half2(a, a); }
inline __half2 make_half2(__half a, __half b) { return __half2(a, b); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __low2half2(__half2 h) { return __half2(h.x, h.x); }
inline __half2 __high2half2(__half2 h) { return __half2(h.y, h.y); }
inline __half2 __lowhigh2highlow(__half2 h) { return __half2(h.y, h.x); }
inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __short_as_half(short s) { return __half_raw{(unsigned short)s}; }
inline __half __ushort_as_half(unsigned short s) { return __half_raw{s}; }
#define KB_H2I(suffix, I, mode) \
    inline I __half2##suffix(__half h) { return kb_cpu::cvt_int<I>(__half2float(h), mode); }
KB_H2I(int_rn, int, 0) KB_H2I(int_rz, int, 1) KB_H2I(int_ru, int, 2) KB_H2I(int_rd, int, 3)
KB_H2I(uint_rn, unsigned, 0) KB_H2I(uint_rz, unsigned, 1) KB_H2I(short_rz, short, 1)
KB_H2I(ushort_rz, unsigned short, 1) KB_H2I(ll_rz, long long, 1) KB_H2I(ull_rz, unsigned long long, 1)
#undef KB_H2I
// int to half: exact in float for |i| < 2^24, else rounded to odd first so the result is exact.
inline __half __int2half_rn(int i) { return __double2half((double)i); }
inline __half __uint2half_rn(unsigned i) { return __double2half((double)i); }
inline __half __short2half_rn(short i) { return __float2half((float)i); }
inline __half __ushort2half_rn(unsigned short i) { return __float2half((float)i); }
inline __half __ll2half_rn(long long i) { return __double2half((double)i); }
inline __half __ull2half_rn(unsigned long long i) { return __double2half((double)i); }

// --- arithmetic: in float, rounded once to half ---------------------------------------------------
#define KB_H(x) __half2float(x)
inline bool __hisnan(__half a) { return (a.__x & 0x7fffu) > 0x7c00u; }
inline __half __hadd(__half a, __half b) { return __float2half(KB_H(a) + KB_H(b)); }
inline __half __hsub(__half a, __half b) { return __float2half(KB_H(a) - KB_H(b)); }
inline __half __hmul(__half a, __half b) { return __float2half(KB_H(a) * KB_H(b)); }
inline __half __hdiv(__half a, __half b) { return __float2half(KB_H(a) / KB_H(b)); }
inline __half __hadd_rn(__half a, __half b) { return __hadd(a, b); }
inline __half __hsub_rn(__half a, __half b) { return __hsub(a, b); }
inline __half __hmul_rn(__half a, __half b) { return __hmul(a, b); }
inline __half __hadd_sat(__half a, __half b) { return __float2half(__saturatef(KB_H(a) + KB_H(b))); }
inline __half __hmul_sat(__half a, __half b) { return __float2half(__saturatef(KB_H(a) * KB_H(b))); }
// a * b is exact in double and a + b of it nearly always: one rounding, by way of round-to-odd.
inline __half __hfma(__half a, __half b, __half c) {
    return __double2half((double)KB_H(a) * KB_H(b) + KB_H(c));
}
inline __half __hfma_sat(__half a, __half b, __half c) { return __float2half(__saturatef(__half2float(__hfma(a, b, c)))); }
inline __half __hneg(__half a) { return __half_raw{(unsigned short)(a.__x ^ 0x8000u)}; }
inline __half __habs(__half a) { return __half_raw{(unsigned short)(a.__x & 0x7fffu)}; }
inline __half __hmax(__half a, __half b) { return std::fmax(KB_H(a), KB_H(b)); }
inline __half __hmin(__half a, __half b) { return std::fmin(KB_H(a), KB_H(b)); }
inline __half __hmax_nan(__half a, __half b) { return __hisnan(a) || __hisnan(b) ? __half(__half_raw{0x7fff}) : __hmax(a, b); }
inline __half __hmin_nan(__half a, __half b) { return __hisnan(a) || __hisnan(b) ? __half(__half_raw{0x7fff}) : __hmin(a, b); }
inline bool __heq(__half a, __half b) { return KB_H(a) == KB_H(b); }
inline bool __hne(__half a, __half b) { return KB_H(a) != KB_H(b) && !__hisnan(a) && !__hisnan(b); }
inline bool __hlt(__half a, __half b) { return KB_H(a) < KB_H(b); }
inline bool __hle(__half a, __half b) { return KB_H(a) <= KB_H(b); }
inline bool __hgt(__half a, __half b) { return KB_H(a) > KB_H(b); }
inline bool __hge(__half a, __half b) { return KB_H(a) >= KB_H(b); }
inline int __hisinf(__half a) { return (a.__x & 0x7fffu) == 0x7c00u ? (a.__x & 0x8000u ? -1 : 1) : 0; }
// Math functions: computed in float and rounded once to half.
inline __half hsqrt(__half a) { return __float2half(std::sqrt(KB_H(a))); }
inline __half hrsqrt(__half a) { return __float2half(1.0f / std::sqrt(KB_H(a))); }
inline __half hrcp(__half a) { return __float2half(1.0f / KB_H(a)); }
inline __half hexp(__half a) { return __float2half(std::exp(KB_H(a))); }
inline __half hexp2(__half a) { return __float2half(std::exp2(KB_H(a))); }
inline __half hexp10(__half a) { return __float2half(std::pow(10.0f, KB_H(a))); }
inline __half hlog(__half a) { return __float2half(std::log(KB_H(a))); }
inline __half hlog2(__half a) { return __float2half(std::log2(KB_H(a))); }
inline __half hlog10(__half a) { return __float2half(std::log10(KB_H(a))); }
inline __half hsin(__half a) { return __float2half(std::sin(KB_H(a))); }
inline __half hcos(__half a) { return __float2half(std::cos(KB_H(a))); }
inline __half htanh(__half a) { return __float2half(std::tanh(KB_H(a))); }
inline __half hfloor(__half a) { return __float2half(std::floor(KB_H(a))); }
inline __half hceil(__half a) { return __float2half(std::ceil(KB_H(a))); }
inline __half htrunc(__half a) { return __float2half(std::trunc(KB_H(a))); }
inline __half hrint(__half a) { return __float2half(std::nearbyint(KB_H(a))); }
// Operators, as cuda_fp16.hpp defines them for __half.
inline __half operator+(const __half& a, const __half& b) { return __hadd(a, b); }
inline __half operator-(const __half& a, const __half& b) { return __hsub(a, b); }
inline __half operator*(const __half& a, const __half& b) { return __hmul(a, b); }
inline __half operator/(const __half& a, const __half& b) { return __hdiv(a, b); }
inline __half& operator+=(__half& a, const __half& b) { return a = __hadd(a, b); }
inline __half& operator-=(__half& a, const __half& b) { return a = __hsub(a, b); }
inline __half& operator*=(__half& a, const __half& b) { return a = __hmul(a, b); }
inline __half& operator/=(__half& a, const __half& b) { return a = __hdiv(a, b); }
inline __half operator-(const __half& a) { return __hneg(a); }
inline __half operator+(const __half& a) { return a; }
inline bool operator==(const __half& a, const __half& b) { return __heq(a, b); }
inline bool operator!=(const __half& a, const __half& b) { return !__heq(a, b); }
inline bool operator<(const __half& a, const __half& b) { return __hlt(a, b); }
inline bool operator<=(const __half& a, const __half& b) { return __hle(a, b); }
inline bool operator>(const __half& a, const __half& b) { return __hgt(a, b); }
inline bool operator>=(const __half& a, const __half& b) { return __hge(a, b); }
#undef KB_H

// --- __half2: each half on its own -----------------------------------------------------------------
#define KB_H2(name, f) \
    inline __half2 name(__half2 a, __half2 b) { return __half2(f(a.x, b.x), f(a.y, b.y)); }
KB_H2(__hadd2, __hadd) KB_H2(__hsub2, __hsub) KB_H2(__hmul2, __hmul) KB_H2(__h2div, __hdiv)
KB_H2(__hmax2, __hmax) KB_H2(__hmin2, __hmin) KB_H2(__hadd2_sat, __hadd_sat) KB_H2(__hmul2_sat, __hmul_sat)
#undef KB_H2
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
inline __half2 __hneg2(__half2 a) { return __half2(__hneg(a.x), __hneg(a.y)); }
inline __half2 __habs2(__half2 a) { return __half2(__habs(a.x), __habs(a.y)); }
inline __half2 h2sqrt(__half2 a) { return __half2(hsqrt(a.x), hsqrt(a.y)); }
inline __half2 h2exp(__half2 a) { return __half2(hexp(a.x), hexp(a.y)); }
inline __half2 operator+(const __half2& a, const __half2& b) { return __hadd2(a, b); }
inline __half2 operator-(const __half2& a, const __half2& b) { return __hsub2(a, b); }
inline __half2 operator*(const __half2& a, const __half2& b) { return __hmul2(a, b); }
inline __half2 operator/(const __half2& a, const __half2& b) { return __h2div(a, b); }
inline __half2& operator+=(__half2& a, const __half2& b) { return a = __hadd2(a, b); }
inline __half2& operator-=(__half2& a, const __half2& b) { return a = __hsub2(a, b); }
inline __half2& operator*=(__half2& a, const __half2& b) { return a = __hmul2(a, b); }
inline __half2& operator/=(__half2& a, const __half2& b) { return a = __h2div(a, b); }
inline __half2 operator-(const __half2& a) { return __hneg2(a); }
