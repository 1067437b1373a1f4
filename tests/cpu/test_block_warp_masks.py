"""Warp masks on the cpu backend: `__activemask()` is the lanes executing the call together, and a
shuffle that reads a lane its mask does not name (undefined on a GPU) is a LaunchError. The
sources with a defined result are shared with the GPU parity test (tests/kernels/warp_mask_cases.py)."""

from __future__ import annotations

import os
import sys

import kernelbay as kb
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.kernels.warp_mask_cases import CASES  # noqa: E402


def _run(cpu, src: str, block: int = 32) -> list[int]:
    k = kb.compile(kb.Source(src, lang="cuda", name="k"), cpu)
    y = kb.asarray(np.zeros(block, np.uint32), device=cpu)
    k.launch(1, block, (y,))
    return y.numpy().tolist()


@pytest.mark.parametrize("case", sorted(CASES))
def test_warp_mask_case_gives_what_a_gpu_gives(cpu, case):
    # activemask_*: the lanes executing the call together (each branch's lanes; the whole warp
    # when converged; the idiom of reducing over the branch's lanes); own_value_shuffles: the
    # CUDA guide's defined cases; handshake: two threads wait for each other without a barrier.
    src, block, want = CASES[case]
    assert _run(cpu, src, block) == want


def test_activemask_leaves_out_exited_lanes(cpu):
    src = """
__global__ void k(unsigned* y) {
    if (threadIdx.x >= 15) return;
    __syncwarp(0x7fffu);
    y[threadIdx.x] = __activemask();
}
"""
    assert _run(cpu, src, block=20)[:15] == [0x7FFF] * 15


def test_shuffle_reading_a_lane_outside_its_mask_is_a_launch_error_when_checked(cpu, monkeypatch):
    src = """
__global__ void k(unsigned* y) {
    if (threadIdx.x < 16) y[threadIdx.x] = __shfl_down_sync(0x0000ffffu, threadIdx.x, 8);
}
"""
    # Unchecked, lanes 8..15 read lanes 16..23, which are not at the call: they get 0.
    assert _run(cpu, src)[:16] == [*range(8, 16), *[0] * 8]
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    with pytest.raises(
        kb.LaunchError,
        match=r"kernel 'k'.*block \(0,0,0\): thread \(8,0,0\) \(lane 8\) in __shfl_down_sync at kernel.cu:3 "
        r"reads lane 16, which mask 0x0000ffff does not name",
    ):
        _run(cpu, src)


def test_broadcast_from_a_lane_outside_the_mask_is_a_launch_error_when_checked(cpu, monkeypatch):
    src = """
__global__ void k(unsigned* y) {
    if (threadIdx.x > 0) y[threadIdx.x] = __shfl_sync(0xfffffffeu, threadIdx.x, 0);
}
"""
    assert _run(cpu, src) == [0] * 32  # lane 0 has exited: it gives 0
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    with pytest.raises(kb.LaunchError, match=r"in __shfl_sync at kernel.cu:3 reads lane 0, which mask 0xfffffffe"):
        _run(cpu, src)
