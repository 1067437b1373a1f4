"""``k.jax`` inside jit, vmap and custom_vjp; Pallas in-place and aliasing semantics under the TPU
interpreter; and the sharp edges a Pallas author meets (statics, SMEM scalars, kwargs, pytrees,
several outputs, grid=(), LaunchConfig, pl.Buffered, vmem_limit_bytes, one execution per launch,
errors that leave donated inputs intact, pl.ds padding)."""

from __future__ import annotations

import warnings
from typing import Any

import kernelbay as kb
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

F32 = jnp.float32


def SDS(*shape: int) -> Any:
    return jax.ShapeDtypeStruct(shape, F32)


@pytest.fixture
def tpu_interp() -> Any:
    """JAX's TPU interpreter for one test (uninitialised memory reads as NaN, OOB raises)."""
    from kernelbay_tpu.testing import interpret_mode

    with interpret_mode("tpu"):
        yield kb.device("tpu")


def pallas(fn: Any, **meta: Any) -> kb.Kernel:
    return kb.compile(kb.Source(fn, lang="pallas", meta=meta), device=kb.device("tpu"))


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def square_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * x_ref[...]


def square_bwd_kernel(x_ref, g_ref, o_ref):
    o_ref[...] = 2.0 * x_ref[...] * g_ref[...]


# --- k.jax: a JAX function ----------------------------------------------------------------


def test_jax_inside_jit_and_vmap() -> None:
    k = pallas(add_kernel, outputs=("o_ref",))
    x, y = jnp.arange(8, dtype=F32), jnp.ones(8, F32)
    step = jax.jit(lambda a, b: k.jax(a, b, SDS(8)) * 2)
    np.testing.assert_array_equal(step(x, y), (x + y) * 2)
    xb, yb = jnp.arange(24, dtype=F32).reshape(3, 8), jnp.ones((3, 8), F32)
    np.testing.assert_array_equal(jax.vmap(lambda a, b: k.jax(a, b, SDS(8)))(xb, yb), xb + yb)


def test_jax_with_custom_vjp_grad() -> None:
    fwd_k, bwd_k = pallas(square_kernel, outputs=("o_ref",)), pallas(square_bwd_kernel, outputs=("o_ref",))

    @jax.custom_vjp
    def square(x: Any) -> Any:
        return fwd_k.jax(x, x)

    square.defvjp(lambda x: (fwd_k.jax(x, x), x), lambda x, g: (bwd_k.jax(x, g, x),))
    x = jnp.linspace(-1, 1, 16, dtype=F32)
    g = jax.jit(jax.grad(lambda v: square(v).sum()))(x)
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)


def test_multiple_outputs_kwargs_and_pytrees() -> None:
    def kernel(xs, s_ref, d_ref, *, scale):
        s_ref[...] = (xs["a"][...] + xs["b"][...]) * scale
        d_ref[...] = xs["a"][...] - xs["b"][...]

    k = pallas(kernel, outputs=("s_ref", "d_ref"))
    a, b = jnp.arange(8, dtype=F32), jnp.ones(8, F32)
    s, d = k.jax({"a": a, "b": b}, SDS(8), d_ref=SDS(8), scale=3.0)
    np.testing.assert_array_equal(s, (a + b) * 3)
    np.testing.assert_array_equal(d, a - b)
    # Buffer style, with keyword arguments given as a mapping.
    k2 = pallas(add_kernel, outputs=("o_ref",))
    dev = kb.device("tpu")
    x, o = kb.asarray(np.arange(8, dtype=np.float32), device=dev), kb.empty(8, "float32", device=dev)
    k2.launch(grid=(), args={"o_ref": o, "y_ref": x, "x_ref": x})
    np.testing.assert_array_equal(o.numpy(), 2 * np.arange(8, dtype=np.float32))


def test_eager_calls_reuse_their_entry_by_shape_dtype_and_statics() -> None:
    """Eager k.jax calls skip the signature work once seen (issue #29), and still tell apart
    what must differ: shapes, dtypes, static values, run-time scalars' values."""

    def kernel(x_ref, a_ref, o_ref, *, scale):
        o_ref[...] = x_ref[...] * scale + a_ref[0]

    k = pallas(kernel, outputs=("o_ref",), scalars=("a_ref",))
    for n, dt, a, scale in [(8, F32, 1.0, 2.0), (8, F32, 5.0, 2.0), (8, F32, 5.0, 3.0), (16, F32, 1.0, 2.0)] * 2:
        x = jnp.arange(n, dtype=dt)
        got = k.jax(x, a, jax.ShapeDtypeStruct((n,), dt), scale=scale)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(x) * scale + a)
    assert len(k.handle.jax_cache) == 3  # (8, scale 2), (8, scale 3), (16, scale 2): the scalar a runs in SMEM
    # an integer input is another signature; by name it takes the slow path, same result
    xi = jnp.arange(8, dtype=jnp.int32)
    np.testing.assert_array_equal(
        np.asarray(k.jax(xi, 1, jax.ShapeDtypeStruct((8,), jnp.int32), scale=2)), np.asarray(xi) * 2 + 1
    )
    np.testing.assert_array_equal(
        np.asarray(k.jax(x_ref=xi, a_ref=1, o_ref=jax.ShapeDtypeStruct((8,), jnp.int32), scale=2)),
        np.asarray(xi) * 2 + 1,
    )


# --- in place and aliasing, as Pallas on a TPU --------------------------------------------


def inc_kernel(x_ref):
    x_ref[...] += 1.0


def test_inplace_single_ref_reads_its_input_under_the_tpu_interpreter(tpu_interp: kb.Device) -> None:
    k = kb.compile(kb.Source(inc_kernel, lang="pallas", meta={"inplace": ("x_ref",)}), device=tpu_interp)
    x = kb.asarray(np.arange(16, dtype=np.float32), device=tpu_interp)
    k.launch(grid=(), args=(x,))
    np.testing.assert_array_equal(x.numpy(), np.arange(16, dtype=np.float32) + 1)  # not NaN
    np.testing.assert_array_equal(k.jax(jnp.zeros(16, F32)), np.ones(16, np.float32))


def accumulate_kernel(x_ref, acc_ref):
    acc_ref[...] += x_ref[...]


def test_inplace_accumulates_over_revisited_blocks(tpu_interp: kb.Device) -> None:
    # grid (row block i, column block j): acc's block (i) is revisited for every j and keeps
    # what the earlier steps added, as a Pallas output block does on a TPU.
    xs = np.random.default_rng(0).standard_normal((16, 384)).astype(np.float32)
    acc0 = np.full((16, 128), 5.0, np.float32)
    meta = {
        "inplace": ("acc_ref",),
        "block_specs": {
            "x_ref": pl.BlockSpec((8, 128), lambda i, j: (i, j)),
            "acc_ref": pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
        },
    }
    k = kb.compile(kb.Source(accumulate_kernel, lang="pallas", meta=meta), device=tpu_interp)
    x, acc = kb.asarray(xs, device=tpu_interp), kb.asarray(acc0, device=tpu_interp)
    k.launch(grid=(2, 3), args=(x, acc))
    want = acc0 + xs.reshape(16, 3, 128).sum(axis=1)
    np.testing.assert_allclose(acc.numpy(), want, rtol=1e-5, atol=1e-5)


def hbm_inc_kernel(x_hbm, buf, sem):
    copy = pltpu.make_async_copy(x_hbm, buf, sem)
    copy.start()
    copy.wait()
    buf[...] += 1.0
    copy = pltpu.make_async_copy(buf, x_hbm, sem)
    copy.start()
    copy.wait()


def test_inplace_in_hbm_is_one_buffer(tpu_interp: kb.Device) -> None:
    meta = {
        "inplace": ("x_hbm",),
        "block_specs": {"x_hbm": pl.BlockSpec(memory_space=pl.ANY)},
        "scratch_shapes": [pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA],
    }
    k = kb.compile(kb.Source(hbm_inc_kernel, lang="pallas", meta=meta), device=tpu_interp)
    x = kb.asarray(np.ones((8, 128), np.float32), device=tpu_interp)
    k.launch(grid=(), args=(x,))
    np.testing.assert_array_equal(x.numpy(), np.full((8, 128), 2.0, np.float32))


def double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def test_input_output_aliases_between_arguments(tpu_interp: kb.Device) -> None:
    k = kb.compile(
        kb.Source(
            double_kernel, lang="pallas", meta={"outputs": ("o_ref",), "input_output_aliases": {"x_ref": "o_ref"}}
        ),
        device=tpu_interp,
    )
    xs = np.arange(8, dtype=np.float32)
    # The same array for both: updated in place, its old storage donated.
    x = kb.asarray(xs, device=tpu_interp)
    old = x.handle
    k.launch(grid=(), args=(x, x))
    assert old.is_deleted()
    np.testing.assert_array_equal(x.numpy(), xs * 2)
    # Different arrays: the input is left as it was.
    x, o = kb.asarray(xs, device=tpu_interp), kb.empty(8, "float32", device=tpu_interp)
    k.launch(grid=(), args=(x, o))
    np.testing.assert_array_equal(o.numpy(), xs * 2)
    np.testing.assert_array_equal(x.numpy(), xs)
    np.testing.assert_array_equal(k.jax(jnp.asarray(xs), SDS(8)), xs * 2)


# --- statics and SMEM scalars -------------------------------------------------------------


def scaled_kernel(x_ref, o_ref, a):
    o_ref[...] = x_ref[...] * a


def smem_scaled_kernel(x_ref, o_ref, a_ref):
    o_ref[...] = x_ref[...] * a_ref[0]


def test_changing_static_warns_once_with_the_remedy(dev: kb.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelbay_tpu import _call
    from kernelbay_tpu._call import RecompileWarning

    monkeypatch.setattr(_call, "RECOMPILE_WARN_AFTER", 3)
    k = pallas(scaled_kernel, outputs=("o_ref",))
    x, o = kb.asarray(np.ones(8, np.float32), device=dev), kb.empty(8, "float32", device=dev)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for a in range(5):
            k.launch(grid=(), args=(x, o, float(a)))
    ours = [w for w in caught if issubclass(w.category, RecompileWarning)]
    assert len(ours) == 1
    assert "meta['scalars']" in str(ours[0].message) and "'a'" in str(ours[0].message)
    np.testing.assert_array_equal(o.numpy(), np.full(8, 4.0, np.float32))


def test_scalars_in_smem_compile_once(dev: kb.Device) -> None:
    k = pallas(smem_scaled_kernel, outputs=("o_ref",), scalars=("a_ref",))
    x, o = kb.asarray(np.ones(8, np.float32), device=dev), kb.empty(8, "float32", device=dev)
    for a in (1.0, 2.5, -3.0):
        k.launch(grid=(), args=(x, o, a))
        np.testing.assert_array_equal(o.numpy(), np.full(8, a, np.float32))
    assert len(k.handle.cache) == 1
    # Through k.jax the scalar may be a traced value.
    f = jax.jit(lambda v, a: k.jax(v, SDS(8), a))
    np.testing.assert_array_equal(f(jnp.ones(8, F32), jnp.float32(4.0)), np.full(8, 4.0, np.float32))


# --- grids ----------------------------------------------------------------------------------


def test_empty_grid_and_launch_config(dev: kb.Device) -> None:
    k = pallas(add_kernel, outputs=("o_ref",), block_specs=[pl.BlockSpec((8,), lambda i: (i,))] * 3)
    xs = np.arange(32, dtype=np.float32)
    x, o = kb.asarray(xs, device=dev), kb.empty(32, "float32", device=dev)
    # LaunchConfig makes grid (4, 1, 1): the one-index maps still get one index.
    k.launch(config=kb.LaunchConfig(grid=4), args=(x, x, o))
    np.testing.assert_array_equal(o.numpy(), 2 * xs)
    whole = pallas(add_kernel, outputs=("o_ref",))
    whole.launch(grid=(), args=(x, x, o))
    np.testing.assert_array_equal(o.numpy(), 2 * xs)


# --- the VMEM check -------------------------------------------------------------------------


def test_buffered_n_counts_n_buffers(dev: kb.Device) -> None:
    b = 1024  # a (1024, 1024) float32 block is 4 MiB
    xs = kb.empty((b, b), "float32", device=dev)
    o = kb.empty((b, b), "float32", device=dev)
    two = pl.BlockSpec((b, b), lambda i: (i, 0))
    three = pl.BlockSpec((b, b), lambda i: (i, 0), pipeline_mode=pl.Buffered(3))
    ok = pallas(double_kernel, outputs=("o_ref",), block_specs=[two, two])
    ok.handle.lower((1,), (xs, o))  # 2 x 4 + 2 x 4 = 16 MiB: fits the 16 MiB budget
    over = pallas(double_kernel, outputs=("o_ref",), block_specs=[three, two])
    with pytest.raises(kb.InvalidArgumentError, match=r"20\.0 MiB"):
        over.handle.lower((1,), (xs, o))


def test_vmem_limit_above_capacity_is_rejected(dev: kb.Device) -> None:
    k = pallas(double_kernel, outputs=("o_ref",), compiler_params=pltpu.CompilerParams(vmem_limit_bytes=1 << 30))
    x, o = kb.asarray(np.ones(8, np.float32), device=dev), kb.empty(8, "float32", device=dev)
    with pytest.raises(kb.InvalidArgumentError, match="capacity") as err:
        k.launch(grid=(), args=(x, o))
    assert "1024.0 MiB" in str(err.value)


# --- one execution per launch; errors ------------------------------------------------------


def test_a_launch_runs_the_kernel_once(dev: kb.Device) -> None:
    runs: list[int] = []

    def counted(x_ref):
        jax.debug.callback(lambda: runs.append(1))
        x_ref[...] += 1.0

    k = pallas(counted, inplace=("x_ref",))
    x = kb.asarray(np.zeros(8, np.float32), device=dev)
    k.launch(grid=(), args=(x,))  # the first launch of a signature compiles, then runs once
    dev.synchronize()
    k.launch(grid=(), args=(x,))
    dev.synchronize()
    jax.effects_barrier()
    assert len(runs) == 2
    np.testing.assert_array_equal(x.numpy(), np.full(8, 2.0, np.float32))


def test_a_failing_kernel_leaves_donated_input_intact_and_says_why(dev: kb.Device) -> None:
    traced: list[int] = []

    def broken(x_ref):
        traced.append(1)
        raise ValueError("the kernel's own complaint")

    k = pallas(broken, inplace=("x_ref",))
    x = kb.asarray(np.arange(8, dtype=np.float32), device=dev)
    with pytest.raises(kb.CompileError, match="the kernel's own complaint"):
        k.launch(grid=(), args=(x,))
    assert len(traced) == 1
    np.testing.assert_array_equal(x.numpy(), np.arange(8, dtype=np.float32))  # not "deleted"


# --- pl.ds padding --------------------------------------------------------------------------


def rows_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[...] = x_ref[pl.ds(i * 8, 8), :] * 2.0


def test_ds_padding_is_opt_in(tpu_interp: kb.Device) -> None:
    xs = jnp.asarray(np.random.default_rng(0).standard_normal((20, 128)).astype(np.float32))
    whole = pl.BlockSpec(memory_space=pltpu.VMEM)
    outs = pl.BlockSpec((8, 128), lambda i: (i, 0))
    plain = pallas(rows_kernel, outputs=("o_ref",), block_specs=[whole, outs])
    # Without padding the TPU interpreter catches the read past row 20.
    with pytest.raises(Exception, match="(?i)out-of-bounds"):
        jax.block_until_ready(plain.jax(xs, SDS(24, 128), grid=(3,)))
    padded = pallas(rows_kernel, outputs=("o_ref",), block_specs=[whole, outs], pad={"x_ref": {0: 8}, "o_ref": {0: 8}})
    got = padded.jax(xs, SDS(20, 128), grid=(3,))
    np.testing.assert_array_equal(got, xs * 2)


# --- errors name the kernel's arguments (issue #29) ------------------------------------------


def test_k_jax_errors_name_the_kernels_arguments() -> None:
    bad = pallas(add_kernel, outputs=("o_ref",), block_specs={"y_ref": pl.BlockSpec((8, 8), lambda: (0, 0))})
    x = jnp.ones(8, F32)
    for call in (lambda: bad.jax(x, x, SDS(8)), lambda: jax.jit(lambda a: bad.jax(a, a, SDS(8)))(x)):
        with pytest.raises(kb.CompileError, match=r"args\[1\] \(kernel argument y_ref\)") as info:
            call()
        assert "'y_ref' (position 1): (8,) float32" in str(info.value)
        assert isinstance(info.value.__cause__, ValueError)  # pallas_call's own error, chained


def axpy_kernel(x_ref, y_ref):
    y_ref[...] += x_ref[...]


def test_one_array_in_place_and_read_is_refused_clearly(dev: kb.Device) -> None:
    k = pallas(axpy_kernel, inplace=("y_ref",))
    x, y = kb.asarray(np.ones(8, np.float32), device=dev), kb.asarray(np.ones(8, np.float32), device=dev)
    k.launch(grid=(), args=(x, y))  # builds the fast path for this pattern
    k.launch(grid=(), args=(x, y))
    for _ in range(2):  # the fast path hands it to the generic path, which says what is wrong
        with pytest.raises(kb.InvalidArgumentError, match="'y_ref' .* donated .* also passed as 'x_ref'"):
            k.launch(grid=(), args=(y, y))
    np.testing.assert_array_equal(y.numpy(), np.full(8, 3.0, np.float32))  # untouched by the refusals
    with pytest.raises(kb.InvalidArgumentError, match="donated"):
        k.launch(grid=(), args={"x_ref": y, "y_ref": y})
