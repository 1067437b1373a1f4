"""What the core does in place of an optional hook a backend leaves out.

This module belongs to the contract: each optional spec in :mod:`kernelbay.hookspecs` names its
fallback, and the fallback is written here, once. :func:`fallback` gives the function a binding
uses for a hook its backend does not implement; :func:`replay_steps` is the graph replay used when
``kernelbay_graph_build`` is missing or returns ``None``.

Fallbacks that need the backend's own hooks (a stream query synchronizes the device) take the
backend's binding when they are made, so this module imports nothing above the errors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from ._binding import Binding
    from .graphs import Step
    from .streams import Event, Stream
    from .types import Device, Source

__all__ = ["OPTIONAL", "fallback", "replay_steps"]


def _record(b: Binding) -> Callable[[Device, Stream], float]:
    def event_record(device: Device, stream: Stream) -> float:
        b.synchronize(device, None)  # the record waits for the device's work...
        return time.perf_counter()  # ...and keeps the host time, which elapsed() subtracts

    return event_record


def _query(b: Binding) -> Callable[[Device, Stream], bool]:
    def stream_query(device: Device, stream: Stream) -> bool:
        b.synchronize(device, None)
        return True

    return stream_query


def _elapsed(device: Device, start: Event, end: Event) -> float:
    if not isinstance(start.handle, float) or not isinstance(end.handle, float):
        raise UnsupportedError(f"backend {device.backend!r} records events but cannot time them; time on the host")
    return (end.handle - start.handle) * 1000.0


def _compile_to_cache(b: Binding) -> Callable[..., Any]:
    def compile_to_cache(device: Device, source: Source) -> None:
        b.compile(device, source)  # the handle is dropped; the disk cache keeps what it kept

    # What kept is the backend's: a function source's compile may live only in this process, so
    # the tuner compiles function sources in its pool only for backends implementing the hook.
    compile_to_cache.kernelbay_fallback = True  # type: ignore[attr-defined]
    return compile_to_cache


def _const(value: Any) -> Callable[[Binding], Callable[..., Any]]:
    def make(_b: Binding) -> Callable[..., Any]:
        return lambda *_args: value

    return make


#: Every optional hook with a fallback, as ``hook -> (binding -> function)``. A hook that is
#: neither required nor listed here raises :class:`UnsupportedError` when called (the spec says
#: so: memory stats, clear cache, DLPack, the CUDA array interface, memset).
OPTIONAL: dict[str, Callable[[Binding], Callable[..., Any]]] = {
    # No host view: the core copies instead.
    "kernelbay_host_view": _const(None),
    # No host memory of its own: the core's np.empty receives device-to-host copies.
    "kernelbay_host_empty": _const(None),
    # No external adoption: asarray falls back to numpy.
    "kernelbay_from_external": _const(None),
    # Nothing kept per kernel: dropping the reference is the whole release.
    "kernelbay_close_kernel": _const(None),
    # Compile as for a launch and drop the handle: the disk cache keeps what it kept.
    "kernelbay_compile_to_cache": _compile_to_cache,
    # No device timer: a trace has host spans only.
    "kernelbay_device_timer": _const(None),
    # Streams and events: one in-order stream (every dev.stream() is it); events complete when
    # recorded (the record waits for the device's work and keeps the host time).
    "kernelbay_default_stream": _const(None),
    "kernelbay_stream_create": _const(None),
    "kernelbay_stream_destroy": _const(None),
    "kernelbay_stream_query": _query,
    "kernelbay_stream_wait": _const(None),
    "kernelbay_event_record": _record,
    "kernelbay_event_synchronize": _const(None),
    "kernelbay_event_query": _const(True),
    "kernelbay_event_elapsed": lambda _b: _elapsed,
    # Graphs: no native graph (a replay runs the recorded steps in order: replay_steps), and
    # kernels whose buffer arguments are all read and written.
    "kernelbay_graph_build": _const(None),
    "kernelbay_graph_replay": _const(None),
    "kernelbay_graph_update": _const(False),
    "kernelbay_graph_destroy": _const(None),
    "kernelbay_kernel_access": _const(None),
}


def fallback(hook: str, b: Binding) -> Callable[..., Any]:
    """The function ``b`` calls for ``hook`` when its backend does not implement it."""
    make = OPTIONAL.get(hook)
    if make is not None:
        return make(b)
    what = hook.removeprefix("kernelbay_").replace("_", " ")
    backend = b.name

    def unsupported(*_args: Any) -> Any:
        raise UnsupportedError(f"backend {backend!r} does not support {what}; use another device for this")

    return unsupported


def replay_steps(b: Binding, steps: Sequence[Step], stream: Any) -> None:
    """Run ``steps`` in recorded order through the ordinary hooks (the replay without a native
    graph). ``stream`` is what the hooks receive (already resolved by the caller)."""
    # All on ``stream``, in recorded order: a valid order of the dependencies.
    for s in steps:
        if s.kind == "launch":
            assert s.kernel is not None  # a launch step always has its kernel
            b.launch(s.kernel, s.grid, s.block, s.args, s.shared_mem, stream)
        elif s.kind == "copy":
            b.copy(s.dst, s.src, s.nbytes, stream)
        else:
            try:
                b.memset(s.dst, s.value, s.nbytes, stream)
            except NotImplementedError:  # no memset hook (UnsupportedError is one): a copy from the host
                import numpy as np  # only for backends without memset, at replay

                b.copy(s.dst, np.full(s.nbytes, s.value, np.uint8), s.nbytes, stream)
