"""The backend's streams and events: the handles ``kb.Stream`` and ``kb.Event`` hold, the stream
and event hooks, and turning any ``stream=`` value into the CUstream a driver call takes.

``kb.Stream`` (``dev.stream()``) holds a :class:`_StreamHandle` as its ``handle`` and ``kb.Event``
an :class:`_EventHandle`. User streams are blocking: they order with the legacy default stream,
so a host read with ``stream=None`` sees their work. ``None`` as a stream means the device's
default stream: the legacy default stream, which orders with every blocking stream. Anything
implementing the ``__cuda_stream__`` protocol (CuPy, cuda.core, recent PyTorch) is accepted
where a stream is (:func:`as_stream`).
"""

from __future__ import annotations

import ctypes
from typing import Any

import kernelbay as kb
from kernelbay.errors import ArgumentTypeError, InvalidArgumentError
from kernelbay.streams import Stream as KbStream
from kernelbay.types import Device

from . import _driver, allocator, native
from .devices import sync_failed

__all__ = ["default_stream", "cuda_device", "as_stream", "ctypes_stream", "synchronize"]

# CUDA_ERROR_NOT_READY: queued work has not finished (a query's "no", not a failure).
_NOT_READY = 600


def cuda_device(device: Any) -> Device:
    """The CUDA device a selector names (``None``: ``KERNELBAY_DEVICE`` where it names a CUDA
    device, else cuda:0)."""
    dev = kb.device(device if device is not None else "cuda")
    if dev.backend != "cuda":
        raise InvalidArgumentError(f"{dev} is not a CUDA device")
    return dev


def default_stream(device: Any = None) -> KbStream:
    """The device's default stream (``dev.default_stream``): the legacy default stream, what
    ``stream=None`` means."""
    return cuda_device(device).default_stream


class _StreamHandle:
    """One CUstream of one device: what ``kb.Stream.handle`` is on this backend.

    Made by ``dev.stream()`` (an owned, blocking stream) or by :meth:`wrap` around a handle
    kernelbay does not own (the legacy default stream 0, another library's stream).

    :ivar handle: the CUstream as an int (0 once closed, or for the legacy default stream).
    :ivar ctypes_handle: the same as a ``ctypes.c_void_p`` for calls through ctypes (``None``
        for handle 0).
    :ivar bindings_handle: the same as a cuda.bindings ``CUstream`` (the fast path without the
        native helpers launches through cuda.bindings).
    """

    __slots__ = (
        "device",
        "index",
        "handle",
        "ctypes_handle",
        "bindings_handle",
        "closed",
        "_owned",
        "_owner",
        "__weakref__",
    )
    ctypes_handle: ctypes.c_void_p | None

    def __init__(self, device: Device, non_blocking: bool = False, priority: int = 0) -> None:
        self.device = device
        self.index = device.index
        self._owned = False
        self._owner = None
        self.closed = False
        _driver.ensure_current(device.index)
        h = ctypes.c_void_p()
        rc = _driver.libcuda().cuStreamCreateWithPriority(ctypes.byref(h), 1 if non_blocking else 0, priority)
        _driver.check(rc, "cuStreamCreate", device.index)
        self.handle = h.value or 0
        self.ctypes_handle = ctypes.c_void_p(self.handle)
        self.bindings_handle = _driver.driver().CUstream(self.handle)
        self._owned = True
        allocator.stream_opened(device, self.handle, not non_blocking)

    @classmethod
    def wrap(cls, device: Device, handle: int, owner: Any = None) -> _StreamHandle:
        """A handle for a CUstream kernelbay does not own; ``owner`` (the foreign stream object)
        is kept alive with it."""
        s = cls.__new__(cls)
        s.device = device
        s.index = device.index
        s.handle = handle
        s.ctypes_handle = ctypes.c_void_p(handle) if handle else None
        s.bindings_handle = _driver.driver().CUstream(handle)
        s._owned = False
        s._owner = owner
        s.closed = False
        return s

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    def synchronize(self) -> None:
        """Block until everything queued on this stream has finished."""
        _driver.ensure_current(self.index)
        rc = _driver.libcuda().cuStreamSynchronize(self.ctypes_handle)
        if rc:
            sync_failed(self.index, rc)

    def wait(self, event: _EventHandle) -> None:
        """Make later work on this stream wait for ``event``."""
        rc = _driver.libcuda().cuStreamWaitEvent(self.ctypes_handle, event.ctypes_handle, 0)
        _driver.check(rc, "cuStreamWaitEvent", self.index)

    def close(self) -> None:
        """Destroy an owned stream after its queued work (a no-op for a wrapped one)."""
        if self._owned and self.handle:
            h, self.handle, self._owned, self.closed = self.handle, 0, False, True
            native.stream_closed()  # the fast paths read stream handles again
            if _driver.dead_reason(self.index) is None:
                lib = _driver.libcuda()
                if allocator.stream_closing(self.index, h):  # blocks live here: finish its work first
                    _driver.ensure_current(self.index)
                    lib.cuStreamSynchronize(ctypes.c_void_p(h))
                allocator.stream_closed(self.index, h)  # the handle may be reused by the next stream
                lib.cuStreamDestroy_v2(ctypes.c_void_p(h))

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<CUDA stream handle 0x{self.handle:x} of cuda:{self.index}>"


class _EventHandle:
    """One CUevent of one device: what ``kb.Event.handle`` is on this backend.

    :ivar handle: the CUevent as an int.
    :ivar ctypes_handle: the same as a ``ctypes.c_void_p`` for calls through ctypes.
    """

    __slots__ = ("device", "index", "handle", "ctypes_handle", "__weakref__")

    def __init__(self, device: Device, timing: bool = True) -> None:
        self.device = device
        self.index = device.index
        _driver.ensure_current(device.index)
        h = ctypes.c_void_p()
        rc = _driver.libcuda().cuEventCreate(ctypes.byref(h), 0 if timing else 2)  # 2: CU_EVENT_DISABLE_TIMING
        _driver.check(rc, "cuEventCreate", device.index)
        self.handle = h.value
        self.ctypes_handle = ctypes.c_void_p(self.handle)

    def record(self, stream: Any = None) -> _EventHandle:
        """Record the event on ``stream`` (any form :func:`as_stream` takes); returns it."""
        s = None if stream is None else as_stream(stream, self.device).ctypes_handle
        _driver.check(_driver.libcuda().cuEventRecord(self.ctypes_handle, s), "cuEventRecord", self.index)
        return self

    def synchronize(self) -> None:
        rc = _driver.libcuda().cuEventSynchronize(self.ctypes_handle)
        if rc:
            sync_failed(self.index, rc)

    def query(self) -> bool:
        return _driver.libcuda().cuEventQuery(self.ctypes_handle) == 0

    def elapsed(self, start: _EventHandle) -> float:
        """Milliseconds from ``start`` to this event (both recorded, this one completed)."""
        ms = ctypes.c_float()
        rc = _driver.libcuda().cuEventElapsedTime(ctypes.byref(ms), start.ctypes_handle, self.ctypes_handle)
        _driver.check(rc, "cuEventElapsedTime", self.index)
        return ms.value

    def __del__(self) -> None:
        try:
            if self.handle and _driver.dead_reason(self.index) is None:
                _driver.libcuda().cuEventDestroy_v2(self.ctypes_handle)
                self.handle = 0
        except Exception:
            pass


def as_stream(obj: Any, device: Device) -> _StreamHandle:
    """The stream handle for ``obj``: a ``kb.Stream``, ``None`` (the legacy default stream), a
    backend handle, or a ``__cuda_stream__`` object (CuPy and PyTorch streams without the
    protocol too)."""
    if obj is None:
        return _StreamHandle.wrap(device, 0)
    if type(obj) is KbStream:  # its handle is one of ours (see the hooks below)
        h = obj.handle
        if type(h) is _StreamHandle and not h.closed:
            return h
        raise InvalidArgumentError(f"{obj!r} was closed or is not a CUDA stream; create one with dev.stream()")
    if isinstance(obj, _StreamHandle):
        if obj.closed:
            raise InvalidArgumentError(f"{obj!r} was closed; create a new stream with dev.stream()")
        return obj
    proto = getattr(obj, "__cuda_stream__", None)
    if proto is None:
        # CuPy (.ptr) and PyTorch (.cuda_stream) streams of versions without the protocol.
        raw = getattr(obj, "cuda_stream", None)
        if raw is None and type(obj).__module__.startswith("cupy"):
            raw = getattr(obj, "ptr", None)
        if isinstance(raw, int):
            return _StreamHandle.wrap(device, raw, owner=obj)
        raise ArgumentTypeError(
            f"a stream must be a kb.Stream (dev.stream()), None or an object with __cuda_stream__, "
            f"not {type(obj).__name__}"
        )
    got: Any = proto() if callable(proto) else proto
    try:
        _version, handle = got
        handle = int(handle)
    except (TypeError, ValueError):
        raise ArgumentTypeError(
            f"{type(obj).__name__}.__cuda_stream__ returned {got!r}, not (version, handle)"
        ) from None
    return _StreamHandle.wrap(device, handle, owner=obj)


def ctypes_stream(stream: Any, device: Device, what: str) -> ctypes.c_void_p | None:
    """The CUstream that work ``what`` (``"a copy"``, ``"launch of 'k'"``) on ``device`` is
    queued on, for a call through ctypes: ``None`` for the legacy default stream.

    :raises InvalidArgumentError: for a stream of another device.
    """
    if stream is None:
        return None
    s = as_stream(stream, device)
    if s.index != device.index:
        raise InvalidArgumentError(f"{what} on {device} was given a stream of cuda:{s.index}")
    return s.ctypes_handle


def synchronize(device: Device, stream: Any) -> None:
    """The ``kernelbay_synchronize`` hook."""
    idx = device.index
    _driver.check_alive(idx)
    _driver.ensure_current(idx)
    lib = _driver.libcuda()
    if stream is None:
        rc = lib.cuCtxSynchronize()
    else:
        rc = lib.cuStreamSynchronize(as_stream(stream, device).ctypes_handle)
    if rc:
        sync_failed(idx, rc)


# --- the hooks (plugin.py binds these) -------------------------------------------------------


def hook_default_stream(device: Device) -> _StreamHandle:
    return _StreamHandle.wrap(device, 0)


def hook_stream_create(device: Device, priority: int) -> _StreamHandle:
    return _StreamHandle(device, non_blocking=False, priority=priority)


def hook_stream_destroy(device: Device, handle: _StreamHandle) -> None:
    handle.close()


def hook_stream_query(device: Device, stream: Any) -> bool:
    s = as_stream(stream, device)
    rc = _driver.libcuda().cuStreamQuery(s.ctypes_handle)
    if rc in (0, _NOT_READY):
        return rc == 0
    sync_failed(s.index, rc)
    return False


def hook_stream_wait(device: Device, stream: Any, event: Any) -> None:
    as_stream(stream, device).wait(event.handle)


def hook_event_record(device: Device, stream: Any) -> _EventHandle:
    return _EventHandle(device).record(stream)


def hook_event_synchronize(device: Device, event: Any) -> None:
    event.handle.synchronize()


def hook_event_query(device: Device, event: Any) -> bool:
    return event.handle.query()


def hook_event_elapsed(device: Device, start: Any, end: Any) -> float:
    return end.handle.elapsed(start.handle)
