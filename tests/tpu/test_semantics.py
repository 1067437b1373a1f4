"""Launch semantics: zero copy, donation, validation before compiling, availability."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import kernelbay as kb
import numpy as np
import pytest


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def inc_kernel(x_ref):
    x_ref[...] = x_ref[...] + 1.0


def _ops(text: str, op: str) -> int:
    return len(re.findall(rf"\b(?:stablehlo|mhlo)\.{op}\b", text))


def test_output_only_lowers_to_the_bare_pallas_call(dev: kb.Device) -> None:
    import jax

    k = kb.compile(kb.Source(add_kernel, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x, y = kb.asarray(np.ones(256, np.float32), device=dev), kb.asarray(np.ones(256, np.float32), device=dev)
    o = kb.empty(256, "float32", device=dev)
    args = (x, y, o)
    ours = k.handle.lower(1, args).as_text()
    from kernelbay_tpu.launcher import launch_entry

    entry, _ = launch_entry(k.handle, 1, args)
    bare = jax.jit(entry.pallas).lower(*entry.avals).as_text()  # the same operands, placed on the device
    # The output is not an input of the program: main takes x and y only.
    main = re.search(r"func\.func public @main\((.*?)\) ->", ours).group(1)
    assert main.count("%arg") == 2
    # Nothing beyond the Pallas call itself: no copy, and no broadcast the bare call lacks.
    assert _ops(ours, "copy") == 0
    assert _ops(ours, "broadcast_in_dim") == _ops(bare, "broadcast_in_dim")
    assert len(ours.splitlines()) == len(bare.splitlines())


def test_output_only_result_becomes_the_arrays_storage(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(add_kernel, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x, y = kb.asarray(np.ones(64, np.float32), device=dev), kb.asarray(np.ones(64, np.float32), device=dev)
    o = kb.empty(64, "float32", device=dev)
    before = o.handle
    k.launch(grid=1, args=(x, y, o))
    entry = next(iter(k.handle.cache.values()))
    direct = entry.fn(x.handle, y.handle)[0]
    # The handle is the call's own result (a JAX array of the array's shape), not a copy into
    # storage allocated up front: kb.empty allocated nothing.
    assert o.handle is not before and type(o.handle) is type(direct)
    assert o.handle.shape == (64,) and o.handle.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(o.handle), np.asarray(direct))


def test_inplace_is_aliased_and_donated(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(inc_kernel, lang="pallas", meta={"inplace": ("x_ref",)}), device=dev)
    x = kb.asarray(np.zeros(1024, np.float32), device=dev)
    lowered = k.handle.lower(1, (x,))
    assert "tf.aliasing_output = 0" in lowered.as_text()
    assert re.search(r"input_output_alias=\{ \{\}: \(0, \{\}", lowered.compile().as_text())
    old = x.handle
    k.launch(grid=1, args=(x,))
    dev.synchronize()
    # The input was donated (its handle is gone) and the compiled program aliases it to the
    # output. The buffer's address is not compared: XLA:CPU may still hand out a new buffer
    # (seen in about half the runs of the full suite), which a TPU does not.
    assert old.is_deleted()
    assert x.handle is not old
    np.testing.assert_array_equal(x.numpy(), np.ones(1024, np.float32))


def test_no_donation_warning(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(inc_kernel, lang="pallas", meta={"inplace": ("x_ref",)}), device=dev)
    x = kb.asarray(np.zeros((8, 128), np.float32), device=dev)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k.launch(grid=1, args=(x,))
        k.launch(grid=1, args=(x,))
        dev.synchronize()
    assert not [w for w in caught if "donat" in str(w.message).lower()]


@pytest.mark.parametrize("dtype", ["float64", "int64", "complex64"])
def test_64_bit_dtype_is_rejected_before_compiling(dev: kb.Device, dtype: str) -> None:
    k = kb.compile(kb.Source(add_kernel, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x = kb.asarray(np.ones(8, dtype), device=dev)
    y = kb.asarray(np.ones(8, np.float32), device=dev)
    o = kb.empty(8, "float32", device=dev)
    with pytest.raises(kb.InvalidArgumentError, match=rf"'x_ref'.*{dtype}.*32-bit"):
        k.launch(grid=1, args=(x, y, o))
    assert not k.handle.cache


def test_vmem_over_limit_names_both_numbers(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(add_kernel, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    n = 1 << 20  # 4 MiB per array, 3 arrays, double-buffered: 24 MiB > the 16 MiB fallback
    x, y = kb.zeros(n, "float32", device=dev), kb.zeros(n, "float32", device=dev)
    o = kb.empty(n, "float32", device=dev)
    with pytest.raises(kb.InvalidArgumentError) as info:
        k.launch(grid=1, args=(x, y, o))
    msg = str(info.value)
    assert "24.0 MiB" in msg and "16.0 MiB" in msg and "block_specs" in msg
    assert not k.handle.cache


def test_vmem_with_blocks_fits(dev: kb.Device) -> None:
    from jax.experimental import pallas as pl

    n, b = 1 << 20, 1 << 16
    spec = pl.BlockSpec((b,), lambda i: (i,))
    src = kb.Source(add_kernel, lang="pallas", meta={"outputs": ("o_ref",), "block_specs": [spec, spec, spec]})
    k = kb.compile(src, device=dev)
    xs = np.arange(n, dtype=np.float32)
    x, y = kb.asarray(xs, device=dev), kb.asarray(xs, device=dev)
    o = kb.empty(n, "float32", device=dev)
    k.launch(grid=n // b, args=(x, y, o))
    np.testing.assert_array_equal(o.numpy(), 2 * xs)


def test_geometry_and_arguments_are_checked(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(add_kernel, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x = kb.zeros(8, "float32", device=dev)
    with pytest.raises(kb.InvalidArgumentError, match="block"):
        k.launch(grid=1, block=(128,), args=(x, x, x))
    with pytest.raises(kb.InvalidArgumentError, match=">= 1"):
        k.launch(grid=(2, 0), args=(x, x, x))
    with pytest.raises(kb.InvalidArgumentError, match="takes 3 arguments"):
        k.launch(grid=1, args=(x, x))
    with pytest.raises(kb.ArgumentTypeError, match="output"):
        k.launch(grid=1, args=(x, x, 1.0))


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        ({"outputs": ("nope",)}, "nope"),
        ({"outputs": ("o_ref",), "inplace": ("o_ref",)}, "both"),
        ({"block_spec": {}}, "unknown"),
        ({"block_specs": [None]}, "3 arguments"),
    ],
)
def test_bad_meta_is_a_compile_error(dev: kb.Device, meta: dict, match: str) -> None:
    with pytest.raises(kb.CompileError, match=match) as info:
        kb.compile(kb.Source(add_kernel, lang="pallas", meta=meta), device=dev)
    assert "add_kernel(x_ref, y_ref, o_ref)" in info.value.log


def test_info_says_interpret_mode(dev: kb.Device) -> None:
    assert dev.properties["interpret"] is True and dev.properties["platform"] == "cpu"
    assert "interpret" in dev.name


def test_jax_arrays_are_adopted_without_copy(dev: kb.Device) -> None:
    import jax.numpy as jnp

    j = jnp.arange(6, dtype=jnp.float32)
    a = kb.asarray(j, device=dev)
    assert a.handle is j and a.shape == (6,) and a.dtype == np.float32


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k != "KERNELBAY_TPU_INTERPRET"}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=600)


def test_unavailable_without_the_flag_and_jax_not_imported_to_list() -> None:
    code = (
        "import sys, kernelbay as kb\n"
        "rec = {b.name: b for b in kb.backends()}['tpu']\n"
        "assert rec.spec.name == 'tpu' and rec.priority == 200 and 'jax' not in sys.modules\n"
        "print(rec.status); print(rec.reason)\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    status, reason = out.stdout.splitlines()[:2]
    if status == "available":
        pytest.skip("this machine has a TPU")
    assert status == "unavailable"
    assert "no TPU found; set KERNELBAY_TPU_INTERPRET=1" in reason
    flagged = _run("import kernelbay as kb; print(kb.device('tpu'))", KERNELBAY_TPU_INTERPRET="1")
    assert flagged.returncode == 0 and flagged.stdout.strip() == "tpu:0", flagged.stderr


def test_kernelbay_demo_runs_in_interpret_mode() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "KERNELBAY_TPU_INTERPRET": "1", "KERNELBAY_DEVICE": "tpu"}
    r = subprocess.run([sys.executable, "-m", "kernelbay.cli", "demo"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "tpu:0" in r.stdout and "saxpy (pallas)" in r.stdout and "matches numpy: OK" in r.stdout


def test_default_selection_does_not_import_jax_without_a_tpu() -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELBAY_", "TPU_"))}
    code = "import sys, kernelbay as kb; kb.device(); print('jax' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
