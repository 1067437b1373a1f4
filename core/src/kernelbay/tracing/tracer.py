"""Timeline traces of kernelbay's work: ``KERNELBAY_TRACE=path.json`` or ``with kb.trace(path):``.

The tracer is an extension plugin (:func:`kernelbay.register`) made of ``wrapper=True`` hook
implementations, the mechanism hookspecs.py offers every extension. Its hot-path wrappers
(allocate, free, copy, launch) also carry a positional form (``kernelbay_positional``, made by
:mod:`.hot`), so the core chains them as direct calls instead of going through pluggy; with no
trace running nothing is registered and the hot path is exactly what it is without this
package.

Each call extends a flat list by one record (:mod:`.records`: two clock reads, no
formatting); every ``CHUNK`` records the list is folded (:mod:`.tracefile`): device spans
resolved in one batch per timer, the records kept in a ring of the newest ``max_events``, and
the chunk leaving the ring summed into the whole-run aggregates (per kernel, with C-level
loops). The file is written at the end (context exit, :meth:`Tracer.stop`, or interpreter
exit) by :mod:`.chrome`, to a temporary file renamed into place.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from time import perf_counter_ns
from typing import Any

from .. import _api, cache
from .._plugins import runtime
from ..errors import InvalidArgumentError
from ..hookspecs import hookimpl
from . import chrome, hot, nvtx
from .records import ALLOC, CHUNK, COMPILE, COPY, FREE, LAUNCH, MEMSET, SIZE, SYNC, copy_ends, err_text
from .tracefile import Log

__all__ = ["ENV_DEVICE", "ENV_MAX_EVENTS", "ENV_TRACE", "Tracer", "current", "trace"]

ENV_TRACE = "KERNELBAY_TRACE"
ENV_MAX_EVENTS = "KERNELBAY_TRACE_MAX_EVENTS"
ENV_DEVICE = "KERNELBAY_TRACE_DEVICE"
DEFAULT_MAX_EVENTS = 100_000

log = logging.getLogger("kernelbay.trace")

_active: Tracer | None = None
_active_lock = threading.Lock()


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    return raw not in ("0", "false", "no", "off")


class Tracer:
    """Records kernelbay's operations while registered; :meth:`stop` writes the trace.

    Its hot wrappers (:mod:`.hot`) use it through the wrapper protocol only
    (:class:`.hot.Recorder`): ``buf``, ``chunk``, ``reg``, :meth:`fold`, :meth:`ref` and
    :meth:`timer`.

    :param path: the JSON file to write; ``{pid}`` in it becomes the process id.
    :param max_events: how many records the timeline keeps (the newest); the summary in the
        file counts every call regardless. Default ``KERNELBAY_TRACE_MAX_EVENTS`` or 100,000.
    :param device_timing: ask backends for device spans (default ``KERNELBAY_TRACE_DEVICE``,
        on).
    :raises InvalidArgumentError: when ``path`` cannot be written (checked now, not at exit).
    """

    def __init__(
        self, path: str | os.PathLike[str], max_events: int | None = None, device_timing: bool | None = None
    ) -> None:
        self.path = chrome.check_path(os.fspath(path))
        if max_events is None:
            raw = os.environ.get(ENV_MAX_EVENTS, "")
            try:
                max_events = int(raw) if raw.strip() else DEFAULT_MAX_EVENTS
            except ValueError:
                raise InvalidArgumentError(f"{ENV_MAX_EVENTS}={raw!r} is not a whole number of events") from None
        if max_events < 1:
            raise InvalidArgumentError(f"max_events must be >= 1, got {max_events}")
        self.device_timing = _flag(ENV_DEVICE, True) if device_timing is None else device_timing
        #: the records not folded yet, flat: record i is ``buf[SIZE * i : SIZE * (i + 1)]``
        #: (:mod:`.records`), each added by one ``extend`` call
        self.buf: list[Any] = []
        #: id -> the kernel, device, stream or source a record names by id (kept alive, so no
        #: id in a record can be reused by another object while the trace runs)
        self.reg: dict[int, Any] = {}
        #: records per fold (this module's CHUNK when the tracer is made; tests lower it)
        self.chunk = CHUNK
        self.log = Log(max_events, os.getpid(), self.chunk, self.reg)
        self.running = False
        #: backend name -> its device timer (``None``: host spans only), asked of the backend
        #: the first time its calls are wrapped; set an entry before :meth:`start` to choose
        #: the timer (the benchmarks compare timers so). Each is closed when the trace ends.
        self.timers: dict[str, Any] = {}
        self._fold_lock = threading.Lock()
        self._tls = threading.local()
        self._seen: set[Any] = set()

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> Tracer:
        """Start recording (``with tracer:`` does this).

        :raises InvalidArgumentError: when a trace is already recording in this process.
        """
        global _active
        with _active_lock:
            if _active is not None:
                raise InvalidArgumentError(
                    f"a kernelbay trace is already recording to {_active.path!r}; stop it first (or unset {ENV_TRACE})"
                )
            _active = self
        self.log.start_ns = perf_counter_ns()
        try:
            _api.register(self, name=f"kernelbay-trace-{id(self)}")
        except BaseException:
            with _active_lock:
                _active = None
            raise
        self.running = True
        cache.observer = self._on_lookup
        return self

    def stop(self) -> str:
        """Stop recording, close the device timers (``close()``, where a timer has it) and write
        the file; returns its path. Stopping twice is harmless."""
        global _active
        if not self.running:
            return self.path
        self.running = False
        try:
            _api.unregister(self)
        finally:
            if cache.observer == self._on_lookup:
                cache.observer = None
            with _active_lock:
                if _active is self:
                    _active = None
        try:
            self.fold()
        finally:
            self._close_timers()
        self.log.finish()
        self.log.memory_stats = _memory_stats()
        chrome.write(self.path, self.log)
        log.info("kernelbay trace written to %s (%d calls)", self.path, self.log.total)
        return self.path

    def __enter__(self) -> Tracer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fold(self) -> None:
        """Fold the raw records into the log (device spans resolved, aggregates updated)."""
        with self._fold_lock:
            buf = self.buf
            n = len(buf)
            chunk = buf[:n]
            del buf[:n]  # appends from other threads meanwhile land after n and stay
            self.log.fold(chunk, self.timers)

    def ref(self, obj: Any) -> int | None:
        """``obj``'s id, keeping ``obj`` in ``reg`` (``None`` stays ``None``)."""
        if obj is None:
            return None
        self.reg[id(obj)] = obj
        return id(obj)

    def timer(self, binding: Any) -> Any:
        """The device timer of ``binding``'s backend (its ``kernelbay_device_timer``, asked once
        per trace), or ``None``: device timing is off, or the backend has none."""
        if not self.device_timing:
            return None
        name = binding.name
        if name not in self.timers:
            # The backend's own implementation, called directly: the binding may not have
            # resolved this hook yet (the core is binding the hot path right now).
            impls = runtime.own_impls(binding.plugin, "kernelbay_device_timer")
            try:
                self.timers[name] = impls[0].function() if impls else None
            except Exception:
                log.warning("kernelbay trace: backend %r has no working device timer", name, exc_info=True)
                self.timers[name] = None
        return self.timers[name]

    def _close_timers(self) -> None:
        """The trace has ended: each timer's optional ``close()`` (CUPTI turns its activities
        off there), once per timer object; a failing one is logged, never raised."""
        done: set[int] = set()
        for name, t in self.timers.items():
            close = getattr(t, "close", None)
            if close is None or id(t) in done:
                continue
            done.add(id(t))
            try:
                close()
            except Exception:
                log.warning("kernelbay trace: closing the device timer of %r failed", name, exc_info=True)

    def _copy_ends(self, dst: Any, src: Any) -> tuple[int | None, str]:
        dev, direction = copy_ends(dst, src)
        return self.ref(dev), direction

    # --- compile: a pluggy wrapper (not hot); the cache reports disk hits and misses ------

    def _on_lookup(self, key: str, hit: bool) -> None:
        found = getattr(self._tls, "lookups", None)
        if found is not None:
            found.append(hit)

    def _add(self, *fields: Any, err: str | None = None) -> None:
        """Append one record: ``fields`` from its start, ``None`` up to the error slot, then
        ``err`` (one ``extend`` call, so records of several threads never interleave)."""
        self.buf.extend((*fields, *(None,) * (SIZE - 1 - len(fields)), err))

    @hookimpl(wrapper=True)
    def kernelbay_compile(self, device: Any, source: Any) -> Any:
        outer = getattr(self._tls, "lookups", None)
        found: list[bool] = []
        self._tls.lookups = found
        t0 = perf_counter_ns()
        tid = threading.get_ident()
        try:
            handle = yield
        except BaseException as exc:
            self._add(
                COMPILE, t0, perf_counter_ns(), tid, self.ref(device), self.ref(source), "failed", err=err_text(exc)
            )
            raise
        finally:
            self._tls.lookups = outer
        t1 = perf_counter_ns()
        key = (device, source)
        if found:
            how = "disk" if all(found) else "miss"
        elif key in self._seen or id(handle) in self._seen:
            how = "memory"
        else:
            how = "uncached"  # no disk lookup: kept from before the trace, or a backend without a disk cache
        self._seen.add(key)
        self._seen.add(id(handle))
        self._add(COMPILE, t0, t1, tid, self.ref(device), self.ref(source), how)
        return handle

    @hookimpl(wrapper=True)
    def kernelbay_synchronize(self, device: Any, stream: Any) -> Any:
        t0 = perf_counter_ns()
        tid = threading.get_ident()
        try:
            r = yield
        except BaseException as exc:
            self._add(SYNC, t0, perf_counter_ns(), tid, self.ref(device), self.ref(stream), err=err_text(exc))
            raise
        self._add(SYNC, t0, perf_counter_ns(), tid, self.ref(device), self.ref(stream))
        return r

    @hookimpl(wrapper=True)
    def kernelbay_memset(self, dst: Any, value: int, nbytes: int, stream: Any) -> Any:
        t0 = perf_counter_ns()
        r = yield
        self._add(MEMSET, t0, perf_counter_ns(), threading.get_ident(), self.ref(dst.device), nbytes, self.ref(stream))
        return r

    # --- the hot path: pluggy wrappers (used when another extension without a positional
    # form wraps the same hook), each with the positional form the core chains (.hot) ------

    @hookimpl(wrapper=True)
    def kernelbay_launch(self, kernel: Any, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> Any:
        t0 = perf_counter_ns()
        r = yield
        self._add(LAUNCH, t0, perf_counter_ns(), threading.get_ident(), kernel, grid, block, shared_mem, stream)
        return r

    @hookimpl(wrapper=True)
    def kernelbay_copy(self, dst: Any, src: Any, nbytes: int, stream: Any) -> Any:
        t0 = perf_counter_ns()
        r = yield
        self._add(
            COPY, t0, perf_counter_ns(), threading.get_ident(), *self._copy_ends(dst, src), nbytes, self.ref(stream)
        )
        return r

    @hookimpl(wrapper=True)
    def kernelbay_allocate(self, device: Any, nbytes: int) -> Any:
        t0 = perf_counter_ns()
        r = yield
        self._add(ALLOC, t0, perf_counter_ns(), threading.get_ident(), self.ref(device), nbytes, id(r))
        return r

    @hookimpl(wrapper=True)
    def kernelbay_free(self, device: Any, handle: Any) -> Any:
        t0 = perf_counter_ns()
        r = yield
        self._add(FREE, t0, perf_counter_ns(), threading.get_ident(), self.ref(device), id(handle))
        return r


def _memory_stats() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for b in list(runtime.bindings.values()):
        try:
            devs = b.devices()
        except Exception:
            continue
        for d in devs:
            try:
                s = b.memory_stats(d)
            except Exception:  # optional hook, or a device that cannot say
                continue
            out[str(d)] = {"active": s.active, "peak": s.peak, "cached": s.cached, "limit": s.limit}
            if s.counters:
                out[str(d)]["counters"] = dict(s.counters)
    return out


# The positional forms the core chains as direct calls (kept apart in .hot: the code that runs
# per call).
Tracer.kernelbay_launch.kernelbay_positional = hot.make_launch  # type: ignore[attr-defined]
Tracer.kernelbay_copy.kernelbay_positional = hot.make_copy  # type: ignore[attr-defined]
Tracer.kernelbay_allocate.kernelbay_positional = hot.make_allocate  # type: ignore[attr-defined]
Tracer.kernelbay_free.kernelbay_positional = hot.make_free  # type: ignore[attr-defined]


def trace(path: str | os.PathLike[str], *, max_events: int | None = None, device_timing: bool | None = None) -> Tracer:
    """Record a timeline of kernelbay's work into ``path`` (Chrome trace-event JSON, which
    https://ui.perfetto.dev and chrome://tracing open)::

        with kb.trace("run.json"):
            ...

    The file is written when the block ends, also when it ends with an exception.

    :param path: the file; ``{pid}`` in it becomes the process id. Written to a temporary file
        in the same directory and renamed into place, so two processes writing the same path
        leave one whole trace (the last to finish), never a mix.
    :param max_events: records kept in the timeline (the newest); default
        ``KERNELBAY_TRACE_MAX_EVENTS`` or 100,000. The summary counts every call.
    :param device_timing: device spans where the backend can time them (default on;
        ``KERNELBAY_TRACE_DEVICE=0`` turns them off).
    :raises InvalidArgumentError: when ``path`` cannot be written, or a trace is already
        recording in this process.
    """
    return Tracer(path, max_events=max_events, device_timing=device_timing)


def current() -> Tracer | None:
    """The trace recording now in this process, if any."""
    return _active


def start_from_env() -> Tracer | None:
    """Start the trace ``KERNELBAY_TRACE`` asks for (at ``import kernelbay``), written at exit,
    and the NVTX ranges ``KERNELBAY_NVTX=1`` asks for."""
    if _flag(nvtx.ENV_NVTX, False):
        nvtx.enable()
    path = os.environ.get(ENV_TRACE, "").strip()
    if not path or _active is not None:
        return None
    try:
        t = Tracer(path).start()
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{ENV_TRACE}={path!r}: {exc}") from None
    atexit.register(_stop_at_exit, t)
    return t


def _stop_at_exit(t: Tracer) -> None:
    try:
        t.stop()
    except Exception:
        log.exception("kernelbay: could not write the trace %s", t.path)
