"""Portable streams and events: :class:`Stream`, :class:`Event`, and a thread's current stream.

A stream is an ordered queue of work on one device; work on two streams may overlap. Every
``stream=`` parameter of kernelbay takes a :class:`Stream`, ``None`` (the thread's current stream
of that device, set by ``with stream:``, else the device's default stream), or whatever the
backend documents (CUDA: objects with ``__cuda_stream__``, CuPy and PyTorch streams).

Backends implement streams through the optional hooks ``kernelbay_stream_*`` and
``kernelbay_event_*`` (see :mod:`kernelbay.hookspecs`). A backend without them gets the fallback
in :data:`FALLBACKS`: every stream is the device's one in-order stream, and an event completes
when it is recorded (the record waits for the stream's work).

Host reads (``Array.numpy()``, ``kb.copy`` into a numpy array with ``stream=None``,
``dev.synchronize()``) see every write queued before them on every stream of the device.

The launch hot path pays for none of this unless some thread has a current stream or records a
graph: :data:`intercept` counts those, and ``Kernel.launch`` looks further only when it is
non-zero.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import attrs

from .errors import InvalidArgumentError, UnsupportedError
from .types import Device

if TYPE_CHECKING:  # pragma: no cover
    from ._plugins import Binding
    from .graphs import Graph
    from .types import Kernel

__all__ = ["FALLBACKS", "Event", "Stream", "current_stream"]

#: Threads with a current stream plus active graph captures, all threads together. The hot
#: path reads it without a lock: a thread always sees its own changes.
intercept = 0
_count_lock = threading.Lock()
_local = threading.local()
_defaults: dict[Device, Stream] = {}


def _bump(by: int) -> None:
    global intercept
    with _count_lock:
        intercept += by


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
    return _state().capture.get(device)


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


def launch(
    kernel: Kernel, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any, reads: Any, writes: Any
) -> Any:
    """``Kernel.launch`` while a stream is current or a graph records (the slow path)."""
    st = _state()
    dev = kernel.device
    if stream is None:
        stack = st.current.get(dev)
        if stack:
            stream = stack[-1]
    g = st.capture.get(dev)
    if g is not None:  # recorded with the stream as given: events order by its identity
        return g._record_launch(kernel, grid, block, args, shared_mem, stream, reads, writes)
    if type(stream) is Stream and stream.handle is None:
        stream = None  # the backend's one stream (see resolve)
    return kernel._b.launch(kernel, grid, block, args, shared_mem, stream)


def current_or(device: Device, stream: Any) -> Any:
    """``stream``, or for ``None`` this thread's current stream of ``device`` (else ``None``)."""
    if stream is None and intercept:
        return current_stream(device)
    return stream


def resolve(device: Device, stream: Any) -> Any:
    """The stream a hook receives: :func:`current_or`, and ``None`` for a :class:`Stream` whose
    handle is ``None`` (a backend without ``kernelbay_stream_create``, or whose streams are all
    the device's one ordering domain)."""
    stream = current_or(device, stream)
    if type(stream) is Stream and stream.handle is None:
        return None
    return stream


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
    _b: Binding = attrs.field(repr=False, alias="binding")
    priority: int = 0
    is_default: bool = False
    closed: bool = attrs.field(default=False, init=False)
    _counted: bool = attrs.field(default=False, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        # A stream the backend does not see (handle None) must reach its hooks as None: count
        # it, so Kernel.launch takes the path that says so while one exists. Streams with a
        # handle cost the launch hot path nothing.
        if self.handle is None:
            self._counted = True
            _bump(1)

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            _bump(-1)

    def __del__(self) -> None:
        try:
            self._uncount()
        except Exception:  # interpreter shutdown
            pass

    @classmethod
    def create(cls, device: Device, priority: int = 0) -> Stream:
        from ._plugins import binding

        if type(priority) is not int:
            raise InvalidArgumentError(f"stream priority must be an int, got {priority!r}")
        b = binding(device.backend)
        return cls(device, b.stream_create(device, priority), b, priority)

    @classmethod
    def default(cls, device: Device) -> Stream:
        s = _defaults.get(device)
        if s is None:
            from ._plugins import binding

            b = binding(device.backend)
            s = _defaults.setdefault(device, cls(device, b.default_stream(device), b, 0, True))
        return s

    def _live(self) -> None:
        if self.closed:
            raise InvalidArgumentError(f"{self!r} was closed; create a new one with dev.stream()")

    def synchronize(self) -> None:
        """Block until the work queued on this stream has finished.

        :raises LaunchError: if queued work failed.
        """
        self._live()
        if capturing(self.device) is not None:
            raise InvalidArgumentError(
                f"cannot synchronize {self.device} while a graph records it; leave the `with` first"
            )
        self._b.synchronize(self.device, self if self.handle is not None else None)

    def query(self) -> bool:
        """``True`` when all work queued on this stream has finished (does not block)."""
        self._live()
        return bool(self._b.stream_query(self.device, self))

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
        self._b.stream_wait(self.device, self, event)

    def record(self) -> Event:
        """An :class:`Event` that completes when the work queued on this stream so far has."""
        self._live()
        g = capturing(self.device)
        if g is not None:
            return g._record_event(self)
        return Event(self.device, self._b.event_record(self.device, self), self._b, self)

    def close(self) -> None:
        """Release the backend's stream after its queued work (closing twice is harmless).

        The default stream is never closed.
        """
        if self.closed or self.is_default:
            return
        self.closed = True
        self._uncount()
        h = self.handle
        if h is not None:
            self._b.stream_destroy(self.device, h)

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
    _b: Binding = attrs.field(repr=False, alias="binding")
    stream: Stream | None = None

    def synchronize(self) -> None:
        """Block until the work before the event has finished.

        :raises LaunchError: if that work failed.
        """
        self._b.event_synchronize(self.device, self)

    def query(self) -> bool:
        """``True`` when the work before the event has finished (does not block)."""
        return bool(self._b.event_query(self.device, self))

    def elapsed(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event; waits for this event to complete.

        :raises InvalidArgumentError: for an event of another device.
        """
        if not isinstance(start, Event):
            raise InvalidArgumentError(f"Event.elapsed takes the kb.Event it started at, not {type(start).__name__}")
        _check_device("the start event", start, self.device)
        self.synchronize()
        return float(self._b.event_elapsed(self.device, start, self))


# --- the fallback for backends without stream hooks --------------------------------------------


def _sync_all(device: Device) -> None:
    from ._plugins import binding

    binding(device.backend).synchronize(device, None)


def _fallback_query(device: Device, stream: Stream) -> bool:
    _sync_all(device)
    return True


def _fallback_record(device: Device, stream: Stream) -> float:
    _sync_all(device)
    return time.perf_counter()


def _fallback_elapsed(device: Device, start: Event, end: Event) -> float:
    if not isinstance(start.handle, float) or not isinstance(end.handle, float):
        raise UnsupportedError(f"backend {device.backend!r} records events but cannot time them; time on the host")
    return (end.handle - start.handle) * 1000.0


#: What a backend without the stream and event hooks gets: one in-order stream (every
#: ``dev.stream()`` is it), events that complete when recorded (the record waits for the device's
#: work and keeps the host time, which :meth:`Event.elapsed` subtracts).
FALLBACKS: dict[str, Any] = {
    "kernelbay_default_stream": lambda device: None,
    "kernelbay_stream_create": lambda device, priority: None,
    "kernelbay_stream_destroy": lambda device, handle: None,
    "kernelbay_stream_query": _fallback_query,
    "kernelbay_stream_wait": lambda device, stream, event: None,
    "kernelbay_event_record": _fallback_record,
    "kernelbay_event_synchronize": lambda device, event: None,
    "kernelbay_event_query": lambda device, event: True,
    "kernelbay_event_elapsed": _fallback_elapsed,
}


def implements(device: Device, hook: str) -> bool:
    """Whether ``device``'s backend implements ``hook`` itself (not through a fallback)."""
    from ._plugins import binding

    attr = hook.removeprefix("kernelbay_")
    fn = getattr(binding(device.backend), attr)
    from .graphs import FALLBACKS as GRAPH_FALLBACKS

    return fn is not FALLBACKS.get(hook) and fn is not GRAPH_FALLBACKS.get(hook)
