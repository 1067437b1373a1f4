"""Argument packing and validation against declared parameter sizes: no GPU needed."""

from __future__ import annotations

import ctypes
import struct

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cuda import packing

DEV = kb.Device("cuda", 0, "fake")
OTHER = kb.Device("cuda", 1, "fake")
SAXPY = packing.layout([(8, 8, "u64"), (8, 8, "u64"), (4, 4, "f32"), (4, 4, "u32")])


class _NoFree:
    def free(self, device, handle) -> None:
        pass


def _arr(ptr: int, device=DEV) -> kb.Array:
    return kb.Array(device, 16, ptr, _NoFree(), (4,), np.dtype("float32"))


def _pack(params, args):
    blk = packing.ParamBlock(params)
    packer = packing.make_packer("k", params, args, DEV)
    packer(args, DEV, blk.buf)
    return blk, packer


def test_layout_aligns_like_c() -> None:
    assert [o for *_, o in packing.layout([(4, 4, "f32"), (8, 8, "u64"), (2, 2, "u16"), (24, 8, "b8")])] == [
        0,
        8,
        16,
        24,
    ]


def test_saxpy_arguments_are_packed_in_place() -> None:
    x, y = _arr(0x1000), _arr(0x2000)
    blk, packer = _pack(SAXPY, (x, y, np.float32(2.5), np.int32(7)))
    assert struct.unpack("<QQfi", bytes(blk.buf)[:24]) == (0x1000, 0x2000, 2.5, 7)
    base = ctypes.addressof(blk.buf)
    assert list(blk.pointers) == [base, base + 8, base + 16, base + 20]
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
        (
            (_arr(8), _arr(8), np.float64(1), np.int32(1)),
            kb.ArgumentTypeError,
            "argument 2 .*4-byte floating-point, got float64",
        ),
        ((_arr(8), _arr(8), np.float32(1), np.float32(1)), kb.ArgumentTypeError, "4-byte integer, got float32"),
        ((_arr(8), _arr(8), np.float32(1), 1.5), kb.ArgumentTypeError, "Python float"),
        ((_arr(8), _arr(8), np.float32(1), 1 << 40), kb.InvalidArgumentError, "does not fit"),
        ((_arr(8), _arr(8), np.float32(1), "x"), kb.ArgumentTypeError, "got str"),
        (
            (_arr(8, OTHER), _arr(8), np.float32(1), np.int32(1)),
            kb.InvalidArgumentError,
            "argument 0 .* lives on cuda:1",
        ),
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


# --- the core's scalar rules, with the C types the compile probe finds -------------------

TYPED = packing.layout([(8, 8, "pointer"), (4, 4, "int"), (4, 4, "unsigned int"), (1, 1, "bool"), (4, 4, "u32")])


def _typed_args(**over):
    args = [_arr(8), np.int32(1), np.uint32(1), True, 1]
    for i, v in over.items():
        args[int(i[1:])] = v
    return tuple(args)


@pytest.mark.parametrize(
    ("over", "error", "match"),
    [
        ({"a1": 3_000_000_000}, kb.InvalidArgumentError, "argument 1 .*4-byte signed integer.*out of range"),
        ({"a1": np.uint32(4_000_000_000)}, kb.InvalidArgumentError, "argument 1 .*out of range"),
        ({"a2": -1}, kb.InvalidArgumentError, "argument 2 .*unsigned.*out of range"),
        ({"a2": np.int32(-1)}, kb.InvalidArgumentError, "argument 2 .*out of range"),
        ({"a3": 1}, kb.ArgumentTypeError, "argument 3 .*bool.*True or False"),
        ({"a1": None}, kb.ArgumentTypeError, "argument 1 .*None"),
        ({"a1": np.int64(1)}, kb.ArgumentTypeError, "argument 1 .*8 bytes"),
        ({"a1": _arr(16)}, kb.ArgumentTypeError, "argument 1 .*pointer parameter"),
        ({"a4": 1 << 32}, kb.InvalidArgumentError, "argument 4 .*out of range"),
        ({"a1": np.array(1, np.int32)}, kb.ArgumentTypeError, r"argument 1 .*0-d array.*arr\.item\(\)"),
        ({"a2": np.array(1, np.uint32)}, kb.ArgumentTypeError, r"argument 2 .*0-d array.*arr\[\(\)\]"),
    ],
)
def test_scalar_rules_follow_the_core_table(over, error, match) -> None:
    with pytest.raises(error, match=match):
        packing.make_packer("k", TYPED, _typed_args(**over), DEV)


@pytest.mark.parametrize("value", [1 << 2000, 10**400])
def test_int_beyond_any_float_is_out_of_range(value) -> None:
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 2 .*digits.*out of range"):
        packing.make_packer("k", SAXPY, (_arr(8), _arr(16), value, 4), DEV)


def test_zero_d_float_array_is_refused_like_an_int_one() -> None:
    for args in ((_arr(8), _arr(16), np.array(2.5, np.float32), 4), (_arr(8), _arr(16), 2.5, np.array(4, np.uint32))):
        with pytest.raises(kb.ArgumentTypeError, match=r"0-d array is not a scalar"):
            packing.make_packer("k", SAXPY, args, DEV)


def test_sign_unknown_parameter_takes_either_sign() -> None:
    for v in (3_000_000_000, -1):
        blk, _ = _pack(TYPED, _typed_args(a4=v))
        assert struct.unpack_from("<I", bytes(blk.buf), 20)[0] == v & 0xFFFFFFFF
    *_, ckinds = packing.pack_plan("k", TYPED, _typed_args(a4=5), DEV)
    assert ckinds == ["P", "i", "I", "?", "4"]


def test_numpy_scalars_in_range_cross_signedness() -> None:
    blk, _ = _pack(TYPED, _typed_args(a1=np.uint32(7), a2=np.int32(9), a3=np.bool_(True)))
    assert struct.unpack_from("<iI?", bytes(blk.buf), 8) == (7, 9, True)
