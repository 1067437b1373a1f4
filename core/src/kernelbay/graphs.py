"""Graphs: record a device's launches, copies and memsets once, replay them cheaply.

>>> with dev.graph() as g:                # records instead of running
...     k1.launch(n // 256, 256, (x, y))
...     k2.launch(n // 256, 256, (y, z))
>>> g.replay()                            # runs both; k2 waits for k1 (it reads y, k1 writes it)
>>> g.update(1, args=(y, w))              # new arguments for the second launch, no recapture

Dependencies come from the buffers each step reads and writes (the scheduling idea of
tinygrad, written anew): a step waits for the earlier writers of what it reads, and for the
earlier readers and writers of what it writes; steps with no such relation may run concurrently.
A launch's buffer arguments count as read and written unless the backend knows the kernel's
signature (a pointer to ``const`` data is only read: hook ``kernelbay_kernel_access``) or the
launch says ``reads=``/``writes=``. The stream a step was issued on does not order it; events do
(``s2.wait(s1.record())`` inside the capture orders what follows on ``s2`` after what came before
on ``s1``), and so does :meth:`Graph.add_dependency`.

Backends build graphs through the optional hooks ``kernelbay_graph_*``; without them a replay
runs the recorded steps in order through the ordinary hooks
(:func:`kernelbay.fallbacks.replay_steps`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from . import kernel as _kernel
from . import memory as _memory
from . import streams as _streams
from .errors import InvalidArgumentError, UseAfterFreeError
from .fallbacks import replay_steps
from .kernel import Kernel
from .memory import Buffer

if TYPE_CHECKING:  # pragma: no cover
    from ._binding import Binding
    from .device import Device

__all__ = ["Graph", "Step", "pointer_access"]


@attrs.define(eq=False, slots=True)
class Step:
    """One recorded operation, as a backend's ``kernelbay_graph_build`` receives it.

    :ivar index: its position in the graph (0, 1, ...).
    :ivar kind: ``"launch"``, ``"copy"`` or ``"memset"``.
    :ivar stream: the stream it was issued on (a :class:`kb.Stream`, ``None`` or a foreign one).
    :ivar deps: indices of the earlier steps it must wait for.
    :ivar reads: the buffers (or host numpy arrays) it reads.
    :ivar writes: those it writes.
    :ivar kernel: ``launch``: the kernel; ``grid``, ``block``, ``args``, ``shared_mem`` as given.
    :ivar dst: ``copy``/``memset``: destination; ``src``: copy source; ``nbytes``; ``value``: the
        memset byte.
    """

    index: int
    kind: str
    stream: Any
    deps: tuple[int, ...] = ()
    reads: tuple[Any, ...] = ()
    writes: tuple[Any, ...] = ()
    kernel: Kernel | None = None
    grid: Any = None
    block: Any = None
    args: tuple[Any, ...] = ()
    shared_mem: int = 0
    dst: Any = None
    src: Any = None
    nbytes: int = 0
    value: int = 0
    explicit: bool = False  # reads/writes given by the user

    def describe(self) -> str:
        if self.kind == "launch":
            assert self.kernel is not None
            return f"step {self.index} (launch of {self.kernel.name!r})"
        return f"step {self.index} ({self.kind} of {self.nbytes} bytes)"


def pointer_access(text: str, name: str) -> tuple[str | None, ...] | None:
    """Access modes of a C/C++/CUDA function's parameters, read from its source: see
    :func:`kernelbay.csource.pointer_access`, which this calls."""
    # Deferred: the C reader is needed when a graph records a launch, not by `import kernelbay`.
    from .csource import pointer_access as read

    return read(text, name)


class Graph:
    """Recorded device work (``with dev.graph() as g:``), replayed with :meth:`replay`.

    While the ``with`` block runs, launches, copies and memsets issued on the device from this
    thread (any stream) are recorded, not run; each returns its :class:`Step`. Host reads inside
    the block see the data as it was before the graph runs.
    """

    # Slots, so that the C front of replay (kernelbay._fronts) reads _fast, _binding, device and
    # _handle at fixed offsets (a generic attribute lookup from C cost ~40 ns each, more than the
    # Python twin's specialised loads); __dict__ keeps other attributes (subclasses, users) working.
    __slots__ = (
        "device",
        "_binding",
        "serial",
        "steps",
        "_handle",
        "_built",
        "_recording",
        "_extra",
        "_waits",
        "_buffers",
        "_checked",
        "_fast",
        "closed",
        "__dict__",
        "__weakref__",
    )

    def __init__(self, device: Device, binding: Binding, serial: bool = False) -> None:
        self.device = device
        self._binding = binding
        #: each step waits for the one recorded before it (``dev.graph(serial=True)``)
        self.serial = serial
        self.steps: list[Step] = []
        self._handle: Any = None
        self._built = False
        self._recording = False
        self._extra: set[tuple[int, int]] = set()  # (before, after) from add_dependency and events
        self._waits: dict[int, list[tuple[Any, int]]] = {}  # id(stream) -> [(event stream, marker)]
        self._buffers: tuple[tuple[Buffer | Kernel, Step], ...] = ()
        # memory.closes + kernel.closes at the last check (both only grow: an equal sum means
        # nothing was closed since), and _checked after a native replay: the next may skip the checks
        self._checked: int | None = None
        self._fast: int | None = None
        self.closed = False

    # --- recording ----------------------------------------------------------------------

    def __enter__(self) -> Graph:
        if self.steps or self.closed:
            raise InvalidArgumentError("a kb.Graph records once; make a new one with dev.graph()")
        _streams.begin_capture(self)
        self._recording = True
        return self

    def __exit__(self, exc_type: Any, *rest: object) -> None:
        _streams.end_capture(self)
        self._recording = False
        if exc_type is not None:
            self.steps = []
            return
        self._schedule()

    def _add(self, step: Step) -> Step:
        for stream_obj, marker in self._waits.get(id(step.stream), ()):
            for s in self.steps[:marker]:
                if s.stream is stream_obj:
                    self._extra.add((s.index, step.index))
        self.steps.append(step)
        return step

    def _record_launch(
        self, kernel: Kernel, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any, reads: Any, writes: Any
    ) -> Step:
        if grid is None:
            raise InvalidArgumentError(f"launch of {kernel.name!r} needs grid= (or config=)")
        step = Step(
            len(self.steps),
            "launch",
            stream,
            kernel=kernel,
            grid=grid,
            block=block,
            args=tuple(args),
            shared_mem=shared_mem,
        )
        self._set_access(step, reads, writes)
        return self._add(step)

    def _record_copy(self, dst: Any, src: Any, nbytes: int, stream: Any) -> Step:
        return self._add(
            Step(len(self.steps), "copy", stream, reads=(src,), writes=(dst,), dst=dst, src=src, nbytes=nbytes)
        )

    def _record_memset(self, dst: Buffer, value: int, nbytes: int, stream: Any) -> Step:
        return self._add(Step(len(self.steps), "memset", stream, writes=(dst,), dst=dst, nbytes=nbytes, value=value))

    def _record_event(self, stream: Any) -> _streams.Event:
        return _streams.Event(self.device, ("graph-marker", id(self), len(self.steps)), self._binding, stream)

    def _record_wait(self, stream: Any, event: _streams.Event) -> None:
        h = event.handle
        if not (isinstance(h, tuple) and h[:2] == ("graph-marker", id(self))):
            return  # recorded before the capture: already complete when the graph runs
        self._waits.setdefault(id(stream), []).append((event.stream, h[2]))

    def _set_access(self, step: Step, reads: Any, writes: Any) -> None:
        if reads is not None or writes is not None:
            step.reads = tuple(reads or ())
            step.writes = tuple(writes or ())
            step.explicit = True
            for b in step.reads + step.writes:
                if not isinstance(b, Buffer):
                    raise InvalidArgumentError(f"reads=/writes= take kernelbay buffers, not {type(b).__name__}")
            return
        modes = self._binding.kernel_access(step.kernel) if step.kernel is not None else None
        r, w = [], []
        for i, a in enumerate(step.args):
            if isinstance(a, Buffer):
                mode = (modes[i] if modes is not None and i < len(modes) else None) or "rw"
                if "r" in mode:
                    r.append(a)
                if "w" in mode:
                    w.append(a)
        step.reads, step.writes = tuple(r), tuple(w)

    # --- scheduling ---------------------------------------------------------------------

    def _schedule(self) -> None:
        """Dependencies from buffers (and explicit edges), checked for cycles; then build."""
        deps: list[set[int]] = [set() for _ in self.steps]
        writer: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        for s in self.steps:
            for b in s.reads:
                w = writer.get(id(b))
                if w is not None:
                    deps[s.index].add(w)
            for b in s.writes:
                w = writer.get(id(b))
                if w is not None:
                    deps[s.index].add(w)
                deps[s.index].update(readers.get(id(b), ()))
            for b in s.reads:
                readers.setdefault(id(b), []).append(s.index)
            for b in s.writes:
                writer[id(b)] = s.index
                readers[id(b)] = []
        for before, after in self._extra:
            deps[after].add(before)
        if self.serial:
            for i in range(1, len(deps)):
                deps[i].add(i - 1)
        for s in self.steps:
            s.deps = tuple(sorted(deps[s.index] - {s.index}))
        self._check_acyclic()
        self._collect_buffers()
        self._destroy()
        self._handle = self._binding.graph_build(self.device, tuple(self.steps))
        self._built = True

    def _collect_buffers(self) -> None:
        """Each buffer and kernel the graph uses once, with its first step: checked before each
        replay (a closed kernel's code may be unloaded: ``kernelbay_close_kernel``)."""
        seen: dict[int, tuple[Buffer | Kernel, Step]] = {}
        for s in self.steps:
            for x in s.reads + s.writes + s.args + (s.dst, s.src, s.kernel):
                if isinstance(x, (Buffer, Kernel)) and id(x) not in seen:
                    seen[id(x)] = (x, s)
        self._buffers = tuple(seen.values())
        self._checked = self._fast = None

    def _check_acyclic(self) -> None:
        n = len(self.steps)
        indeg = [len(s.deps) for s in self.steps]
        users: list[list[int]] = [[] for _ in range(n)]
        for s in self.steps:
            for d in s.deps:
                users[d].append(s.index)
        ready = [i for i in range(n) if indeg[i] == 0]
        seen = 0
        while ready:
            i = ready.pop()
            seen += 1
            for u in users[i]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if seen != n:
            stuck = [self.steps[i].describe() for i in range(n) if indeg[i] > 0]
            raise InvalidArgumentError(
                f"the graph's dependencies form a cycle through {', '.join(stuck)}; remove the "
                "add_dependency() that closes it"
            )

    def add_dependency(self, step: int | Step, on: int | Step) -> None:
        """Make ``step`` wait for ``on``, an order the buffers do not show.

        :raises InvalidArgumentError: for an unknown step, or an order that closes a cycle (the
            graph is left as it was).
        """
        a, b = self._index(on), self._index(step)
        if a == b:
            raise InvalidArgumentError(f"{self.steps[a].describe()} cannot depend on itself")
        self._extra.add((a, b))
        try:
            self._schedule()
        except InvalidArgumentError:
            self._extra.discard((a, b))
            self._schedule()
            raise

    def _index(self, step: int | Step) -> int:
        i = step.index if isinstance(step, Step) else step
        if type(i) is not int or not 0 <= i < len(self.steps):
            raise InvalidArgumentError(f"the graph has steps 0..{len(self.steps) - 1}; there is no step {step!r}")
        return i

    # --- use ----------------------------------------------------------------------------

    @property
    def kernels(self) -> list[Step]:
        """The recorded launches, in order (what :meth:`update` counts)."""
        return [s for s in self.steps if s.kind == "launch"]

    def __len__(self) -> int:
        return len(self.steps)

    def _check_usable(self) -> None:
        if self.closed:
            raise InvalidArgumentError("this kb.Graph was closed")
        if self._recording:
            raise InvalidArgumentError(
                "a kb.Graph cannot be replayed or changed while it records; leave the `with` first"
            )
        if not self._built:
            raise InvalidArgumentError("replay of an empty kb.Graph: record with `with dev.graph() as g:` first")
        epoch = _memory.closes + _kernel.closes
        if epoch == self._checked:  # nothing was closed since the last check
            return
        for x, s in self._buffers:
            if x.handle is None:
                if type(x) is Kernel:
                    raise UseAfterFreeError(
                        f"the kernel of {s.describe()} of this graph was closed; keep a graph's kernels open "
                        "while you replay it"
                    )
                raise UseAfterFreeError(
                    f"a buffer of {s.describe()} of this graph was closed; a graph keeps using the buffers "
                    "it recorded: keep them open while you replay it, or update the step's arguments"
                )
        self._checked = epoch

    def replay(self, stream: Any = None) -> None:
        """Queue the recorded work once on ``stream`` (``None``: the current, else default stream).

        :raises UseAfterFreeError: when a buffer or kernel the graph uses was closed.
        """
        # The hot path: a native graph checked at an earlier replay, nothing closed since, on the
        # default stream with no current stream or recording anywhere: the backend's replay alone.
        if stream is None and self._fast == _memory.closes + _kernel.closes and not _streams.intercept:
            self._binding.graph_replay(self.device, self._handle, None)
            return
        self._check_usable()
        g, stream = _streams.route(self.device, stream)
        if g is not None:
            raise InvalidArgumentError("replaying a graph inside another graph's recording is not supported")
        if self._handle is None:  # no native graph: the contract's fallback replay
            replay_steps(self._binding, self.steps, stream)
        else:
            self._binding.graph_replay(self.device, self._handle, stream)
            self._fast = self._checked

    def update(self, kernel_index: int | Step, args: Sequence[Any], *, reads: Any = None, writes: Any = None) -> None:
        """Give a recorded launch new arguments (same kernel and geometry), without recapture.

        :param kernel_index: the launch's position among :attr:`kernels`, or its :class:`Step`.
        :param args: the new arguments.
        :param reads: / :param writes: as on ``Kernel.launch``.
        """
        if self.closed:
            raise InvalidArgumentError("this kb.Graph was closed")
        if isinstance(kernel_index, Step):
            step = kernel_index
            if step.kind != "launch" or step not in self.steps:
                raise InvalidArgumentError(f"{step.describe()} is not a launch of this graph")
        else:
            ks = self.kernels
            if type(kernel_index) is not int or not 0 <= kernel_index < len(ks):
                raise InvalidArgumentError(
                    f"the graph has launches 0..{len(ks) - 1}; there is no launch {kernel_index!r}"
                )
            step = ks[kernel_index]
        if step.kernel is not None and step.kernel.handle is None:
            raise UseAfterFreeError(f"the kernel of {step.describe()} of this graph was closed")
        old = (step.args, step.reads, step.writes, step.explicit)
        step.args = tuple(args)
        self._set_access(step, reads, writes)
        if (step.reads, step.writes) != old[1:3]:
            try:
                self._schedule()
            except Exception:
                step.args, step.reads, step.writes, step.explicit = old
                self._schedule()
                raise
        else:
            self._collect_buffers()
            if self._handle is not None and not self._binding.graph_update(self.device, self._handle, step):
                self._schedule()

    def _destroy(self) -> None:
        self._fast = None
        h, self._handle = self._handle, None
        if h is not None:
            self._binding.graph_destroy(self.device, h)

    def close(self) -> None:
        """Release the backend's graph and the recorded buffers (closing twice is harmless)."""
        if not self.closed:
            self.closed = True
            self._destroy()
            self.steps = []

    def __del__(self) -> None:
        try:
            self._destroy()
        except Exception:  # interpreter shutdown or a dead device
            pass

    def __repr__(self) -> str:
        return f"kernelbay.Graph({self.device}, {len(self.steps)} steps)"
