"""Compile = check the function; launch = call it once per (block, thread).

numpy is imported inside the function that uses it (see allocator.py for why).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, NamedTuple

import kernelbay as kb
from kernelbay.argrules import DType, annotated, check_scalar
from kernelbay.types import dim3

MAX_THREADS_PER_BLOCK = 1024


class Dim3(NamedTuple):
    x: int
    y: int
    z: int


class ThreadIndex(NamedTuple):
    """What CUDA calls blockIdx, threadIdx, blockDim and gridDim."""

    blockIdx: Dim3
    threadIdx: Dim3
    blockDim: Dim3
    gridDim: Dim3


class Compiled(NamedTuple):
    fn: Any
    nparams: int
    #: per kernel argument: the table's dtype of an annotated scalar parameter, else None
    scalars: tuple[DType | None, ...] = ()


def compile(device: kb.Device, source: kb.Source) -> Compiled:
    fn = source.code
    if not callable(fn):
        raise kb.CompileError(
            f"pyref kernels are Python functions, got {type(fn).__name__}",
            log="Source(code=<function>, lang='python') expected",
            source=source.text,
        )
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise kb.CompileError(f"cannot read the signature of {fn!r}", log=str(exc)) from exc
    if not params or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        raise kb.CompileError(
            f"pyref kernel {source.name or fn.__name__!r} must take (thread_index, *kernel_args) as plain parameters",
            log=f"signature: {inspect.signature(fn)}",
        )
    # A parameter annotated with a numpy scalar type (``p: np.int32``, or "int32") is a scalar of
    # that type (kernelbay.argrules.annotated): the core's one table of rules checks what a launch
    # passes for it, as for a C parameter.
    return Compiled(fn, len(params) - 1, tuple(annotated(p.annotation) for p in params[1:]))


def _convert(kernel: kb.Kernel, args: Sequence[Any]) -> list[Any]:
    import numpy as np

    out: list[Any] = []
    scalars = kernel.handle.scalars
    for pos, a in enumerate(args):
        d = scalars[pos] if pos < len(scalars) else None
        if d is not None:
            check_scalar(a, d.kind, d.size, f"argument {pos} of kernel {kernel.name!r}")
            out.append(np.dtype(d.name).type(a))
        elif isinstance(a, kb.Buffer):
            if a.device != kernel.device:
                raise kb.InvalidArgumentError(
                    f"argument {pos} of {kernel.name!r} lives on {a.device}, but the kernel runs on "
                    f"{kernel.device}; copy it over with kb.asarray(x, device={str(kernel.device)!r})"
                )
            h = a.checked_handle()
            dt = getattr(a, "dtype", np.dtype(np.uint8))
            out.append(np.frombuffer(h, dt).reshape(getattr(a, "shape", (a.nbytes,))))
        else:
            out.append(a)
    return out


def launch(kernel: kb.Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> None:
    # pyref has no shared memory and no queues: shared_mem and stream change nothing, and the
    # launch has finished when this returns.
    compiled: Compiled = kernel.handle
    g = dim3(grid, "grid")
    b = dim3(block if block is not None else 1, "block")
    if b[0] * b[1] * b[2] > MAX_THREADS_PER_BLOCK:
        raise kb.InvalidArgumentError(
            f"block {b} has {b[0] * b[1] * b[2]} threads; pyref allows at most {MAX_THREADS_PER_BLOCK}"
        )
    if len(args) != compiled.nparams:
        raise kb.InvalidArgumentError(f"{kernel.name!r} takes {compiled.nparams} arguments, got {len(args)}")
    conv = _convert(kernel, args)
    fn = compiled.fn
    gd, bd = Dim3(*g), Dim3(*b)
    for bz in range(g[2]):
        for by in range(g[1]):
            for bx in range(g[0]):
                bi = Dim3(bx, by, bz)
                for tz in range(b[2]):
                    for ty in range(b[1]):
                        for tx in range(b[0]):
                            fn(ThreadIndex(bi, Dim3(tx, ty, tz), bd, gd), *conv)
