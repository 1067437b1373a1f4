"""JAX's own Pallas TPU kernels, their code unchanged, run through kernelbay.

The library module's ``pl`` is swapped for one whose ``pallas_call`` builds a kernelbay kernel
and calls it with ``k.jax`` (:mod:`pallas_shim`); everything else in the library runs as
shipped. Each result is compared bit for bit with the library's own ``pallas_call`` in the same
interpret mode, under ``interpret=True`` and under JAX's TPU interpreter.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

import kernelbay as kb
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from .pallas_shim import routed  # noqa: E402

gmm_mod = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")
pa_mod = importlib.import_module("jax.experimental.pallas.ops.tpu.paged_attention.paged_attention_kernel")
fa_mod = importlib.import_module("jax.experimental.pallas.ops.tpu.flash_attention")


@pytest.fixture(autouse=True, scope="module", params=["1", "tpu"], ids=["interpret", "tpu-interpreter"])
def _interpret(request: Any) -> Any:
    from kernelbay_tpu.testing import interpret_mode

    with interpret_mode(request.param):
        yield request.param


def _interp() -> Any:
    from kernelbay_tpu._driver import state

    return state.interpret_arg


def _forced(pl: Any) -> types.SimpleNamespace:
    """``pl`` with ``pallas_call`` forced to this run's interpret mode: the library's own call,
    for kernels that take no ``interpret`` argument."""
    ns = types.SimpleNamespace(**{n: getattr(pl, n) for n in dir(pl) if not n.startswith("__")})
    ns.pallas_call = lambda *a, **kw: pl.pallas_call(*a, **{**kw, "interpret": _interp()})
    return ns


def _rand(*shape: int, seed: int = 0) -> Any:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# --- megablox grouped matmul: the grid's middle dimension is traced from group_sizes ---------


@pytest.mark.parametrize("sizes", [(128, 0, 256, 128), (64, 200, 0, 248)], ids=["aligned", "ragged"])
def test_megablox_gmm_traced_group_sizes(dev: kb.Device, monkeypatch: pytest.MonkeyPatch, sizes: Any) -> None:
    m, kd, n = 512, 128, 128
    lhs, rhs = _rand(m, kd), _rand(len(sizes), kd, n, seed=1)
    group_sizes = jnp.asarray(sizes, jnp.int32)
    want = gmm_mod.gmm(lhs, rhs, group_sizes, interpret=_interp())  # the library, pallas_call
    calls: list[Any] = []
    monkeypatch.setattr(gmm_mod, "pl", routed(dev, calls))
    # gmm's own function under a jit of its own (a new function: a fresh trace cache), so
    # group_sizes, and with it the grid, is traced.
    ours = jax.jit(lambda *a: gmm_mod.gmm.__wrapped__(*a))(lhs, rhs, group_sizes)
    assert calls, "gmm did not run through kernelbay"
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(want))
    bounds = np.cumsum((0, *sizes))
    ref = np.concatenate([np.asarray(lhs[a:b] @ rhs[g]) for g, (a, b) in enumerate(zip(bounds, bounds[1:]))])
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=1e-4, atol=1e-4)


def test_traced_grid_in_k_jax(dev: kb.Device) -> None:
    """A grid dimension computed inside jit (Pallas takes it; so does k.jax), with an in-place
    argument, whose block refill reads the traced grid through pl.num_programs."""
    from jax.experimental import pallas as pl

    def double(x_ref):
        x_ref[...] *= 2.0

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    k = kb.compile(
        kb.Source(double, lang="pallas", meta={"inplace": ("x_ref",), "block_specs": {"x_ref": spec}}), device=dev
    )

    def direct(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    @jax.jit
    def ours(x, count):
        return k.jax(x, grid=(count.sum(),))

    @jax.jit
    def theirs(x, count):
        return pl.pallas_call(
            direct,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(count.sum(),),
            in_specs=[spec],
            out_specs=spec,
            input_output_aliases={0: 0},
            interpret=_interp(),
        )(x)

    x = _rand(32, 128)
    for count in ([1, 1], [3, 1]):
        c = jnp.asarray(count, jnp.int32)
        got = ours(x, c)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(theirs(x, c)))
        rows = 8 * sum(count)
        np.testing.assert_array_equal(np.asarray(got[:rows]), np.asarray(x[:rows] * 2))
    assert not k.handle.jax_cache, "a call with a traced grid belongs to its trace and is never cached"


# --- paged attention: a PrefetchScalarGridSpec with None specs for its None operands ---------


@pytest.mark.parametrize("inline_seq_dim", [True, False], ids=["inline", "grid-seq"])
def test_paged_attention_grid_spec_verbatim(
    dev: kb.Device, monkeypatch: pytest.MonkeyPatch, inline_seq_dim: bool
) -> None:
    b, hq, hkv, d, page, per_seq, total = 2, 8, 2, 128, 16, 4, 16
    rng = np.random.default_rng(0)
    q, kp, vp = _rand(b, hq, d) * 0.1, _rand(hkv, total, page, d, seed=1), _rand(hkv, total, page, d, seed=2)
    lengths = jnp.asarray([40, 64], jnp.int32)
    pages = jnp.asarray(rng.permutation(total)[: b * per_seq].reshape(b, per_seq), jnp.int32)
    run = pa_mod.paged_attention.__wrapped__  # the library's function, under our own jit below
    opts = {"pages_per_compute_block": 2, "inline_seq_dim": inline_seq_dim}

    monkeypatch.setattr(pa_mod, "pl", _forced(pa_mod.pl))
    want = jax.jit(lambda *a: run(*a, **opts))(q, kp, vp, lengths, pages)
    calls: list[Any] = []
    monkeypatch.setattr(pa_mod, "pl", routed(dev, calls))
    ours = jax.jit(lambda *a: run(*a, **opts))(q, kp, vp, lengths, pages)
    assert calls, "paged_attention did not run through kernelbay"
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(want))

    # a plain reference: grouped-query attention over each sequence's pages, up to its length
    # (loose: the kernel's dots run at the backend's default matmul precision)
    kk = np.asarray(kp)[:, np.asarray(pages)].reshape(hkv, b, per_seq * page, d)
    vv = np.asarray(vp)[:, np.asarray(pages)].reshape(hkv, b, per_seq * page, d)
    qq = np.asarray(q).reshape(b, hkv, hq // hkv, d)
    for i, n in enumerate(np.asarray(lengths)):
        s = np.einsum("hgd,hkd->hgk", qq[i], kk[:, i, :n])
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = np.einsum("hgk,hkd->hgd", p / p.sum(-1, keepdims=True), vv[:, i, :n]).reshape(hq, d)
        np.testing.assert_allclose(np.asarray(ours[i]), ref, rtol=1e-2, atol=1e-2)


# --- flash attention: SegmentIds (a pytree), None operands and None outputs, and its backward ---


def test_flash_attention_segment_ids_forward_and_grad(dev: kb.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    b, h, s, d = 1, 2, 256, 128
    q, k, v = (_rand(b, h, s, d, seed=i) * 0.1 for i in range(3))
    ids = jnp.asarray((np.arange(s) >= 100).astype(np.int32)[None])
    seg = fa_mod.SegmentIds(q=ids, kv=ids)
    bs = fa_mod.BlockSizes(**{f: 128 for f in fa_mod.BlockSizes.__dataclass_fields__ if f != "block_b"}, block_b=1)

    def run() -> Any:
        jax.clear_caches()  # the library's inner jitted functions would keep the other run's trace
        attn = lambda *a: fa_mod.flash_attention(*a[:3], segment_ids=a[3], causal=True, block_sizes=bs)
        out = jax.jit(attn)(q, k, v, seg)
        grads = jax.jit(jax.grad(lambda *a: attn(*a).sum(), argnums=(0, 1, 2)))(q, k, v, seg)
        return out, grads

    monkeypatch.setattr(fa_mod, "pl", _forced(fa_mod.pl))
    want, want_grads = run()
    calls: list[Any] = []
    monkeypatch.setattr(fa_mod, "pl", routed(dev, calls))
    ours, our_grads = run()
    assert len(calls) == 4  # forward (twice: alone and under grad), dK/dV, dQ
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(want))
    for a, w in zip(our_grads, want_grads):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(w))
    logits = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    mask = (ids[:, None, :, None] == ids[:, None, None, :]) & jnp.tril(jnp.ones((s, s), bool))
    ref = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(jnp.where(mask, logits, -1e30), axis=-1), v)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-2, atol=1e-2)
