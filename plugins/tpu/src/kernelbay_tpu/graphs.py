"""Graphs for the tpu backend: the recorded launches become ONE jitted program.

Each recorded launch is the pure function of its launch signature (``_call.Entry.raw``: the
``pallas_call`` with its scalar and padding handling); the program threads the arrays through
them functionally (a launch's results replace the arrays it writes, in place arguments
included, for the launches after it), so XLA sees the whole chain, orders it by data and may
overlap what is independent. A replay is one dispatch: the current arrays of the graph's buffers
in, the new arrays of those it writes out and stored back (a handle swap, as a launch does).

A graph with copies or memsets is replayed step by step by the core instead (build returns None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelbay.graphs import Step
from kernelbay.types import Buffer, Device

from . import launcher
from .allocator import materialize

# jax and numpy are imported inside the functions that use them (see _driver): importing the
# backend, to list or select it, must not load jax, which takes seconds.


class TpuGraph:
    """The jitted program of a graph, and which buffers go in and come out."""

    def __init__(self, steps: Sequence[Step]) -> None:
        import jax

        bufs: list[Buffer] = []
        where: dict[int, int] = {}

        def slot(b: Buffer) -> int:
            i = where.get(id(b))
            if i is None:
                i = where[id(b)] = len(bufs)
                bufs.append(b)
            return i

        plan = []
        consts: list[Any] = []  # run-time scalar operands (Source.meta['scalars']), passed at each run
        for s in steps:
            assert s.kernel is not None
            k = s.kernel.handle
            e, _ = launcher.launch_entry(k, s.grid, s.args)  # validates and builds, as a launch would
            vals, _kw = launcher._bind(k, s.args)
            tree = launcher.trees(k, vals)
            # per operand: a buffer's slot, a pytree of slots, or a run-time constant
            ins: list[tuple[str, Any]] = []
            for p in e.ins:
                a = vals[p]
                if isinstance(a, Buffer):
                    ins.append(("b", slot(a)))
                elif p in tree:
                    ins.append(("t", (tree[p][0], [slot(x) for x in tree[p][1]])))
                else:
                    ins.append(("c", len(consts)))
                    consts.append(a)
            outs = [[slot(x) for x in tree[p][1]] if p in tree else [slot(vals[p])] for p in e.outs]
            plan.append((e.raw, tuple(ins), outs))
        written = tuple(sorted({o for _, _, outs in plan for slots in outs for o in slots}))
        nb = len(bufs)

        def program(*operands: Any) -> tuple[Any, ...]:
            env, cs = list(operands[:nb]), operands[nb:]

            def operand(kind: str, at: Any) -> Any:
                if kind == "b":
                    return env[at]
                if kind == "t":
                    return jax.tree_util.tree_unflatten(at[0], [env[i] for i in at[1]])
                return cs[at]

            for call, ins, outs in plan:
                res = call(*[operand(kind, at) for kind, at in ins])
                if len(outs) == 1:  # one output comes back bare, as from pallas_call
                    res = (res,)
                for slots, r in zip(outs, res):
                    for o, leaf in zip(slots, jax.tree.leaves(r)):
                        env[o] = leaf
            return tuple(env[o] for o in written)

        self.fn = jax.jit(program)
        self.bufs = bufs
        self.consts = consts
        self.written = written

    def run(self) -> None:
        bufs = self.bufs
        res = self.fn(*[materialize(b) for b in bufs], *self.consts)
        for o, r in zip(self.written, res):
            bufs[o].handle = r
        launcher._last.results = res


def graph_build(device: Device, steps: Sequence[Step]) -> TpuGraph | None:
    if not steps or any(s.kind != "launch" for s in steps):
        return None
    return TpuGraph(steps)


def graph_replay(device: Device, graph: TpuGraph, stream: Any) -> None:
    graph.run()


def kernel_access(kernel: Any) -> tuple[str, ...] | None:
    """Outputs are written, in-place arguments read and written, the other arrays only read."""
    k = kernel.handle
    if k is None:
        return None
    n = k.nargs if k.nargs is not None else len(k.params)
    return tuple("w" if i in k.outputs else "rw" if i in k.inplace else "r" for i in range(n))
