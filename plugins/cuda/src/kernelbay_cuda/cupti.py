"""Device spans for :func:`kernelbay.trace` from CUPTI's activity records (the way PyTorch's
profiler, through Kineto, times kernels): the hardware's own start and end of each kernel, copy
and memset, with no CUDA event on the stream.

``mark`` is ``_cupti.c``'s: the start mark pushes a new external correlation id on the calling
thread and returns it, the end mark pops it and returns it negated, so every CUDA call made in
between is tied to that id by CUPTI. CUPTI hands its records over in buffers, on its own thread,
to C code that keeps external id -> (first start, last end). ``resolve`` synchronizes the
contexts this backend made, flushes CUPTI's buffers and looks the ids up.

This module finds and loads libcupti (:func:`find_library`) and makes the timer
(:func:`make_timer`); :mod:`kernelbay_cuda.timing` chooses between it and the CUDA-event timer
(``KERNELBAY_TRACE_TIMER``). Activities are enabled when a trace asks for the timer and
disabled (after a last flush) by :meth:`Timer.close`, which the tracer calls when the trace
ends, so a process pays for CUPTI only while it traces.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import logging
import os
from typing import Any

from . import _driver, native

ENV_LIB = "KERNELBAY_CUPTI_LIB"

log = logging.getLogger("kernelbay.trace")

#: The functions _cupti.c calls, in cupti_set_api()'s order; the last one may be missing.
FUNCTIONS = (
    "cuptiActivityPushExternalCorrelationId",
    "cuptiActivityPopExternalCorrelationId",
    "cuptiActivityFlushAll",
    "cuptiActivityGetNextRecord",
    "cuptiActivityEnable",
    "cuptiActivityDisable",
    "cuptiActivityRegisterCallbacks",
    "cuptiGetTimestamp",
    "cuptiActivityRegisterTimestampCallback",  # CUDA 12.6 on; without it the clocks' offset is measured
)


class CuptiUnavailable(Exception):
    """Why the CUPTI timer cannot run here (the event timer is used instead)."""


def _package_dir(name: str) -> list[str]:
    """The directories of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return list(spec.submodule_search_locations or [])


def candidates() -> list[tuple[str, str]]:
    """Where libcupti may be, in the order tried: ``(path or soname, where it came from)``."""
    out: list[tuple[str, str]] = []
    explicit = os.environ.get(ENV_LIB, "").strip()
    if explicit:
        return [(explicit, ENV_LIB)]
    for d in _package_dir("nvidia"):  # nvidia-cuda-cupti-cu12 (torch pulls it), -cu13
        for sub in ("cuda_cupti/lib", "cu13/lib"):
            for p in sorted(glob.glob(os.path.join(d, sub, "libcupti.so.*")), reverse=True):
                out.append((p, "the nvidia-cuda-cupti wheel"))
    for d in _package_dir("triton"):
        for p in sorted(glob.glob(os.path.join(d, "backends/nvidia/lib/cupti/libcupti.so*")), reverse=True):
            out.append((p, "Triton's bundled copy"))
    homes = [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for home in dict.fromkeys(h for h in homes if h):
        for sub in ("extras/CUPTI/lib64", "lib64", "lib"):
            for p in sorted(glob.glob(os.path.join(home, sub, "libcupti.so*")), reverse=True):
                out.append((p, f"the CUDA toolkit in {home}"))
    out += [("libcupti.so.13", "the loader's search path"), ("libcupti.so.12", "the loader's search path")]
    out.append(("libcupti.so", "the loader's search path"))
    return out


def load_library() -> tuple[ctypes.CDLL, str]:
    """The first libcupti of :func:`candidates` that loads and has the functions used, with a
    line saying which; raises :class:`CuptiUnavailable` saying why none."""
    tried: list[str] = []
    for path, where in candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} ({where}): no such file")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            tried.append(f"{path} ({where}): {exc}")
            continue
        missing = [f for f in FUNCTIONS[:-1] if not hasattr(lib, f)]
        if missing:
            tried.append(f"{path} ({where}): not libcupti (no {', '.join(missing)})")
            continue
        return lib, f"{path} ({where})"
    raise CuptiUnavailable("no usable libcupti: " + "; ".join(tried))


class Timer:
    """The ``kernelbay_device_timer`` of the cuda backend with CUPTI. Marks are ints: an
    external correlation id, negated for the end mark."""

    def __init__(self, mod: Any, lib: ctypes.CDLL, where: str) -> None:
        self._mod = mod
        self.where = where
        addr = [ctypes.cast(getattr(lib, f), ctypes.c_void_p).value if hasattr(lib, f) else 0 for f in FUNCTIONS]
        self._addr = addr
        mod.cupti_set_api(*addr)
        self._sync = ctypes.CDLL(_driver.libcuda()._name).cuCtxSynchronize  # our own function object
        self.mark = mod.cupti_mark  # the C function itself: what the tracer's hot path calls

    def start(self) -> None:
        """Enable CUPTI's activities (a trace begins); raises :class:`CuptiUnavailable`."""
        if not self._mod.cupti_state()["enabled"]:
            # This library's functions again, should anything have set others since (the C
            # side keeps one set per process; a no-op when they are these).
            self._mod.cupti_set_api(*self._addr)
        failed = self._mod.cupti_enable()
        if failed is not None:
            what, status = failed
            raise CuptiUnavailable(f"{what} returned CUPTI status {status}{_status_hint(status)}")

    def _settle(self) -> None:
        """Wait for the work queued on every context this backend made, then have CUPTI hand
        over every record it holds."""
        before = _driver.current_index()
        for index in list(_driver._ctx):
            _driver.ensure_current(index)
            rc = self._sync()
            if rc:
                log.warning("kernelbay trace: cuCtxSynchronize on cuda:%d returned %d", index, rc)
        if before >= 0:
            _driver.ensure_current(before)
        self._mod.cupti_flush()

    def resolve(self, starts: list, ends: list, host_t0s: list) -> tuple[list, list]:
        """The device spans of a batch of mark pairs in perf_counter_ns units (``None`` where
        unknown)."""
        self._settle()
        return self._mod.cupti_resolve(starts, ends, host_t0s)

    def close(self) -> None:
        """The trace has ended (its last resolve is done): disable CUPTI's activities, after a
        last flush, so the process pays for CUPTI only while it traces. The next trace's
        ``kernelbay_device_timer`` enables them again (:func:`make_timer`)."""
        self._mod.cupti_disable()
        log.debug("kernelbay trace: CUPTI activities disabled (%s)", self._mod.cupti_state())

    def span(self, start: int | None, end: int | None) -> tuple[int, int] | None:
        """The device span between two marks; a start mark without an end (its call raised) is
        popped here."""
        if end is None:
            if start is not None:
                self._mod.cupti_cancel(start)
            return None
        begins, ends = self.resolve([start], [end], [None])
        return None if begins[0] is None else (begins[0], ends[0])


def _status_hint(status: int) -> str:
    if status == 39:  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
        return " (another profiler, such as Nsight Systems or torch.profiler, holds CUPTI)"
    if status == 15:  # CUPTI_ERROR_NOT_INITIALIZED
        return " (no usable CUDA driver)"
    return ""


_timer: Timer | None = None
_failed: str | None = None


def make_timer() -> Timer:
    """The process's CUPTI timer, enabled for a trace; raises :class:`CuptiUnavailable` with
    the reason. A library that cannot be loaded is remembered (not looked for again); enabling
    is tried again at each trace (another profiler may have let CUPTI go meanwhile)."""
    global _timer, _failed
    if _timer is None:
        if _failed is not None:
            raise CuptiUnavailable(_failed)
        try:
            mod = native.module()
            if mod is None or not hasattr(mod, "cupti_mark"):
                raise CuptiUnavailable(f"the native helpers are unavailable: {native.status()}")
            lib, where = load_library()
            _timer = Timer(mod, lib, where)
        except (CuptiUnavailable, OSError) as exc:
            _failed = str(exc)
            raise CuptiUnavailable(_failed) from None
    _timer.start()
    log.info("kernelbay trace: device spans from CUPTI, %s", _timer.where)
    return _timer
