"""cuda_fp16.h and cuda_bf16.h on the cpu backend: conversions bit for bit as the GPU rounds
(to nearest even, or the mode the name says), arithmetic rounded once, atomics and shuffles of
half types. numpy's float16 is IEEE binary16 with round-to-nearest-even; bfloat16 references
are the float's top 16 bits rounded to nearest even."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest


def _k(cpu, src: str, name: str = "k"):
    return kb.compile(kb.Source(src, lang="cuda", name=name), cpu)


def _floats() -> np.ndarray:
    """Floats around every half boundary: the halves themselves, their midpoints (ties) and
    neighbours, subnormals, overflow, infinities, plus random values of every magnitude."""
    rng = np.random.default_rng(3)
    halves = np.arange(0, 0x7C01, dtype=np.uint16).view(np.float16).astype(np.float32)
    mids = (halves[:-1].astype(np.float64) + halves[1:]) / 2
    mids = mids.astype(np.float32)
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
    rand = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    extra = np.array([65504, 65519.99, 65520, 65536, 1e-8, 2.0**-25, 2.0**-24, 3 * 2.0**-26, 1e30], np.float32)
    x = np.concatenate([halves, mids, near, rand, extra])
    x = np.concatenate([x, -x])
    return x[~np.isnan(x)]


HALF_CVT = r"""
#include <cuda_fp16.h>
__global__ void k(const float* x, unsigned short* h, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half v = __float2half(x[i]);
    h[i] = __half_as_ushort(v);
    h[n + i] = __half_as_ushort(__float2half_rz(x[i]));
    h[2 * n + i] = __half_as_ushort(__float2half_ru(x[i]));
    h[3 * n + i] = __half_as_ushort(__float2half_rd(x[i]));
    back[i] = __half2float(v);
}
"""


def _round_dir(x: np.ndarray, rn: np.ndarray, toward: str) -> np.ndarray:
    """The binary16 bits of x rounded toward zero / +inf / -inf, from the nearest-even result."""
    r = rn.view(np.float16).astype(np.float64)
    xd = x.astype(np.float64)
    bits = rn.astype(np.int64)
    mag_up = np.abs(r) > np.abs(xd)  # nearest rounded away from zero
    mag_dn = np.abs(r) < np.abs(xd)
    if toward == "z":
        step = np.where(mag_up, -1, 0)
    elif toward == "u":
        step = np.where(xd >= 0, np.where(mag_dn, 1, 0), np.where(mag_up, -1, 0))
    else:
        step = np.where(xd < 0, np.where(mag_dn, 1, 0), np.where(mag_up, -1, 0))
    out = bits + step  # a step in magnitude is a step of the bit pattern within a sign
    fin = np.isfinite(xd)
    big = np.abs(xd) > 65504
    limit = {"z": np.full(x.shape, True), "u": xd < 0, "d": xd > 0}[toward]
    out = np.where(fin & big & limit, np.where(xd < 0, 0xFBFF, 0x7BFF), out)
    out = np.where(fin & big & ~limit, np.where(xd < 0, 0xFC00, 0x7C00), out)
    return out.astype(np.uint16)


def test_float_to_half_rounds_bit_for_bit_in_each_mode(cpu):
    x = _floats()
    n = x.size
    h = kb.asarray(np.zeros(4 * n, np.uint16), device=cpu)
    back = kb.asarray(np.zeros(n, np.float32), device=cpu)
    _k(cpu, HALF_CVT).launch(-(-n // 256), 256, (kb.asarray(x, device=cpu), h, back, np.int32(n)))
    got = h.numpy().reshape(4, n)
    with np.errstate(over="ignore"):
        rn = x.astype(np.float16).view(np.uint16)
    bad = np.flatnonzero(got[0] != rn)
    assert bad.size == 0, f"{bad.size} differ, e.g. {x[bad[:5]]} -> {got[0][bad[:5]]} not {rn[bad[:5]]}"
    for row, mode in ((1, "z"), (2, "u"), (3, "d")):
        want = _round_dir(x, rn, mode)
        bad = np.flatnonzero(got[row] != want)
        assert bad.size == 0, (
            f"_r{mode}: {bad.size} differ, e.g. {x[bad[:5]]} -> {got[row][bad[:5]]} not {want[bad[:5]]}"
        )
    np.testing.assert_array_equal(back.numpy(), rn.view(np.float16).astype(np.float32))


HALF_OPS = r"""
#include <cuda_fp16.h>
__global__ void k(const __half* a, const __half* b, __half* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = a[i] + b[i];
    out[n + i] = __hmul(a[i], b[i]);
    out[2 * n + i] = __hsub(a[i], b[i]);
    out[3 * n + i] = a[i] / b[i];
    half2 p = __halves2half2(a[i], b[i]), q = __halves2half2(b[i], a[i]);
    half2 r = __hfma2(p, q, p);
    out[4 * n + i] = __low2half(r);
    out[5 * n + i] = __hmax(a[i], b[i]);
    out[6 * n + i] = hsqrt(__habs(a[i]));
    out[7 * n + i] = __float2half(__half2float(a[i]) > __half2float(b[i]) ? 1.0f : 0.0f);
}
"""


def test_half_arithmetic_is_rounded_once_as_on_the_gpu(cpu):
    rng = np.random.default_rng(4)
    n = 50_000
    a = rng.integers(0, 0x7C00, n).astype(np.uint16).view(np.float16) * rng.choice([-1, 1], n).astype(np.float16)
    b = rng.integers(0x0400, 0x6000, n).astype(np.uint16).view(np.float16)
    out = kb.asarray(np.zeros(8 * n, np.float16), device=cpu)
    _k(cpu, HALF_OPS).launch(
        -(-n // 256), 256, (kb.asarray(a, device=cpu), kb.asarray(b, device=cpu), out, np.int32(n))
    )
    o = out.numpy().reshape(8, n)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        want = [
            a + b,
            a * b,
            a - b,
            (a64 / b64).astype(np.float16),
            (a64 * b64 + a64).astype(np.float16),
            np.maximum(a, b),
            np.sqrt(np.abs(a64)).astype(np.float16),
            (a > b).astype(np.float16),
        ]
    for k, w in enumerate(want):
        np.testing.assert_array_equal(
            o[k].view(np.uint16), np.asarray(w, np.float16).view(np.uint16), err_msg=f"op {k}"
        )


BF16 = r"""
#include <cuda_bf16.h>
__global__ void k(const float* x, const unsigned short* a, const unsigned short* b, unsigned short* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 p = __ushort_as_bfloat16(a[i]), q = __ushort_as_bfloat16(b[i]);
    out[i] = __bfloat16_as_ushort(__float2bfloat16(x[i]));
    out[n + i] = __bfloat16_as_ushort(p + q);
    out[2 * n + i] = __bfloat16_as_ushort(__hmul(p, q));
    out[3 * n + i] = __bfloat16_as_ushort(__float2bfloat16(__bfloat162float(p)));
    __nv_bfloat162 v = __floats2bfloat162_rn(x[i], 1.0f);
    out[4 * n + i] = __bfloat16_as_ushort(__low2bfloat16(v * v));
}
"""


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even; NaN -> 0x7fff (the GPU's canonical NaN)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), r)


def test_bfloat16_conversions_and_arithmetic_round_to_nearest_even(cpu):
    x = _floats()
    x = np.concatenate([x, np.array([np.nan, np.inf, -np.inf], np.float32)])
    n = x.size
    rng = np.random.default_rng(5)
    a = _bf16(rng.standard_normal(n).astype(np.float32) * 100)
    b = _bf16(rng.standard_normal(n).astype(np.float32))
    out = kb.asarray(np.zeros(5 * n, np.uint16), device=cpu)
    _k(cpu, BF16).launch(
        -(-n // 256),
        256,
        (kb.asarray(x, device=cpu), kb.asarray(a, device=cpu), kb.asarray(b, device=cpu), out, np.int32(n)),
    )
    o = out.numpy().reshape(5, n)
    f = lambda h: (h.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(o[0], _bf16(x))
    np.testing.assert_array_equal(o[1], _bf16(f(a) + f(b)))
    np.testing.assert_array_equal(o[2], _bf16(f(a) * f(b)))
    np.testing.assert_array_equal(o[3], a)
    with np.errstate(over="ignore", invalid="ignore"):
        xb = f(_bf16(x))
        np.testing.assert_array_equal(o[4], _bf16(xb * xb))


HALF_ATOMICS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void k(__half* h, __nv_bfloat16* b, __half2* h2, float* y) {
    atomicAdd(h, __float2half(1.0f));
    atomicAdd(b, __float2bfloat16(0.5f));
    atomicAdd(h2, __floats2half2_rn(1.0f, 2.0f));
    __half v = __float2half((float)threadIdx.x);
    __half s = v;
    for (int o = 16; o > 0; o /= 2) s = __hadd(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (threadIdx.x == 0) y[blockIdx.x] = __half2float(s);
}
"""


def test_half_atomics_and_shuffles(cpu):
    h = kb.asarray(np.zeros(1, np.float16), device=cpu)
    b = kb.asarray(np.zeros(1, np.uint16), device=cpu)
    h2 = kb.asarray(np.zeros(2, np.float16), device=cpu)
    y = kb.asarray(np.zeros(4, np.float32), device=cpu)
    _k(cpu, HALF_ATOMICS).launch(4, 32, (h, b, h2, y))
    assert h.numpy()[0] == 128
    assert (b.numpy().astype(np.uint32) << 16).view(np.float32)[0] == 64
    assert h2.numpy().tolist() == [128, 256]
    assert y.numpy().tolist() == [sum(range(32))] * 4


FP8 = r"""
#include <cuda_fp8.h>
__global__ void k(const float* x, unsigned char* out, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_fp8_e4m3 a(x[i]);
    __nv_fp8_e5m2 b(x[i]);
    out[i] = a.__x;
    out[n + i] = b.__x;
    out[2 * n + i] = __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E4M3);
    out[3 * n + i] = __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E5M2);
    back[i] = (float)a;
    back[n + i] = (float)b;
}
"""


def test_fp8_conversions_round_to_nearest_even_and_saturate_as_cuda(cpu):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(6)
    e4 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    e5 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float32)
    grid = np.concatenate([e4, e5, (e4[:-1] + e4[1:]) / 2, (e5[:-1] + e5[1:]) / 2])
    x = np.concatenate([grid, rng.standard_normal(20_000).astype(np.float32) * 100, [1e6, -1e6, 1e-9]])
    x = x[np.isfinite(x)].astype(np.float32)
    n = x.size
    out = kb.asarray(np.zeros(4 * n, np.uint8), device=cpu)
    back = kb.asarray(np.zeros(2 * n, np.float32), device=cpu)
    _k(cpu, FP8).launch(-(-n // 256), 256, (kb.asarray(x, device=cpu), out, back, np.int32(n)))
    o = out.numpy().reshape(4, n)
    # ml_dtypes rounds to nearest even without saturation: e4m3fn overflows to NaN, e5m2 to inf.
    nosat4 = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    nosat5 = x.astype(ml_dtypes.float8_e5m2).view(np.uint8)
    nan4 = (nosat4 & 0x7F) == 0x7F
    np.testing.assert_array_equal(np.where(nan4, 0x7F, o[2]), np.where(nan4, 0x7F, nosat4))
    np.testing.assert_array_equal(o[3], nosat5)
    sat4 = np.where(nan4, (nosat4 & 0x80) | 0x7E, nosat4)
    inf5 = (nosat5 & 0x7F) == 0x7C
    sat5 = np.where(inf5, (nosat5 & 0x80) | 0x7B, nosat5)
    np.testing.assert_array_equal(o[0], sat4)
    np.testing.assert_array_equal(o[1], sat5)
    b = back.numpy().reshape(2, n)
    np.testing.assert_array_equal(b[0], sat4.view(ml_dtypes.float8_e4m3fn).astype(np.float32))
    np.testing.assert_array_equal(b[1], sat5.view(ml_dtypes.float8_e5m2).astype(np.float32))
