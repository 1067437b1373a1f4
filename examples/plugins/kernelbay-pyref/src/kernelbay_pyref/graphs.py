"""Graphs, the smallest honest way: a built graph is the list of its steps, checked once.

pyref has no streams or events of its own: it leaves those hooks out and gets the core's
fallback (every stream is its one in-order stream; an event completes when recorded). Graphs it
implements, to show the hooks: ``kernelbay_graph_build`` receives the recorded steps with their
dependencies; a backend that can run independent steps side by side would use ``step.deps``.
pyref runs them in recorded order, which is always a valid order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import kernelbay as kb
from kernelbay.graphs import Step

from . import allocator, launcher


class PyrefGraph:
    """The steps, in recorded order."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        for s in self.steps:
            if s.kind == "launch" and len(s.args) != s.kernel.handle.nparams:  # type: ignore[union-attr]
                raise kb.InvalidArgumentError(
                    f"{s.describe()} passes {len(s.args)} arguments; the kernel takes {s.kernel.handle.nparams}"  # type: ignore[union-attr]
                )

    def run(self) -> None:
        for s in self.steps:
            if s.kind == "launch":
                assert s.kernel is not None  # a launch step always has its kernel
                launcher.launch(s.kernel, s.grid, s.block, s.args, s.shared_mem, None)
            elif s.kind == "copy":
                allocator.copy(s.dst, s.src, s.nbytes, None)
            else:
                allocator.as_bytes(s.dst)[: s.nbytes] = s.value  # kb.zeros inside a recording


def graph_build(device: kb.Device, steps: Sequence[Step]) -> PyrefGraph:
    return PyrefGraph(steps)


def graph_replay(device: kb.Device, graph: PyrefGraph, stream: Any) -> None:
    graph.run()


def graph_update(device: kb.Device, graph: PyrefGraph, step: Step) -> bool:
    return True  # the graph holds the Step itself: its new args are already in place
