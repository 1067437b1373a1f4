"""Real CUDA kernels with shared memory, barriers, warp intrinsics and cooperative groups on the cpu
backend, each compared with numpy (the sources are shared with tests/cuda/test_cpu_parity.py)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.kernels.block_cases import CASES  # noqa: E402


@pytest.mark.parametrize("case", sorted(CASES))
def test_block_kernel_matches_numpy(cpu, case):
    got, want, exact = CASES[case](cpu)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        # -O3 -march=native contracts a * b + c into FMAs (as nvcc does)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
