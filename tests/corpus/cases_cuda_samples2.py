"""Corpus cases: more NVIDIA/cuda-samples (BSD-3-Clause): scan, histogram64/256, bitonic sort,
shuffle scan, Black-Scholes; numpy references, launches as each sample's host code.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.corpus.cases import Case, Launch, ceil_div

_D = "cuda_samples/"
_TB = 256  # scan.cu's THREADBLOCK_SIZE


def _chunk_exclusive(x: np.ndarray, chunk: int) -> np.ndarray:
    c = x.astype(np.uint64).reshape(-1, chunk)
    return (np.cumsum(c, axis=1) - c).astype(np.uint32).ravel()


def _scan_short(rng: np.random.Generator) -> Launch:
    batch, length = 8, 1024  # scanExclusiveShort: grid (batch * L) / (4 * 256), block 256, size L
    x = rng.integers(0, 1024, size=batch * length, dtype=np.uint32)
    args = [np.zeros_like(x), x, np.uint32(length)]
    want = _chunk_exclusive(x, length)
    return Launch(args, (batch * length // (4 * _TB),), (_TB,), {0: want}, rtol=0, atol=0)


def _scan_large_inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int, int]:
    batch, length = 2, 8192  # scanExclusiveLarge's three launches, batch x 8192 elements
    x = rng.integers(0, 1024, size=batch * length, dtype=np.uint32)
    dst = _chunk_exclusive(x, 4 * _TB)  # what the first scanExclusiveShared launch leaves
    return x, dst, batch, length


def _scan_shared2(rng: np.random.Generator) -> Launch:
    x, dst, batch, length = _scan_large_inputs(rng)
    n = batch * length // (4 * _TB)
    tops = (dst + x).reshape(-1, 4 * _TB)[:, -1]  # each chunk's total
    want = _chunk_exclusive(tops, length // (4 * _TB))
    args = [np.zeros(n, np.uint32), dst, x, np.uint32(n), np.uint32(length // (4 * _TB))]
    return Launch(args, (ceil_div(n, _TB),), (_TB,), {0: want}, rtol=0, atol=0)


def _uniform_update(rng: np.random.Generator) -> Launch:
    x, dst, batch, length = _scan_large_inputs(rng)
    n = batch * length // (4 * _TB)
    tops = (dst + x).reshape(-1, 4 * _TB)[:, -1]
    buf = _chunk_exclusive(tops, length // (4 * _TB))
    want = _chunk_exclusive(x, length)
    return Launch([dst, buf], (n,), (_TB,), {0: want}, rtol=0, atol=0)


def _histogram(bins: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        if bins == 64:  # histogram64(): grid iDivUp(count, iSnapDown(255, 16)), block 64, uint4 data
            byte_count = 16 * 240 * 16
            data_count = byte_count // 16
            blocks, threads = ceil_div(data_count, 240), 64
        else:  # histogram256(): grid PARTIAL_HISTOGRAM256_COUNT (240), block WARP_COUNT * 32, uint data
            byte_count = 240 * 192 * 4 * 3
            data_count = byte_count // 4
            blocks, threads = 240, 192
        data = rng.integers(0, 256, size=byte_count, dtype=np.uint8)
        want = np.bincount(data >> 2 if bins == 64 else data, minlength=bins)

        def check(outs: dict[int, np.ndarray]) -> None:
            got = outs[0].reshape(blocks, bins).astype(np.int64).sum(axis=0)
            np.testing.assert_array_equal(got, want, err_msg="sum of the partial histograms")

        args = [np.zeros(blocks * bins, np.uint32), data.view(np.uint32), np.uint32(data_count)]
        return Launch(args, (blocks,), (threads,), {}, check=check)

    return make


def _merge_histogram(bins: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        count = 240 if bins == 256 else 16  # the partial histograms the first kernel wrote
        partial = rng.integers(0, 1 << 16, size=(count, bins), dtype=np.uint32)
        want = partial.astype(np.int64).sum(axis=0)
        args = [np.zeros(bins, np.uint32), partial.ravel(), np.uint32(count)]
        return Launch(args, (bins,), (256,), {0: want}, rtol=0, atol=0)

    return make


_LIMIT = 1024  # SHARED_SIZE_LIMIT


def _sort_inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    keys = rng.permutation(n * 7)[:n].astype(np.uint32)  # distinct keys: the value order is defined
    return keys, np.arange(n, dtype=np.uint32)


def _bitonic_shared(rng: np.random.Generator) -> Launch:
    batch, length = 4, _LIMIT  # bitonicSort(): arrayLength <= SHARED_SIZE_LIMIT
    keys, vals = _sort_inputs(rng, batch * length)
    order = np.argsort(keys.reshape(batch, length), axis=1, kind="stable")
    want_k = np.take_along_axis(keys.reshape(batch, length), order, axis=1).ravel()
    want_v = np.take_along_axis(vals.reshape(batch, length), order, axis=1).ravel()
    args = [np.zeros_like(keys), np.zeros_like(vals), keys, vals, np.uint32(length), np.uint32(1)]
    return Launch(args, (batch * length // _LIMIT,), (_LIMIT // 2,), {0: want_k, 1: want_v}, rtol=0, atol=0)


def _sort_chunks(keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """bitonicSortShared1: each 1024-chunk sorted, descending in even blocks, ascending in odd."""
    k, v = keys.reshape(-1, _LIMIT).copy(), vals.reshape(-1, _LIMIT).copy()
    for b in range(k.shape[0]):
        o = np.argsort(k[b])
        if b % 2 == 0:
            o = o[::-1]
        k[b], v[b] = k[b][o], v[b][o]
    return k.ravel(), v.ravel()


def _merge_step(
    keys: np.ndarray, vals: np.ndarray, length: int, size: int, stride: int, dir_: int
) -> tuple[np.ndarray, np.ndarray]:
    """One bitonicMergeGlobal launch: comparator i compares pos and pos + stride."""
    k, v = keys.copy(), vals.copy()
    for g in range(k.size // 2):
        ci = g & (length // 2 - 1)
        ddd = dir_ ^ int((ci & (size // 2)) != 0)
        pos = 2 * g - (g & (stride - 1))
        if (k[pos] > k[pos + stride]) == bool(ddd):
            k[pos], k[pos + stride] = k[pos + stride], k[pos]
            v[pos], v[pos + stride] = v[pos + stride], v[pos]
    return k, v


def _bitonic_shared1(rng: np.random.Generator) -> Launch:
    batch, length = 1, 2 * _LIMIT  # bitonicSort(): arrayLength > SHARED_SIZE_LIMIT, first launch
    keys, vals = _sort_inputs(rng, batch * length)
    wk, wv = _sort_chunks(keys, vals)
    args = [np.zeros_like(keys), np.zeros_like(vals), keys, vals]
    return Launch(args, (batch * length // _LIMIT,), (_LIMIT // 2,), {0: wk, 1: wv}, rtol=0, atol=0)


def _bitonic_merge(shared: bool) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        length = 2 * _LIMIT  # size 2048: bitonicMergeGlobal for stride 1024, then bitonicMergeShared
        keys, vals = _sort_inputs(rng, length)
        k, v = _sort_chunks(keys, vals)
        if not shared:
            wk, wv = _merge_step(k, v, length, length, _LIMIT, 1)
            args = [
                np.zeros_like(k),
                np.zeros_like(v),
                k,
                v,
                np.uint32(length),
                np.uint32(length),
                np.uint32(_LIMIT),
                np.uint32(1),
            ]
            return Launch(args, (length // 512,), (256,), {0: wk, 1: wv}, rtol=0, atol=0)
        k, v = _merge_step(k, v, length, length, _LIMIT, 1)
        o = np.argsort(k)
        args = [np.zeros_like(k), np.zeros_like(v), k, v, np.uint32(length), np.uint32(length), np.uint32(1)]
        return Launch(args, (length // _LIMIT,), (_LIMIT // 2,), {0: k[o], 1: v[o]}, rtol=0, atol=0)

    return make


def _shfl_scan(rng: np.random.Generator) -> Launch:
    n, bs = 4096, 256  # main: shfl_scan_test<<<n / 256, 256, 256 / 32 * sizeof(int)>>>(d_data, 32, d_partial_sums)
    x = rng.integers(0, 100, size=n, dtype=np.int32)
    blocks = x.reshape(-1, bs).astype(np.int64)
    want = np.cumsum(blocks, axis=1)
    args = [x, np.int32(32), np.zeros(n // bs, np.int32)]
    return Launch(args, (n // bs,), (bs,), {0: want.ravel(), 2: want[:, -1]}, shared_mem=bs // 32 * 4, rtol=0, atol=0)


def _uniform_add(rng: np.random.Generator) -> Launch:
    n, bs = 4096, 256  # main: uniform_add<<<grid - 1, 256>>>(d_data + 256, d_partial_sums, n)
    x = rng.integers(0, 100, size=n, dtype=np.int32)
    per_block = np.cumsum(x.reshape(-1, bs).astype(np.int64), axis=1)
    partial = np.cumsum(per_block[:, -1])  # the second shfl_scan_test pass over the block sums
    data = per_block.ravel()[bs:].astype(np.int32)  # the d_data + blockSize the host passes
    want = np.cumsum(x.astype(np.int64))[bs:]
    args = [data, partial.astype(np.int32), np.int32(n)]
    return Launch(args, (n // bs - 1,), (bs,), {0: want}, rtol=0, atol=0)


def _cnd(d: np.ndarray) -> np.ndarray:
    a = [0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429]
    k = 1.0 / (1.0 + 0.2316419 * np.abs(d))
    cnd = (
        0.39894228040143267793994605993438
        * np.exp(-0.5 * d * d)
        * (k * (a[0] + k * (a[1] + k * (a[2] + k * (a[3] + k * a[4])))))
    )
    return np.where(d > 0, 1.0 - cnd, cnd)


def _black_scholes(rng: np.random.Generator) -> Launch:
    opt_n, r, vol = 4096, 0.02, 0.30  # BlackScholes.cu: RISKFREE, VOLATILITY; grid DIV_UP(OPT_N / 2, 128)
    s = (5.0 + 25.0 * rng.random(opt_n)).astype(np.float32)
    x = (1.0 + 99.0 * rng.random(opt_n)).astype(np.float32)
    t = (0.25 + 9.75 * rng.random(opt_n)).astype(np.float32)
    s64, x64, t64 = (a.astype(np.float64) for a in (s, x, t))
    sq = np.sqrt(t64)
    d1 = (np.log(s64 / x64) + (r + 0.5 * vol * vol) * t64) / (vol * sq)
    d2 = d1 - vol * sq
    e = np.exp(-r * t64)
    call = s64 * _cnd(d1) - x64 * e * _cnd(d2)
    put = x64 * e * (1.0 - _cnd(d2)) - s64 * (1.0 - _cnd(d1))
    args = [
        np.zeros(opt_n, np.float32),
        np.zeros(opt_n, np.float32),
        s,
        x,
        t,
        np.float32(r),
        np.float32(vol),
        np.int32(opt_n),
    ]
    return Launch(args, (ceil_div(opt_n // 2, 128),), (128,), {0: call, 1: put}, rtol=1e-4, atol=2e-4)


def _fence_reduction(single: bool) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        n, threads, blocks = 1 << 16, 128, 64  # reduceSinglePass(size, threads, blocks): smem threads * 4
        x = rng.random(n, dtype=np.float32)
        per_block = x.astype(np.float64).reshape(-1, 2 * threads * blocks)  # gridSize = 2 * threads * blocks
        partials = per_block.reshape(-1, blocks, 2 * threads).sum(axis=(0, 2))

        def check(outs: dict[int, np.ndarray]) -> None:
            got = outs[1].astype(np.float64)
            if single:  # the last block to retire sums the partials into g_odata[0]
                np.testing.assert_allclose(got[0], partials.sum(), rtol=1e-5, err_msg="the single-pass total")
                np.testing.assert_allclose(got[1:], partials[1:], rtol=1e-5, err_msg="the other block partials")
            else:
                np.testing.assert_allclose(got, partials, rtol=1e-5, err_msg="the block partials")

        args = [x, np.zeros(blocks, np.float32), np.uint32(n)]
        return Launch(args, (blocks,), (threads,), {}, shared_mem=threads * 4, check=check)

    return make


def cuda_samples2_cases() -> list[Case]:
    scan_h = (_D + "scan_common.h",)
    hist_h = (_D + "histogram_common.h",)
    sort_h = (_D + "sortingNetworks_common.cuh", _D + "sortingNetworks_common.h")
    shfl_h = (_D + "shfl_integral_image.cuh",)
    return [
        Case(
            "cuda_samples/scan:scanExclusiveShared", _D + "scan.cu", "scanExclusiveShared", _scan_short, headers=scan_h
        ),
        Case(
            "cuda_samples/scan:scanExclusiveShared2",
            _D + "scan.cu",
            "scanExclusiveShared2",
            _scan_shared2,
            headers=scan_h,
        ),
        Case("cuda_samples/scan:uniformUpdate", _D + "scan.cu", "uniformUpdate", _uniform_update, headers=scan_h),
        Case(
            "cuda_samples/histogram64:histogram64Kernel",
            _D + "histogram64.cu",
            "histogram64Kernel",
            _histogram(64),
            headers=hist_h,
        ),
        Case(
            "cuda_samples/histogram64:mergeHistogram64Kernel",
            _D + "histogram64.cu",
            "mergeHistogram64Kernel",
            _merge_histogram(64),
            headers=hist_h,
        ),
        Case(
            "cuda_samples/histogram256:histogram256Kernel",
            _D + "histogram256.cu",
            "histogram256Kernel",
            _histogram(256),
            headers=hist_h,
        ),
        Case(
            "cuda_samples/histogram256:mergeHistogram256Kernel",
            _D + "histogram256.cu",
            "mergeHistogram256Kernel",
            _merge_histogram(256),
            headers=hist_h,
        ),
        Case(
            "cuda_samples/bitonicSort:bitonicSortShared",
            _D + "bitonicSort.cu",
            "bitonicSortShared",
            _bitonic_shared,
            headers=sort_h,
        ),
        Case(
            "cuda_samples/bitonicSort:bitonicSortShared1",
            _D + "bitonicSort.cu",
            "bitonicSortShared1",
            _bitonic_shared1,
            headers=sort_h,
        ),
        Case(
            "cuda_samples/bitonicSort:bitonicMergeGlobal",
            _D + "bitonicSort.cu",
            "bitonicMergeGlobal",
            _bitonic_merge(False),
            headers=sort_h,
        ),
        Case(
            "cuda_samples/bitonicSort:bitonicMergeShared",
            _D + "bitonicSort.cu",
            "bitonicMergeShared",
            _bitonic_merge(True),
            headers=sort_h,
        ),
        Case(
            "cuda_samples/shfl_scan:shfl_scan_test", _D + "shfl_scan.cu", "shfl_scan_test", _shfl_scan, headers=shfl_h
        ),
        Case("cuda_samples/shfl_scan:uniform_add", _D + "shfl_scan.cu", "uniform_add", _uniform_add, headers=shfl_h),
        Case(
            "cuda_samples/threadFenceReduction:reduceMultiPass<128,true>",
            _D + "threadFenceReduction_kernel.cu",
            "reduceMultiPass<128, true>",
            _fence_reduction(False),
        ),
        Case(
            "cuda_samples/threadFenceReduction:reduceSinglePass<128,true>",
            _D + "threadFenceReduction_kernel.cu",
            "reduceSinglePass<128, true>",
            _fence_reduction(True),
        ),
        Case(
            "cuda_samples/BlackScholes:BlackScholesGPU",
            _D + "BlackScholes_kernel.cu",
            "BlackScholesGPU",
            _black_scholes,
        ),
    ]
