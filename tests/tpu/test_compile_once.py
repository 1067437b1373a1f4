"""One XLA compilation per launch signature, counted in jax's own compile log (issue #29)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kernelbay as kb
import numpy as np
import pytest

jax = pytest.importorskip("jax")


@pytest.fixture(autouse=True, scope="module", params=["1", "tpu"], ids=["interpret", "tpu-interpreter"])
def _interpret(request: Any) -> Any:
    from kernelbay_tpu.testing import interpret_mode

    with interpret_mode(request.param):
        yield request.param


@contextmanager
def compile_log() -> Iterator[list[str]]:
    """The names of the programs XLA compiles in the block (jax's "Finished XLA compilation of
    jit(NAME)" lines, logged under ``jax.log_compiles()``)."""
    names: list[str] = []
    pattern = re.compile(r"Finished XLA compilation of jit\((.*?)\)")

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            m = pattern.search(record.getMessage())
            if m:
                names.append(m.group(1))

    grab, logger = Grab(level=logging.DEBUG), logging.getLogger("jax")
    logger.addHandler(grab)
    try:
        with jax.log_compiles():
            yield names
    finally:
        logger.removeHandler(grab)


def scaled_add(x_ref, y_ref, o_ref, *, scale):
    o_ref[...] = x_ref[...] * scale + y_ref[...]


def test_one_compilation_per_launch_signature(dev: kb.Device) -> None:
    src = kb.Source(scaled_add, lang="pallas", name="kb_once_add", meta={"outputs": ("o_ref",)})
    k = kb.compile(src, device=dev)
    x, y = (kb.asarray(np.arange(256, dtype=np.float32), device=dev) for _ in range(2))
    o = kb.empty(256, "float32", device=dev)

    def launch(scale: float, n: int = 256, out: Any = o) -> None:
        xs, ys = (x, y) if n == 256 else (kb.asarray(np.ones(n, np.float32), device=dev) for _ in range(2))
        k.launch(grid=(), args={"x_ref": xs, "y_ref": ys, "o_ref": out, "scale": scale})
        dev.synchronize()

    with compile_log() as names:
        launch(2.0)
    assert names.count("kb_once_add") == 1, names
    np.testing.assert_array_equal(o.numpy(), np.arange(256) * 3.0)
    with compile_log() as names:
        launch(2.0)  # the same signature: nothing compiles
        launch(3.0)  # a new static value: one compilation
        launch(2.0, n=128, out=kb.empty(128, "float32", device=dev))  # new shapes: one
    assert names.count("kb_once_add") == 2, names


def test_one_compilation_per_k_jax_signature(dev: kb.Device) -> None:
    k = kb.compile(kb.Source(scaled_add, lang="pallas", name="kb_once_jax", meta={"outputs": (2,)}), device=dev)
    x = jax.numpy.ones(128, jax.numpy.float32)
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    with compile_log() as names:
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(k.jax(x, x, out, scale=2.0)), np.full(128, 3.0))
    assert names.count("kb_once_jax") == 1, names
