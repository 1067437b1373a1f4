"""One ``pallas_call`` per call signature, as a pure JAX function.

A *signature* gives, per kernel argument, what it is in this call: ``("a", treedef, avals)``
an array or pytree of arrays (``treedef`` None: one array), ``("x", dtype)`` a scalar passed
at run time in SMEM (``meta['scalars']``), or ``("s", value)`` a static Python value.
:func:`build` turns a signature into an :class:`Entry`: ``fn(*operands) -> outputs``, the
jitted pure function that ``k.jax`` and ``k.launch`` both call.
"""

from __future__ import annotations

import inspect
import logging
import operator
import re
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

from kernelbay.argrules import DTYPES
from kernelbay.errors import ArgumentTypeError, CompileError, InvalidArgumentError

from . import _driver
from ._body import kernel_body
from ._vmem import check_vmem

# jax and numpy are imported inside the functions that use them (see _driver): importing the
# backend, to list or select it, must not load jax, which takes seconds.

log = logging.getLogger("kernelbay.tpu")

#: Distinct values of one static argument after which a kernel warns (once) about recompiling.
RECOMPILE_WARN_AFTER = 8


class RecompileWarning(UserWarning):
    """A static kernel argument changes from call to call, and each new value compiles anew."""


class Entry:
    """One call signature: the jitted pure function and where its operands come from."""

    __slots__ = ("avals", "donate", "fn", "ins", "outs", "pallas", "raw")

    def __init__(
        self,
        fn: Any,
        raw: Any,
        ins: tuple[int, ...],
        outs: tuple[int, ...],
        pallas: Any,
        avals: Any,
        donate: tuple[int, ...] = (),
    ) -> None:
        self.fn = fn  # jax.jit(raw), donating what the caller asked for
        self.donate = donate  # the operands (indices into ins) fn donates
        self.raw = raw  # the pure function: operands -> the output, or a tuple of several
        self.ins = ins  # argument positions whose values are fn's operands, in order
        self.outs = outs  # argument positions fn's results belong to, in order
        self.pallas = pallas  # the bare pallas_call, for inspection
        self.avals = avals  # fn's operand shapes (for lowering without running)


_OPERAND = re.compile(r"\b(args|outputs)\[(\d+)\]")


def compile_failure(k: Any, e: Entry, exc: BaseException, grid: Any, described: str) -> CompileError:
    """``exc``, raised tracing, lowering or compiling entry ``e``, as a ``CompileError`` whose
    message names the kernel's arguments where Pallas numbers its operands (``args[1]``)."""

    def named(m: re.Match[str]) -> str:
        where, j = (e.ins if m.group(1) == "args" else e.outs), int(m.group(2))
        if j >= len(where) or where[j] >= len(k.params):
            return m.group(0)
        return f"{m.group(0)} (kernel argument {k.params[where[j]]})"

    first = str(exc).splitlines()[0] if str(exc) else ""
    return CompileError(
        f"Pallas kernel {k.name!r} failed to trace or compile for grid {grid!r} and arguments [{described}]: "
        f"{type(exc).__name__}: {_OPERAND.sub(named, first)}",
        log="".join(traceback.format_exception(exc)),
    )


def normalise_grid(k: Any, grid: Any) -> tuple[Any, ...]:
    """A Pallas grid: an int or a tuple of ints >= 1, ``()`` for one step. A grid that a
    ``LaunchConfig`` padded to three dimensions is cut back to the index maps' rank. Inside a
    trace (``k.jax`` under ``jax.jit``) a dimension may be a traced integer, as ``pallas_call``
    allows (megablox computes one from its group sizes): it is passed through as it is."""
    if grid is None:
        return k.default_grid
    dims = grid if isinstance(grid, (tuple, list)) else (grid,)
    out: list[Any] = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            if traced(d):
                out.append(d)
                continue
            try:
                d = operator.index(d)
            except TypeError:
                raise ArgumentTypeError(
                    f"a Pallas grid is an int or a tuple of ints (traced ints inside jax.jit), not {grid!r}"
                ) from None
        if d < 1:
            raise InvalidArgumentError(f"grid dimensions must all be >= 1, got {tuple(dims)}")
        out.append(d)
    rank = index_rank(k)
    while rank is not None and len(out) > rank and type(out[-1]) is int and out[-1] == 1:
        out.pop()
    return tuple(out)


def traced(d: Any) -> bool:
    """Whether ``d`` is a value being traced by JAX (a dynamic grid dimension)."""
    core = sys.modules.get("jax.core")
    return core is not None and isinstance(d, core.Tracer)


def dynamic(grid: tuple[Any, ...]) -> bool:
    """Whether a normalised grid has a traced dimension: its call belongs to one trace and is
    never cached (a cached call would hold the tracer past its trace)."""
    return any(type(d) is not int for d in grid)


def index_rank(k: Any) -> int | None:
    """How many grid indices the kernel's index maps take (None: no index maps, or they disagree)."""
    try:
        return k.__dict__["_index_rank"]
    except KeyError:
        k._index_rank = r = _index_rank(k)
        return r


def _index_rank(k: Any) -> int | None:
    ranks = set()
    specs = (
        list(k.specs.values())
        + list(_seq(getattr(k.grid_spec, "in_specs", None)))
        + list(_seq(getattr(k.grid_spec, "out_specs", None)))
    )
    for s in specs:
        im = getattr(s, "index_map", None)
        im = getattr(im, "index_map", im)  # jax wraps it
        if im is None:
            continue
        try:
            ps = inspect.signature(im).parameters.values()
        except (TypeError, ValueError):
            return None
        if any(p.kind is p.VAR_POSITIONAL for p in ps):
            return None
        ranks.add(sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps) - k.num_prefetch)
    return ranks.pop() if len(ranks) == 1 else None


def _seq(v: Any) -> Sequence[Any]:
    if v is None or not isinstance(v, (list, tuple)):
        return ()
    return v


def note_statics(k: Any, statics: dict[int | str, Any]) -> None:
    """Count each static argument's distinct values; warn once when one keeps changing."""
    for p, v in statics.items():
        seen = k.static_seen.setdefault(p, set())
        try:
            seen.add(v)
        except TypeError:
            continue
        if len(seen) >= RECOMPILE_WARN_AFTER and p not in k.warned:
            k.warned.add(p)
            msg = (
                f"static argument {k._label(p)} of Pallas kernel {k.name!r} has taken {len(seen)} values, and each "
                f"compiles a new pallas_call; pass it as a run-time SMEM scalar instead: list it in "
                f"Source.meta['scalars'] and read it in the kernel as {k.params[p] if isinstance(p, int) and p < len(k.params) else 'ref'}[0]"
            )
            log.warning(msg)
            warnings.warn(msg, RecompileWarning, stacklevel=4)


def declared_dtype(d: Any) -> Any:
    """The numpy dtype of a declared scalar type (an argrules row)."""
    import numpy as np

    return np.dtype(d.name)


def scalar_dtype(v: Any) -> Any:
    import numpy as np

    if isinstance(v, bool):
        return np.dtype(np.int32)
    if isinstance(v, int):
        return np.dtype(np.int32)
    if isinstance(v, float):
        return np.dtype(np.float32)
    dt = getattr(v, "dtype", None)
    if dt is None:
        raise ArgumentTypeError(
            f"a Source.meta['scalars'] argument is a number or a 0-d/1-element array, not {type(v).__name__}"
        )
    return np.dtype(dt)


def build(
    k: Any, grid: tuple[Any, ...], sig: tuple[Any, ...], kw: tuple[tuple[str, Any], ...], donate_pos: frozenset[int]
) -> Entry:
    """Validate one call signature and build its pure function (the slow path)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    if k.nargs is not None and len(sig) != k.nargs:
        raise InvalidArgumentError(
            f"kernel {k.name!r} takes {k.nargs} arguments ({', '.join(k.params)}), got {len(sig)}"
        )
    n_pre = k.num_prefetch
    pre: list[int] = []
    ins: list[int] = []
    outs: list[int] = []
    statics: dict[int | str, Any] = {}
    for p, s in enumerate(sig):
        kind = s[0]
        if kind == "s":
            # An output may be None, as in pallas_call's out_shape: the kernel gets None for it.
            if (p in k.outputs and s[1] is not None) or p in k.inplace or p < n_pre or p in k.aliases:
                raise ArgumentTypeError(
                    f"argument {k._label(p)} of {k.name!r} is an array argument (output, in-place, aliased or scalar "
                    f"prefetch), so it must be an array, not {type(s[1]).__name__}"
                )
            statics[p] = s[1]
            continue
        if p < n_pre:
            pre.append(p)
        elif p in k.outputs:
            outs.append(p)
        else:
            ins.append(p)
            if p in k.inplace:
                outs.append(p)
        if kind == "a":
            for a in s[2] if s[1] is not None else (s[2],):
                if str(a.dtype) not in TPU_DTYPES:
                    raise InvalidArgumentError(
                        f"argument {k._label(p)} of {k.name!r} has dtype {a.dtype}, which TPU Pallas kernels "
                        f"cannot take; use a 32-bit type (float32 or int32), e.g. kb.asarray(x, dtype='float32')"
                    )
    outs.sort()
    for p in k.specs:
        if p >= len(sig) or p in statics:
            raise InvalidArgumentError(
                f"meta['block_specs'] gives a BlockSpec for {k._label(p)}, which is not an array"
            )
    kwstat = dict(kw)
    statics.update(kwstat)
    note_statics(k, statics)

    def tree(p: int, value: Any) -> Any:
        s = sig[p]
        return value if s[1] is None else jax.tree_util.tree_unflatten(s[1], [value] * s[1].num_leaves)

    def padded(p: int) -> Any:
        s = sig[p]
        if s[0] == "x":
            return jax.ShapeDtypeStruct((1,), s[1])
        if p not in k.pad:
            return s[2] if s[1] is None else jax.tree_util.tree_unflatten(s[1], list(s[2]))
        if s[1] is not None:
            raise InvalidArgumentError(f"meta['pad'] pads single arrays; {k._label(p)} is a pytree")
        shape = list(s[2].shape)
        for d, (mult, extra) in k.pad[p].items():
            shape[d] = -(-shape[d] // mult) * mult + extra
        return jax.ShapeDtypeStruct(tuple(shape), s[2].dtype)

    # Specs in Pallas order. grid_spec's own in/out specs cover the array arguments that are
    # not scalar prefetch, not SMEM scalars and have no entry in meta['block_specs'].
    gs_in, gs_out = (
        list(_seq(getattr(k.grid_spec, "in_specs", None))),
        list(_seq(getattr(k.grid_spec, "out_specs", None))),
    )
    if k.grid_spec is not None and getattr(k.grid_spec, "out_specs", None) is not None and not gs_out:
        gs_out = [k.grid_spec.out_specs]
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    any_spec = bool(k.specs or gs_in or gs_out or any(sig[p][0] == "x" for p in ins))

    def spec_for(p: int, pool: list[Any], j: int) -> Any:
        if sig[p][0] == "x":
            return smem
        spec = k.specs.get(p, pool[j] if 0 <= j < len(pool) else None)
        if spec is None:  # kernelbay's None: the whole array
            spec = pl.BlockSpec()
        if sig[p][1] is not None and isinstance(spec, pl.BlockSpec):
            return tree(p, spec)
        return spec

    # grid_spec.in_specs pair with the array inputs in order; or, as Pallas reads them, with
    # every input operand, a None operand (a static None here) taking a None spec.
    in_order = [p for p in ins if sig[p][0] == "a"]
    operands = [p for p in range(n_pre, len(sig)) if p not in k.outputs]
    if len(gs_in) == len(operands) != len(in_order):
        in_order = operands
        for j, p in enumerate(operands):
            if p in statics and gs_in[j] is not None:
                raise InvalidArgumentError(
                    f"grid_spec.in_specs gives a BlockSpec for {k._label(p)} of {k.name!r}, which is passed "
                    f"{statics[p]!r}, not an array; give None for it (or pass an array)"
                )
    in_specs = [spec_for(p, gs_in, in_order.index(p) if p in in_order else -1) for p in ins]
    out_order = [p for p in range(len(sig)) if p in k.outputs or p in k.inplace]  # None outputs too
    out_order = out_order if len(gs_out) == len(out_order) != len(outs) else outs
    out_specs = [spec_for(p, gs_out, out_order.index(p)) for p in outs]
    out_shape = tuple(padded(p) for p in outs)
    in_index = {p: n_pre + j for j, p in enumerate(ins)}
    aliases = {in_index[p]: outs.index(p) for p in ins if p in k.inplace}
    aliases.update({in_index[i]: outs.index(o) for i, o in k.aliases.items() if i in in_index and o in outs})
    if k.mesh is None:
        check_vmem(
            k,
            grid,
            [(p, padded(p), in_specs[j]) for j, p in enumerate(ins)],
            [(p, out_shape[j], out_specs[j]) for j, p in enumerate(outs)],
        )
    else:  # refs stay in HBM: only the scratch is VMEM
        if grid:
            raise InvalidArgumentError(
                f"kernel {k.name!r} runs over meta['mesh'] (once per core, as pl.kernel does), not over a grid: "
                f"launch it with grid=() (got {grid}); pipeline inside it with pltpu.emit_pipeline"
            )
        check_vmem(k, grid, [], [])

    kwargs: dict[str, Any] = {}
    if n_pre:
        kwargs["grid_spec"] = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=n_pre,
            grid=grid,
            in_specs=in_specs,
            out_specs=tuple(out_specs),
            scratch_shapes=k.scratch,
        )
    else:
        kwargs.update(grid=grid, scratch_shapes=k.scratch)
        if any_spec:
            kwargs.update(in_specs=in_specs, out_specs=tuple(out_specs))
    if k.compiler_params is not None:
        kwargs["compiler_params"] = k.compiler_params
    if k.cost_estimate is not None:
        kwargs["cost_estimate"] = k.cost_estimate
    body = kernel_body(k, grid, len(sig), pre, ins, outs, statics, kwstat, in_specs, out_specs)
    interpret = _driver.state.interpret_arg if k.interpret is None else k.interpret

    def make_call() -> Any:
        # Built when traced, not once: pallas_call reads jax's force_tpu_interpret_mode context
        # as it is built, and jit keys its traces by that context, so each trace gets its own.
        if k.mesh is not None:
            return pl.kernel(
                body,
                out_type=out_shape,
                mesh=k.mesh,
                scratch_types=k.scratch,
                compiler_params=k.compiler_params,
                cost_estimate=k.cost_estimate,
                interpret=interpret,
                name=k.name,
            )
        return pl.pallas_call(
            body, out_shape=out_shape, input_output_aliases=aliases, interpret=interpret, name=k.name, **kwargs
        )

    passed = tuple(pre + ins)
    scalars = {j: sig[p][1] for j, p in enumerate(passed) if sig[p][0] == "x"}
    pads = {j: (k.pad[p], padded(p)) for j, p in enumerate(passed) if p in k.pad}
    cuts = {j: sig[p][2].shape for j, p in enumerate(outs) if p in k.pad}

    single = len(outs) == 1

    def pure(*operands: Any) -> Any:
        ops = list(operands)
        for j, dt in scalars.items():
            ops[j] = jnp.asarray(ops[j], dt).reshape((1,))
        for j, (_, want) in pads.items():
            ops[j] = jnp.pad(ops[j], [(0, w - n) for n, w in zip(ops[j].shape, want.shape)])
        res = make_call()(*ops)
        if cuts:
            res = tuple(r[tuple(slice(0, n) for n in cuts[j])] if j in cuts else r for j, r in enumerate(res))
        # One output comes back bare, as from pallas_call: no tuple to build and unpack.
        return res[0] if single else tuple(res)

    donate = tuple(j for j, p in enumerate(passed) if p in donate_pos)
    # Placed on the kernel's device, as a launch's arrays are: lowering and compiling these
    # ahead of the first call (launch does, to fail before donating) is then the very program
    # the call looks up in jit's caches, not a second compilation of the same kernel.
    where = jax.sharding.SingleDeviceSharding(_driver.jax_device(k.device))
    avals = []
    for p in passed:
        s = sig[p]
        if s[0] == "x":
            avals.append(jax.ShapeDtypeStruct((), s[1], weak_type=s[2], sharding=where))
        else:
            leaves = (s[2],) if s[1] is None else s[2]
            placed = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=where) for a in leaves]
            avals.append(placed[0] if s[1] is None else jax.tree_util.tree_unflatten(s[1], placed))
    pure.__name__ = pure.__qualname__ = k.name  # jax's logs and profiles name the kernel
    return Entry(jax.jit(pure, donate_argnums=donate), pure, passed, tuple(outs), make_call(), tuple(avals), donate)


#: Element types a TPU Pallas kernel can take: the core table's, without 64-bit or complex.
TPU_DTYPES = frozenset(d.name for d in DTYPES if d.size <= 4 and d.kind != "c")
