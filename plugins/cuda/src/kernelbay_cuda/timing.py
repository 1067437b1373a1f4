"""Device spans for :mod:`kernelbay.tracing`: CUDA events recorded around launches and copies
(the fallback where CUPTI's activity records, :mod:`kernelbay_cuda.cupti`, cannot be had).

``mark`` records a pooled event on the launch's stream (two ``cuEventRecord`` calls per
launch); ``span`` waits for the second event and reads both against a reference event whose
host time was taken when the timer first touched the device (the middle of the narrowest of
five record-and-wait windows, a few microseconds wide). Durations come from the two events
themselves (``cuEventElapsedTime``, about 0.5 us resolution); where a span starts is mapped
through the reference, so it drifts by the clocks' difference over the run (parts per million).

Two implementations, one behaviour: with the native helpers (:mod:`kernelbay_cuda.native`)
``mark`` is ``_timer.c``'s (event pool, stream resolution and ``cuEventRecord`` in one C call)
and the tracer resolves a whole chunk of marks in one ``resolve`` call; without them
(``KERNELBAY_NATIVE=0``, no compiler) the same steps run here through ctypes, one ``span`` per
launch. The C timer hands to :meth:`Timer._native_slow` what it does not do itself: a device's
first mark (its reference event), another context current, streams of other kinds.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from time import perf_counter_ns
from typing import Any

from kernelbay.streams import Stream as KbStream

from . import _driver, cupti, native
from .streams import _StreamHandle, as_stream

_c_void_p, _c_float = ctypes.c_void_p, ctypes.c_float

log = logging.getLogger("kernelbay.trace")


class Timer:
    """The ``kernelbay_device_timer`` of the cuda backend. Marks are ints: event handles, or
    with the C timer indexes into its table of events.

    :param use_native: use the C timer where the native helpers are available (``False``: the
        ctypes one, as with ``KERNELBAY_NATIVE=0``; the benchmarks compare the two).
    """

    def __init__(self, use_native: bool = True) -> None:
        self._lib: Any = None
        self._pool: dict[int, list[int]] = {}  # device index -> free events
        self._device: dict[int, int] = {}  # event -> device index
        self._ref: dict[int, tuple[int, int]] = {}  # device index -> (reference event, host ns)
        self._lock = threading.Lock()
        self._native: Any = None
        self._native_set = False  # set_driver() done, and add_device() for each index in _ref
        mod = native.module() if use_native else None
        if mod is not None and hasattr(mod, "Timer"):
            self._native = mod.Timer(self._native_slow, _StreamHandle, KbStream)
            # The C methods themselves: what the tracer's hot path and fold call.
            self.mark = self._native.mark  # type: ignore[method-assign]
            self.resolve = self._native.resolve

    def _native_slow(self, device: Any, stream: Any) -> int | None:
        """What the C ``mark`` hands over: set the device up, make its context current, resolve
        the stream, then record through the C timer. ``None`` where that fails."""
        nat = self._native
        try:
            index = device.index
            _driver.ensure_current(index)
            if not self._native_set:
                lib = _driver.libcuda()
                addr = [
                    ctypes.cast(getattr(lib, f), _c_void_p).value
                    for f in (
                        "cuEventCreate",
                        "cuEventRecord",
                        "cuEventQuery",
                        "cuEventSynchronize",
                        "cuEventElapsedTime",
                        "cuCtxGetCurrent",
                    )
                ]
                nat.set_driver(*addr)
                self._native_set = True
            if index not in self._ref:
                ref_ev, ref_ns = self._reference(index)
                nat.add_device(index, ref_ev, ref_ns)
            h = self._stream_handle(device, stream)
        except Exception:
            return None
        return None if h is None else nat.record(index, h)

    def _stream_handle(self, device: Any, stream: Any) -> int | None:
        """The CUstream of what the user passed as the stream, or ``None`` for a non-stream
        (the launch itself reports that)."""
        if stream is None:
            return 0
        h = getattr(stream, "handle", None)
        if isinstance(h, int):
            return h
        try:
            return as_stream(stream, device).handle
        except Exception:
            return None

    def _libcuda(self) -> Any:
        if self._lib is None:
            lib = ctypes.CDLL(_driver.libcuda()._name)  # its own function objects: argtypes stay ours
            lib.cuEventCreate.argtypes = [ctypes.POINTER(_c_void_p), ctypes.c_uint]
            lib.cuEventRecord.argtypes = [_c_void_p, _c_void_p]
            lib.cuEventSynchronize.argtypes = [_c_void_p]
            lib.cuEventElapsedTime.argtypes = [ctypes.POINTER(_c_float), _c_void_p, _c_void_p]
            lib.cuStreamCreate.argtypes = [ctypes.POINTER(_c_void_p), ctypes.c_uint]
            self._lib = lib
        return self._lib

    def _new_event(self, index: int) -> int:
        h = _c_void_p()
        _driver.check(self._libcuda().cuEventCreate(ctypes.byref(h), 0), "cuEventCreate", index)
        ev: int = h.value  # type: ignore[assignment]  # a created event is never NULL
        self._device[ev] = index
        return ev

    def _reference(self, index: int) -> tuple[int, int]:
        with self._lock:
            ref = self._ref.get(index)
            if ref is None:
                lib = self._libcuda()
                # A private non-blocking stream: the reference completes at once, not after
                # whatever is queued on the default stream.
                s = _c_void_p()
                _driver.check(lib.cuStreamCreate(ctypes.byref(s), 1), "cuStreamCreate", index)
                # The event ran between the host's clock read before the record and the one
                # after the wait: take the middle of the narrowest of a few tries.
                best: tuple[int, int, int] | None = None
                for _ in range(5):
                    ev = self._new_event(index)
                    before = perf_counter_ns()
                    _driver.check(lib.cuEventRecord(ev, s.value), "cuEventRecord", index)
                    _driver.check(lib.cuEventSynchronize(ev), "cuEventSynchronize", index)
                    after = perf_counter_ns()
                    if best is None or after - before < best[2] - best[1]:
                        if best is not None:
                            self._pool.setdefault(index, []).append(best[0])
                        best = (ev, before, after)
                    else:
                        self._pool.setdefault(index, []).append(ev)
                assert best is not None  # five tries
                ref = self._ref[index] = (best[0], (best[1] + best[2]) // 2)
        return ref

    def mark(self, device: Any, stream: Any) -> int | None:
        """An event recorded on ``stream``; ``None`` where that fails (tracing never fails the
        launch it watches: the launch reports its own errors). With the native helpers this
        method is replaced by the C timer's ``mark`` (see the module docstring)."""
        index = device.index
        try:
            _driver.ensure_current(index)
            if index not in self._ref:
                self._reference(index)
            try:
                ev = self._pool[index].pop()
            except (KeyError, IndexError):
                ev = self._new_event(index)
        except Exception:
            return None
        h = self._stream_handle(device, stream)
        if h is None:  # not a stream: the launch will say so
            self._pool.setdefault(index, []).append(ev)
            return None
        if self._lib.cuEventRecord(ev, h):
            self._pool.setdefault(index, []).append(ev)
            return None  # the span is then unknown; the launch itself goes on
        return ev

    def span(self, start: int | None, end: int | None) -> tuple[int, int] | None:
        """The device span between two marks in perf_counter_ns units (``None`` when unknown);
        gives both marks back to the pool."""
        if self._native is not None:
            begins, ends = self._native.resolve([start], [end], [None])
            return None if begins[0] is None else (begins[0], ends[0])
        if start is None or end is None:
            for ev in (start, end):
                if ev is not None:
                    self._pool.setdefault(self._device[ev], []).append(ev)
            return None
        index = self._device[start]
        lib = self._lib
        try:
            if lib.cuEventSynchronize(end):
                return None
            ref_ev, ref_host = self._ref[index]
            ms = _c_float()
            if lib.cuEventElapsedTime(ctypes.byref(ms), ref_ev, start):
                return None
            t0 = ref_host + int(ms.value * 1e6)
            if lib.cuEventElapsedTime(ctypes.byref(ms), start, end):
                return None
            return t0, t0 + int(ms.value * 1e6)
        finally:
            pool = self._pool.setdefault(index, [])
            pool.append(start)
            pool.append(end)


_timer: Timer | None = None

ENV_TIMER = "KERNELBAY_TRACE_TIMER"
TIMERS = ("auto", "cupti", "events")


def device_timer() -> Any:
    """The ``kernelbay_device_timer`` hook, called when a trace starts: CUPTI's activity records
    (:mod:`kernelbay_cuda.cupti`) where they work and ``KERNELBAY_TRACE_TIMER`` is ``auto`` (the
    default) or ``cupti``, else CUDA events (``events``, or where CUPTI cannot run: the reason is
    logged on ``kernelbay.trace``). The event timer is one for the process, so each trace reuses
    the events of the one before; it touches no driver until the first mark."""
    global _timer
    choice = os.environ.get(ENV_TIMER, "").strip().lower() or "auto"
    if choice not in TIMERS:
        log.warning("kernelbay trace: %s=%r is not one of %s; using auto", ENV_TIMER, choice, ", ".join(TIMERS))
        choice = "auto"
    if choice != "events":
        try:
            return cupti.make_timer()
        except cupti.CuptiUnavailable as exc:
            level = logging.WARNING if choice == "cupti" else logging.INFO
            log.log(level, "kernelbay trace: CUDA events time the device spans, not CUPTI: %s", exc)
    if _timer is None:
        _timer = Timer()
    return _timer
