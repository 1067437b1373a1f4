"""The VMEM check: what a kernel's blocks need, against what the chip (or the kernel's
``vmem_limit_bytes``) allows, before anything compiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelbay.errors import InvalidArgumentError

from . import _driver

# jax and numpy are imported inside the functions that use them (see _driver): importing the
# backend, to list or select it, must not load jax, which takes seconds.


def _in_vmem(memory_space: Any) -> bool:
    return memory_space is None or str(memory_space).lower().endswith("vmem")


def _block_dim(d: Any) -> int:
    if d is None:
        return 1  # squeezed
    if isinstance(d, int):
        return d
    size = getattr(d, "block_size", None)
    return int(size) if size is not None else 1


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB ({n} bytes)"


def buffers(spec: Any) -> int:
    """How many copies of a block the pipeline keeps: ``pl.Buffered(n)``'s n, else 2."""
    mode = getattr(spec, "pipeline_mode", None)
    n = getattr(mode, "buffer_count", None)
    return int(n) if isinstance(n, int) and n >= 1 else 2


def _leaves(aval_tree: Any, spec: Any) -> list[tuple[Any, Any]]:
    import jax
    from jax.experimental import pallas as pl

    avals = jax.tree.leaves(aval_tree, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))
    if isinstance(spec, pl.BlockSpec) or spec is None:
        return [(a, spec) for a in avals]
    specs = jax.tree.leaves(spec, is_leaf=lambda x: isinstance(x, pl.BlockSpec))
    return list(zip(avals, specs)) if len(specs) == len(avals) else [(a, None) for a in avals]


def check_vmem(
    k: Any, grid: tuple[Any, ...], ins: Sequence[tuple[int, Any, Any]], outs: Sequence[tuple[int, Any, Any]]
) -> None:
    """Estimate the VMEM the kernel's blocks need (each as many times as it is buffered, two
    by default) plus VMEM scratch, and reject what cannot fit; reject a ``vmem_limit_bytes``
    above the chip's capacity."""
    import numpy as np

    parts: list[tuple[str, int]] = []
    for kind, group in (("in", ins), ("out", outs)):
        for p, aval_tree, spec in group:
            for aval, sp in _leaves(aval_tree, spec):
                if sp is not None and not _in_vmem(getattr(sp, "memory_space", None)):
                    continue
                block = getattr(sp, "block_shape", None)
                dims = aval.shape if block is None else tuple(_block_dim(d) for d in block)
                n = buffers(sp) * int(np.prod(dims, dtype=np.int64)) * np.dtype(aval.dtype).itemsize
                parts.append((f"{k.params[p] if p < len(k.params) else p} ({kind})", n))
    scratch = k.scratch.items() if isinstance(k.scratch, dict) else enumerate(k.scratch)
    for j, s in scratch:
        shape, dtype = getattr(s, "shape", None), getattr(s, "dtype", None)
        if shape is None or dtype is None or not _in_vmem(getattr(s, "memory_space", None)):
            continue
        parts.append((f"scratch {j}", int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize))
    need = sum(n for _, n in parts)
    asked = getattr(k.compiler_params, "vmem_limit_bytes", None)
    cap = _driver.state.vmem_capacity
    if asked and cap and asked > cap:
        raise InvalidArgumentError(
            f"kernel {k.name!r} sets compiler_params.vmem_limit_bytes to {_mib(asked)}, more than the chip's VMEM "
            f"capacity of {_mib(cap)}{' (the chip interpret mode describes)' if _driver.state.interpret else ''}; "
            f"ask for at most {cap}"
        )
    limit = asked or _driver.state.vmem_bytes
    if need > limit:
        detail = ", ".join(f"{name} {_mib(n)}" for name, n in sorted(parts, key=lambda t: -t[1])[:4])
        where = "the chip's VMEM capacity" if _driver.state.vmem_known else "the assumed VMEM capacity (chip unknown)"
        if asked:
            where = "compiler_params.vmem_limit_bytes"
        raise InvalidArgumentError(
            f"kernel {k.name!r} needs about {_mib(need)} of VMEM for its blocks (buffered: {detail}), "
            f"more than {where} of {_mib(limit)}; use smaller block shapes in meta['block_specs'] "
            f"(grid {grid})"
        )
