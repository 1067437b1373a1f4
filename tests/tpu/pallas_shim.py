"""Run library code that calls ``pl.pallas_call`` through kernelbay, without changing it.

:func:`routed` gives a stand-in for a library module's ``pl`` (``jax.experimental.pallas``):
every name is Pallas's own except ``pallas_call``, which builds a ``kb.Source`` from
``pallas_call``'s arguments and calls the kernel through ``k.jax``. Patching the library
module's ``pl`` (not ``jax.experimental.pallas`` itself) leaves kernelbay's own ``pallas_call``
untouched.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import kernelbay as kb


def kb_pallas_call(device: kb.Device, calls: list[Any]) -> Callable[..., Callable[..., Any]]:
    """A ``pl.pallas_call`` whose kernels run through kernelbay on ``device``; each compiled
    kernel is appended to ``calls``."""
    import jax

    def pallas_call(
        kernel: Any,
        out_shape: Any,
        *,
        grid_spec: Any = None,
        grid: Any = (),
        in_specs: Any = None,
        out_specs: Any = None,
        scratch_shapes: Sequence[Any] = (),
        input_output_aliases: dict[int, int] | None = None,
        compiler_params: Any = None,
        interpret: Any = False,  # kernelbay's device decides
        name: str | None = None,
        cost_estimate: Any = None,
        debug: bool = False,  # pallas_call's jaxpr printing: not mapped
        **unsupported: Any,
    ) -> Callable[..., Any]:
        if unsupported:
            raise TypeError(f"pallas_shim: pallas_call arguments not mapped: {sorted(unsupported)}")
        # None outputs stay (the kernel gets None for them, and so does the caller)
        outs, out_tree = jax.tree.flatten(out_shape, is_leaf=lambda x: x is None)

        def call(*operands: Any) -> Any:
            n_in = len(operands)
            meta: dict[str, Any] = {"outputs": tuple(range(n_in, n_in + len(outs)))}
            gs = grid_spec
            if gs is None:
                from jax.experimental import pallas as pl

                gs = pl.GridSpec(grid=grid, in_specs=in_specs, out_specs=out_specs, scratch_shapes=scratch_shapes)
            meta["grid_spec"] = gs
            if input_output_aliases:
                meta["input_output_aliases"] = {i: n_in + o for i, o in input_output_aliases.items()}
            if compiler_params is not None:
                meta["compiler_params"] = compiler_params
            if cost_estimate is not None:
                meta["cost_estimate"] = cost_estimate
            k = kb.compile(kb.Source(kernel, lang="pallas", name=name, meta=meta), device=device)
            calls.append(k)
            # The grid given explicitly, as an author calling k.jax would (it may hold tracers).
            res = k.jax(*operands, *outs, grid=gs.grid)
            real = [o for o in outs if o is not None]
            got = iter([res] if len(real) == 1 else list(res))
            return jax.tree.unflatten(out_tree, [None if o is None else next(got) for o in outs])

        return call

    return pallas_call


def routed(device: kb.Device, calls: list[Any]) -> types.SimpleNamespace:
    """A stand-in for ``jax.experimental.pallas`` whose ``pallas_call`` is kernelbay's."""
    from jax.experimental import pallas as pl

    ns = types.SimpleNamespace(**{n: getattr(pl, n) for n in dir(pl) if not n.startswith("__")})
    ns.pallas_call = kb_pallas_call(device, calls)
    return ns
