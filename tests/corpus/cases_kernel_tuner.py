"""Corpus cases: KernelTuner/kernel_tuner examples/cuda (Apache-2.0), with numpy references.

Kernel Tuner compiles these files with its tunable parameters as preprocessor definitions
(``-Dblock_size_x=...``) and launches grid = problem size / (block size x tiling factor); the
cases pass one tuned configuration the same way (``Case.options``). Where a file fixes a large
problem size (``#define image_width 4096``), the launch covers a corner of the grid (the
kernel's own geometry, fewer blocks), its inputs span only the rows that corner reads, and the
check covers the outputs it writes: the device code is unchanged and the CI run stays small.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.corpus.cases import Case, Launch, ceil_div

_D = "kernel_tuner/"


def _opts(**kw: int) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in kw.items())


# convolution.cu: image 4096 x 4096, filter 17 x 17 (its defaults), input padded by the border.
_IMG_W, _FH, _FW = 4096, 17, 17
_IN_W = _IMG_W + (_FW // 2) * 2


def _conv_filter() -> np.ndarray:
    return np.random.default_rng(7).random(_FH * _FW, dtype=np.float32)


def _convolution(naive: bool, bx: int, by: int, tx: int, ty: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        gx, gy = 2, 2  # a corner of the (4096 / (bx * tx), 4096 / (by * ty)) grid
        out_h, out_w = gy * by * ty, gx * bx * tx
        rows = out_h + (_FH // 2) * 2  # the input rows that corner reads (row stride input_width)
        inp = rng.random((rows, _IN_W), dtype=np.float32)
        filt = _conv_filter()
        f64 = filt.astype(np.float64).reshape(_FH, _FW)
        want = np.zeros((out_h, out_w))
        for i in range(_FH):
            for j in range(_FW):
                want += inp[i : i + out_h, j : j + out_w].astype(np.float64) * f64[i, j]

        def check(outs: dict[int, np.ndarray]) -> None:
            got = outs[0].reshape(out_h, _IMG_W)[:, :out_w]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg="the corner's outputs")

        args = [np.zeros(out_h * _IMG_W, np.float32), inp.ravel(), filt]
        return Launch(args, (gx, gy), (bx, by), {}, check=check)

    return make


# pnpoly.cu: 600 vertices in __constant__ memory (float2), points tested by crossing number.
_VERTICES = 600


def _polygon() -> np.ndarray:
    """A star-shaped polygon around (0.5, 0.5): sorted angles, random radii (float2 pairs)."""
    rng = np.random.default_rng(11)
    ang = np.sort(rng.random(_VERTICES)) * 2 * np.pi
    rad = 0.2 + 0.25 * rng.random(_VERTICES)
    return np.stack([0.5 + rad * np.cos(ang), 0.5 + rad * np.sin(ang)], axis=1).astype(np.float32)


def _slopes(v: np.ndarray) -> np.ndarray:
    """kernel_tuner's examples/cuda/pnpoly.py precomputes, for edge (j, j-1): dx / dy."""
    vk = np.roll(v, 1, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((vk[:, 0] - v[:, 0]) / (vk[:, 1] - v[:, 1])).astype(np.float32)


def _pnpoly(block: int, tile: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        n = 20000
        pts = rng.random((n, 2), dtype=np.float32)
        v = _polygon()
        vk = np.roll(v, 1, axis=0)
        inside = np.zeros(n, bool)
        for j in range(_VERTICES):  # float32 arithmetic, as the kernel's
            vjx, vjy, vkx, vky = v[j, 0], v[j, 1], vk[j, 0], vk[j, 1]
            slope = (vkx - vjx) / (vky - vjy) if vky != vjy else np.float32(np.inf)
            between = (vjy > pts[:, 1]) != (vky > pts[:, 1])
            inside ^= between & (pts[:, 0] < slope * (pts[:, 1] - vjy) + vjx)

        def check(outs: dict[int, np.ndarray]) -> None:
            got = outs[0].astype(bool)
            # a point within an ulp of an edge may go either way (the GPU fuses the multiply-add)
            bad = int((got != inside).sum())
            assert bad <= n // 2000, f"{bad} of {n} points classified differently from numpy"
            assert 0.1 < inside.mean() < 0.9

        return Launch(
            [np.zeros(n, np.int32), pts.ravel(), np.int32(n)], (ceil_div(n, block * tile),), (block,), {}, check=check
        )

    return make


# reduction.cu: each block sums a grid-stride slice; the block partials go to sum_global.
def _sum_floats(block: int, blocks: int, vector: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        n = 1 << 16
        x = rng.random(n, dtype=np.float32)
        total = float(x.astype(np.float64).sum())

        def check(outs: dict[int, np.ndarray]) -> None:
            got = float(outs[0].astype(np.float64).sum())
            np.testing.assert_allclose(got, total, rtol=1e-5, err_msg="sum of the block partials")
            per_thread = x.reshape(-1, vector).sum(axis=1)  # thread t of block b takes i = b*bs+t+k*step
            idx = np.arange(per_thread.size)
            want = np.bincount((idx // block) % blocks, weights=per_thread, minlength=blocks)
            np.testing.assert_allclose(outs[0], want, rtol=1e-4, err_msg="each block's partial")

        return Launch([np.zeros(blocks, np.float32), x, np.int32(n)], (blocks,), (block,), {}, check=check)

    return make


# stencil.cu: 5-point average on a 4096 x 2048 domain.
def _stencil(rng: np.random.Generator) -> Launch:
    w, bx, by = 4096, 32, 8
    gx, gy = 4, 8  # a corner of the (4096 / 32, 2048 / 8) grid: rows 0..63, cols 0..127
    ch, cw = gy * by, gx * bx
    x_old = rng.random((ch + 1, w), dtype=np.float32)  # the rows that corner reads (row stride 4096)
    xo = x_old.astype(np.float64)
    want = np.zeros((ch, cw))
    want[1:ch, 1:cw] = (
        xo[1:ch, 1:cw] + xo[1:ch, 0 : cw - 1] + xo[1:ch, 2 : cw + 1] + xo[2 : ch + 1, 1:cw] + xo[0 : ch - 1, 1:cw]
    ) / 5

    def check(outs: dict[int, np.ndarray]) -> None:
        got = outs[0].reshape(ch, w)
        np.testing.assert_allclose(got[:, :cw], want, rtol=1e-5, atol=1e-6, err_msg="the corner's outputs")
        assert not got[:, cw:].any(), "a thread outside the launched corner wrote"

    return Launch([np.zeros(ch * w, np.float32), x_old.ravel()], (gx, gy), (bx, by), {}, check=check)


# matmul.cu: C = A @ B, WIDTH 4096; block_size_x = block_size_y * tile_size_y.
def _matmul(rng: np.random.Generator) -> Launch:
    width, bx, by, tx, ty = 4096, 32, 8, 2, 4
    gx, gy = 2, 2  # a corner of the (4096 / 64, 4096 / 32) grid: C rows 0..63, cols 0..127
    rows, cols = gy * by * ty, gx * bx * tx
    a = rng.standard_normal((rows, width), dtype=np.float32)  # the rows of A that corner reads
    b = np.zeros((width, width), np.float32)
    b[:, :cols] = rng.standard_normal((width, cols), dtype=np.float32)
    want = a.astype(np.float64) @ b[:, :cols].astype(np.float64)

    def check(outs: dict[int, np.ndarray]) -> None:
        got = outs[0].reshape(rows, width)[:, :cols]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg="the corner of C")

    return Launch([np.zeros(rows * width, np.float32), a.ravel(), b.ravel()], (gx, gy), (bx, by), {}, check=check)


# spmv.cu: CSR y = A x, threads_per_row threads per row with a shuffle-xor reduction.
def _spmv(rng: np.random.Generator) -> Launch:
    nrows, ncols, block, tpr = 1024, 1024, 128, 32
    counts = rng.integers(0, 80, size=nrows)
    rows = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    cols = np.concatenate([np.sort(rng.choice(ncols, size=c, replace=False)) for c in counts]).astype(np.int32)
    vals = rng.standard_normal(cols.size, dtype=np.float32)
    x = rng.standard_normal(ncols, dtype=np.float32)
    want = np.array(
        [np.dot(vals[rows[i] : rows[i + 1]].astype(np.float64), x[cols[rows[i] : rows[i + 1]]]) for i in range(nrows)]
    )
    args = [np.zeros(nrows, np.float32), rows, cols, vals, x, np.int32(nrows)]
    return Launch(args, (ceil_div(nrows * tpr, block),), (block,), {0: want}, rtol=1e-4, atol=1e-4)


def kernel_tuner_cases() -> list[Case]:
    conv_g = {"d_filter": _conv_filter()}
    poly = _polygon()
    pn_g = {"d_vertices": poly.ravel(), "d_slopes": _slopes(poly)}
    return [
        Case(
            "kernel_tuner/convolution:convolution_kernel",
            _D + "convolution.cu",
            "convolution_kernel",
            _convolution(False, 16, 16, 1, 1),
            globals_=conv_g,
        ),
        Case(
            "kernel_tuner/convolution:convolution_kernel[tiled,ldg]",
            _D + "convolution.cu",
            "convolution_kernel",
            _convolution(False, 32, 8, 2, 2),
            globals_=conv_g,
            options=_opts(block_size_x=32, block_size_y=8, tile_size_x=2, tile_size_y=2, read_only=1, use_padding=1),
        ),
        Case(
            "kernel_tuner/convolution:convolution_naive",
            _D + "convolution.cu",
            "convolution_naive",
            _convolution(True, 16, 16, 1, 1),
        ),
        Case("kernel_tuner/pnpoly:cn_pnpoly", _D + "pnpoly.cu", "cn_pnpoly", _pnpoly(256, 1), globals_=pn_g),
        Case(
            "kernel_tuner/pnpoly:cn_pnpoly[tiled,slopes]",
            _D + "pnpoly.cu",
            "cn_pnpoly",
            _pnpoly(128, 4),
            globals_=pn_g,
            options=_opts(block_size_x=128, tile_size=4, between_method=1, use_precomputed_slopes=1, use_method=1),
        ),
        Case(
            "kernel_tuner/pnpoly:cn_pnpoly_naive", _D + "pnpoly.cu", "cn_pnpoly_naive", _pnpoly(256, 1), globals_=pn_g
        ),
        Case(
            "kernel_tuner/reduction:sum_floats[float4,shfl]",
            _D + "reduction.cu",
            "sum_floats",
            _sum_floats(128, 64, 4),
            options=_opts(block_size_x=128, num_blocks=64, vector=4, use_shuffle=1, loop_unroll_factor_0=1),
        ),
        Case(
            "kernel_tuner/reduction:sum_floats[float,smem]",
            _D + "reduction.cu",
            "sum_floats",
            _sum_floats(256, 32, 1),
            options=_opts(block_size_x=256, num_blocks=32, vector=1, use_shuffle=0, loop_unroll_factor_0=4),
        ),
        Case(
            "kernel_tuner/stencil:stencil_kernel",
            _D + "stencil.cu",
            "stencil_kernel",
            _stencil,
            options=_opts(block_size_x=32, block_size_y=8),
        ),
        Case(
            "kernel_tuner/matmul:matmul_kernel",
            _D + "matmul.cu",
            "matmul_kernel",
            _matmul,
            options=_opts(block_size_x=32, block_size_y=8, tile_size_x=2, tile_size_y=4),
        ),
        Case(
            "kernel_tuner/spmv:spmv_kernel",
            _D + "spmv.cu",
            "spmv_kernel",
            _spmv,
            options=_opts(block_size_x=128, threads_per_row=32, read_only=1),
        ),
    ]
