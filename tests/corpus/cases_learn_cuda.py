"""Corpus cases: PacktPublishing/Learn-CUDA-Programming (MIT), a CUDA course's chapter 7
(parallel programming patterns), with numpy references; launches as each file's host code.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.corpus.cases import Case, Launch, ceil_div

_D = "learn_cuda/"
_FILTER = 5  # convolution.cu's filter_size; the image is CI-small (upstream: 2048 x 2048)


def _conv_filter() -> np.ndarray:
    f = np.random.default_rng(5).random(_FILTER * _FILTER, dtype=np.float32)
    return f / f.sum()  # generate_filter normalises its taps


def _convolution(version: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        rows, cols, bd, p = 128, 128, 16, _FILTER // 2
        img = rng.random((rows, cols), dtype=np.float32)
        filt = _conv_filter()
        padded = np.pad(img.astype(np.float64), p)
        want = np.zeros((rows, cols))
        for fr in range(_FILTER):
            for fc in range(_FILTER):
                want += padded[fr : fr + rows, fc : fc + cols] * float(filt[fr * _FILTER + fc])
        smem = (2 * _FILTER + bd) * (2 * _FILTER + bd) * 4 if version == 3 else 0
        args = [np.zeros(rows * cols, np.float32), img.ravel(), filt, np.int32(rows), np.int32(cols), np.int32(_FILTER)]
        grid = (ceil_div(cols, bd), ceil_div(rows, bd))
        return Launch(args, grid, (bd, bd), {0: want.ravel()}, shared_mem=smem, rtol=1e-5, atol=1e-5)

    return make


def _scan(version: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        bd = 512
        length = bd * 2  # scan.cu's main
        x = (rng.random(length, dtype=np.float32) - 0.5).astype(np.float32)
        want = np.cumsum(x.astype(np.float64))  # both versions compute the inclusive scan
        if version == 1:
            grid, smem = ceil_div(length, bd), 0
        else:
            grid, smem = ceil_div(length, 2 * bd), 4 * bd * 2
        args = [np.zeros(length, np.float32), x, np.int32(length)]
        return Launch(args, (grid,), (bd,), {0: want}, shared_mem=smem, rtol=1e-4, atol=1e-4)

    return make


def _n_body(rng: np.random.Generator) -> Launch:
    n, bs, dt = 1024, 128, 0.01  # n a multiple of BLOCK_SIZE (the kernel syncs inside `if (i < n)`)
    p = (2 * rng.random((n, 4)) - 1).astype(np.float32)
    v = (2 * rng.random((n, 4)) - 1).astype(np.float32)
    pos = p[:, :3].astype(np.float64)
    d = pos[None, :, :] - pos[:, None, :]  # d[i, j] = p[j] - p[i]
    inv = 1.0 / np.sqrt((d**2).sum(-1) + 1e-9)
    force = (d * (inv**3)[..., None]).sum(axis=1)
    want = v.astype(np.float64).copy()
    want[:, :3] += dt * force
    atol = 1e-4 * float(np.abs(dt * force).max())
    return Launch(
        [p.ravel(), v.ravel(), np.float32(dt), np.int32(n)], (n // bs,), (bs,), {1: want.ravel()}, rtol=1e-3, atol=atol
    )


def learn_cuda_cases() -> list[Case]:
    conv = _D + "convolution.cu"
    g = {"c_filter": _conv_filter()}
    scan_h = (_D + "scan.h",)
    return [
        Case("learn_cuda/convolution:convolution_kernel_v1", conv, "convolution_kernel_v1", _convolution(1)),
        Case(
            "learn_cuda/convolution:convolution_kernel_v2", conv, "convolution_kernel_v2", _convolution(2), globals_=g
        ),
        Case(
            "learn_cuda/convolution:convolution_kernel_v3", conv, "convolution_kernel_v3", _convolution(3), globals_=g
        ),
        Case("learn_cuda/scan_v1:scan_v1_kernel", _D + "scan_v1.cu", "scan_v1_kernel", _scan(1), headers=scan_h),
        Case("learn_cuda/scan_v2:scan_v2_kernel", _D + "scan_v2.cu", "scan_v2_kernel", _scan(2), headers=scan_h),
        Case(
            "learn_cuda/n_body:calculateBodyForce",
            _D + "n_body.cu",
            "calculateBodyForce",
            _n_body,
            headers=(_D + "n_body.h",),
        ),
    ]
