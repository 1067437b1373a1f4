"""Portable streams and events: :class:`Stream`, :class:`Event`, and a thread's current stream.

A stream is an ordered queue of work on one device; work on two streams may overlap. Every
``stream=`` parameter of kernelbay takes a :class:`Stream`, ``None`` (the thread's current stream
of that device, set by ``with stream:``, else the device's default stream), or whatever the
backend documents (CUDA: objects with ``__cuda_stream__``, CuPy and PyTorch streams).

Backends implement streams through the optional hooks ``kernelbay_stream_*`` and
``kernelbay_event_*`` (see :mod:`kernelbay.hookspecs`). A backend without them gets the fallbacks
of :mod:`kernelbay.fallbacks`: every stream is the device's one in-order stream, and an event
completes when it is recorded (the record waits for the stream's work).

:func:`route` is the one rule that sends work to a graph recording or to a stream.

Host reads (``Array.numpy()``, ``kb.copy`` into a numpy array with ``stream=None``,
``dev.synchronize()``) see every write queued before them on every stream of the device.

The launch hot path pays for none of this unless some thread has a current stream or records a
graph: :data:`intercept` counts those, and ``Kernel.launch`` looks further only when it is
non-zero. A stream its backend does not see (handle ``None``: a backend without stream hooks)
costs nothing anywhere: every direct path maps it to ``None`` on the way to the hook
(:func:`to_hook`, or its inlined check). This module sits below the values
(:mod:`kernelbay.types`): it reaches a device's backend through ``device.binding``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import attrs

from .errors import InvalidArgumentError

if TYPE_CHECKING:  # pragma: no cover
    from ._binding import Binding
    from .graphs import Graph
    from .types import Device, Kernel

__all__ = ["Event", "Stream", "current_stream", "route"]

#: Threads with a current stream plus active graph captures, all threads together. The hot path
#: reads it without a lock: a thread always sees its own changes.
intercept = 0
#: Changes whenever :data:`intercept` does (a thread enters or leaves ``with stream:``, a capture
#: begins or ends): C code that looks up a thread's current stream (the cuda allocator's) may
#: keep what it found while ``epoch`` stays the same.
epoch = 0
_count_lock = threading.Lock()
_local = threading.local()


def _bump(by: int) -> None:
    global intercept, epoch
    with _count_lock:
        intercept += by
        epoch += 1


class _ThreadState:
    __slots__ = ("capture", "current")

    def __init__(self) -> None:
        self.current: dict[Device, list[Stream]] = {}
        self.capture: dict[Device, Graph] = {}


def _state() -> _ThreadState:
    st = getattr(_local, "s", None)
    if st is None:
        st = _local.s = _ThreadState()
    return st


def current_stream(device: Device) -> Stream | None:
    """The stream made current for ``device`` in this thread by ``with stream:``, or ``None``."""
    stack = _state().current.get(device)
    return stack[-1] if stack else None


def capturing(device: Device) -> Graph | None:
    """The graph recording ``device``'s work in this thread, or ``None``."""
    return _state().capture.get(device) if intercept else None


def begin_capture(graph: Graph) -> None:
    st = _state()
    if graph.device in st.capture:
        raise InvalidArgumentError(
            f"a graph is already recording {graph.device} in this thread; finish it before starting another"
        )
    st.capture[graph.device] = graph
    _bump(1)


def end_capture(graph: Graph) -> None:
    st = _state()
    if st.capture.get(graph.device) is graph:
        del st.capture[graph.device]
        _bump(-1)


def current_or(device: Device, stream: Any) -> Any:
    """``stream``, or for ``None`` this thread's current stream of ``device`` (else ``None``)."""
    if stream is None and intercept:
        return current_stream(device)
    return stream


def to_hook(stream: Any) -> Any:
    """What a hook receives for ``stream``: ``None`` for a :class:`Stream` whose handle is ``None``
    (a backend without ``kernelbay_stream_create``: all its streams are the device's one
    in-order stream); any other stream as it is."""
    if stream is not None and stream.__class__ is Stream and stream.handle is None:
        return None
    return stream


def route(device: Device, stream: Any) -> tuple[Graph | None, Any]:
    """Where work for ``device`` given ``stream`` goes: the one rule of every launch, copy,
    memset and replay.

    :return: ``(graph, stream)`` while a graph records ``device`` in this thread (record the work
        with ``stream`` as given, or the current stream: events order by its identity), else
        ``(None, stream)`` with ``stream`` as its hook receives it (:func:`current_or`, then
        :func:`to_hook`).
    """
    if intercept:
        st = _state()
        if stream is None:
            stack = st.current.get(device)
            if stack:
                stream = stack[-1]
        g = st.capture.get(device)
        if g is not None:
            return g, stream
    # to_hook(stream), inlined: this runs on every launch while some thread has a current stream
    if stream is not None and stream.__class__ is Stream and stream.handle is None:
        return None, None
    return None, stream


def launch(
    kernel: Kernel, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any, reads: Any, writes: Any
) -> Any:
    """``Kernel.launch`` while a stream is current or a graph records (the slow path)."""
    g, stream = route(kernel.device, stream)
    if g is not None:
        return g._record_launch(kernel, grid, block, args, shared_mem, stream, reads, writes)
    return kernel._binding.launch(kernel, grid, block, args, shared_mem, stream)


def no_capture(device: Device, what: str) -> None:
    """Refuse ``what`` (a host wait) while a graph records ``device`` in this thread."""
    if intercept and _state().capture.get(device) is not None:
        raise InvalidArgumentError(f"cannot {what} {device} while a graph records it; leave the `with` first")


def _check_device(what: str, obj: Any, device: Device) -> None:
    if obj.device != device:
        raise InvalidArgumentError(f"{what} belongs to {obj.device}, not {device}; use one of {device}'s own")


@attrs.define(eq=False, slots=True, weakref_slot=True)
class Stream:
    """An ordered queue of work on one device (``dev.stream()``, ``dev.default_stream``).

    ``with stream:`` makes it the current stream of its device in this thread: launches, copies
    and memsets given ``stream=None`` go to it.

    :ivar device: the device.
    :ivar handle: the backend's stream object (``None`` for the default stream of a backend
        without stream hooks).
    :ivar priority: as asked for (lower is more urgent where the backend supports priorities).
    :ivar is_default: whether this is the device's default stream.
    """

    device: Device
    handle: Any
    _binding: Binding = attrs.field(repr=False, alias="binding")
    priority: int = 0
    is_default: bool = False
    closed: bool = attrs.field(default=False, init=False)

    @classmethod
    def create(cls, device: Device, priority: int = 0) -> Stream:
        """A new stream on ``device`` (what ``device.stream(priority=...)`` returns).

        :param priority: the backend's stream priority (lower is more urgent on CUDA; 0 is the default).
        :raises InvalidArgumentError: for a priority that is not an int.
        """
        if type(priority) is not int:
            raise InvalidArgumentError(f"stream priority must be an int, got {priority!r}")
        b = device.binding
        return cls(device, b.stream_create(device, priority), b, priority)

    @classmethod
    def default(cls, device: Device) -> Stream:
        """``device``'s default stream: where work goes when no stream is given or current."""
        # Kept by the binding, so a runtime reset (a new binding) leaves no default stream behind.
        b = device.binding
        s = b.default_streams.get(device)
        if s is None:
            s = b.default_streams.setdefault(device, cls(device, b.default_stream(device), b, 0, True))
        return s

    def _live(self) -> None:
        if self.closed:
            raise InvalidArgumentError(f"{self!r} was closed; create a new one with dev.stream()")

    def synchronize(self) -> None:
        """Block until the work queued on this stream has finished.

        :raises LaunchError: if queued work failed.
        """
        self._live()
        no_capture(self.device, "synchronize")
        self._binding.synchronize(self.device, self if self.handle is not None else None)

    def query(self) -> bool:
        """``True`` when all work queued on this stream has finished (does not block)."""
        self._live()
        return bool(self._binding.stream_query(self.device, self))

    def wait(self, event: Event) -> None:
        """Make work queued on this stream from now on wait until ``event`` has completed."""
        self._live()
        if not isinstance(event, Event):
            raise InvalidArgumentError(
                f"Stream.wait takes a kb.Event (from stream.record()), not {type(event).__name__}"
            )
        _check_device("the event", event, self.device)
        g = capturing(self.device)
        if g is not None:
            g._record_wait(self, event)
            return
        self._binding.stream_wait(self.device, self, event)

    def record(self) -> Event:
        """An :class:`Event` that completes when the work queued on this stream so far has."""
        self._live()
        g = capturing(self.device)
        if g is not None:
            return g._record_event(self)
        return Event(self.device, self._binding.event_record(self.device, self), self._binding, self)

    def close(self) -> None:
        """Release the backend's stream after its queued work (closing twice is harmless).

        The default stream is never closed.
        """
        if self.closed or self.is_default:
            return
        self.closed = True
        h = self.handle
        if h is not None:
            self._binding.stream_destroy(self.device, h)

    def __enter__(self) -> Stream:
        self._live()
        st = _state()
        st.current.setdefault(self.device, []).append(self)
        _bump(1)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = _state().current.get(self.device)
        if stack and stack[-1] is self:
            stack.pop()
            _bump(-1)

    @property
    def __cuda_stream__(self) -> Any:
        # The stream protocol of CUDA libraries, present only where the backend's handle has it
        # (AttributeError otherwise, so hasattr() is False).
        h = self.handle
        if h is None:
            raise AttributeError("__cuda_stream__")
        return h.__cuda_stream__

    def __repr__(self) -> str:
        what = "default" if self.is_default else ("closed" if self.closed else f"priority={self.priority}")
        return f"kernelbay.Stream({self.device}, {what})"


@attrs.define(eq=False, slots=True, weakref_slot=True)
class Event:
    """A point in a stream's work (``stream.record()``): wait on it, query it, time with it.

    :ivar device: the device.
    :ivar handle: the backend's event object.
    :ivar stream: the stream it was recorded on.
    """

    device: Device
    handle: Any
    _binding: Binding = attrs.field(repr=False, alias="binding")
    stream: Stream | None = None

    def synchronize(self) -> None:
        """Block until the work before the event has finished.

        :raises LaunchError: if that work failed.
        """
        self._binding.event_synchronize(self.device, self)

    def query(self) -> bool:
        """``True`` when the work before the event has finished (does not block)."""
        return bool(self._binding.event_query(self.device, self))

    def elapsed(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event; waits for this event to complete.

        :raises InvalidArgumentError: for an event of another device.
        """
        if not isinstance(start, Event):
            raise InvalidArgumentError(f"Event.elapsed takes the kb.Event it started at, not {type(start).__name__}")
        _check_device("the start event", start, self.device)
        self.synchronize()
        return float(self._binding.event_elapsed(self.device, start, self))
