"""Launch: the buffer-style hot path over the pure function :mod:`._call` builds.

One dict lookup for the signature, one call of the cached jitted function, and the results
stored into the callers' arrays (a handle swap, no copy). A launch runs the kernel once: a
new signature is lowered and compiled before anything runs (a kernel that fails to trace or
compile raises ``CompileError`` with its donated inputs untouched), and a failed call is
diagnosed, never repeated, except where it failed before running (an unwritten input).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, cast

from kernelbay.argrules import check_scalar
from kernelbay.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    KernelbayError,
    LaunchError,
    UseAfterFreeError,
)
from kernelbay.types import Array, Buffer, Device, Kernel

from . import _call, _driver
from ._jaxfn import bind
from ._scalars import check_typed, static, typed_kw, where
from .allocator import Unset, layout, materialize

# jax and numpy are imported inside the functions that use them (see _driver): importing the
# backend, to list or select it, must not load jax, which takes seconds.

_NOTHING = object()


class _Last:
    # The results of the most recent launch not yet waited for: a TPU runs its programs in
    # order, so waiting for these waits for everything queued before them.
    results: Any = ()


_last = _Last()


#: Kernels with a generated fast path: a fork()ed child drops them all (see _after_fork_in_child).
_specialised: weakref.WeakSet[Any] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The fast paths would call JAX without asking; the generic path meets the driver's refusal.
    for k in list(_specialised):
        k.fast = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def launch(kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    fast = kernel.handle.fast
    if fast is not None and block is None and stream is None and not shared_mem and fast(grid, args):
        return None
    if block is not None or shared_mem or stream is not None:
        _reject(kernel, block, shared_mem, stream)
    return _generic(kernel.handle, grid, args)


#: Types of static values that never hold arrays: no pytree walk for them.
_PLAIN = frozenset({int, float, bool, str, bytes, complex, type(None)})


def trees(k: Any, vals: Sequence[Any]) -> dict[int, tuple[Any, list[Buffer]]]:
    """The arguments that are pytrees of kernelbay arrays (megablox's tuple of group metadata,
    flash attention's ``SegmentIds``): position -> (treedef, leaves). The kernel receives the
    same pytree of refs."""
    found: dict[int, tuple[Any, list[Buffer]]] = {}
    for p, a in enumerate(vals):
        if type(a) in _PLAIN or isinstance(a, Buffer) or p in k.scalars:
            continue
        import jax

        leaves, treedef = jax.tree_util.tree_flatten(a)
        if not any(isinstance(x, Buffer) for x in leaves):
            continue
        if not all(type(x) is Array for x in leaves):
            raise ArgumentTypeError(
                f"argument {k._label(p)} of {k.name!r} is a pytree holding kernelbay arrays and other values "
                f"({', '.join(sorted({type(x).__name__ for x in leaves}))}); a pytree argument holds kernelbay "
                "arrays only (pass the other values as arguments of their own)"
            )
        found[p] = (treedef, leaves)
    return found


def _key(k: Any, grid: Any, vals: Sequence[Any], kw: Mapping[str, Any], tree: Mapping[int, Any]) -> tuple[Any, ...]:
    key: list[Any] = [grid]
    for p, a in enumerate(vals):
        if type(a) is Array:
            key += (a.shape, a.dtype)
        elif isinstance(a, Buffer):
            key += ((a.nbytes,), None)
        elif p in k.scalars:
            key.append((type(a), getattr(a, "dtype", None)))
        elif p in tree:
            treedef, leaves = tree[p]
            key.append((treedef, tuple((x.shape, x.dtype) for x in leaves)))
        else:
            key.append((type(a), a))
    for i, o in k.aliases.items():
        if i < len(vals) and o < len(vals) and isinstance(vals[i], Buffer):
            key.append(vals[i] is vals[o])
    if kw:
        key.append(tuple(sorted(kw.items())))
    return tuple(key)


def _checked(k: Any, p: int, a: Buffer) -> Any:
    """The JAX operand shape of buffer argument ``p``, after checking it can be one."""
    import jax

    if a.handle is None:
        raise UseAfterFreeError(f"argument {k._label(p)} of {k.name!r} was used after close()")
    if a.device != k.device:
        raise InvalidArgumentError(
            f"argument {k._label(p)} of {k.name!r} lives on {a.device}, the kernel on "
            f"{k.device}; copy it with kb.asarray(x, device={str(k.device)!r})"
        )
    if isinstance(a, Array) and a.dtype.name not in _call.TPU_DTYPES:
        raise InvalidArgumentError(
            f"argument {k._label(p)} of {k.name!r} has dtype {a.dtype}, which TPU Pallas kernels "
            f"cannot take; use a 32-bit type (float32 or int32), e.g. kb.asarray(x, dtype='float32')"
        )
    shape, dtype = layout(a)
    return jax.ShapeDtypeStruct(shape, dtype)


def _signature(k: Any, vals: Sequence[Any], tree: Mapping[int, Any]) -> tuple[tuple[Any, ...], frozenset[int]]:
    sig: list[Any] = []
    for p, a in enumerate(vals):
        if isinstance(a, Buffer):
            sig.append(("a", None, _checked(k, p, a)))
        elif p in k.scalars:
            if p in k.types:  # checked by the launch (k.checked): the declared type
                sig.append(("x", _call.declared_dtype(k.types[p]), False))
            else:
                sig.append(("x", _call.scalar_dtype(a), isinstance(a, (int, float))))
        elif p in tree:
            treedef, leaves = tree[p]
            sig.append(("a", treedef, tuple(_checked(k, p, x) for x in leaves)))
        elif p in k.types:  # a typed static: checked once per value (the cache is keyed by it)
            sig.append(("s", static(k, p, a)))
        else:
            sig.append(("s", a))
    donate = {p for p in k.inplace if p < len(vals)}
    donate.update(i for i, o in k.aliases.items() if i < len(vals) and o < len(vals) and vals[i] is vals[o])
    return tuple(sig), frozenset(donate)


def _operand(k: Any, p: int, a: Any, tree: Mapping[int, Any]) -> Any:
    """What the jitted call takes for argument ``p``: an array's storage (zeros if never
    written), a pytree of them, or the value itself."""
    if isinstance(a, Buffer):
        h = a.handle
        if h is None:
            raise UseAfterFreeError(f"argument {k._label(p)} of {k.name!r} was used after close()")
        return materialize(a) if type(h) is Unset else h
    if p in tree:
        import jax

        treedef, leaves = tree[p]
        return jax.tree_util.tree_unflatten(treedef, [_operand(k, p, x, tree) for x in leaves])
    return a


def _store(vals: Sequence[Any], outs: Sequence[int], res: Any, tree: Mapping[int, Any]) -> Any:
    """Make the call's results the storage of the arrays they belong to; return them flat."""
    if not tree:
        for p, r in zip(outs, res):
            vals[p].handle = r
        return res
    import jax

    flat: list[Any] = []
    for p, r in zip(outs, res):
        if p in tree:
            got = jax.tree.leaves(r)
            for x, h in zip(tree[p][1], got):
                x.handle = h
            flat += got
        else:
            vals[p].handle = r
            flat.append(r)
    return tuple(flat)


def launch_entry(k: Any, grid: Any, args: Any) -> tuple[Any, Any]:
    """The entry a launch with these arguments runs (built if new), and its operand shapes."""
    vals, kw = _bind(k, args)
    tree = trees(k, vals)
    key = _key(k, grid, vals, kw, tree)
    e = k.cache.get(key)
    if e is None:
        sig, donate = _signature(k, vals, tree)
        e = _call.build(k, _call.normalise_grid(k, grid), sig, tuple(sorted(typed_kw(k, kw).items())), donate)
    return e, e.avals


def _bind(k: Any, args: Any) -> tuple[Sequence[Any], dict[str, Any]]:
    if isinstance(args, Mapping):
        return bind(k, (), args)
    return args, {}


def _generic(k: Any, grid: Any, args: Any) -> None:
    if isinstance(_driver.state.jax_devices, _driver._ForkedDevices):
        raise LaunchError(_driver.FORKED)
    vals, kw = _bind(k, args)
    for p, kind, size, at in k.checked:  # SMEM scalars of a declared type: every launch
        if p < len(vals):
            check_scalar(vals[p], kind, size, at)
    tree = trees(k, vals)
    try:
        key = _key(k, grid, vals, kw, tree)
        e = k.cache.get(key)
    except TypeError:  # an unhashable grid or static value
        check_typed(k, vals)
        bad = [a for a in vals if not isinstance(a, Buffer)]
        raise ArgumentTypeError(
            f"Pallas static arguments and the grid must be hashable (they key the compile cache); got grid "
            f"{grid!r} and static values {bad!r}. Pass arrays as kernelbay arrays (kb.asarray), and numbers "
            "that change as Source.meta['scalars']"
        ) from None
    if e is None:
        e = _miss(k, grid, vals, kw, tree)
        k.cache[key] = e
    ops = [_operand(k, p, vals[p], tree) for p in e.ins]
    if e.donate:
        _check_donated(k, e, ops)
    try:
        res = e.fn(*ops)
    except OverflowError as exc:
        raise _untyped_overflow(k, e, vals, exc) from exc
    if len(e.outs) == 1:
        res = (res,)
    _last.results = _store(vals, e.outs, res, tree)
    if (
        k.fast is None
        and not kw
        and not tree
        and isinstance(args, (tuple, list))
        and all(type(a) is Array or not isinstance(a, Buffer) for a in args)
    ):
        k.fast = _specialise(k, args)
        _specialised.add(k)


def _miss(k: Any, grid: Any, vals: Sequence[Any], kw: dict[str, Any], tree: Mapping[int, Any]) -> Any:
    """A new launch signature: validate, build, lower and compile, all before anything runs
    (a failure here leaves donated inputs untouched and is reported as a CompileError)."""
    sig, donate = _signature(k, vals, tree)
    e = _call.build(k, _call.normalise_grid(k, grid), sig, tuple(sorted(typed_kw(k, kw).items())), donate)
    try:
        e.fn.lower(*e.avals).compile()  # fills jit's caches: the call below compiles nothing
    except KernelbayError:
        raise
    except Exception as exc:
        shapes = ", ".join(
            f"{k._label(i)}: {getattr(a, 'shape', None)} {getattr(a, 'dtype', '')}"
            if isinstance(a, Buffer)
            else f"{k._label(i)}: {a!r}"
            for i, a in enumerate(vals)
        )
        raise _call.compile_failure(k, e, exc, grid, shapes) from exc
    return e


def _check_donated(k: Any, e: Any, ops: Sequence[Any]) -> None:
    """A donated operand (an in-place argument's storage) must be no other operand's: XLA
    refuses to donate a buffer the same call reads."""
    import jax

    leaves = [jax.tree.leaves(o) for o in ops]
    for j in e.donate:
        mine = {id(h) for h in leaves[j]}
        for i, other in enumerate(leaves):
            same = len(mine) < len(other) if i == j else any(id(h) in mine for h in other)
            if same:
                p, q = e.ins[j], e.ins[i]
                also = "holds one array twice" if i == j else f"the same array is also passed as {k._label(q)}"
                raise InvalidArgumentError(
                    f"argument {k._label(p)} of {k.name!r} is updated in place (its storage is donated to the "
                    f"kernel), and {also}; a call cannot read a buffer it donates. "
                    "Pass a copy (kb.asarray(x)) for the one that is only read"
                )


def _untyped_overflow(k: Any, e: Any, args: Sequence[Any], exc: OverflowError) -> Exception:
    """JAX's bare OverflowError for a Python number too large for an undeclared SMEM scalar's
    type (int32 for an int): the argrules error for that type, naming the argument. Only this
    error path pays for it; a declared type (an annotation) is checked before every launch."""
    for p in e.ins:
        a = args[p]
        if p in k.scalars and p not in k.types and type(a) in (int, float, bool):
            dt = _call.scalar_dtype(a)
            try:
                check_scalar(a, dt.kind, dt.itemsize, where(k, p))
            except InvalidArgumentError as bad:
                return InvalidArgumentError(
                    f"{bad}; an SMEM scalar (meta['scalars']) with no declared type holds a Python int as int32 "
                    "and a float as float32 (a TPU's SMEM holds 32-bit values): pass a value that fits, or pass a "
                    "larger one as a static argument (not in meta['scalars'])"
                )
    return exc


def _recover(k: Any, e: Any, args: Sequence[Any], exc: Exception) -> Any:
    """The cached call raised. An argument closed since, or on another device: say which. An
    input nothing has written yet (kb.empty): the call failed before running, so fill it and
    call once more. Anything else is the kernel's own error, raised as it came."""
    unset = False
    for p in e.ins:
        a = args[p]
        if isinstance(a, Buffer):
            if a.handle is None:
                raise UseAfterFreeError(f"argument {k._label(p)} of {k.name!r} was used after close()") from exc
            if a.device != k.device:
                raise InvalidArgumentError(
                    f"argument {k._label(p)} of {k.name!r} lives on {a.device}, the kernel on {k.device}; "
                    f"copy it with kb.asarray(x, device={str(k.device)!r})"
                ) from exc
            unset = unset or type(a.handle) is Unset
    if isinstance(exc, OverflowError):
        raise _untyped_overflow(k, e, args, exc) from exc
    if not unset:
        raise exc
    return e.fn(*[materialize(args[p]) if isinstance(args[p], Buffer) else args[p] for p in e.ins])


def _specialise(k: Any, args: Sequence[Any]) -> Any:
    """Generate the launch fast path for this kernel's argument pattern (which positions are
    arrays): unpack, key, call and store results with no loop. It answers False (and the
    generic path takes over) for another pattern or a new signature."""
    n = len(args)
    if n == 0:
        return None
    arrays = [i for i, a in enumerate(args) if type(a) is Array]
    key = ["grid"]
    for i in range(n):
        if i in arrays:
            key += [f"a{i}.shape", f"a{i}.dtype"]
        elif i in k.scalars:
            key.append(f"(type(a{i}), getattr(a{i}, 'dtype', None))")
        else:
            key.append(f"(type(a{i}), a{i})")
    key += [f"a{i} is a{o}" for i, o in k.aliases.items() if i in arrays and o < n]
    ins = [i for i in range(n) if i not in k.outputs and (i in arrays or i in k.scalars)]
    outs = sorted(i for i in arrays if i in k.outputs or i in k.inplace)
    check = " and ".join(f"type(a{i}) is Array" for i in arrays) or "True"
    # A donated array passed again elsewhere: the generic path raises the clear error.
    clash = []
    for d in sorted(i for i in arrays if i in k.inplace or i in k.aliases):
        others = " or ".join(f"a{d}.handle is a{j}.handle" for j in ins if j != d and j in arrays)
        if others:
            alias = f"a{d} is a{k.aliases[d]} and " if d in k.aliases and k.aliases[d] < n else ""
            if d in k.aliases and not alias:
                continue
            clash.append(f"({alias}({others}))")
    clashes = " or ".join(clash) or "False"
    # SMEM scalars of a declared type are checked on every launch whose values are not the very
    # objects of the last one (numbers are immutable: the same object was checked then).
    checks = "".join(f"\n        check(a{p}, {kind!r}, {size}, {at!r})" for p, kind, size, at in k.checked if p < n)
    # Identity with the last launch's arguments (MEMO) stands for the whole key: an
    # Array's shape and dtype never change, and a static is the same object. The fast path
    # therefore keeps the last arguments alive until the kernel's next launch.
    # A mapping's keys are strings, never the Arrays of the last launch; without arrays in the
    # pattern the identity test cannot tell, so it also asks for a sequence.
    # MEMO is one tuple, replaced whole, so that another thread never sees half of an update.
    same = " and ".join(f"a{i} is m[{i + 2}]" for i in range(n)) + ("" if arrays else " and type(args) is not dict")
    operands = ", ".join(f"a{i}.handle" if i in arrays else f"a{i}" for i in ins)
    if len(outs) == 1:
        store = f"a{outs[0]}.handle = r"
    else:
        store = f"({', '.join(f'a{i}.handle' for i in outs)},) = r" if outs else "pass"
    src = f"""
def fast(grid, args):
    global MEMO
    if len(args) != {n}:
        return False
    {", ".join(f"a{i}" for i in range(n))}{"," if n == 1 else ""} = args
    m = MEMO
    if {same} and grid == m[0]:
        e = m[1]  # the very arguments of the last launch: the same signature
    else:
        if type(args) is dict or not ({check}):
            return False{checks}
        try:
            e = cache.get(({", ".join(key)},))
        except TypeError:
            return False
        if e is None or {clashes}:
            return False
        MEMO = (grid, e, {", ".join(f"a{i}" for i in range(n))}{"," if n == 1 else ""})
    try:
        r = e.fn({operands})
    except Exception as exc:
        r = recover(k, e, args, exc)
    {store}
    last.results = r
    return True
"""
    scope: dict[str, Any] = {
        "Array": Array,
        "cache": k.cache,
        "last": _last,
        "recover": _recover,
        "check": check_scalar,
        "k": k,
        "MEMO": (_NOTHING, None) + (_NOTHING,) * n,
    }
    exec(src, scope)
    return scope["fast"]


def _reject(kernel: Kernel, block: Any, shared_mem: int, stream: Any) -> None:
    if block is not None:
        raise InvalidArgumentError(
            f"Pallas kernel {kernel.name!r} has no thread blocks: launch it with block=None and give "
            f"per-argument blocks as BlockSpecs in Source.meta['block_specs'] (got block={block!r})"
        )
    if shared_mem:
        raise InvalidArgumentError(
            f"Pallas kernel {kernel.name!r} takes no shared_mem: declare scratch memory with "
            f"Source.meta['scratch_shapes'] (got shared_mem={shared_mem!r})"
        )
    raise InvalidArgumentError(
        f"the tpu backend has no streams; launch {kernel.name!r} with stream=None (got {stream!r})"
    )


def synchronize(device: Device, stream: Any) -> None:
    r = _last.results
    if r is None or (type(r) is tuple and not r):
        return  # nothing launched since the last wait
    _last.results = ()
    try:
        if type(r) is not tuple:  # one array (a single-output launch)
            cast(Any, r).block_until_ready()  # (pyright keeps tuple subclasses in this branch)
        else:
            for a in r:  # each array's own wait: jax.block_until_ready's pytree walk costs more
                a.block_until_ready()
    except Exception as exc:
        raise LaunchError(f"a Pallas kernel on {device} failed: {exc}") from exc
