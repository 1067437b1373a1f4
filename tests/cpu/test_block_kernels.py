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


SHARED_FORMS = r"""
__shared__ int file_scope[64];
__device__ int from_device(int t) {
    __shared__ int in_device[64];
    in_device[t] = t * 2;
    __syncthreads();
    return in_device[63 - t];
}
__global__ void forms(int* out) {
    static __shared__ char odd[3];
    volatile __shared__ int vol[64];
    __shared__ __align__(16) unsigned char bytes[64];
    __shared__ double grid[4][8][2];
    int t = threadIdx.x;
    if (t < 3) odd[t] = 'a' + t;
    vol[t] = t;
    bytes[t] = (unsigned char)t;
    file_scope[t] = 100 + t;
    grid[t / 16][(t / 2) % 8][t % 2] = t * 0.5;
    __syncthreads();
    int aligned = ((unsigned long long)(void*)odd % 16 == 0) + ((unsigned long long)(void*)bytes % 16 == 0) +
                  ((unsigned long long)(void*)grid % 16 == 0) + ((unsigned long long)(void*)file_scope % 16 == 0);
    out[t] = vol[63 - t] + bytes[t] + file_scope[63 - t] + from_device(t) + (int)grid[3][7][1] + odd[t % 3] + 1000 * aligned;
}
"""


def test_shared_declaration_forms_and_alignment(cpu):
    import kernelbay as kb

    k = kb.compile(kb.Source(SHARED_FORMS, lang="cuda", name="forms"), cpu)
    out = kb.asarray(np.zeros(64, np.int32), device=cpu)
    k.launch(2, 64, (out,))
    t = np.arange(64)
    want = (63 - t) + t + (100 + 63 - t) + 2 * (63 - t) + 31 + (ord("a") + t % 3) + 4000
    np.testing.assert_array_equal(out.numpy(), want)
