"""``k.jax``: a Pallas kernel as a pure JAX function, usable in jit, vmap and custom_vjp."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from kernelbay.errors import ArgumentTypeError, InvalidArgumentError, KernelbayError

from . import _call
from ._scalars import static, traced_dtype

# jax and numpy are imported inside the functions that use them (see _driver): importing the
# backend, to list or select it, must not load jax, which takes seconds.


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

    typed = p in k.types
    array = hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, np.generic)
    if p in k.scalars:
        if not typed:
            return ("x", _call.scalar_dtype(v), isinstance(v, (int, float))), True
        if array:  # a JAX value, traced inside jit: its dtype is checked (once per trace)
            return ("x", traced_dtype(k, p, v), False), True
        static(k, p, v)  # a number: the whole rule, range included
        return ("x", _call.declared_dtype(k.types[p]), False), True
    if typed:
        if array:
            raise ArgumentTypeError(
                f"argument {k._label(p)} of {k.name!r} is a static scalar of type {k.types[p].name}, known when the "
                f"call is traced; pass a Python or numpy number, or list it in Source.meta['scalars'] to pass a "
                f"JAX value (read it as {k.params[p]}[0])"
            )
        return ("s", static(k, p, v)), False
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
    if p in k.outputs and v is not None:  # None: an output the kernel gets as None (pallas_call's out_shape)
        raise ArgumentTypeError(
            f"output argument {k._label(p)} of {k.name!r} is given by its shape and dtype: pass a "
            f"jax.ShapeDtypeStruct or an array (not read), not {type(v).__name__}"
        )
    return ("s", v), False


#: Types of static values a fast key holds as they are.
_PLAIN = frozenset({int, float, bool, str, type(None)})
#: Types whose values key a call by their ``aval`` (concrete JAX arrays: jax interns avals, so
#: the key compares by identity), and by shape and dtype (numpy arrays, ShapeDtypeStruct); filled
#: by the calls that saw them, so jax's array class is never named.
_AVAL: set[type] = set()
_SHAPED: set[type] = set()


def fast_key(k: Any, args: Sequence[Any], kwargs: Mapping[str, Any], grid: Any) -> Any:
    """A key for ``k.jax``'s memo of eager calls, built from cheap attributes (no
    ``ShapeDtypeStruct`` per argument); None for a call the memo does not serve (tracers,
    pytrees, arguments by name)."""
    parts: list[Any] = [grid]
    add = parts.append
    if k.scalars:  # a run-time scalar keys by its type only, not its value
        for p, a in enumerate(args):
            t = type(a)
            if t in _AVAL:
                add(a.aval)
            elif t in _SHAPED:
                add((a.shape, a.dtype))
            elif t in _PLAIN:
                add((t,) if p in k.scalars else (t, a))
            else:
                return None
    else:
        for a in args:
            t = type(a)
            if t in _AVAL:
                add(a.aval)
            elif t in _SHAPED:
                add((a.shape, a.dtype))
            elif t in _PLAIN:
                add((t, a))
            else:
                return None
    if kwargs:
        for name, v in kwargs.items():
            if type(v) not in _PLAIN or name not in k.kwonly:
                return None
        add(tuple(kwargs.items()))
    return tuple(parts)


def picker(ins: tuple[int, ...]) -> Any:
    """``args -> the operands at positions ins``, as one C call."""
    if len(ins) == 1:
        (i,) = ins
        return lambda args: (args[i],)
    if ins == tuple(range(len(ins))):
        n = len(ins)
        return lambda args: args[:n]
    return operator.itemgetter(*ins)


def _described(k: Any, sig: Sequence[Any], kw: Mapping[str, Any]) -> str:
    """The call's arguments, named, for an error message."""
    parts = []
    for p, s in enumerate(sig):
        if s[0] == "a":
            leaves = (s[2],) if s[1] is None else s[2]
            what = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in leaves)
            parts.append(f"{k._label(p)}: {what if s[1] is None else f'pytree [{what}]'}")
        elif s[0] == "x":
            parts.append(f"{k._label(p)}: scalar {s[1]}")
        else:
            parts.append(f"{k._label(p)}: {s[1]!r}")
    return ", ".join(parts + [f"{n}={v!r}" for n, v in kw.items()])


def call_jax(k: Any, args: Sequence[Any], kwargs: Mapping[str, Any], grid: Any) -> Any:
    """``k.jax``'s slow path: bind, describe, build or look up the entry, call it; remember it
    under its :func:`fast_key` for the next eager call with the same key."""
    import jax
    import jax.core  # jax.core.Tracer below (import jax loads it; this says so)
    import numpy as np

    vals, kw = bind(k, args, kwargs)
    key: Any = None  # the signature of an entry built here, cached once it compiled
    dyn = False
    grid_t = _call.normalise_grid(k, grid)
    sig = tuple(describe(k, p, v)[0] for p, v in enumerate(vals))
    kwsig = tuple(sorted((n, static(k, n, v) if n in k.types else v) for n, v in kw.items()))
    if _call.dynamic(grid_t):  # a traced grid: this trace's own call, never cached
        e, dyn = _call.build(k, grid_t, sig, kwsig, frozenset()), True
    else:
        try:
            e = k.jax_cache.get((grid_t, sig, kwsig))
        except TypeError:
            raise ArgumentTypeError(
                f"static arguments of Pallas kernel {k.name!r} must be hashable (they key the compile cache); "
                f"pass arrays as JAX arrays, and numbers that change as meta['scalars']"
            ) from None
        if e is None:
            e, key = _call.build(k, grid_t, sig, kwsig, frozenset()), (grid_t, sig, kwsig)
    operands = [vals[p] for p in e.ins]
    tracing = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(operands))
    if not e.outs:
        raise InvalidArgumentError(f"kernel {k.name!r} has no outputs: list them in meta['outputs'] or meta['inplace']")
    try:
        if tracing:
            traced = e.raw(*operands)
        elif key is not None:  # trace, lower and compile apart from running, to tell their errors from the run's
            e.fn.lower(*operands).compile()  # with the call's own arrays: jit's caches keep it
    except KernelbayError:
        raise
    except Exception as exc:
        raise _call.compile_failure(k, e, exc, grid_t, _described(k, sig, kw)) from exc
    if key is not None:
        k.jax_cache[key] = e
    if tracing:
        return traced
    for v in vals:
        if isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer) and hasattr(v, "aval"):
            _AVAL.add(type(v))
        elif isinstance(v, (np.ndarray, jax.ShapeDtypeStruct)):
            _SHAPED.add(type(v))
    fkey = None if dyn or len(k.jax_fast) >= 4096 else fast_key(k, args, kwargs, grid)
    if fkey is not None:
        try:
            k.jax_fast[fkey] = (e.fn, picker(e.ins))
        except TypeError:  # an unhashable grid
            pass
    return e.fn(*operands)
