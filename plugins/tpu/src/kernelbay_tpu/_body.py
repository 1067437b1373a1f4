"""The function ``pallas_call`` runs: the user's kernel, its refs put back in its own order.

It also gives an in-place argument (one ref, read and written) what a TPU would hold in it:
see :func:`kernel_body`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def kernel_body(
    k: Any,
    grid: tuple[Any, ...],
    nargs: int,
    pre: list[int],
    ins: list[int],
    outs: list[int],
    statics: dict[Any, Any],
    kwstat: dict[str, Any],
    in_specs: list[Any],
    out_specs: list[Any],
) -> Any:
    """The kernel pallas_call runs: its refs put back in the user kernel's own argument order.

    An in-place argument is one buffer in HBM (aliased input and output); the kernel sees its
    output block, which a TPU does not load from HBM. So that the single ref reads what it
    holds, its input block is copied in when the block changes from one grid step to the
    next, which is when a TPU fetches an input block; revisiting a block on consecutive steps
    keeps what the kernel accumulated there, as Pallas outputs do.
    """
    fn = k.fn
    n_pre, n_in = len(pre), len(ins)
    plan: list[tuple[str, Any]] = [("s", statics.get(p)) for p in range(nargs)]
    for j, p in enumerate(pre):
        plan[p] = ("r", j)
    for j, p in enumerate(ins):
        plan[p] = ("r", n_pre + j)
    fills = []
    for j, p in enumerate(outs):
        plan[p] = ("r", n_pre + n_in + j)
        if p in k.inplace:
            fills.append((n_pre + ins.index(p), n_pre + n_in + j, out_specs[j]))
    n_refs = n_pre + n_in + len(outs)
    layout = tuple(plan)

    def body(*refs: Any, **scratch: Any) -> None:  # scratch by name: meta['scratch_shapes'] a mapping
        for src, dst, spec in fills:
            _fill_on_new_block(refs[src], refs[dst], spec, grid, refs[:n_pre])
        fn(*[refs[v] if kind == "r" else v for kind, v in layout], *refs[n_refs:], **scratch, **kwstat)

    return body


def _fill_on_new_block(src: Any, dst: Any, spec: Any, grid: tuple[Any, ...], prefetch: Sequence[Any]) -> None:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    # A traced grid dimension is the outer trace's value: inside the kernel, ask Pallas.
    dims: tuple[Any, ...] = tuple(g if type(g) is int else pl.num_programs(d) for d, g in enumerate(grid))
    for s_ref, d_ref, sp in zip(jax.tree.leaves(src), jax.tree.leaves(dst), _spec_leaves(spec, src)):
        ms = str(getattr(sp, "memory_space", None)).lower()
        if "any" in ms or "hbm" in ms:
            continue  # one buffer in HBM: the kernel's ref already reads the input
        im = getattr(sp, "index_map", None)
        if not grid:
            d_ref[...] = s_ref[...]
            continue
        ids = [pl.program_id(d) for d in range(len(dims))]
        strides: list[Any] = [1] * len(dims)
        for d in range(len(dims) - 2, -1, -1):
            strides[d] = strides[d + 1] * dims[d + 1]
        flat = sum(i * s for i, s in zip(ids, strides))
        changed = flat == 0
        if im is not None and getattr(sp, "block_shape", None) is not None:
            prev = [((flat - 1 + strides[0] * dims[0]) // s) % g for s, g in zip(strides, dims)]
            cur, was = im(*ids, *prefetch), im(*prev, *prefetch)
            for a, b in zip(jax.tree.leaves(cur), jax.tree.leaves(was)):
                changed = jnp.logical_or(changed, jnp.asarray(a) != jnp.asarray(b))

        @pl.when(changed)
        def _(s_ref: Any = s_ref, d_ref: Any = d_ref) -> None:
            d_ref[...] = s_ref[...]


def _spec_leaves(spec: Any, ref_tree: Any) -> list[Any]:
    import jax
    from jax.experimental import pallas as pl

    n = len(jax.tree.leaves(ref_tree))
    if isinstance(spec, pl.BlockSpec):
        return [spec] * n
    leaves = jax.tree.leaves(spec, is_leaf=lambda x: isinstance(x, pl.BlockSpec))
    return leaves if len(leaves) == n else [pl.BlockSpec()] * n
