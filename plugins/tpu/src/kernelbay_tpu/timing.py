"""Device spans for :mod:`kernelbay.tracing` on TPUs: dispatch to completion.

JAX gives no completion callback, so ``mark`` waits for the work queued so far (the
backend's own synchronize) before reading the host clock. The span of a launch then runs from
its dispatch to the end of its program. The price: while a trace records device spans, each
launch waits for the one before it, so launches no longer overlap with the host's work
(``KERNELBAY_TRACE_DEVICE=0`` keeps the trace to host spans and the launches asynchronous).
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from . import launcher


class Timer:
    """The ``kernelbay_device_timer`` of the tpu backend. Marks are host clock values."""

    host_clock = True

    def mark(self, device: Any, stream: Any) -> int:
        try:
            launcher.synchronize(device, None)
        except Exception:  # failed work: the next synchronize reports it, not the tracer
            pass
        return perf_counter_ns()

    def span(self, start: int, end: int) -> tuple[int, int]:  # not called: host_clock
        return start, end


def device_timer() -> Timer:
    return Timer()
