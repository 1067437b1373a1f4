"""Module globals on a real NVIDIA GPU: ``__constant__`` and ``__device__`` variables read and
written from the host before and between launches (``cudaMemcpyToSymbol``), and a device
``assert`` from <cassert> that fires. Skips without a GPU; fails instead under
--kernelbay-require=cuda."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay.errors import InvalidArgumentError, UseAfterFreeError

pytestmark = pytest.mark.kernelbay_device("cuda")

SCALE = r"""
__constant__ float coef[4];
__device__ int calls;
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = coef[0] * x[i] + coef[1] * coef[2] - coef[3];
    if (i == 0) atomicAdd(&calls, 1);
}
"""


@pytest.fixture
def dev() -> kb.Device:
    return kb.device("cuda:0")


def test_constant_set_before_and_between_launches(dev) -> None:
    k = kb.compile(kb.Source(SCALE, "cuda", name="scale"), dev)
    n = 1000
    x = np.arange(n, dtype=np.float32)
    dx, dy = kb.asarray(x, device=dev), kb.asarray(np.zeros(n, np.float32), device=dev)
    assert k.global_nbytes("coef") == 16 and k.global_nbytes("calls") == 4
    k.set_global("coef", np.array([2, 3, 4, 5], np.float32))
    k.set_global("calls", np.int32(0))
    k.launch((n + 255) // 256, 256, (dx, dy, np.int32(n)))
    np.testing.assert_array_equal(dy.numpy(), 2 * x + 12 - 5)
    assert np.array_equal(k.get_global("coef", np.float32), [2, 3, 4, 5])
    k.set_global("coef", np.array([-1, 0, 0, 0], np.float32))  # between launches
    k.launch((n + 255) // 256, 256, (dx, dy, np.int32(n)))
    np.testing.assert_array_equal(dy.numpy(), -x)
    assert k.get_global("calls", np.int32)[0] == 2  # written by the kernel, read by the host


def test_global_errors_name_the_variable(dev) -> None:
    k = kb.compile(kb.Source(SCALE, "cuda", name="scale"), dev)
    with pytest.raises(InvalidArgumentError, match="no global 'nope'"):
        k.set_global("nope", np.zeros(1, np.float32))
    with pytest.raises(InvalidArgumentError, match="has 16 bytes"):
        k.set_global("coef", np.zeros(5, np.float32))
    with pytest.raises(InvalidArgumentError, match="has 16 bytes"):
        k.get_global("coef", np.float32, shape=(8,))
    k.close()
    with pytest.raises(UseAfterFreeError):
        k.get_global("coef", np.float32)
