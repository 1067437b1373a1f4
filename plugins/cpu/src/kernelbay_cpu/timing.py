"""Device spans for :mod:`kernelbay.tracing` on the cpu: a launch or copy has finished when the
backend's call returns, so the kernel's run time is the time between the marks around that call.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from kernelbay.types import Device


class Timer:
    """The ``kernelbay_device_timer`` of the cpu backend. Marks are host clock values."""

    __slots__ = ()
    # The tracer then takes the backend call's own clock reads as the device span: no extra cost.
    synchronous = True

    def mark(self, device: Device, stream: Any) -> int:
        return perf_counter_ns()

    def span(self, start: int, end: int) -> tuple[int, int]:
        return start, end


def device_timer() -> Timer:
    return Timer()
