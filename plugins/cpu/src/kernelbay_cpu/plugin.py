"""The cpu backend's hooks: thin, delegating to allocator, compiler and launcher.

Importing this module imports only kernelbay's core; numpy, ctypes work and the compiler probe
happen inside the hooks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from time import perf_counter_ns
from typing import Any

from kernelbay import API_VERSION, hookimpl
from kernelbay.types import Array, BackendSpec, Buffer, Device, Kernel, MemoryStats, Source


@hookimpl
def kernelbay_backend() -> BackendSpec:
    return BackendSpec(
        name="cpu",
        priority=100,
        # A c++ source was written for the CPU: prefer it over the CUDA text when both are given.
        languages=("c++", "cuda"),
        api_version=API_VERSION,
        description="host CPU: CUDA-style and C++ kernels built with the system C++ compiler, OpenMP across cores",
    )


@hookimpl
def kernelbay_devices() -> Sequence[Device]:
    from . import _driver, launcher

    tc = _driver.toolchain()
    cores = os.cpu_count() or 1
    nthreads = _driver.threads() or cores
    return [
        Device(
            "cpu",
            0,
            name=f"{tc.cpu_name}, {cores} threads",
            properties={
                "cores": cores,
                "threads": nthreads,
                "compiler": " ".join(tc.argv),
                "compiler_version": tc.version,
                "openmp": tc.openmp,
                "max_threads_per_block": launcher.MAX_THREADS_PER_BLOCK,
                "max_block": launcher.MAX_BLOCK,
                "max_grid": launcher.MAX_GRID,
                "max_shared_memory_per_block": launcher.MAX_SHARED_MEMORY_PER_BLOCK,
                "warp_size": 32,
            },
        )
    ]


# The hot-path hooks are bound once by the core and called directly; they reach their
# implementation through a module global that the first call fills in, so the import happens
# on first use and each later call costs one global lookup.


def _load_hot() -> None:
    global _allocate, _free, _copy, _launch
    from . import allocator, launcher, streams

    _allocate, _free, _copy, _launch = allocator.allocate, allocator.free, streams.copy, launcher.launch


def _allocate(device: Device, nbytes: int) -> Any:
    _load_hot()
    return _allocate(device, nbytes)


def _free(device: Device, handle: Any) -> None:
    _load_hot()
    return _free(device, handle)


def _copy(dst: Any, src: Any, nbytes: int, stream: Any) -> None:
    _load_hot()
    return _copy(dst, src, nbytes, stream)


def _launch(kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    _load_hot()
    return _launch(kernel, grid, block, args, shared_mem, stream)


@hookimpl
def kernelbay_allocate(device: Device, nbytes: int) -> Any:
    return _allocate(device, nbytes)


@hookimpl
def kernelbay_free(device: Device, handle: Any) -> None:
    _free(device, handle)


@hookimpl
def kernelbay_copy(dst: Any, src: Any, nbytes: int, stream: Any) -> None:
    _copy(dst, src, nbytes, stream)


@hookimpl
def kernelbay_memset(dst: Buffer, value: int, nbytes: int, stream: Any) -> None:
    from . import streams

    streams.memset(dst, value, nbytes, stream)


@hookimpl
def kernelbay_close_kernel(kernel: Kernel) -> None:
    from . import compiler

    compiler.close_kernel(kernel.handle)


@hookimpl
def kernelbay_compile(device: Device, source: Source) -> Any:
    from . import compiler

    return compiler.compile_source(device, source)


@hookimpl
def kernelbay_launch(kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    return _launch(kernel, grid, block, args, shared_mem, stream)


@hookimpl
def kernelbay_synchronize(device: Device, stream: Any) -> None:
    from . import streams

    streams.synchronize(device, stream)


@hookimpl
def kernelbay_host_view(array: Array) -> Any:
    from . import streams

    return streams.host_view(array)


# --- streams, events and graphs: streams.py and graphs.py -----------------------------------


@hookimpl
def kernelbay_default_stream(device: Device) -> Any:
    from . import streams

    return streams.default_stream(device)


@hookimpl
def kernelbay_stream_create(device: Device, priority: int) -> Any:
    from . import streams

    return streams.stream_create(device, priority)


@hookimpl
def kernelbay_stream_destroy(device: Device, handle: Any) -> None:
    from . import streams

    streams.stream_destroy(device, handle)


@hookimpl
def kernelbay_stream_query(device: Device, stream: Any) -> bool:
    from . import streams

    return streams.stream_query(device, stream)


@hookimpl
def kernelbay_stream_wait(device: Device, stream: Any, event: Any) -> None:
    from . import streams

    streams.stream_wait(device, stream, event)


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
def kernelbay_kernel_access(kernel: Kernel) -> Any:
    from . import graphs

    return graphs.kernel_access(kernel)


@hookimpl
def kernelbay_graph_build(device: Device, steps: Sequence[Any]) -> Any:
    from . import graphs

    return graphs.graph_build(device, steps)


@hookimpl
def kernelbay_graph_replay(device: Device, graph: Any, stream: Any) -> None:
    from . import graphs

    graphs.graph_replay(device, graph, stream)


@hookimpl
def kernelbay_graph_update(device: Device, graph: Any, step: Any) -> bool:
    from . import graphs

    return graphs.graph_update(device, graph, step)


@hookimpl
def kernelbay_graph_destroy(device: Device, graph: Any) -> None:
    from . import graphs

    graphs.graph_destroy(device, graph)


@hookimpl
def kernelbay_memory_stats(device: Device) -> MemoryStats:
    from . import allocator

    return allocator.memory_stats(device)


@hookimpl
def kernelbay_from_external(obj: Any, device: Device | None) -> Any:
    from . import allocator

    return allocator.from_external(obj, device)


@hookimpl
def kernelbay_to_dlpack(array: Array, stream: Any, max_version: Any) -> Any:
    from . import allocator

    return allocator.to_dlpack(array, stream, max_version)


@hookimpl
def kernelbay_dlpack_device(array: Array) -> tuple[int, int]:
    from . import allocator

    return allocator.dlpack_device(array)


class _Timer:
    """Device spans for kernelbay.trace: a cpu launch or copy has finished when its call returns,
    so the kernel's run time is the time between the marks around the backend's call."""

    __slots__ = ()
    # The tracer then takes the backend call's own clock reads as the device span: no extra cost.
    synchronous = True

    def mark(self, device: Device, stream: Any) -> int:
        return perf_counter_ns()

    def span(self, start: int, end: int) -> tuple[int, int]:
        return start, end


@hookimpl
def kernelbay_device_timer() -> _Timer:
    return _Timer()
