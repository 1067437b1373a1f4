"""Kernels from the Pallas documentation, run through kernelbay and checked against numpy."""

from __future__ import annotations

import warnings

import kernelbay as kb
import numpy as np
import pytest


def add_vectors_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def test_vector_add(dev: kb.Device) -> None:
    xs = np.arange(8, dtype=np.float32)
    ys = np.linspace(0, 1, 8, dtype=np.float32)
    k = kb.compile(kb.Source(add_vectors_kernel, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x, y = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev)
    o = kb.empty(8, "float32", device=dev)
    k.launch(grid=1, args=(x, y, o))
    np.testing.assert_array_equal(o.numpy(), xs + ys)
    # A second launch with new contents reuses the compiled call and sees the new data.
    kb.copy(x, xs * 10)
    k.launch(grid=1, args=(x, y, o))
    assert len(k.handle.cache) == 1
    np.testing.assert_array_equal(o.numpy(), xs * 10 + ys)


def matmul_kernel(x_ref, y_ref, z_ref):
    z_ref[...] = x_ref[...] @ y_ref[...]


def test_blocked_matmul_2d_grid(dev: kb.Device) -> None:
    from jax.experimental import pallas as pl

    m, k_, n, bm, bn = 256, 128, 256, 128, 128
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((m, k_)).astype(np.float32)
    ys = rng.standard_normal((k_, n)).astype(np.float32)
    src = kb.Source(
        matmul_kernel,
        lang="pallas",
        meta={
            "outputs": ("z_ref",),
            "block_specs": {
                "x_ref": pl.BlockSpec((bm, k_), lambda i, j: (i, 0)),
                "y_ref": pl.BlockSpec((k_, bn), lambda i, j: (0, j)),
                "z_ref": pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
            },
        },
    )
    kern = kb.compile(src, device=dev)
    x, y = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev)
    z = kb.empty((m, n), "float32", device=dev)
    kern.launch(grid=(m // bm, n // bn), args=(x, y, z))
    np.testing.assert_allclose(z.numpy(), xs @ ys, rtol=1e-4, atol=1e-4)


def add_one_inplace(x_ref):
    x_ref[...] = x_ref[...] + 1.0


def test_inplace_read_and_write(dev: kb.Device) -> None:
    xs = np.arange(16, dtype=np.float32).reshape(2, 8)
    k = kb.compile(kb.Source(add_one_inplace, lang="pallas", meta={"inplace": ("x_ref",)}), device=dev)
    x = kb.asarray(xs, device=dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "donated buffers were not usable" would fail here
        for _ in range(3):
            k.launch(grid=(1,), args=(x,))
        dev.synchronize()
    np.testing.assert_array_equal(x.numpy(), xs + 3)


def add_sub_kernel(x_ref, y_ref, s_ref, d_ref):
    x, y = x_ref[...], y_ref[...]
    s_ref[...] = x + y
    d_ref[...] = x - y


def test_two_output_only_results(dev: kb.Device) -> None:
    rng = np.random.default_rng(1)
    xs, ys = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    k = kb.compile(kb.Source(add_sub_kernel, lang="pallas", meta={"outputs": ("s_ref", "d_ref")}), device=dev)
    x, y = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev)
    s, d = kb.empty(128, "float32", device=dev), kb.empty(128, "float32", device=dev)
    k.launch(grid=1, args=(x, y, s, d))
    np.testing.assert_array_equal(s.numpy(), xs + ys)
    np.testing.assert_array_equal(d.numpy(), xs - ys)


def scaled_copy(x_ref, o_ref, scale, acc_ref):
    acc_ref[...] = x_ref[...] * scale
    o_ref[...] = acc_ref[...]


def test_static_values_scratch_and_positions(dev: kb.Device) -> None:
    from jax.experimental.pallas import tpu as pltpu

    xs = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    k = kb.compile(
        kb.Source(
            scaled_copy,
            lang="pallas",
            meta={
                "outputs": (1,),  # positions work as well as names
                "scratch_shapes": (pltpu.VMEM((8, 128), np.float32),),
                "compiler_params": pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
            },
        ),
        device=dev,
    )
    x, o = kb.asarray(xs, device=dev), kb.empty((8, 128), "float32", device=dev)
    for scale in (2.0, 3):
        k.launch(grid=1, args=(x, o, scale))
        np.testing.assert_array_equal(o.numpy(), xs * scale)
    assert len(k.handle.cache) == 2  # a static value keys the compiled call


def test_empty_input_reads_as_zeros(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(add_vectors_kernel, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x, y, o = (kb.empty(4, "float32", device=dev) for _ in range(3))
    kb.copy(y, np.ones(4, np.float32))
    k.launch(grid=1, args=(x, y, o))
    np.testing.assert_array_equal(o.numpy(), np.ones(4, np.float32))


def test_trace_error_is_a_compile_error(dev: kb.Device) -> None:
    def bad(x_ref, o_ref):
        o_ref[...] = x_ref[...] @ x_ref[...]  # 1-D @ 1-D into a 1-D ref: shape error

    k = kb.compile(kb.Source(bad, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x, o = kb.asarray(np.ones(8, np.float32), device=dev), kb.empty(8, "float32", device=dev)
    with pytest.raises(kb.CompileError, match="bad") as info:
        k.launch(grid=1, args=(x, o))
    assert info.value.log
