"""Kernels over a mesh, as ``pl.kernel`` runs them (``Source.meta['mesh']``, issue #29): the TPU
quickstart's kernels, unchanged, through ``launch`` and ``k.jax``, bit-equal to ``pl.kernel``.

The quickstart builds its mesh with ``pltpu.TensorCoreMesh(axis_name='core')``, a newer jax's
spelling; this jax's is ``pltpu.create_tensorcore_mesh('core')``, with ``num_cores=1`` where the
device (the CPU, in interpret mode) cannot say how many cores it has.
"""

from __future__ import annotations

from typing import Any

import kernelbay as kb
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from .both_modes import _interp, _interpret  # noqa: E402, F401  (runs this module in both modes)


def _mesh() -> Any:
    return pltpu.create_tensorcore_mesh("core", num_cores=1)


def _axis_index_needs_the_tpu_interpreter(mode: str) -> None:
    if mode != "tpu":
        pytest.skip("jax's HLO interpreter (interpret=True) leaves the mesh's axis name unbound for axis_index")


# --- "Your first kernel" ------------------------------------------------------------------------


def fill_42(o_ref, o_vmem):
    # Compute in VMEM
    o_vmem[...] = jnp.full_like(o_vmem, 42.0)

    # VMEM → HBM (blocks until the transfer completes)
    pltpu.sync_copy(o_vmem, o_ref)


def test_first_kernel_fill_42(dev: kb.Device) -> None:
    out = jax.ShapeDtypeStruct((128,), jnp.float32)
    scratch = dict(o_vmem=pltpu.VMEM((128,), jnp.float32))
    want = pl.kernel(fill_42, out_type=out, mesh=_mesh(), scratch_types=scratch, interpret=_interp())()
    meta = {"mesh": _mesh(), "outputs": ("o_ref",), "scratch_shapes": scratch}
    k = kb.compile(kb.Source(fill_42, lang="pallas", meta=meta), device=dev)
    o = kb.empty(128, "float32", device=dev)
    k.launch(grid=(), args=(o,))
    np.testing.assert_array_equal(o.numpy(), np.asarray(want))
    np.testing.assert_array_equal(o.numpy(), np.full(128, 42.0, np.float32))
    np.testing.assert_array_equal(np.asarray(k.jax(out)), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda: k.jax(out))()), np.asarray(want))


# --- "Distributing work across TensorCores" -----------------------------------------------------


def iota_kernel(o_ref, o_vmem):
    i = jax.lax.axis_index("core")

    # Compute our chunk in VMEM
    o_vmem[...] = jnp.arange(128, dtype=jnp.float32) + i * 128

    # Copy back to our slice of HBM
    pltpu.sync_copy(o_vmem, o_ref.at[pl.ds(i * 128, 128)])


def test_distributing_work_across_cores(dev: kb.Device, _interpret: str) -> None:  # noqa: F811 (the fixture)
    _axis_index_needs_the_tpu_interpreter(_interpret)
    tpu_info = pltpu.get_tpu_info()
    out = jax.ShapeDtypeStruct((128 * tpu_info.num_cores,), jnp.float32)
    scratch = dict(o_vmem=pltpu.VMEM((128,), jnp.float32))
    want = pl.kernel(iota_kernel, out_type=out, mesh=_mesh(), scratch_types=scratch, interpret=_interp())()
    meta = {"mesh": _mesh(), "outputs": ("o_ref",), "scratch_shapes": scratch}
    k = kb.compile(kb.Source(iota_kernel, lang="pallas", meta=meta), device=dev)
    o = kb.empty(out.shape, "float32", device=dev)
    k.launch(grid=(), args=(o,))
    np.testing.assert_array_equal(o.numpy(), np.asarray(want))
    np.testing.assert_array_equal(o.numpy(), np.arange(out.shape[0], dtype=np.float32))


# --- "Making it fast: pipelining" ---------------------------------------------------------------


def add_kernel(x_hbm, y_hbm, o_hbm):
    def add_body(x_vmem, y_vmem, o_vmem):
        o_vmem[...] = x_vmem[...] + y_vmem[...]

    pltpu.emit_pipeline(
        add_body,
        grid=(x_hbm.shape[0] // 128, x_hbm.shape[1] // 128),
        in_specs=[
            pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            pl.BlockSpec((128, 128), lambda i, j: (i, j)),
        ],
        out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
        core_axis_name="core",
        dimension_semantics=(pltpu.PARALLEL, pltpu.ARBITRARY),
    )(x_hbm, y_hbm, o_hbm)


def test_pipelined_add(dev: kb.Device, _interpret: str) -> None:  # noqa: F811 (the fixture)
    _axis_index_needs_the_tpu_interpreter(_interpret)
    x = 2 * jnp.ones((256, 256))
    y = 3 * jnp.ones((256, 256))
    want = pl.kernel(add_kernel, out_type=jax.ShapeDtypeStruct.like(x), mesh=_mesh(), interpret=_interp())(x, y)
    k = kb.compile(kb.Source(add_kernel, lang="pallas", meta={"mesh": _mesh(), "outputs": ("o_hbm",)}), dev)
    xa, ya, o = kb.asarray(x, device=dev), kb.asarray(y, device=dev), kb.empty((256, 256), "float32", device=dev)
    k.launch(grid=(), args=(xa, ya, o))
    np.testing.assert_array_equal(o.numpy(), np.asarray(want))
    np.testing.assert_array_equal(o.numpy(), np.full((256, 256), 5.0, np.float32))
    np.testing.assert_array_equal(np.asarray(k.jax(x, y, jax.ShapeDtypeStruct.like(x))), np.asarray(want))


def test_mesh_kernels_take_no_grid_or_blocks(dev: kb.Device) -> None:
    with pytest.raises(kb.CompileError, match=r"meta\['mesh'\] .* takes no block_specs"):
        kb.compile(
            kb.Source(add_kernel, lang="pallas", meta={"mesh": _mesh(), "block_specs": {"x_hbm": pl.BlockSpec()}}),
            device=dev,
        )
    k = kb.compile(
        kb.Source(
            fill_42,
            lang="pallas",
            meta={
                "mesh": _mesh(),
                "outputs": ("o_ref",),
                "scratch_shapes": dict(o_vmem=pltpu.VMEM((128,), jnp.float32)),
            },
        ),
        dev,
    )
    with pytest.raises(kb.InvalidArgumentError, match="not over a grid"):
        k.launch(grid=(2,), args=(kb.empty(128, "float32", device=dev),))
