"""Interpret mode per kernel (``Source.meta['interpret']``) and jax's own
``pltpu.force_tpu_interpret_mode`` context, for signatures called before and after (issue #29).

The observable: a kernel that reads its output block before writing it. Pallas's interpreters
fill an unwritten output with NaN; ``InterpretParams(uninitialized_memory='zero')`` with zeros.
"""

from __future__ import annotations

from typing import Any

import kernelbay as kb
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

ZEROED = {"uninitialized_memory": "zero"}


def peek(x_ref, o_ref):
    o_ref[...] = o_ref[...] + x_ref[...]


def _first(a: Any) -> float:
    return float(np.asarray(a if not isinstance(a, kb.Array) else a.numpy()).reshape(-1)[0])


@pytest.fixture
def x() -> Any:
    return jnp.ones((8, 128), jnp.float32)


OUT = jax.ShapeDtypeStruct((8, 128), jnp.float32)


@pytest.mark.parametrize("how", [ZEROED, pltpu.InterpretParams(**ZEROED)], ids=["mapping", "InterpretParams"])
def test_per_kernel_interpret_params(dev: kb.Device, x: Any, how: Any) -> None:
    mine = kb.compile(kb.Source(peek, lang="pallas", meta={"outputs": ("o_ref",), "interpret": how}), dev)
    plain = kb.compile(kb.Source(peek, lang="pallas", meta={"outputs": ("o_ref",)}), dev)
    assert _first(mine.jax(x, OUT)) == 1.0  # its own parameters: the output starts zeroed
    assert np.isnan(_first(plain.jax(x, OUT)))  # the device's interpret mode
    o = kb.empty((8, 128), "float32", device=dev)
    mine.launch(grid=(), args=(kb.asarray(np.ones((8, 128), np.float32), device=dev), o))
    assert _first(o) == 1.0


def test_bad_interpret_value_is_refused(dev: kb.Device) -> None:
    with pytest.raises(kb.CompileError, match="meta\\['interpret'\\]"):
        kb.compile(kb.Source(peek, lang="pallas", meta={"interpret": "yes"}), dev)
    with pytest.raises(kb.CompileError, match="field"):
        kb.compile(kb.Source(peek, lang="pallas", meta={"interpret": {"no_such_field": 1}}), dev)


def test_force_tpu_interpret_mode_applies_to_signatures_called_before(dev: kb.Device, x: Any) -> None:
    k = kb.compile(kb.Source(peek, lang="pallas", meta={"outputs": ("o_ref",)}), dev)
    xa = kb.asarray(np.ones((8, 128), np.float32), device=dev)
    o = kb.empty((8, 128), "float32", device=dev)
    step = jax.jit(lambda a: k.jax(a, OUT))
    k.launch(grid=(), args=(xa, o))
    assert np.isnan(_first(k.jax(x, OUT))) and np.isnan(_first(step(x))) and np.isnan(_first(o))
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(**ZEROED)):
        k.launch(grid=(), args=(xa, o))
        assert _first(k.jax(x, OUT)) == 1.0
        assert _first(step(x)) == 1.0
        assert _first(o) == 1.0
    k.launch(grid=(), args=(xa, o))  # and, outside it again, the device's mode
    assert np.isnan(_first(k.jax(x, OUT))) and np.isnan(_first(step(x))) and np.isnan(_first(o))
