"""Warp masks on the cpu backend: `__activemask()` is the lanes executing the call together, and a
shuffle that reads a lane its mask does not name (undefined on a GPU) is a LaunchError."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest


def _run(cpu, src: str, block: int = 32) -> list[int]:
    k = kb.compile(kb.Source(src, lang="cuda", name="k"), cpu)
    y = kb.asarray(np.zeros(block, np.uint32), device=cpu)
    k.launch(1, block, (y,))
    return y.numpy().tolist()


def test_activemask_in_diverged_branches_is_each_branchs_lanes(cpu):
    src = """
__global__ void k(unsigned* y) {
    if (threadIdx.x % 32 < 12) y[threadIdx.x] = __activemask();
    else y[threadIdx.x] = __activemask();
}
"""
    got = _run(cpu, src, block=64)
    assert got == ([0x00000FFF] * 12 + [0xFFFFF000] * 20) * 2


def test_activemask_feeds_a_warp_operation_inside_a_branch(cpu):
    # The idiom: the lanes that took the branch reduce among themselves.
    src = """
__global__ void k(unsigned* y) {
    if (threadIdx.x < 12) y[threadIdx.x] = __reduce_add_sync(__activemask(), threadIdx.x);
}
"""
    assert _run(cpu, src) == [sum(range(12))] * 12 + [0] * 20


def test_activemask_leaves_out_exited_lanes_and_lanes_past_the_block(cpu):
    src = """
__global__ void k(unsigned* y) {
    if (threadIdx.x >= 15) return;
    __syncwarp(0x7fffu);
    y[threadIdx.x] = __activemask();
}
"""
    assert _run(cpu, src, block=20)[:15] == [0x7FFF] * 15


def test_activemask_with_every_lane_converged_is_the_whole_warp(cpu):
    src = "__global__ void k(unsigned* y) { y[threadIdx.x] = __activemask(); }"
    assert _run(cpu, src, block=40) == [0xFFFFFFFF] * 32 + [0xFF] * 8


def test_shuffle_reading_a_lane_outside_its_mask_is_a_launch_error(cpu):
    src = """
__global__ void k(unsigned* y) {
    if (threadIdx.x < 16) y[threadIdx.x] = __shfl_down_sync(0x0000ffffu, threadIdx.x, 8);
}
"""
    with pytest.raises(
        kb.LaunchError,
        match=r"kernel 'k'.*block \(0,0,0\): thread \(8,0,0\) \(lane 8\) in __shfl_down_sync at kernel.cu:3 "
        r"reads lane 16, which mask 0x0000ffff does not name",
    ):
        _run(cpu, src)


def test_broadcast_from_a_lane_outside_the_mask_is_a_launch_error(cpu):
    src = """
__global__ void k(unsigned* y) {
    if (threadIdx.x > 0) y[threadIdx.x] = __shfl_sync(0xfffffffeu, threadIdx.x, 0);
}
"""
    with pytest.raises(kb.LaunchError, match=r"in __shfl_sync at kernel.cu:3 reads lane 0, which mask 0xfffffffe"):
        _run(cpu, src)


def test_shuffles_whose_result_is_the_callers_own_value_stay_legal(cpu):
    # up/down past the segment, and xor into a later group of `width` lanes: the caller's value;
    # xor into an earlier group reads it (CUDA guide, warp shuffle functions).
    src = """
__global__ void k(unsigned* y) {
    unsigned v = threadIdx.x * 10;
    unsigned a = __shfl_up_sync(0xffffffffu, v, 4, 8);
    unsigned b = __shfl_down_sync(0xffffffffu, v, 4, 8);
    unsigned c = __shfl_xor_sync(0xffffffffu, v, 16, 16);
    y[threadIdx.x] = a + 1000 * b + 1000000 * c;
}
"""
    want = []
    for lane in range(32):
        seg = lane & ~7
        a = lane - 4 if lane - seg >= 4 else lane
        b = lane + 4 if lane - seg + 4 < 8 else lane
        c = lane ^ 16 if lane >= 16 else lane
        want.append(10 * a + 1000 * 10 * b + 1000000 * 10 * c)
    assert _run(cpu, src) == want
