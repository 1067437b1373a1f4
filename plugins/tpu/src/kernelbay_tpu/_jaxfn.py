"""``k.jax``: a Pallas kernel as a pure JAX function, usable in jit, vmap and custom_vjp."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernelbay.errors import ArgumentTypeError, InvalidArgumentError

from . import _call


def bind(k: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Positional values for the kernel's own arguments, and its keyword-only values."""
    vals = list(args)
    kw: dict[str, Any] = {}
    for name, v in kwargs.items():
        if name in k.params:
            p = k.params.index(name)
            while len(vals) <= p:
                vals.append(_MISSING)
            if vals[p] is not _MISSING:
                raise ArgumentTypeError(f"kernel {k.name!r} got argument {name!r} twice (by position and by name)")
            vals[p] = v
        elif name in k.kwonly:
            kw[name] = v
        else:
            raise ArgumentTypeError(
                f"kernel {k.name!r} has no argument {name!r} (arguments: {', '.join(k.params)}; "
                f"keyword-only: {', '.join(k.kwonly) or 'none'})"
            )
    missing = [k.params[p] for p, v in enumerate(vals) if v is _MISSING]
    if missing:
        raise ArgumentTypeError(f"kernel {k.name!r} is missing argument(s) {', '.join(missing)}")
    return vals, kw


_MISSING = object()


def _aval(v: Any) -> Any:
    import jax

    return jax.ShapeDtypeStruct(tuple(v.shape), v.dtype)


def describe(k: Any, p: int, v: Any) -> tuple[Any, bool]:
    """The signature entry for argument ``p`` with value ``v``, and whether ``v`` is passed."""
    import jax
    import numpy as np

    if p in k.scalars:
        return ("x", _call.scalar_dtype(v), isinstance(v, (int, float))), True
    if isinstance(v, np.generic):  # a numpy scalar is a static value, as a Python number
        pass
    elif hasattr(v, "shape") and hasattr(v, "dtype"):
        return ("a", None, _aval(v)), p not in k.outputs
    treedef: Any  # jaxlib's PyTreeDef (compiled, without type stubs)
    leaves, treedef = jax.tree_util.tree_flatten(v)
    if (
        not isinstance(v, np.generic)
        and leaves
        and all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves)
        and treedef != jax.tree_util.tree_structure(0)
    ):
        return ("a", treedef, tuple(_aval(x) for x in leaves)), p not in k.outputs
    if p in k.outputs:
        raise ArgumentTypeError(
            f"output argument {k._label(p)} of {k.name!r} is given by its shape and dtype: pass a "
            f"jax.ShapeDtypeStruct or an array (not read), not {type(v).__name__}"
        )
    return ("s", v), False


def call_jax(k: Any, args: Sequence[Any], kwargs: Mapping[str, Any], grid: Any) -> Any:
    import jax
    import jax.core  # jax.core.Tracer below (import jax loads it; this says so)

    vals, kw = bind(k, args, kwargs)
    grid_t = _call.normalise_grid(k, grid)
    sig = tuple(describe(k, p, v)[0] for p, v in enumerate(vals))
    kwsig = tuple(sorted(kw.items()))
    if _call.dynamic(grid_t):  # a traced grid: this trace's own call, never cached
        e = _call.build(k, grid_t, sig, kwsig, frozenset())
    else:
        key = (grid_t, sig, kwsig)
        try:
            e = k.jax_cache.get(key)
        except TypeError:
            raise ArgumentTypeError(
                f"static arguments of Pallas kernel {k.name!r} must be hashable (they key the compile cache); "
                f"pass arrays as JAX arrays, and numbers that change as meta['scalars']"
            ) from None
        if e is None:
            e = _call.build(k, grid_t, sig, kwsig, frozenset())
            k.jax_cache[key] = e
    operands = [vals[p] for p in e.ins]
    tracing = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(operands))
    if not e.outs:
        raise InvalidArgumentError(f"kernel {k.name!r} has no outputs: list them in meta['outputs'] or meta['inplace']")
    return (e.raw if tracing else e.fn)(*operands)
