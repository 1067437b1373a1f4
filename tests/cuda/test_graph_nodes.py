"""Kernel nodes of a CUDA graph made from the kernel's launch plan (the launcher's too): no GPU needed.

The kernel handle is built without a module (its limits set by hand, its occupancy block
known), so only the node's parameters are checked: geometry, packed arguments, a Triton
kernel's fixed block, added shared memory and hidden scratch pointers.
"""

from __future__ import annotations

import ctypes
import struct
from types import SimpleNamespace

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cuda import graphs, packing
from kernelbay_cuda.kernel import CudaKernel
from kernelbay_cuda.launcher import STALE

DEV = kb.Device("cuda", 0, "fake")
SAXPY = packing.layout([(8, 8, "u64"), (8, 8, "u64"), (4, 4, "f32"), (4, 4, "u32")])


class _NoFree:
    def free(self, device, handle) -> None:
        pass


def _arr(ptr: int) -> kb.Array:
    return kb.Array(DEV, 16, ptr, _NoFree(), (4,), np.dtype("float32"))


def _kernel(params=SAXPY, visible=None) -> CudaKernel:
    k = object.__new__(CudaKernel)
    k.device, k.index, k.name = DEV, 0, "saxpy"
    k.params, k.caller_params, k.arg_names = params, params if visible is None else visible, None
    k.fixed_block, k.extra_shared, k.scratch, k.scratch_buffers, k.scratch_pointers = None, 0, [], None, {}
    k.max_threads, k.max_gx, k.max_gy, k.max_gz, k.max_bx, k.max_by, k.max_bz = (
        1024,
        2**31 - 1,
        65535,
        65535,
        1024,
        1024,
        64,
    )
    k.static_shared, k.dynamic_shared_limit, k.max_shared_optin = 0, 48 * 1024, 48 * 1024
    k.auto_block = {0: 256}
    k.function, k.ctypes_function = 0xF00, ctypes.c_void_p(0xF00)
    k.last_packed, k.entry, k.inner_entry = [STALE], None, None
    return k


def _node(k: CudaKernel, grid, block, args, shared_mem=0):
    g = object.__new__(graphs.CudaGraph)
    g.keep = {}
    step = SimpleNamespace(
        kernel=SimpleNamespace(handle=k), grid=grid, block=block, args=args, shared_mem=shared_mem, index=0
    )
    p = g._kernel_params(step)
    blk = g.keep[0][1]
    return p, bytes(blk.buf)


def test_a_node_packs_the_arguments_and_the_geometry() -> None:
    k = _kernel()
    p, buf = _node(k, (4, 2), None, (_arr(0x1000), _arr(0x2000), np.float32(2.5), np.uint32(7)))
    assert (p.gridDimX, p.gridDimY, p.gridDimZ) == (4, 2, 1)
    assert (p.blockDimX, p.blockDimY, p.blockDimZ) == (256, 1, 1)  # the occupancy block
    assert p.func == 0xF00 and p.sharedMemBytes == 0
    assert struct.unpack_from("<QQfI", buf) == (0x1000, 0x2000, 2.5, 7)


def test_a_node_rejects_what_a_launch_rejects() -> None:
    k = _kernel()
    with pytest.raises(kb.InvalidArgumentError, match=r"block \(1025, 1, 1\) exceeds"):
        _node(k, 1, 1025, (_arr(0x1000), _arr(0x2000), np.float32(1), np.uint32(1)))
    with pytest.raises(kb.ArgumentTypeError):
        _node(k, 1, 32, (_arr(0x1000), 3.0, np.float32(1), np.uint32(1)))


def test_a_triton_node_takes_its_fixed_block_shared_memory_and_scratch() -> None:
    params = packing.layout([(8, 8, "u64"), (4, 4, "u32"), (8, 8, "u64")])  # x, n, hidden scratch
    k = _kernel(params, visible=params[:2])
    k.fixed_block, k.extra_shared = (128, 1, 1), 1024
    k.scratch_buffers, k.scratch_pointers = [], {params[2][3]: 0xABC0}  # scratch already placed by a launch
    p, buf = _node(k, 3, None, (_arr(0x1000), np.uint32(5)), shared_mem=64)
    assert (p.blockDimX, p.sharedMemBytes) == (128, 1024 + 64)
    assert struct.unpack_from("<Q", buf, params[2][3])[0] == 0xABC0
    with pytest.raises(kb.InvalidArgumentError, match="fixed"):
        _node(k, 3, 64, (_arr(0x1000), np.uint32(5)))
