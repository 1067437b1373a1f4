"""Launch: the hot path. One dict lookup for the signature, one call of the cached jitted
``pallas_call``, and the results stored into the callers' arrays (a handle swap, no copy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelbay.errors import InvalidArgumentError
from kernelbay.types import Array, Buffer, Device, Kernel

from .allocator import Unset, materialize


class _Last:
    # The results of the most recent launch: a TPU runs its programs in order, so waiting
    # for these waits for everything queued before them.
    results: Any = ()


_last = _Last()


def launch(kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    if block is not None or shared_mem or stream is not None:
        _reject(kernel, block, shared_mem, stream)
    k = kernel.handle
    fast = k.fast
    if fast is not None and fast(grid, args):
        return None
    return _generic(k, grid, args)


def _generic(k: Any, grid: Any, args: Sequence[Any]) -> None:
    key: list[Any] = [grid]
    for a in args:
        if type(a) is Array:
            key.append(a.shape)
            key.append(a.dtype)
        elif isinstance(a, Buffer):
            key.append((a.nbytes,))
            key.append(None)
        else:
            key.append((type(a), a))
    try:
        e = k.cache[tuple(key)]
    except KeyError:
        e, res = _miss(k, grid, args, key)
    except TypeError:  # an unhashable grid or static value
        e, res = _miss(k, grid, args, None)
    else:
        try:
            res = e.fn(*[args[i].handle for i in e.ins])
        except Exception:
            res = _retry(k, e, args)
    for i, r in zip(e.outs, res):
        args[i].handle = r
    _last.results = res
    if k.fast is None and all(type(a) is Array or not isinstance(a, Buffer) for a in args):
        k.fast = _specialise(k, args)
    return None


def _specialise(k: Any, args: Sequence[Any]) -> Any:
    """Generate the launch fast path for this kernel's argument pattern (which positions are
    arrays): unpack, key, call and store results with no loop. It answers False (and the
    generic path takes over) for anything else: another pattern, a miss, an error."""
    n = len(args)
    names = [f"a{i}" for i in range(n)]
    arrays = [i for i, a in enumerate(args) if type(a) is Array]
    key = ["grid"]
    for i in range(n):
        key += [f"a{i}.shape", f"a{i}.dtype"] if i in arrays else [f"(type(a{i}), a{i})"]
    ins = [i for i in arrays if i not in k.outputs]
    outs = [i for i in arrays if i in k.outputs or i in k.inplace]
    check = " and ".join(f"type(a{i}) is Array" for i in arrays) or "True"
    call = f"e.fn({', '.join(f'a{i}.handle' for i in ins)})"
    store = f"({', '.join(f'a{i}.handle' for i in outs)},) = r" if outs else "pass"
    src = f"""
def fast(grid, args):
    if len(args) != {n}:
        return False
    {', '.join(names)}{',' if n == 1 else ''} = args
    if not ({check}):
        return False
    try:
        e = cache.get(({', '.join(key)},))
        if e is None:
            return False
        r = {call}
    except Exception:
        return False
    {store}
    last.results = r
    return True
"""
    if n == 0:
        return None
    scope: dict[str, Any] = {"Array": Array, "cache": k.cache, "last": _last}
    exec(src, scope)  # noqa: S102 - generated from argument positions only
    return scope["fast"]


def _miss(k: Any, grid: Any, args: Sequence[Any], key: list[Any] | None) -> tuple[Any, Any]:
    """A new launch signature: validate, build, and run the first call (which traces and
    compiles; a failure there is the kernel's, reported as a CompileError)."""
    import traceback

    from kernelbay.errors import ArgumentTypeError, CompileError, KernelbayError

    e = k.build(grid, args)
    if key is None:
        bad = [a for a in args if not isinstance(a, Buffer)]
        raise ArgumentTypeError(
            f"Pallas static arguments and the grid must be hashable (they key the compile cache); got grid "
            f"{grid!r} and static values {bad!r}. Pass arrays as kernelbay arrays (kb.asarray)"
        )
    handles = [materialize(args[i]) for i in e.ins]
    try:
        res = e.fn(*handles)
    except KernelbayError:
        raise
    except Exception as exc:
        shapes = ", ".join(
            f"{k._label(i)}: {getattr(a, 'shape', None)} {getattr(a, 'dtype', '')}" if isinstance(a, Buffer) else f"{k._label(i)}: {a!r}"
            for i, a in enumerate(args)
        )
        raise CompileError(
            f"Pallas kernel {k.name!r} failed to trace or compile for grid {grid!r} and arguments [{shapes}]: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            log="".join(traceback.format_exception(exc)),
        ) from exc
    k.cache[tuple(key)] = e
    return e, res


def _retry(k: Any, e: Any, args: Sequence[Any]) -> Any:
    # The call failed: an argument closed since the signature was built, one of another
    # device, or one nothing has written yet (kb.empty) used as an input. Say which, or fill
    # the unwritten one and call again.
    handles = []
    for i in e.ins:
        a = args[i]
        h = a.checked_handle()
        if a.device != k.device:
            raise InvalidArgumentError(
                f"argument {k._label(i)} of {k.name!r} lives on {a.device}, the kernel on {k.device}; "
                f"copy it with kb.asarray(x, device={str(k.device)!r})"
            )
        if type(h) is Unset:
            h = materialize(a)
        handles.append(h)
    return e.fn(*handles)


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
    import jax

    from kernelbay.errors import LaunchError

    try:
        jax.block_until_ready(_last.results)
        jax.effects_barrier()
    except Exception as exc:
        raise LaunchError(f"a Pallas kernel on {device} failed: {exc}") from exc
