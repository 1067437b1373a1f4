"""The same CUDA sources (tests/kernels/block_cases.py) on a GPU and on the cpu backend give the
same results: bit-equal for integer kernels, within FMA tolerance for float ones. Skips without a
GPU; fails instead under --kernelbay-require=cuda."""

from __future__ import annotations

import os
import sys

import kernelbay as kb
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.kernels.block_cases import CASES  # noqa: E402

pytestmark = pytest.mark.kernelbay_device("cuda")


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_and_cpu_agree(case) -> None:
    gpu_got, want, exact = CASES[case](kb.device("cuda:0"))
    cpu_got, _, _ = CASES[case](kb.device("cpu"))
    if exact:
        np.testing.assert_array_equal(gpu_got, want)
        np.testing.assert_array_equal(cpu_got, gpu_got)
    else:
        np.testing.assert_allclose(gpu_got, want, rtol=2e-5, atol=2e-5)
        # both contract a * b + c into FMAs, but not necessarily the same ones
        np.testing.assert_allclose(cpu_got, gpu_got, rtol=2e-5, atol=2e-5)
