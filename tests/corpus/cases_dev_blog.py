"""Corpus cases: NVIDIA-developer-blog/code-samples (BSD-3-Clause), with numpy references.

The CUDA C++ series' shared-memory, finite-difference and coalescing kernels and the
mixed-precision post's half2 AXPY; launches as each file's host code.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.corpus.cases import Case, Launch

_D = "dev_blog/"


def _reverse(dynamic: bool) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        n = 64  # main: staticReverse<<<1, n>>>, dynamicReverse<<<1, n, n * sizeof(int)>>>
        d = rng.integers(-1000, 1000, size=n, dtype=np.int32)
        return Launch([d, np.int32(n)], (1,), (n,), {0: d[::-1].copy()}, shared_mem=n * 4 if dynamic else 0)

    return make


# finite-difference.cu: 64^3 grid, 8th-order periodic derivative (period m - 1: the end points
# repeat), stencil weights in __constant__ memory set by setDerivativeParameters.
_M, _SP, _LP = 64, 4, 32


def _fd_coeffs(axis: str) -> dict[str, np.ndarray]:
    dsinv = np.float32(_M - 1.0)
    w = [np.float32(4.0 / 5.0) * dsinv, np.float32(-1.0 / 5.0) * dsinv]
    w += [np.float32(4.0 / 105.0) * dsinv, np.float32(-1.0 / 280.0) * dsinv]
    return {f"c_{c}{axis}": np.float32(v) for c, v in zip("abcd", w, strict=True)}


def _fd_ref(f: np.ndarray, ax: int, coeffs: list[np.float32]) -> np.ndarray:
    m = f.shape[ax]
    idx = np.concatenate([np.arange(m - 5, m - 1), np.arange(m), np.arange(1, 5)])  # the shared-memory halo
    ext = np.take(f.astype(np.float64), idx, axis=ax)
    out = np.zeros(f.shape)
    for d, c in enumerate(coeffs, start=1):
        hi = np.take(ext, np.arange(4 + d, 4 + d + m), axis=ax)
        lo = np.take(ext, np.arange(4 - d, 4 - d + m), axis=ax)
        out += float(c) * (hi - lo)
    return out


def _derivative(axis: str, large: bool) -> Callable[[np.random.Generator], Launch]:
    # setDerivativeParameters: grid[dim][large], block[dim][large]
    geometry = {
        ("x", False): ((_M // _SP, _M), (_M, _SP)),
        ("x", True): ((_M // _LP, _M), (_M, _SP)),
        ("y", False): ((_M // _SP, _M), (_SP, _M)),
        ("y", True): ((_M // _LP, _M), (_LP, _M * _SP // _LP)),
        ("z", False): ((_M // _SP, _M), (_SP, _M)),
        ("z", True): ((_M // _LP, _M), (_LP, _M * _SP // _LP)),
    }

    def make(rng: np.random.Generator) -> Launch:
        f = rng.standard_normal((_M, _M, _M), dtype=np.float32)  # [k][j][i]
        coeffs = list(_fd_coeffs(axis).values())
        want = _fd_ref(f, {"x": 2, "y": 1, "z": 0}[axis], coeffs)
        grid, block = geometry[(axis, large)]
        return Launch([f.ravel(), np.zeros(f.size, np.float32)], grid, block, {1: want.ravel()}, rtol=1e-4, atol=2e-3)

    return make


def _offset(rng: np.random.Generator) -> Launch:
    block, blocks, s = 256, 64, 7  # runTest<float>: offset<<<n / blockSize, blockSize>>>(d_a, i)
    n = block * blocks
    a = rng.random(n + 32, dtype=np.float32)
    want = a.copy()
    want[s : s + n] += np.float32(1)  # rounded to float, as the kernel's a[i] + 1
    return Launch([a, np.int32(s)], (blocks,), (block,), {0: want}, rtol=0, atol=0)


def _stride(rng: np.random.Generator) -> Launch:
    block, blocks, s = 256, 16, 3  # runTest<double>: stride<<<n / blockSize, blockSize>>>(d_a, i)
    n = block * blocks
    a = rng.random(n * 33)
    want = a.copy()
    want[: n * s : s] += 1
    return Launch([a, np.int32(s)], (blocks,), (block,), {0: want}, rtol=0, atol=0)


def _haxpy(rng: np.random.Generator) -> Launch:
    n = 101  # main uses 100; an odd n also runs the first thread's singleton path
    a = np.float16(2.0)
    x = rng.standard_normal(n).astype(np.float16)
    y = (rng.standard_normal(n) * 4).astype(np.float16)
    want = (a.astype(np.float64) * x + y).astype(np.float16).astype(np.float64)
    return Launch([np.int32(n), a, x, y], (1,), (256,), {3: want}, rtol=2e-3, atol=2e-3)


def dev_blog_cases() -> list[Case]:
    fd = _D + "finite-difference.cu"
    return [
        Case("dev_blog/shared-memory:staticReverse", _D + "shared-memory.cu", "staticReverse", _reverse(False)),
        Case("dev_blog/shared-memory:dynamicReverse", _D + "shared-memory.cu", "dynamicReverse", _reverse(True)),
        *(
            Case(
                f"dev_blog/finite-difference:derivative_{ax}{'_lPencils' if large else ''}",
                fd,
                f"derivative_{ax}{'_lPencils' if large else ''}",
                _derivative(ax, large),
                globals_=_fd_coeffs(ax),
            )
            for ax in "xyz"
            for large in (False, True)
        ),
        Case("dev_blog/coalescing:offset<float>", _D + "coalescing.cu", "offset<float>", _offset),
        Case("dev_blog/coalescing:stride<double>", _D + "coalescing.cu", "stride<double>", _stride),
        Case("dev_blog/haxpy:haxpy", _D + "haxpy.cu", "haxpy", _haxpy, headers=(_D + "fp16_conversion.h",)),
    ]
