"""The kernelbay hooks of the TPU backend: thin, delegating to allocator, compiler, launcher."""

from __future__ import annotations

from typing import Any

from kernelbay import API_VERSION, hookimpl
from kernelbay.types import Array, BackendSpec, Buffer, Device, Source

from . import allocator, compiler, launcher, timing


@hookimpl
def kernelbay_backend() -> BackendSpec:
    return BackendSpec(
        name="tpu",
        priority=200,
        languages=("pallas",),
        api_version=API_VERSION,
        description="JAX Pallas kernels on TPUs (KERNELBAY_TPU_INTERPRET=1: interpret mode on the CPU)",
    )


@hookimpl
def kernelbay_devices() -> list[Device]:
    from . import _driver

    return _driver.probe()


@hookimpl
def kernelbay_allocate(device: Device, nbytes: int) -> Any:
    return allocator.allocate(device, nbytes)


@hookimpl
def kernelbay_free(device: Device, handle: Any) -> None:
    allocator.free(device, handle)


@hookimpl
def kernelbay_copy(dst: Any, src: Any, nbytes: int, stream: Any) -> None:
    allocator.copy(dst, src, nbytes, stream)


@hookimpl
def kernelbay_memset(dst: Buffer, value: int, nbytes: int, stream: Any) -> None:
    allocator.memset(dst, value, nbytes, stream)


@hookimpl
def kernelbay_compile(device: Device, source: Source) -> Any:
    return compiler.compile(device, source)


# The launch hook is the launcher's own function (same name and parameters as the spec), so
# the core's binding calls it with no extra Python frame in between.
kernelbay_launch = hookimpl(launcher.launch)


@hookimpl
def kernelbay_synchronize(device: Device, stream: Any) -> None:
    launcher.synchronize(device, stream)


@hookimpl
def kernelbay_host_view(array: Array) -> None:
    # JAX arrays are immutable: a writable view cannot exist, so the core copies.
    return None


@hookimpl
def kernelbay_from_external(obj: Any, device: Device | None) -> Any:
    return allocator.from_external(obj, device)


@hookimpl
def kernelbay_to_dlpack(array: Array, stream: Any) -> Any:
    return allocator.to_dlpack(array, stream)


@hookimpl
def kernelbay_dlpack_device(array: Array) -> tuple[int, int]:
    return allocator.dlpack_device(array)


# --- streams (one ordering domain per device) and graphs (one jitted program) ---------------


@hookimpl
def kernelbay_stream_query(device: Device, stream: Any) -> bool:
    from . import streams

    return streams.stream_query(device, stream)


@hookimpl
def kernelbay_event_record(device: Device, stream: Any) -> Any:
    from . import streams

    return streams.event_record(device, stream)


@hookimpl
def kernelbay_event_synchronize(device: Device, event: Any) -> None:
    from . import streams

    streams.event_synchronize(device, event)


@hookimpl
def kernelbay_event_query(device: Device, event: Any) -> bool:
    from . import streams

    return streams.event_query(device, event)


@hookimpl
def kernelbay_event_elapsed(device: Device, start: Any, end: Any) -> float:
    from . import streams

    return streams.event_elapsed(device, start, end)


@hookimpl
def kernelbay_graph_build(device: Device, steps: Any) -> Any:
    from . import graphs

    return graphs.graph_build(device, steps)


@hookimpl
def kernelbay_graph_replay(device: Device, graph: Any, stream: Any) -> None:
    from . import graphs

    graphs.graph_replay(device, graph, stream)


@hookimpl
def kernelbay_kernel_access(kernel: Any) -> Any:
    from . import graphs

    return graphs.kernel_access(kernel)


kernelbay_device_timer = hookimpl(timing.device_timer)
