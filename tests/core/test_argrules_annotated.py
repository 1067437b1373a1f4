"""``kernelbay.argrules.annotated``: the scalar type a Python kernel's annotation declares."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kernelbay.argrules import annotated


@pytest.mark.parametrize(
    ("annotation", "name"),
    [
        (np.int32, "int32"),
        (np.bool_, "bool"),
        (np.uint64, "uint64"),
        (np.dtype("float32"), "float32"),
        ("int8", "int8"),
        ("np.float64", "float64"),
        ("jnp.bool_", "bool"),
        ("numpy.bool", "bool"),
        # no type: Python's own numbers, other objects, dtypes with no scalar parameter
        (int, None),
        (float, None),
        (bool, None),
        ("bool", None),
        ("int", None),
        (None, None),
        ("Ref", None),
        (object, None),
        (np.complex64, None),
        (np.ndarray, None),
    ],
)
def test_annotations(annotation: Any, name: str | None) -> None:
    row = annotated(annotation)
    assert (row.name if row is not None else None) == name


def test_jax_scalar_types() -> None:
    jnp = pytest.importorskip("jax.numpy", reason="jax is not installed")
    assert [annotated(t).name for t in (jnp.int32, jnp.float32, jnp.bool_, jnp.int64)] == [  # type: ignore[union-attr]
        "int32",
        "float32",
        "bool",
        "int64",
    ]
    assert annotated(jnp.bfloat16) is None  # no scalar parameter of its (kind, size) of its own
