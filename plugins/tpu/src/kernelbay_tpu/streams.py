"""Streams and events for the tpu backend, over JAX's asynchronous dispatch.

JAX queues each launch and returns; XLA runs a device's programs in the order they were issued,
and a program that reads an array waits for the program that wrote it. Every stream of a tpu
device is therefore one ordering domain, the device's: ``dev.stream()`` gives a stream whose
work reaches the launcher as the default stream's (``kernelbay_stream_create`` is left out), and
the hooks here answer from the results of the latest launch. An event is those results: it has
completed when they are ready. Its time is when the host first saw it complete (a query, a
synchronize), good for coarse timing only.
"""

from __future__ import annotations

import time
from typing import Any

from kernelbay.errors import LaunchError
from kernelbay.streams import Event, Stream
from kernelbay.types import Device

from . import launcher

# jax and numpy are imported inside the functions that use them (see _driver): importing the
# backend, to list or select it, must not load jax, which takes seconds.


class TpuEvent:
    """The results queued before the record, and when they were first seen ready."""

    __slots__ = ("results", "time")

    def __init__(self, results: Any) -> None:
        self.results = results
        self.time: float | None = None

    def ready(self) -> bool:
        try:
            done = all(r.is_ready() for r in self.results)
        except Exception as exc:
            raise LaunchError(f"a Pallas kernel failed: {exc}") from exc
        if done and self.time is None:
            self.time = time.perf_counter()
        return done

    def wait(self, device: Device) -> None:
        if self.time is not None:
            return
        import jax

        try:
            jax.block_until_ready(self.results)
        except Exception as exc:
            raise LaunchError(f"a Pallas kernel on {device} failed: {exc}") from exc
        self.time = time.perf_counter()


def stream_query(device: Device, stream: Stream) -> bool:
    return TpuEvent(launcher._last.results).ready()


def event_record(device: Device, stream: Stream) -> TpuEvent:
    return TpuEvent(launcher._last.results)


def event_synchronize(device: Device, event: Event) -> None:
    event.handle.wait(device)


def event_query(device: Device, event: Event) -> bool:
    return event.handle.ready()


def event_elapsed(device: Device, start: Event, end: Event) -> float:
    start.handle.wait(device)
    end.handle.wait(device)
    return (end.handle.time - start.handle.time) * 1000.0
