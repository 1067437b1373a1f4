"""The core conformance suite for the tpu backend, in Pallas interpret mode on the CPU."""

from __future__ import annotations

import struct
from typing import Any

import jax.numpy as jnp
import kernelbay as kb
import numpy as np
import pytest
from kernelbay.testing import BackendConformance

pytest.importorskip("kernelbay_tpu", reason="kernelbay-tpu is not installed")

from kernelbay_tpu.testing import interpret_mode


def saxpy_kernel(x_ref, y_ref, a, n):
    # Whole-array blocks: y = a*x + y over the first n elements (all of them here).
    y_ref[...] = a * x_ref[...] + y_ref[...]


def _store_words(ref: Any, *values: Any) -> None:
    """Store the values' 64-bit patterns into ``ref`` as uint32 words, low word first, the rest
    zero. The values are statics: this runs in Python while the kernel is traced."""

    words = []
    for v in values:
        if isinstance(v, np.floating):
            bits = struct.unpack("<Q", struct.pack("<d", float(v)))[0]
        else:
            bits = int(v) & (2**64 - 1)
        words += [bits & 0xFFFFFFFF, bits >> 32]
    for j, w in enumerate(words + [0] * (16 - len(words))):
        ref[j] = jnp.uint32(w)


def scalars_kernel(
    i_ref,
    u_ref,
    f_ref,
    p0: np.bool_,
    p1: np.int8,
    p2: np.int16,
    p3: np.int32,
    p4: np.int64,
    p5: np.uint8,
    p6: np.uint16,
    p7: np.uint32,
    p8: np.uint64,
    p9: np.float32,
    p10: np.float64,
):
    # Annotated parameters are typed scalars: the launch checks each value with the core's
    # argrules and hands the kernel a numpy scalar of that type (a static value).
    _store_words(i_ref, p1, p2, p3, p4)
    _store_words(u_ref, p0, p5, p6, p7, p8)
    _store_words(f_ref, p9, p10)


def broken_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


@pytest.fixture(autouse=True, scope="module")
def _interpret() -> Any:
    with interpret_mode():
        yield


class TestTpu(BackendConformance):
    backend = "tpu"
    # jax without x64 holds 64-bit arrays as raw bytes: allocation and copies still work.
    dtypes = ("float32", "float64", "int32", "int64", "uint8", "int16", "float16")

    def saxpy_source(self) -> kb.Source:
        return kb.Source(saxpy_kernel, lang="pallas", name="saxpy", meta={"inplace": ("y_ref",)})

    def saxpy_launch(self, n: int) -> dict[str, Any]:
        return {"grid": (1,)}

    # Pallas kernels hold no 64-bit arrays (jax runs without x64): the scalar kernel stores
    # each value's 64-bit pattern as two uint32 words (see scalars_kernel).
    scalar_split64 = True

    def scalar_source(self) -> kb.Source:
        return kb.Source(scalars_kernel, lang="pallas", name="scalars", meta={"outputs": ("i_ref", "u_ref", "f_ref")})

    def scalar_launch(self) -> dict[str, Any]:
        return {"grid": ()}

    def bad_source(self) -> kb.Source:
        # Names an argument the kernel does not have: rejected when compiling.
        return kb.Source(broken_kernel, lang="pallas", meta={"outputs": ("out_ref",)})
