"""Asynchronous streams, events and stream-ordered memory for the cpu backend.

* The default stream (``stream=None``) is synchronous, as it always was: a launch, copy or memset
  returns when done. Like CUDA's legacy default stream it first waits for the work queued on
  every user stream, and so do the host reads (``Array.numpy()``, a copy into numpy,
  ``dev.synchronize()``).
* A user stream (``dev.stream()``) has one worker thread. Launches, copies and memsets on it are
  checked and packed at once (a bad argument raises in the caller; launcher.py packs launches),
  queued, and return; the worker runs them in order, the native launcher without the GIL. A
  failure is kept and raised by the next synchronize or query of that stream (or of the device).
* Events complete when the worker reaches them; ``stream.wait(event)`` queues a wait.
* Stream-ordered memory: a queued job holds the memory of each buffer it uses
  (``allocator.hold``), so a buffer closed while a stream still uses it is set aside -- counted
  as cached by ``memory_stats`` -- and released when that work is done (``allocator.unhold``,
  by the worker, before the job counts as finished).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from kernelbay.errors import InvalidArgumentError, LaunchError, UseAfterFreeError
from kernelbay.streams import Event, Stream
from kernelbay.types import Buffer, Device

from . import allocator

#: Jobs queued on user streams and not yet finished, all streams together. The default stream's
#: hot path reads it without a lock: a thread always sees the jobs it queued itself.
pending = 0
_lock = threading.Lock()
_queues: weakref.WeakSet[_Queue] = weakref.WeakSet()


class _Queue:
    """A user stream's queue and the state its worker shares with the host (no back reference
    to the stream, so a dropped stream is collected and its worker told to stop)."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        #: (job, handles it holds) in order; None tells the worker to stop
        self.jobs: deque[tuple[Callable[[], object], list[Any]] | None] = deque()
        self.running: tuple[Callable[[], object], list[Any]] | None = None  # the job the worker runs
        self.queued = 0  # jobs not yet finished
        self.error: BaseException | None = None
        self.worker: threading.Thread | None = None  # started by the first put (again in a forked child)
        self.stopped = False
        self.__weakref__: Any

    def put(self, job: Callable[[], object], held: list[Any] | None = None) -> None:
        """Queue ``job``; ``held``: the memory handles it uses, already held (released when done)."""
        global pending
        with _lock:
            pending += 1
        with self.cond:
            self.queued += 1
            self.jobs.append((job, held or []))
            if self.worker is None:
                self.worker = threading.Thread(target=self.work, name="kernelbay-cpu-stream", daemon=True)
                self.worker.start()
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            if self.worker is not None:
                self.jobs.append(None)
                self.cond.notify_all()

    def after_fork(self) -> None:
        """In a ``fork()``ed child: the worker is gone, and the work it had not finished runs in the
        parent only. Say so at this stream's next synchronize; reach its events; release its holds."""
        self.cond = threading.Condition(threading.Lock())  # the lock may have been held at fork
        lost = [e for e in (self.running, *self.jobs) if e is not None]
        self.jobs.clear()
        self.running = self.worker = None
        self.queued = 0
        if lost and not self.stopped and self.error is None:
            self.error = LaunchError(
                f"{len(lost)} operation(s) queued on a cpu stream before fork() ran in the parent process "
                "only: this child's memory lacks their results. Synchronize streams before forking, "
                "or queue the work again in the child"
            )
        for job, held in lost:
            ev = getattr(job, "__self__", None)
            if type(ev) is CpuEvent:  # a host waiting for it here would wait forever
                ev.fire()
            if held:
                allocator.unhold(held)

    def work(self) -> None:
        global pending
        while True:
            with self.cond:
                while not self.jobs:
                    self.cond.wait()
                entry = self.running = self.jobs.popleft()
            if entry is None:
                return
            job, held = entry
            try:
                job()
            except BaseException as exc:  # kept for the host's next synchronize
                if self.error is None:
                    self.error = exc
            finally:
                del job, entry  # drop what it kept, and release what it held, before telling the host it is done
                if held:
                    allocator.unhold(held)
                with _lock:
                    pending -= 1
                with self.cond:
                    self.running = None
                    self.queued -= 1
                    self.cond.notify_all()

    def drain(self) -> None:
        with self.cond:
            while self.queued:
                self.cond.wait()

    def raise_error(self) -> None:
        err, self.error = self.error, None
        if err is not None:
            raise err


class CpuStream:
    """The handle of a cpu user stream (``kb.Stream.handle``)."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.queue: _Queue | None = _Queue()  # its worker thread starts with the first job; None once closed
        _queues.add(self.queue)

    def close(self) -> None:
        q = self.queue
        if q is not None:
            self.queue = None
            q.stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class CpuEvent:
    """The handle of a cpu event: set by the worker when it reaches the record."""

    __slots__ = ("done", "queue", "time")

    def __init__(self, queue: _Queue | None) -> None:
        self.done = threading.Event()
        self.time = 0.0
        self.queue = queue

    def fire(self) -> None:
        self.time = time.perf_counter()
        self.done.set()


# --- the stream and event hooks ----------------------------------------------------------


#: The handle of the default stream (``dev.default_stream``): the synchronous one.
DEFAULT = type("CpuDefaultStream", (), {"__repr__": lambda self: "CpuDefaultStream"})()


def default_stream(device: Device) -> Any:
    return DEFAULT


def stream_create(device: Device, priority: int) -> CpuStream:
    return CpuStream(device)


def stream_destroy(device: Device, handle: CpuStream) -> None:
    handle.close()


def queue_of(stream: Any) -> _Queue | None:
    """The queue of a user stream; ``None`` for the default stream."""
    if stream is None:
        return None
    if type(stream) is Stream:
        h = stream.handle
        if h is DEFAULT:
            return None
        if type(h) is CpuStream:
            q = h.queue
            if q is None:
                raise InvalidArgumentError(f"{stream!r} was closed; create a new one with dev.stream()")
            return q
    raise InvalidArgumentError(
        f"the cpu backend takes a kb.Stream of a cpu device (dev.stream()) or None as a stream, not {stream!r}"
    )


def _after_fork_in_child() -> None:
    global pending, _lock
    _lock = threading.Lock()
    pending = 0
    for q in list(_queues):
        q.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def drain_all() -> None:
    """Wait for every user stream's queued work (what the default stream and host reads do)."""
    for q in list(_queues):
        q.drain()


def synchronize(device: Device, stream: Any) -> None:
    q = queue_of(stream)
    if q is None:
        drain_all()
        for other in list(_queues):
            other.raise_error()
        return
    q.drain()
    q.raise_error()


def stream_query(device: Device, stream: Stream) -> bool:
    q = queue_of(stream)
    if q is None:
        return pending == 0
    if q.error is not None:
        q.raise_error()
    return q.queued == 0


def stream_wait(device: Device, stream: Stream, event: Event) -> None:
    ev: CpuEvent = event.handle
    if ev.done.is_set():
        return
    q = queue_of(stream)
    if q is None:  # the default stream is synchronous: the host waits
        ev.done.wait()
    else:
        q.put(ev.done.wait)


def event_record(device: Device, stream: Stream) -> CpuEvent:
    q = queue_of(stream)
    ev = CpuEvent(q)
    if q is None:
        drain_all()
        ev.fire()
    else:
        q.put(ev.fire)
    return ev


def event_synchronize(device: Device, event: Event) -> None:
    ev: CpuEvent = event.handle
    ev.done.wait()
    if ev.queue is not None and ev.queue.error is not None:
        ev.queue.raise_error()


def event_query(device: Device, event: Event) -> bool:
    return event.handle.done.is_set()


def event_elapsed(device: Device, start: Event, end: Event) -> float:
    return (end.handle.time - start.handle.time) * 1000.0


# --- work on streams ---------------------------------------------------------------------


def memory_of(x: Any) -> Any:
    """What keeps the memory of a buffer (or numpy array) alive, checked for use after close."""
    if isinstance(x, Buffer):
        h = x.handle
        if h is None:
            raise UseAfterFreeError(f"{type(x).__name__} on {x.device} was used after close()")
        return h.array
    return x


def hold(xs: Sequence[Any]) -> list[Any]:
    """Hold the memory of the buffers among ``xs`` for a job about to be queued (checked for use
    after close); the worker releases them when the job is done (``_Queue.put(job, held)``)."""
    held = []
    for x in xs:
        if isinstance(x, Buffer):
            h = x.handle
            if h is None:
                raise UseAfterFreeError(f"{type(x).__name__} on {x.device} was used after close()")
            held.append(h)
    if held:
        allocator.hold(held)
    return held


def address_of(x: Any) -> int:
    """The address of a buffer's (or C-contiguous numpy array's) memory."""
    return x.handle.ptr if isinstance(x, Buffer) else x.ctypes.data


def copy(dst: Any, src: Any, nbytes: int, stream: Any) -> None:
    """The copy hook: memmove at once on the default stream (after busy user streams), else queued."""
    if stream is None and not pending:
        if nbytes:
            ctypes.memmove(address_of(dst), address_of(src), nbytes)
        return
    q = queue_of(stream)
    if q is None:
        drain_all()
        if nbytes:
            ctypes.memmove(address_of(dst), address_of(src), nbytes)
        return
    keep = [memory_of(dst), memory_of(src)]
    d, s = address_of(dst), address_of(src)
    if not isinstance(dst, Buffer):  # into host memory: done when the hook returns (the contract)
        q.drain()
        q.raise_error()
        ctypes.memmove(d, s, nbytes)
        return
    q.put(lambda: (ctypes.memmove(d, s, nbytes), keep), hold((dst, src)))


def memset(dst: Buffer, value: int, nbytes: int, stream: Any) -> None:
    if not 0 <= value <= 255:
        raise InvalidArgumentError(f"memset value must be a byte 0..255, got {value}")
    q = queue_of(stream)
    if q is None:
        if pending:
            drain_all()
        if nbytes:
            ctypes.memset(dst.handle.ptr, value, nbytes)
        return
    keep = memory_of(dst)
    p = dst.handle.ptr
    q.put(lambda: (ctypes.memset(p, value, nbytes), keep), hold((dst,)))


def host_view(array: Any) -> Any:
    if pending:
        drain_all()
    h = array.checked_handle()
    return h.array.view(array.dtype).reshape(array.shape)
