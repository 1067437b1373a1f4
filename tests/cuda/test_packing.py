"""Argument packing and validation against declared parameter sizes: no GPU needed."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

import kernelbay as kb
from kernelbay_cuda import kernel, packing

DEV = kb.Device("cuda", 0, "fake")
OTHER = kb.Device("cuda", 1, "fake")
SAXPY = packing.layout([(8, 8, "u64"), (8, 8, "u64"), (4, 4, "f32"), (4, 4, "u32")])


class _NoFree:
    def free(self, device, handle) -> None:
        pass


def _arr(ptr: int, device=DEV) -> kb.Array:
    return kb.Array(device, 16, ptr, _NoFree(), (4,), np.dtype("float32"))


def _pack(params, args):
    blk = kernel.ParamBlock(params)
    packer = packing.make_packer("k", params, args, DEV)
    packer(args, DEV, blk.buf)
    return blk, packer


def test_layout_aligns_like_c() -> None:
    assert [o for *_, o in packing.layout([(4, 4, "f32"), (8, 8, "u64"), (2, 2, "u16"), (24, 8, "b8")])] == [0, 8, 16, 24]


def test_saxpy_arguments_are_packed_in_place() -> None:
    x, y = _arr(0x1000), _arr(0x2000)
    blk, packer = _pack(SAXPY, (x, y, np.float32(2.5), np.int32(7)))
    assert struct.unpack("<QQfi", bytes(blk.buf)[:24]) == (0x1000, 0x2000, 2.5, 7)
    base = ctypes.addressof(blk.buf)
    assert list(blk.ptrs) == [base, base + 8, base + 16, base + 20]
    # A repeated launch only rewrites the values, in the same block.
    packer((y, x, np.float32(-1.0), np.int32(9)), DEV, blk.buf)
    assert struct.unpack("<QQfi", bytes(blk.buf)[:24]) == (0x2000, 0x1000, -1.0, 9)


def test_python_numbers_where_the_size_is_unambiguous() -> None:
    blk, _ = _pack(SAXPY, (_arr(8), _arr(16), 2, 5))
    assert struct.unpack("<QQfi", bytes(blk.buf)[:24]) == (8, 16, 2.0, 5)
    params = packing.layout([(8, 8, ""), (4, 4, "")])  # sizes only, as cuFuncGetParamInfo gives
    blk, _ = _pack(params, (1.5, -3))
    assert struct.unpack("<di", bytes(blk.buf)[:12]) == (1.5, -3)


def test_changed_types_are_repacked() -> None:
    x, y = _arr(0x10), _arr(0x20)
    blk, packer = _pack(SAXPY, (x, y, np.float32(1), np.int32(1)))
    with pytest.raises(packing.Replan):
        packer((x, y, 1.0, np.int32(1)), DEV, blk.buf)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((1, 2, 3), kb.InvalidArgumentError, r"takes 4 argument\(s\).*got 3"),
        ((_arr(8), _arr(8), np.float64(1), np.int32(1)), kb.ArgumentTypeError, "float64 .8 bytes., but the parameter is 4"),
        ((_arr(8), _arr(8), np.float32(1), np.float32(1)), kb.ArgumentTypeError, "parameter is u32"),
        ((_arr(8), _arr(8), np.float32(1), 1.5), kb.ArgumentTypeError, "Python float"),
        ((_arr(8), _arr(8), np.float32(1), 1 << 40), kb.InvalidArgumentError, "does not fit"),
        ((_arr(8), _arr(8), np.float32(1), "x"), kb.ArgumentTypeError, "has type str"),
        ((_arr(8, OTHER), _arr(8), np.float32(1), np.int32(1)), kb.InvalidArgumentError, "argument 0 .* lives on cuda:1"),
    ],
)
def test_bad_arguments_are_named(args, error, match) -> None:
    with pytest.raises(error, match=match):
        packing.make_packer("k", SAXPY, args, DEV)


def test_closed_array_is_use_after_free() -> None:
    a = _arr(8)
    a.close()
    with pytest.raises(kb.UseAfterFreeError, match="argument 1"):
        packing.make_packer("k", SAXPY, (_arr(8), a, np.float32(1), np.int32(1)), DEV)


def test_python_int_needs_an_explicit_size_for_odd_parameters() -> None:
    with pytest.raises(kb.ArgumentTypeError, match="numpy scalar"):
        packing.make_packer("k", packing.layout([(2, 2, "")]), (3,), DEV)
    blk, _ = _pack(packing.layout([(2, 2, "")]), (np.int16(-3),))
    assert struct.unpack("<h", bytes(blk.buf)[:2]) == (-3,)
