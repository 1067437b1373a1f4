"""Pytree arguments in ``launch`` (issue #29): a tuple of kernelbay arrays as megablox passes its
group metadata, flash attention's ``SegmentIds``, and a tuple of outputs; the kernel receives the
same pytree of refs, and the results become the storage of the arrays they belong to."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402
from jax.experimental.pallas.ops.tpu.flash_attention import SegmentIds  # noqa: E402

from .both_modes import _interp, _interpret  # noqa: E402, F401  (runs this module in both modes)


def metadata_gmm(meta_ref, lhs_ref, rhs_ref, out_ref):
    # megablox's shape: the first argument is a tuple of prefetched metadata arrays
    offsets, group_ids, tile_ids = meta_ref
    del offsets, group_ids, tile_ids  # read by the index maps only
    out_ref[...] = jnp.dot(lhs_ref[...], rhs_ref[...], preferred_element_type=jnp.float32)


def test_tuple_of_prefetched_metadata_through_launch(dev: kb.Device) -> None:
    tm, kd, n, groups = 8, 128, 128, 3
    meta = (
        np.asarray([0, 16, 16, 32], np.int32),  # group offsets
        np.asarray([0, 0, 2, 1], np.int32),  # group per tile
        np.asarray([0, 1, 2, 3], np.int32),  # m tile per grid step
    )
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((4 * tm, kd)).astype(np.float32)
    rhs = rng.standard_normal((groups, kd, n)).astype(np.float32)
    gs = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(4,),
        in_specs=[
            pl.BlockSpec((tm, kd), lambda i, m: (m[2][i], 0)),
            pl.BlockSpec((None, kd, n), lambda i, m: (m[1][i], 0, 0)),
        ],
        out_specs=pl.BlockSpec((tm, n), lambda i, m: (m[2][i], 0)),
    )
    out = jax.ShapeDtypeStruct((4 * tm, n), jnp.float32)
    direct = pl.pallas_call(metadata_gmm, out_shape=out, grid_spec=gs, interpret=_interp())(
        tuple(jnp.asarray(m) for m in meta), lhs, rhs
    )
    k = kb.compile(kb.Source(metadata_gmm, lang="pallas", meta={"grid_spec": gs, "outputs": ("out_ref",)}), dev)
    kmeta = tuple(kb.asarray(m, device=dev) for m in meta)
    o = kb.empty(out.shape, "float32", device=dev)
    for _ in range(2):  # a new signature, then the cached one
        k.launch(grid=(4,), args=(kmeta, kb.asarray(lhs, device=dev), kb.asarray(rhs, device=dev), o))
        np.testing.assert_array_equal(o.numpy(), np.asarray(direct))
    assert len(k.handle.cache) == 1


def segment_mask(seg, x_ref, outs):
    # flash attention's SegmentIds in, a tuple of two outputs out
    same = seg.q[...] == seg.kv[...]
    masked, count = outs
    masked[...] = jnp.where(same, x_ref[...], 0.0)
    count[...] = same.astype(jnp.int32)


def test_segment_ids_in_and_a_tuple_of_outputs(dev: kb.Device) -> None:
    rng = np.random.default_rng(1)
    q = rng.integers(0, 3, (8, 128)).astype(np.int32)
    kv = rng.integers(0, 3, (8, 128)).astype(np.int32)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    shapes = (jax.ShapeDtypeStruct((8, 128), jnp.float32), jax.ShapeDtypeStruct((8, 128), jnp.int32))

    def direct_kernel(seg, x_ref, masked, count):
        segment_mask(seg, x_ref, (masked, count))

    want = pl.pallas_call(direct_kernel, out_shape=shapes, interpret=_interp())(
        SegmentIds(jnp.asarray(q), jnp.asarray(kv)), jnp.asarray(x)
    )
    k = kb.compile(kb.Source(segment_mask, lang="pallas", meta={"outputs": ("outs",)}), dev)
    outs = (kb.empty((8, 128), "float32", device=dev), kb.empty((8, 128), "int32", device=dev))
    seg = SegmentIds(q=kb.asarray(q, device=dev), kv=kb.asarray(kv, device=dev))
    k.launch(grid=(), args=(seg, kb.asarray(x, device=dev), outs))
    dev.synchronize()
    np.testing.assert_array_equal(outs[0].numpy(), np.asarray(want[0]))
    np.testing.assert_array_equal(outs[1].numpy(), np.asarray(want[1]))
    # k.jax takes the same pytrees of JAX arrays
    got = k.jax(SegmentIds(jnp.asarray(q), jnp.asarray(kv)), jnp.asarray(x), shapes)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))


def bump_both(pair):
    a, b = pair
    a[...] += 1.0
    b[...] *= 2.0


def test_in_place_pytree_and_graphs(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(bump_both, lang="pallas", meta={"inplace": ("pair",)}), dev)
    pair = (kb.zeros((8, 128), "float32", device=dev), kb.asarray(np.ones((8, 128), np.float32), device=dev))
    k.launch(grid=(), args=(pair,))
    with dev.graph() as g:
        k.launch(grid=(), args=(pair,))
        k.launch(grid=(), args=(pair,))
    g.replay()
    np.testing.assert_array_equal(pair[0].numpy(), np.full((8, 128), 3.0))
    np.testing.assert_array_equal(pair[1].numpy(), np.full((8, 128), 8.0))


def test_a_pytree_mixing_arrays_and_values_is_refused(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(bump_both, lang="pallas", meta={"inplace": ("pair",)}), dev)
    with pytest.raises(kb.ArgumentTypeError, match="pytree holding kernelbay arrays and other values"):
        k.launch(grid=(), args=((kb.zeros(4, "float32", device=dev), 3),))
