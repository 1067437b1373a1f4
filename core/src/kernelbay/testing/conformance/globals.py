"""The suite's checks of module globals (``kernelbay_module_global``): ``__constant__`` and
``__device__`` variables set and read from the host before and between launches, or refused
with an ``UnsupportedError`` naming the backend where it has no such hook."""

from __future__ import annotations

import numpy as np
import pytest

import kernelbay as kb

from .base import Suite

GLOBALS_CUDA = r"""
__constant__ float coef[2];
__device__ int hits;
extern "C" __global__ void affine(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = coef[0] * (float)i + coef[1];
    if (i == 0) atomicAdd(&hits, 1);
}
"""


class GlobalsTests(Suite):
    """Module globals round-trip and reach launches; a backend without the hook says so by name."""

    @pytest.fixture
    def with_globals(self, device: kb.Device) -> kb.Kernel:
        try:
            return kb.compile(kb.Source(GLOBALS_CUDA, "cuda", name="affine"), device=device)
        except kb.InvalidArgumentError as exc:
            if "language" not in str(exc):
                raise
            if not self.implements("kernelbay_module_global"):
                # No hook: the refusal is what there is to check, on the backend's own kernel.
                src = self.saxpy_source()
                return kb.compile(src if isinstance(src, kb.Source) else src[0], device=device)
            pytest.skip(
                f"{self.backend} implements kernelbay_module_global but does not compile cuda, the language of "
                f"this check's kernel: {exc}"
            )

    def test_module_globals_before_and_between_launches(self, device: kb.Device, with_globals: kb.Kernel) -> None:
        k = with_globals
        try:
            k.set_global("coef", np.array([2.0, 1.0], np.float32))
        except kb.UnsupportedError as exc:
            assert f"{device.backend!r}" in str(exc), exc
            return
        assert k.global_nbytes("coef") == 8 and k.global_nbytes("hits") == 4
        k.set_global("hits", np.int32(0))
        n = 300
        y = kb.zeros(n, "float32", device=device)
        k.launch(grid=(n + 127) // 128, block=128, args=(y, np.int32(n)))
        device.synchronize()
        np.testing.assert_array_equal(y.numpy(), 2 * np.arange(n, dtype=np.float32) + 1)
        k.set_global("coef", np.array([-1.0, 0.0], np.float32))
        k.launch(grid=(n + 127) // 128, block=128, args=(y, np.int32(n)))
        device.synchronize()
        np.testing.assert_array_equal(y.numpy(), -np.arange(n, dtype=np.float32))
        np.testing.assert_array_equal(k.get_global("coef", "float32"), [-1.0, 0.0])
        assert int(k.get_global("hits", "int32")[0]) == 2
        with pytest.raises(kb.InvalidArgumentError, match="no global 'absent'"):
            k.get_global("absent", "float32")
