"""Typed scalar parameters of Pallas kernels: annotations checked by the core's argrules.

The conformance suite checks every rule through static parameters (tests/conformance/test_tpu.py);
these check the other ways a value reaches a kernel: SMEM scalars (``meta['scalars']``) on the
launch fast path, keyword-only statics, ``k.jax`` eagerly and inside ``jax.jit``, and the
declarations a kernel cannot make.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import kernelbay as kb
import numpy as np
import pytest
from kernelbay_tpu import _scalars


def scale(x_ref, o_ref, a_ref: jnp.float32, n_ref: jnp.int32):
    o_ref[...] = x_ref[...] * a_ref[0] + n_ref[0].astype(jnp.float32)


_ZERO = np.uint8(0)


def offset(x_ref, o_ref, n: np.int8, *, m: np.uint8 = _ZERO):
    # statics arrive as numpy scalars of the declared type
    assert type(n) is np.int8 and type(m) is np.uint8, (type(n), type(m))
    o_ref[...] = x_ref[...] + float(n) + float(m)


def _smem(dev: kb.Device) -> kb.Kernel:
    return kb.compile(
        kb.Source(scale, lang="pallas", meta={"outputs": ("o_ref",), "scalars": ("a_ref", "n_ref")}), device=dev
    )


def test_smem_scalars_are_checked_on_every_launch(dev: kb.Device) -> None:
    k = _smem(dev)
    x = kb.asarray(np.arange(8, dtype=np.float32), device=dev)
    o = kb.empty(8, "float32", device=dev)
    for _ in range(3):  # the generated fast path serves the repeats
        k.launch(grid=(), args=(x, o, 2.0, 1))
    np.testing.assert_array_equal(o.numpy(), np.arange(8) * 2.0 + 1)
    k.launch(grid=(), args=(x, o, np.float32(3), np.uint32(5)))  # in range crosses signedness
    np.testing.assert_array_equal(o.numpy(), np.arange(8) * 3.0 + 5)
    for bad, exc, match in [
        ((1e39, 1), kb.InvalidArgumentError, r"argument 2 \('a_ref'\).*out of range"),
        ((2.0, 2**31), kb.InvalidArgumentError, r"argument 3 \('n_ref'\).*out of range"),
        ((2.0, np.uint32(4_000_000_000)), kb.InvalidArgumentError, "out of range"),
        ((np.float64(2), 1), kb.ArgumentTypeError, "8 bytes"),
        ((2.0, 1.0), kb.ArgumentTypeError, "argument 3"),
        ((2.0, None), kb.ArgumentTypeError, "None"),
        ((np.array(2.0, np.float32), 1), kb.ArgumentTypeError, "0-d array"),
    ]:
        with pytest.raises(exc, match=match):
            k.launch(grid=(), args=(x, o, *bad))
    k.launch(grid=(), args=(x, o, 2.0, 1))
    np.testing.assert_array_equal(o.numpy(), np.arange(8) * 2.0 + 1)


def test_typed_statics_are_checked_and_converted(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(offset, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x = kb.asarray(np.zeros(4, np.float32), device=dev)
    o = kb.empty(4, "float32", device=dev)
    k.launch(grid=(), args=(x, o, 3))
    np.testing.assert_array_equal(o.numpy(), np.full(4, 3.0))
    k.launch(grid=(), args={"x_ref": x, "o_ref": o, "n": -2, "m": 255})
    np.testing.assert_array_equal(o.numpy(), np.full(4, 253.0))
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 2 \('n'\).*1-byte signed.*out of range"):
        k.launch(grid=(), args=(x, o, 128))
    with pytest.raises(kb.InvalidArgumentError, match="keyword argument 'm'.*out of range"):
        k.launch(grid=(), args={"x_ref": x, "o_ref": o, "n": 1, "m": 256})
    with pytest.raises(kb.ArgumentTypeError, match="0-d array"):
        k.launch(grid=(), args=(x, o, np.array(1, np.int8)))
    assert np.asarray(k.handle.jax(jnp.zeros(4, jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32), 7, m=1))[0] == 8
    with pytest.raises(kb.InvalidArgumentError, match="out of range"):
        k.handle.jax(jnp.zeros(4, jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32), -129)


def test_inside_jit_traced_scalars_are_checked_once_per_trace(dev: kb.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    k = _smem(dev).handle
    calls: list[Any] = []
    real = _scalars.check_scalar

    def counted(*a: Any) -> str:
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(_scalars, "check_scalar", counted)

    @jax.jit
    def step(x: Any, a: Any, n: Any) -> Any:
        return k.jax(x, jax.ShapeDtypeStruct(x.shape, x.dtype), a, n)

    x = jnp.arange(4, dtype=jnp.float32)
    for j in range(3):
        got = step(x, jnp.float32(j), jnp.int32(1))
        np.testing.assert_array_equal(np.asarray(got), np.arange(4) * j + 1)
    assert len(calls) == 2  # the one trace: each scalar's dtype, no value
    with pytest.raises(kb.ArgumentTypeError, match=r"argument 3 \('n_ref'\).*float32"):
        step(x, jnp.float32(1), jnp.float32(1))  # a new trace: a float for an int32 parameter

    @jax.jit
    def static_traced(x: Any, n: Any) -> Any:
        return kb.compile(kb.Source(offset, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev).handle.jax(
            x, jax.ShapeDtypeStruct(x.shape, x.dtype), n
        )

    with pytest.raises(kb.ArgumentTypeError, match="static scalar of type int8.*meta\\['scalars'\\]"):
        static_traced(x, jnp.int8(1))


@pytest.mark.parametrize(
    ("fn", "meta", "match"),
    [
        (lambda x_ref, o_ref: None, {"outputs": ("o_ref",)}, None),
        (offset, {"outputs": ("n",)}, "annotated with a scalar type but are array arguments"),
        (scale, {"outputs": ("o_ref",), "inplace": ("a_ref",)}, "annotated with a scalar type"),
    ],
)
def test_declarations_a_kernel_cannot_make(dev: kb.Device, fn: Any, meta: dict[str, Any], match: str | None) -> None:
    src = kb.Source(fn, lang="pallas", name="k", meta=meta)
    if match is None:
        kb.compile(src, device=dev)
        return
    with pytest.raises(kb.CompileError, match=match):
        kb.compile(src, device=dev)


def test_a_wide_smem_scalar_is_refused(dev: kb.Device) -> None:
    def k(x_ref, o_ref, n_ref: jnp.int64):
        o_ref[...] = x_ref[...]

    with pytest.raises(kb.CompileError, match="int64, which a TPU cannot hold.*static"):
        kb.compile(kb.Source(k, lang="pallas", meta={"outputs": ("o_ref",), "scalars": ("n_ref",)}), device=dev)


def test_python_number_annotations_stay_untyped(dev: kb.Device) -> None:
    def k(x_ref, o_ref, n: int, flag: bool, name: str):
        o_ref[...] = x_ref[...] + (float(n) if flag else 0.0)  # Python values at trace time

    kern = kb.compile(kb.Source(k, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    assert kern.handle.types == {}
    x = kb.asarray(np.zeros(4, np.float32), device=dev)
    o = kb.empty(4, "float32", device=dev)
    kern.launch(grid=(), args=(x, o, 2**40, 1, "any static"))  # Pallas's own statics: any value
    np.testing.assert_array_equal(o.numpy(), np.full(4, 2.0**40, np.float32))


def test_an_undeclared_smem_scalar_too_large_is_an_argrules_error(dev: kb.Device) -> None:
    def k(x_ref, o_ref, n_ref):
        o_ref[...] = x_ref[...] + n_ref[0].astype(jnp.float32)

    kern = kb.compile(kb.Source(k, lang="pallas", meta={"outputs": ("o_ref",), "scalars": ("n_ref",)}), device=dev)
    x = kb.asarray(np.zeros(4, np.float32), device=dev)
    o = kb.empty(4, "float32", device=dev)
    for v in (2**40, 1, -(10**400), 2):  # the first launch and the fast path alike, never a bare OverflowError
        if abs(v) < 2**31:
            kern.launch(grid=(), args=(x, o, v))
            np.testing.assert_array_equal(o.numpy(), np.full(4, float(v)))
            continue
        with pytest.raises(kb.InvalidArgumentError, match=r"argument 2 \('n_ref'\).*out of range.*int32"):
            kern.launch(grid=(), args=(x, o, v))
