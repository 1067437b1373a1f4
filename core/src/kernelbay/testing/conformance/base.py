"""The suite's base: the settings and sources a backend overrides, the fixtures, test data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pytest

import kernelbay as kb

from ..plugin import require_device
from .kernels import BAD_CUDA, SAXPY_CUDA, scalar_kernel_cuda

__all__ = ["Suite", "make_rng", "sample"]


def make_rng() -> np.random.Generator:
    return np.random.default_rng()


def sample(dtype: np.dtype, size: int, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(size).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size, endpoint=True).astype(dtype)


class Suite:
    """What every part of the suite stands on: the settings and sources a backend overrides, and
    the ``device`` and ``saxpy`` fixtures."""

    backend: ClassVar[str] = ""
    dtypes: ClassVar[Sequence[str]] = ("float32", "float64", "int32", "int64", "uint8", "int16", "float16")
    sizes: ClassVar[Sequence[int]] = (0, 1, 7, 4096, 1 << 20)
    validates_arg_count: ClassVar[bool] = True

    # --- what a backend may override ------------------------------------------------

    def saxpy_source(self) -> kb.Source | Sequence[kb.Source]:
        return kb.Source(SAXPY_CUDA, lang="cuda", name="saxpy")

    def saxpy_launch(self, n: int) -> dict[str, Any]:
        return {"grid": (max(1, -(-n // 256)),), "block": (256,)}

    def bad_source(self) -> kb.Source:
        return kb.Source(BAD_CUDA, lang="cuda", name="broken")

    def scalar_source(self) -> kb.Source | None:
        return kb.Source(scalar_kernel_cuda(), lang="cuda", name="scalars")

    # --- fixtures -------------------------------------------------------------------

    @pytest.fixture
    def device(self) -> kb.Device:
        if not self.backend:
            pytest.fail("BackendConformance subclasses must set `backend`", pytrace=False)
        return require_device(self.backend)

    @pytest.fixture
    def saxpy(self, device: kb.Device) -> kb.Kernel:
        return kb.compile(self.saxpy_source(), device=device)

    def _run_saxpy(self, kernel: kb.Kernel, device: kb.Device, a: float, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        n = xs.size
        x = kb.asarray(xs, device=device)
        y = kb.asarray(ys, device=device)
        kernel.launch(**self.saxpy_launch(n), args=(x, y, np.float32(a), np.int32(n)))
        device.synchronize()
        return np.array(y.numpy(), copy=True)
