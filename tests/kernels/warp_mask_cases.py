"""CUDA sources whose results pin down warp-mask semantics and barrier-free progress, run on the
cpu backend (tests/cpu/test_block_warp_masks.py, test_block_loops.py) and, for parity, on a GPU
(tests/cuda/test_cpu_warp_parity.py). Each kernel takes one `unsigned*` of one slot per thread
and runs as a single block of ``BLOCK[name]`` threads."""

from __future__ import annotations

ACTIVEMASK_BRANCHES = """
__global__ void k(unsigned* y) {
    // The branches differ, so no compiler can merge the two calls into one after the branch.
    if (threadIdx.x % 32 < 12) y[threadIdx.x] = __activemask();
    else y[threadIdx.x] = __activemask() + 1u;
}
"""

ACTIVEMASK_REDUCE = """
__global__ void k(unsigned* y) {
    if (threadIdx.x < 12) y[threadIdx.x] = __reduce_add_sync(__activemask(), threadIdx.x);
}
"""

ACTIVEMASK_CONVERGED = "__global__ void k(unsigned* y) { y[threadIdx.x] = __activemask(); }"

OWN_VALUE_SHUFFLES = """
__global__ void k(unsigned* y) {
    unsigned v = threadIdx.x * 10;
    unsigned a = __shfl_up_sync(0xffffffffu, v, 4, 8);
    unsigned b = __shfl_down_sync(0xffffffffu, v, 4, 8);
    unsigned c = __shfl_xor_sync(0xffffffffu, v, 16, 16);
    y[threadIdx.x] = a + 1000 * b + 1000000 * c;
}
"""

HANDSHAKE = r"""
__global__ void k(unsigned* out) {
    __shared__ volatile int ping, pong;
    if (threadIdx.x == 0) ping = pong = 0;
    __syncthreads();
    // A handshake without a barrier: whichever of the two runs first waits for the other.
    int tries = 0;
    if (threadIdx.x == 0) {
        while (ping == 0 && tries < 1000000) ++tries;
        pong = 1;
        out[0] = ping;
    } else if (threadIdx.x == blockDim.x - 1) {
        ping = 1;
        while (pong == 0 && tries < 1000000) ++tries;
        out[1] = pong;
    }
}
"""


def own_value_shuffles_reference() -> list[int]:
    """What OWN_VALUE_SHUFFLES gives by the CUDA guide: up/down past the 8-lane segment and xor
    into a later 16-lane segment return the caller's own value; xor into an earlier one reads it."""
    want = []
    for lane in range(32):
        seg = lane & ~7
        a = lane - 4 if lane - seg >= 4 else lane
        b = lane + 4 if lane - seg + 4 < 8 else lane
        c = lane ^ 16 if lane >= 16 else lane
        want.append(10 * a + 1000 * 10 * b + 1000000 * 10 * c)
    return want


#: name -> (source, threads in the block, expected result)
CASES = {
    "activemask_branches": (ACTIVEMASK_BRANCHES, 64, ([0x00000FFF] * 12 + [0xFFFFF001] * 20) * 2),
    "activemask_reduce": (ACTIVEMASK_REDUCE, 32, [sum(range(12))] * 12 + [0] * 20),
    "activemask_converged": (ACTIVEMASK_CONVERGED, 40, [0xFFFFFFFF] * 32 + [0xFF] * 8),
    "own_value_shuffles": (OWN_VALUE_SHUFFLES, 32, own_value_shuffles_reference()),
    "handshake": (HANDSHAKE, 64, [1, 1] + [0] * 62),
}
