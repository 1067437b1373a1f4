"""Deprecated names: ``kernelbay_cuda.Stream``, ``Event`` and ``Graph``, thin aliases of
``kb.Stream``, ``kb.Event`` and ``kb.Graph`` (one public type per concept), kept so that code
written for kernelbay 0.1 runs. Each warns (``DeprecationWarning``) when called.

* ``kc.Stream(device, non_blocking=False, priority=0)`` is ``dev.stream(priority)``, non-blocking
  where asked: a ``kb.Stream``.
* ``kc.Event(device, timing=True)`` is a ``kb.Event`` not yet recorded, with 0.1's
  ``record(stream)``.
* ``kc.Graph(device)`` is a ``kb.Graph`` that keeps 0.1's CUDA stream capture:
  ``with g.capture() as s:`` captures whatever is queued on ``s``, other libraries' work too.

``isinstance(x, kc.Stream)`` answers as ``isinstance(x, kb.Stream)``, and so for the others.
"""

from __future__ import annotations

import ctypes
import warnings
from typing import Any

import attrs
import kernelbay as kb
from kernelbay.errors import InvalidArgumentError

from . import _driver
from .streams import _EventHandle, _StreamHandle, ctypes_stream, cuda_device

__all__ = ["Stream", "Event", "Graph"]


class _Alias(type):
    """The metaclass of a deprecated alias of a core type (the alias's first base): calling the
    alias warns and makes a value of the core type (the class's ``_make``); ``isinstance`` and
    ``issubclass`` answer as for the core type."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        instead = cls.__dict__["_instead"]
        warnings.warn(f"kernelbay_cuda.{cls.__name__} is deprecated; {instead}", DeprecationWarning, stacklevel=2)
        return cls._make(*args, **kwargs)  # type: ignore[attr-defined]

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.__mro__[1])

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.__mro__[1])


class Stream(kb.Stream, metaclass=_Alias):
    """Deprecated: use ``dev.stream()``, a :class:`kernelbay.Stream` (which this makes)."""

    __slots__ = ()
    _instead = "use dev.stream() (a kb.Stream)"

    @classmethod
    def _make(cls, device: Any = None, non_blocking: bool = False, priority: int = 0) -> kb.Stream:
        dev = cuda_device(device)
        if type(priority) is not int:
            raise InvalidArgumentError(f"stream priority must be an int, got {priority!r}")
        if not non_blocking:
            return dev.stream(priority)
        # The core makes blocking streams only: a kb.Stream like the core's (attrs.evolve keeps
        # what the core gave it) around a non-blocking handle.
        handle = _StreamHandle(dev, non_blocking=True, priority=priority)
        return attrs.evolve(dev.default_stream, handle=handle, priority=priority, is_default=False)


class Event(kb.Event, metaclass=_Alias):
    """Deprecated: use ``stream.record()``, a :class:`kernelbay.Event`. This one starts
    unrecorded: :meth:`record` records it."""

    __slots__ = ()
    _instead = "use stream.record() (a kb.Event)"

    @classmethod
    def _make(cls, device: Any = None, timing: bool = True) -> Event:
        dev = cuda_device(device)
        ev = object.__new__(cls)  # an instance of this subclass, made as the core makes a kb.Event
        kb.Event.__init__(ev, dev, _EventHandle(dev, timing), dev.binding, None)  # not recorded yet, as in 0.1
        return ev

    def record(self, stream: Any = None) -> Event:
        """Record the event on ``stream`` (``None``: the default stream); returns it."""
        self.handle.record(stream)
        self.stream = stream if isinstance(stream, kb.Stream) else None
        return self


class Graph(kb.Graph, metaclass=_Alias):
    """Deprecated: use ``with dev.graph() as g:``, a :class:`kernelbay.Graph` built from the
    launches, copies and memsets it records. This one also keeps 0.1's CUDA stream capture, for
    work queued by code that is not kernelbay's:

    >>> g = kc.Graph(dev)
    >>> with g.capture() as s:          # s: the capturing kb.Stream
    ...     k.launch(grid, block, args, stream=s)
    >>> g.replay()                      # on the capture's stream, or g.replay(stream)

    Arguments are captured by value: a replay reuses the buffers and scalars given at capture.

    :ivar stream: the (non-blocking) stream captures record and replays run on.
    :ivar nodes: the number of nodes of the last capture.
    """

    _instead = "use `with dev.graph() as g:` (a kb.Graph)"
    stream: kb.Stream
    nodes: int
    _cu_graph: ctypes.c_void_p
    _cu_exec: ctypes.c_void_p

    @classmethod
    def _make(cls, device: Any = None) -> Graph:
        dev = cuda_device(device)
        g = object.__new__(cls)  # an instance of this subclass, made as dev.graph() makes a kb.Graph
        kb.Graph.__init__(g, dev, dev.binding)
        g.stream = Stream._make(dev, non_blocking=True)
        g.nodes = 0
        g._cu_graph = ctypes.c_void_p()
        g._cu_exec = ctypes.c_void_p()
        return g

    def capture(self) -> _Capture:
        """``with g.capture() as s:``: capture the work queued on ``s`` (replacing the last capture)."""
        return _Capture(self)

    def replay(self, stream: Any = None) -> None:
        """Launch the captured work once on ``stream`` (``None``: the capture's own stream). A
        graph that recorded with ``with g:`` instead replays as a ``kb.Graph``."""
        if not self._cu_exec.value:
            if self.steps:
                return super().replay(stream)
            raise InvalidArgumentError("Graph.replay() before a capture; use `with graph.capture() as s:` first")
        index = self.device.index
        s = ctypes_stream(self.stream if stream is None else stream, self.device, "a graph replay")
        _driver.ensure_current(index)
        _driver.check(_driver.libcuda().cuGraphLaunch(self._cu_exec, s), "cuGraphLaunch", index)
        return None

    def synchronize(self) -> None:
        """Block until the work queued on the capture's stream (replays, by default) has finished."""
        self.stream.synchronize()

    def _drop_capture(self) -> None:
        if self._cu_exec.value:
            _driver.libcuda().cuGraphExecDestroy(self._cu_exec)
            self._cu_exec = ctypes.c_void_p()
        if self._cu_graph.value:
            _driver.libcuda().cuGraphDestroy(self._cu_graph)
            self._cu_graph = ctypes.c_void_p()

    def close(self) -> None:
        """Release the captured graph, and what ``with g:`` recorded."""
        if _driver.dead_reason(self.device.index) is None:
            self._drop_capture()
        super().close()

    def __del__(self) -> None:
        try:
            if _driver.dead_reason(self.device.index) is None:
                self._drop_capture()
        except Exception:  # interpreter shutdown
            pass
        super().__del__()


class _Capture:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def __enter__(self) -> kb.Stream:
        g = self.graph
        g._drop_capture()
        index = g.device.index
        _driver.ensure_current(index)
        # Thread-local mode: other threads' unrelated CUDA calls do not break this capture.
        rc = _driver.libcuda().cuStreamBeginCapture_v2(g.stream.handle.ctypes_handle, 1)
        _driver.check(rc, "cuStreamBeginCapture", index)
        return g.stream

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        g = self.graph
        index = g.device.index
        lib = _driver.libcuda()
        graph = ctypes.c_void_p()
        rc = lib.cuStreamEndCapture(g.stream.handle.ctypes_handle, ctypes.byref(graph))
        if exc_type is not None:
            if graph.value:
                lib.cuGraphDestroy(graph)
            return
        _driver.check(rc, "cuStreamEndCapture (was something queued on another stream during capture?)", index)
        g._cu_graph = graph
        n = ctypes.c_size_t()
        lib.cuGraphGetNodes(graph, None, ctypes.byref(n))
        g.nodes = n.value
        ex = ctypes.c_void_p()
        rc = lib.cuGraphInstantiateWithFlags(ctypes.byref(ex), graph, ctypes.c_ulonglong(0))
        _driver.check(rc, "cuGraphInstantiate", index)
        g._cu_exec = ex
