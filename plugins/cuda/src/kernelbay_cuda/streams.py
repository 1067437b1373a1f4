"""Streams, events and CUDA graphs; the stream and event hooks of the backend.

``kb.Stream`` (``dev.stream()``) holds a :class:`Stream` as its handle and ``kb.Event`` an
:class:`Event`; both classes stay usable on their own, as before. User streams are blocking:
they order with the legacy default stream, so a host read with ``stream=None`` sees their work.
``None`` as a stream means the device's default stream: the legacy default stream, which
orders with every blocking stream. :class:`Stream` is a user stream (blocking by default, so it
orders with the default stream but overlaps with other user streams). Anything implementing the
``__cuda_stream__`` protocol (CuPy, cuda.core, recent PyTorch) is accepted where a stream is.
"""

from __future__ import annotations

import ctypes
from typing import Any

import kernelbay as kb
from kernelbay.errors import ArgumentTypeError, InvalidArgumentError
from kernelbay.streams import Stream as KbStream

from . import _driver, native
from .devices import sync_failed

__all__ = ["Stream", "Event", "Graph", "as_stream", "default_stream", "synchronize"]


def _device(device: Any) -> Any:
    dev = kb.device(device if device is not None else "cuda")
    if dev.backend != "cuda":
        raise InvalidArgumentError(f"{dev} is not a CUDA device")
    return dev


class Stream:
    """A CUDA stream on one device.

    :param device: a CUDA device (``kb.device("cuda:1")``), a selector, or ``None`` for cuda:0
        (or ``KERNELBAY_DEVICE`` when it names a CUDA device).
    :param non_blocking: ``True`` for a stream that does not order with the default stream.
    :param priority: the CUDA stream priority (lower is more urgent).
    """

    __slots__ = ("device", "index", "handle", "cvp", "_owned", "_owner", "bobj", "closed", "__weakref__")
    cvp: ctypes.c_void_p | None  # None for handle 0 (the legacy default stream)

    def __init__(self, device: Any = None, non_blocking: bool = False, priority: int = 0) -> None:
        dev = _device(device)
        self.device = dev
        self.index = dev.index
        self._owned = False
        self._owner = None
        self.closed = False
        _driver.ensure_current(dev.index)
        h = ctypes.c_void_p()
        rc = _driver.libcuda().cuStreamCreateWithPriority(ctypes.byref(h), 1 if non_blocking else 0, priority)
        _driver.check(rc, "cuStreamCreate", dev.index)
        self.handle = h.value or 0
        self.cvp = ctypes.c_void_p(self.handle)
        self.bobj = _driver.driver().CUstream(self.handle)
        self._owned = True
        from . import allocator

        allocator.stream_opened(dev.index)

    @classmethod
    def _wrap(cls, device: Any, handle: int, owner: Any = None) -> Stream:
        s = cls.__new__(cls)
        s.device = device
        s.index = device.index
        s.handle = handle
        s.cvp = ctypes.c_void_p(handle) if handle else None
        s.bobj = _driver.driver().CUstream(handle)
        s._owned = False
        s._owner = owner
        s.closed = False
        return s

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    def synchronize(self) -> None:
        """Block until everything queued on this stream has finished."""
        _driver.ensure_current(self.index)
        rc = _driver.libcuda().cuStreamSynchronize(self.cvp)
        if rc:
            sync_failed(self.index, rc)

    def query(self) -> bool:
        """``True`` when all queued work has finished."""
        return _driver.libcuda().cuStreamQuery(self.cvp) == 0

    def wait(self, event: Event) -> None:
        """Make later work on this stream wait for ``event``."""
        _driver.check(_driver.libcuda().cuStreamWaitEvent(self.cvp, event.cvp, 0), "cuStreamWaitEvent", self.index)

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if ``None``) on this stream and return it."""
        event = event or Event(self.device)
        event.record(self)
        return event

    def close(self) -> None:
        if self._owned and self.handle:
            h, self.handle, self._owned, self.closed = self.handle, 0, False, True
            native.stream_closed()  # the fast paths read stream handles again
            if _driver.dead_reason(self.index) is None:
                lib = _driver.libcuda()
                from . import allocator

                if allocator.stream_closing(self.index):  # the last: nothing may stay queued on it
                    _driver.ensure_current(self.index)
                    lib.cuStreamSynchronize(ctypes.c_void_p(h))
                    allocator.stream_closed(self.index)
                lib.cuStreamDestroy_v2(ctypes.c_void_p(h))

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"kernelbay_cuda.Stream(cuda:{self.index}, handle=0x{self.handle:x})"


def default_stream(device: Any = None) -> Stream:
    """The device's default (legacy) stream, as a :class:`Stream`."""
    return Stream._wrap(_device(device), 0)


def as_stream(obj: Any, device: Any) -> Stream:
    """A :class:`Stream` for ``obj``: a Stream, ``None`` (default stream) or a ``__cuda_stream__`` object."""
    if obj is None:
        return Stream._wrap(device, 0)
    if type(obj) is KbStream:  # kb.Stream: its handle is one of ours (see the hooks below)
        h = obj.handle
        if type(h) is Stream and not h.closed:
            return h
        raise InvalidArgumentError(f"{obj!r} was closed or is not a CUDA stream; create one with dev.stream()")
    if isinstance(obj, Stream):
        if obj.closed:
            raise InvalidArgumentError(f"{obj!r} was closed; create a new kernelbay_cuda.Stream")
        return obj
    proto = getattr(obj, "__cuda_stream__", None)
    if proto is None:
        # CuPy (.ptr) and PyTorch (.cuda_stream) streams of versions without the protocol.
        raw = getattr(obj, "cuda_stream", None)
        if raw is None and type(obj).__module__.startswith("cupy"):
            raw = getattr(obj, "ptr", None)
        if isinstance(raw, int):
            return Stream._wrap(device, raw, owner=obj)
        raise ArgumentTypeError(
            f"a stream must be a kernelbay_cuda.Stream, None or an object with __cuda_stream__, not {type(obj).__name__}"
        )
    got: Any = proto() if callable(proto) else proto
    try:
        _version, handle = got
        handle = int(handle)
    except (TypeError, ValueError):
        raise ArgumentTypeError(
            f"{type(obj).__name__}.__cuda_stream__ returned {got!r}, not (version, handle)"
        ) from None
    return Stream._wrap(device, handle, owner=obj)


def synchronize(device: Any, stream: Any) -> None:
    """The ``kernelbay_synchronize`` hook."""
    idx = device.index
    _driver.check_alive(idx)
    _driver.ensure_current(idx)
    lib = _driver.libcuda()
    if stream is None:
        rc = lib.cuCtxSynchronize()
    else:
        rc = lib.cuStreamSynchronize(as_stream(stream, device).cvp)
    if rc:
        sync_failed(idx, rc)


class Event:
    """A CUDA event, for ordering streams and for timing (``end.elapsed_ms(start)``... or
    :meth:`elapsed`)."""

    __slots__ = ("index", "handle", "cvp", "__weakref__")

    def __init__(self, device: Any = None, timing: bool = True) -> None:
        dev = _device(device) if not hasattr(device, "backend") else device
        self.index = dev.index
        _driver.ensure_current(dev.index)
        h = ctypes.c_void_p()
        rc = _driver.libcuda().cuEventCreate(ctypes.byref(h), 0 if timing else 2)
        _driver.check(rc, "cuEventCreate", dev.index)
        self.handle = h.value
        self.cvp = ctypes.c_void_p(self.handle)

    def record(self, stream: Any = None) -> Event:
        s = None if stream is None else as_stream(stream, _device(f"cuda:{self.index}")).cvp
        _driver.check(_driver.libcuda().cuEventRecord(self.cvp, s), "cuEventRecord", self.index)
        return self

    def synchronize(self) -> None:
        rc = _driver.libcuda().cuEventSynchronize(self.cvp)
        if rc:
            sync_failed(self.index, rc)

    def query(self) -> bool:
        return _driver.libcuda().cuEventQuery(self.cvp) == 0

    def elapsed(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event (both recorded, this one completed)."""
        ms = ctypes.c_float()
        _driver.check(
            _driver.libcuda().cuEventElapsedTime(ctypes.byref(ms), start.cvp, self.cvp),
            "cuEventElapsedTime",
            self.index,
        )
        return ms.value

    def __del__(self) -> None:
        try:
            if self.handle and _driver.dead_reason(self.index) is None:
                _driver.libcuda().cuEventDestroy_v2(self.cvp)
                self.handle = 0
        except Exception:
            pass


class Graph:
    """Capture a sequence of launches (and copies) on a stream, then replay it.

    >>> g = Graph(dev)
    >>> with g.capture() as s:          # s: the capturing Stream
    ...     k.launch(grid, block, args, stream=s)
    >>> g.replay()                      # on the default stream, or g.replay(stream)

    Arguments are captured by value: a replay reuses the buffers and scalars given at capture.
    """

    def __init__(self, device: Any = None) -> None:
        self.device = _device(device)
        self.index = self.device.index
        self.stream = Stream(self.device, non_blocking=True)
        self._graph = ctypes.c_void_p()
        self._exec = ctypes.c_void_p()
        self.nodes = 0

    def capture(self) -> _Capture:
        return _Capture(self)

    def replay(self, stream: Any = None) -> None:
        """Launch the captured work once on ``stream`` (``None``: the capture's own stream)."""
        if not self._exec.value:
            raise InvalidArgumentError("Graph.replay() before a capture; use `with graph.capture() as s:` first")
        s = self.stream.cvp if stream is None else as_stream(stream, self.device).cvp
        rc = _driver.libcuda().cuGraphLaunch(self._exec, s)
        _driver.check(rc, "cuGraphLaunch", self.index)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        lib = _driver.libcuda()
        if self._exec.value:
            lib.cuGraphExecDestroy(self._exec)
            self._exec = ctypes.c_void_p()
        if self._graph.value:
            lib.cuGraphDestroy(self._graph)
            self._graph = ctypes.c_void_p()

    def __del__(self) -> None:
        try:
            if _driver.dead_reason(self.index) is None:
                self.close()
        except Exception:
            pass


class _Capture:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def __enter__(self) -> Stream:
        g = self.graph
        g.close()
        _driver.ensure_current(g.index)
        # Thread-local mode: other threads' unrelated CUDA calls do not break this capture.
        rc = _driver.libcuda().cuStreamBeginCapture_v2(g.stream.cvp, 1)
        _driver.check(rc, "cuStreamBeginCapture", g.index)
        return g.stream

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        g = self.graph
        lib = _driver.libcuda()
        graph = ctypes.c_void_p()
        rc = lib.cuStreamEndCapture(g.stream.cvp, ctypes.byref(graph))
        if exc_type is not None:
            if graph.value:
                lib.cuGraphDestroy(graph)
            return
        _driver.check(rc, "cuStreamEndCapture (was something queued on another stream during capture?)", g.index)
        g._graph = graph
        n = ctypes.c_size_t()
        lib.cuGraphGetNodes(graph, None, ctypes.byref(n))
        g.nodes = n.value
        ex = ctypes.c_void_p()
        rc = lib.cuGraphInstantiateWithFlags(ctypes.byref(ex), graph, ctypes.c_ulonglong(0))
        _driver.check(rc, "cuGraphInstantiate", g.index)
        g._exec = ex


# --- the hooks (plugin.py binds these) -------------------------------------------------------


def hook_default_stream(device: Any) -> Stream:
    return Stream._wrap(device, 0)


def hook_stream_create(device: Any, priority: int) -> Stream:
    return Stream(device, non_blocking=False, priority=priority)


def hook_stream_destroy(device: Any, handle: Stream) -> None:
    handle.close()


def hook_stream_query(device: Any, stream: Any) -> bool:
    s = as_stream(stream, device)
    rc = _driver.libcuda().cuStreamQuery(s.cvp)
    if rc in (0, 600):  # CUDA_ERROR_NOT_READY
        return rc == 0
    sync_failed(s.index, rc)
    return False


def hook_stream_wait(device: Any, stream: Any, event: Any) -> None:
    as_stream(stream, device).wait(event.handle)


def hook_event_record(device: Any, stream: Any) -> Event:
    return Event(device).record(None if stream is None else as_stream(stream, device))


def hook_event_synchronize(device: Any, event: Any) -> None:
    event.handle.synchronize()


def hook_event_query(device: Any, event: Any) -> bool:
    return event.handle.query()


def hook_event_elapsed(device: Any, start: Any, end: Any) -> float:
    return end.handle.elapsed(start.handle)
