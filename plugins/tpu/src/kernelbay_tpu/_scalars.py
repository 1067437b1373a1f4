"""Typed scalar parameters: a Pallas kernel's annotations checked by the core's one table.

A kernel parameter annotated with a numpy or JAX scalar type (``n: jnp.int32``, ``a:
np.float32``, or the name as a string) is a scalar of that type
(:func:`kernelbay.argrules.annotated`). What a call passes for it is checked by
:func:`kernelbay.argrules.check_scalar`, exactly as cpu and cuda check a C parameter, then
converted to that type:

* a static value (the default) is checked once per distinct value, when its call is built: the
  call cache is keyed by the value, so a repeat costs nothing;
* a run-time SMEM scalar (``meta['scalars']``) is checked on every launch with a concrete value;
  inside ``jax.jit`` its value is traced, so ``k.jax`` checks its dtype once per trace.

Unannotated parameters keep Pallas's own meaning: any hashable static value.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from kernelbay.argrules import DType, annotated, check_scalar
from kernelbay.errors import ArgumentTypeError

# numpy is imported inside the functions that use them (see _driver).


def declared(fn: Any) -> dict[str, DType]:
    """Parameter name -> the scalar type its annotation declares (annotated ones only)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    out = {}
    for p in params:
        d = annotated(p.annotation)
        if d is not None:
            out[p.name] = d
    return out


def where(k: Any, p: int | str) -> str:
    """The argument, for argrules' messages: ``argument 3 ('n') of kernel 'add'``."""
    if isinstance(p, str):
        return f"keyword argument {p!r} of kernel {k.name!r}"
    return f"argument {p} ({k.params[p]!r}) of kernel {k.name!r}"


def static(k: Any, p: int | str, value: Any) -> Any:
    """A static value for typed parameter ``p``, checked and converted to its type."""
    import numpy as np

    d: DType = k.types[p]
    check_scalar(value, d.kind, d.size, where(k, p))
    return np.dtype(d.name).type(value)


def traced_dtype(k: Any, p: int | str, value: Any) -> Any:
    """The declared dtype of SMEM scalar ``p`` given a JAX array (traced or not): its dtype
    must be of the declared kind and size (a traced value cannot be range-checked)."""
    import numpy as np

    d: DType = k.types[p]
    shape = tuple(getattr(value, "shape", ()))
    if shape not in ((), (1,)):
        raise ArgumentTypeError(f"{where(k, p)} is a scalar of type {d.name}, got an array of shape {shape}")
    check_scalar(np.zeros((), value.dtype)[()], d.kind, d.size, where(k, p))  # kind and size only
    return np.dtype(d.name)


def typed_kw(k: Any, kw: dict[str, Any]) -> dict[str, Any]:
    """Keyword-only statics, those annotated with a scalar type checked and converted."""
    return {n: static(k, n, v) if n in k.types else v for n, v in kw.items()}


def check_typed(k: Any, vals: Sequence[Any]) -> None:
    """Check every typed scalar argument (SMEM ones, and statics: a static that cannot key the
    cache, a 0-d array say, is refused by the rule it breaks rather than for being unhashable)."""
    for p, kind, size, where in k.checked:
        if p < len(vals):
            check_scalar(vals[p], kind, size, where)
    for p in k.types:
        if isinstance(p, int) and p < len(vals) and p not in k.scalars:
            static(k, p, vals[p])
