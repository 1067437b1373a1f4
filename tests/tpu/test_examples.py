"""Kernels as Pallas authors write them (the Pallas documentation's examples and small faithful
re-implementations of JAX's own TPU kernels), each run three ways and compared: through
kernelbay (``k.jax`` and ``k.launch``), through ``pl.pallas_call`` called directly, and as a
jnp reference. Every test runs under ``interpret=True`` and under JAX's TPU interpreter
(``KERNELBAY_TPU_INTERPRET=tpu``: uninitialised memory poisoned, out-of-bounds reads raise).
"""

from __future__ import annotations

import functools
from typing import Any

import kernelbay as kb
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

F32 = jnp.float32


from .both_modes import _interp, _interpret  # noqa: E402, F401  (runs this module in both modes)


def check(
    dev: kb.Device,
    kernel: Any,
    args: list[Any],
    out: Any,
    ref: Any,
    meta: dict[str, Any],
    tol: float = 0.0,
    launch: bool = True,
    **call: Any,
) -> None:
    """Run ``kernel`` through kernelbay (k.jax, and k.launch) and pl.pallas_call; compare with ``ref``.

    ``args`` are the Pallas operands (scalar prefetch first), ``out`` the output's
    ShapeDtypeStruct, ``call`` pallas_call's keyword arguments (grid, specs, ...).
    """
    direct = pl.pallas_call(kernel, out_shape=out, interpret=_interp(), **call)(*args)
    k = kb.compile(kb.Source(kernel, lang="pallas", meta=meta), device=dev)
    grid = call["grid_spec"].grid if "grid_spec" in call else call.get("grid", ())
    ours = k.jax(*args, out, grid=None if "grid_spec" in call else grid)  # grid_spec's grid by default
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(direct))
    if launch:
        arrays = [kb.asarray(np.asarray(a), device=dev) for a in args]
        o = kb.empty(out.shape, out.dtype, device=dev)
        k.launch(grid=grid, args=(*arrays, o))
        np.testing.assert_array_equal(o.numpy(), np.asarray(direct))


def _rand(*shape: int, seed: int = 0) -> Any:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# --- the Pallas quickstart ----------------------------------------------------------------


def add_vectors_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def test_quickstart_add_vectors(dev: kb.Device) -> None:
    x, y = jnp.arange(8, dtype=F32), jnp.arange(8, dtype=F32) * 10
    check(dev, add_vectors_kernel, [x, y], jax.ShapeDtypeStruct((8,), F32), x + y, {"outputs": ("o_ref",)})


# --- grids and BlockSpecs -----------------------------------------------------------------


def matmul_kernel(x_ref, y_ref, z_ref):
    z_ref[...] = x_ref[...] @ y_ref[...]


def test_grid_and_blockspecs_matmul(dev: kb.Device) -> None:
    x, y = _rand(256, 128), _rand(128, 256, seed=1)
    specs = [pl.BlockSpec((128, 128), lambda i, j: (i, 0)), pl.BlockSpec((128, 128), lambda i, j: (0, j))]
    zs = pl.BlockSpec((128, 128), lambda i, j: (i, j))
    meta = {"outputs": ("z_ref",), "block_specs": {"x_ref": specs[0], "y_ref": specs[1], "z_ref": zs}}
    check(
        dev,
        matmul_kernel,
        [x, y],
        jax.ShapeDtypeStruct((256, 256), F32),
        x @ y,
        meta,
        tol=1e-4,
        grid=(2, 2),
        in_specs=specs,
        out_specs=zs,
    )


# --- the TPU matmul: a reduction axis, a VMEM accumulator, dimension semantics --------------


def tpu_matmul_kernel(x_ref, y_ref, z_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _() -> None:
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=F32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _() -> None:
        z_ref[...] = acc_ref[...].astype(z_ref.dtype)


def test_tpu_matmul_with_accumulator(dev: kb.Device) -> None:
    bm, b = 8, 128
    x, y = _rand(16, 256), _rand(256, 256, seed=1)
    ins = [pl.BlockSpec((bm, b), lambda i, j, k: (i, k)), pl.BlockSpec((b, b), lambda i, j, k: (k, j))]
    outs = pl.BlockSpec((bm, b), lambda i, j, k: (i, j))
    scratch = [pltpu.VMEM((bm, b), F32)]
    params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"))
    meta = {"outputs": ("z_ref",), "block_specs": [*ins, outs], "scratch_shapes": scratch, "compiler_params": params}
    check(
        dev,
        tpu_matmul_kernel,
        [x, y],
        jax.ShapeDtypeStruct((16, 256), F32),
        x @ y,
        meta,
        tol=1e-3,
        launch=False,
        grid=(2, 2, 2),
        in_specs=ins,
        out_specs=outs,
        scratch_shapes=scratch,
        compiler_params=params,
    )


# The guide's bfloat16 form: the kernel as the guide writes it (nsteps keyword-only), bf16
# operands made with kb.asarray / kb.empty and run through launch.
def guide_matmul_kernel(x_ref, y_ref, z_ref, acc_ref, *, nsteps):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == nsteps - 1)
    def _():
        z_ref[...] = acc_ref[...].astype(z_ref.dtype)


def test_tpu_matmul_bfloat16_through_launch(dev: kb.Device) -> None:
    m = n = kd = 256
    bm = bn = bk = 128
    x = np.asarray(_rand(m, kd)).astype(jnp.bfloat16)  # numpy arrays of ml_dtypes' bfloat16
    y = np.asarray(_rand(kd, n, seed=1)).astype(jnp.bfloat16)
    ins = [pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))]
    outs = pl.BlockSpec((bm, bn), lambda i, j, k: (i, j))
    scratch = [pltpu.VMEM((bm, bn), jnp.float32)]
    params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"))
    grid = (m // bm, n // bn, kd // bk)
    direct = pl.pallas_call(
        functools.partial(guide_matmul_kernel, nsteps=kd // bk),
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.bfloat16),
        grid=grid,
        in_specs=ins,
        out_specs=outs,
        scratch_shapes=scratch,
        compiler_params=params,
        interpret=_interp(),
    )(x, y)
    meta = {"outputs": ("z_ref",), "block_specs": [*ins, outs], "scratch_shapes": scratch, "compiler_params": params}
    k = kb.compile(kb.Source(guide_matmul_kernel, lang="pallas", meta=meta), device=dev)
    xa, ya = kb.asarray(x, device=dev), kb.asarray(y, device=dev)
    z = kb.empty((m, n), "bfloat16", device=dev)
    assert xa.dtype == z.dtype == np.dtype(jnp.bfloat16)
    k.launch(grid=grid, args={"x_ref": xa, "y_ref": ya, "z_ref": z, "nsteps": kd // bk})
    got = z.numpy()
    assert got.dtype == np.dtype(jnp.bfloat16)
    np.testing.assert_array_equal(got, np.asarray(direct))
    ref = x.astype(np.float32) @ y.astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=2e-2, atol=2e-1)


# --- pipelining: emit_pipeline over refs left in HBM ---------------------------------------


def pipelined_add_kernel(x_hbm, y_hbm, o_hbm):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    pltpu.emit_pipeline(add_vectors_kernel, grid=(x_hbm.shape[0] // 8,), in_specs=[spec, spec], out_specs=[spec])(
        x_hbm, y_hbm, o_hbm
    )


def test_emit_pipeline(dev: kb.Device) -> None:
    x, y = _rand(32, 128), _rand(32, 128, seed=1)
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    meta = {"outputs": ("o_hbm",), "block_specs": [hbm, hbm, hbm]}
    check(
        dev,
        pipelined_add_kernel,
        [x, y],
        jax.ShapeDtypeStruct((32, 128), F32),
        x + y,
        meta,
        launch=False,
        in_specs=[hbm, hbm],
        out_specs=hbm,
    )


# --- scalar prefetch: a block-sparse gather whose index map reads prefetched indices --------


def gather_blocks_kernel(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def test_scalar_prefetch_block_sparse(dev: kb.Device) -> None:
    idx = jnp.asarray([3, 0, 3, 1], jnp.int32)
    x = _rand(32, 128)
    gs = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)),
    )
    ref = jnp.concatenate([x[8 * int(j) : 8 * int(j) + 8] for j in idx]) * 2
    check(
        dev,
        gather_blocks_kernel,
        [idx, x],
        jax.ShapeDtypeStruct((32, 128), F32),
        ref,
        {"grid_spec": gs, "outputs": ("o_ref",)},
        grid_spec=gs,
    )


# --- DMA: an explicit async copy from HBM into VMEM scratch ---------------------------------


def dma_kernel(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm, buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...] + 1.0


def test_dma_async_copy(dev: kb.Device) -> None:
    x = _rand(16, 128)
    scratch = [pltpu.VMEM((16, 128), F32), pltpu.SemaphoreType.DMA]
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    meta = {"outputs": ("o_ref",), "block_specs": {"x_hbm": hbm}, "scratch_shapes": scratch}
    check(
        dev,
        dma_kernel,
        [x],
        jax.ShapeDtypeStruct((16, 128), F32),
        x + 1,
        meta,
        launch=False,
        in_specs=[hbm],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=scratch,
    )


# --- flash attention forward (one head, online softmax over key blocks) ---------------------


def flash_fwd_kernel(q_ref, k_ref, v_ref, o_ref, *, block_k: int):
    q = q_ref[...]
    n = k_ref.shape[0] // block_k

    def step(j, carry):
        m, denom, acc = carry
        k = k_ref[pl.ds(j * block_k, block_k), :]
        v = v_ref[pl.ds(j * block_k, block_k), :]
        s = q @ k.T
        m_new = jnp.maximum(m, s.max(axis=-1, keepdims=True))
        p = jnp.exp(s - m_new)
        scale = jnp.exp(m - m_new)
        return m_new, denom * scale + p.sum(axis=-1, keepdims=True), acc * scale + p @ v

    bq, d = q.shape
    init = (jnp.full((bq, 1), -jnp.inf, F32), jnp.zeros((bq, 1), F32), jnp.zeros((bq, d), F32))
    _, denom, acc = jax.lax.fori_loop(0, n, step, init)
    o_ref[...] = acc / denom


def test_flash_attention_forward(dev: kb.Device) -> None:
    s, d, bq, bk = 64, 128, 32, 32
    q, k, v = _rand(s, d) * 0.1, _rand(s, d, seed=1) * 0.1, _rand(s, d, seed=2)
    qspec = pl.BlockSpec((bq, d), lambda i: (i, 0))
    whole = pl.BlockSpec((s, d), lambda i: (0, 0))
    ref = jax.nn.softmax(q @ k.T, axis=-1) @ v
    kernel = functools.partial(flash_fwd_kernel, block_k=bk)
    direct = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((s, d), F32),
        grid=(s // bq,),
        in_specs=[qspec, whole, whole],
        out_specs=qspec,
        interpret=_interp(),
    )(q, k, v)
    # The kernelbay kernel takes block_k as a keyword argument, a static value per call.
    kk = kb.compile(
        kb.Source(
            flash_fwd_kernel, lang="pallas", meta={"outputs": ("o_ref",), "block_specs": [qspec, whole, whole, qspec]}
        ),
        device=dev,
    )
    ours = kk.jax(q, k, v, jax.ShapeDtypeStruct((s, d), F32), grid=(s // bq,), block_k=bk)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=2e-4, atol=2e-4)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(direct))


# --- grouped matmul (megablox's structure): tiles of rows, each tile's group prefetched -----


def gmm_kernel(group_ref, lhs_ref, rhs_ref, out_ref):
    out_ref[...] = jnp.dot(lhs_ref[...], rhs_ref[...], preferred_element_type=F32)


def test_grouped_matmul(dev: kb.Device) -> None:
    tm, kd, n, groups = 8, 128, 128, 3
    tile_group = jnp.asarray([0, 0, 2, 1], jnp.int32)  # rows sorted by group, tile-aligned
    lhs, rhs = _rand(4 * tm, kd), _rand(groups, kd, n, seed=1)
    gs = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(4,),
        in_specs=[pl.BlockSpec((tm, kd), lambda i, g: (i, 0)), pl.BlockSpec((None, kd, n), lambda i, g: (g[i], 0, 0))],
        out_specs=pl.BlockSpec((tm, n), lambda i, g: (i, 0)),
    )
    ref = jnp.concatenate([lhs[tm * t : tm * t + tm] @ rhs[int(g)] for t, g in enumerate(tile_group)])
    check(
        dev,
        gmm_kernel,
        [tile_group, lhs, rhs],
        jax.ShapeDtypeStruct((4 * tm, n), F32),
        ref,
        {"grid_spec": gs, "outputs": ("out_ref",)},
        tol=1e-3,
        launch=False,
        grid_spec=gs,
    )
