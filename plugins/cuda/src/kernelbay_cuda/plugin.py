"""The kernelbay hooks of the CUDA backend: thin, each delegating to its module.

Importing this module imports neither cuda.bindings nor numpy.
"""

from __future__ import annotations

from typing import Any

from kernelbay.hookspecs import hookimpl
from kernelbay.types import BackendSpec

from . import allocator, compiler, copies, devices, graphs, hostpool, interop, launcher, streams, timing

# Hot-path hooks are the implementing functions themselves (no wrapper call): their parameters
# match the specs', in order, so the core binds them directly.
kernelbay_allocate = hookimpl(allocator.allocate)
kernelbay_free = hookimpl(allocator.free)
kernelbay_copy = hookimpl(copies.copy)
kernelbay_launch = hookimpl(launcher.launch)
kernelbay_memset = hookimpl(copies.memset)
kernelbay_host_empty = hookimpl(hostpool.host_empty)
kernelbay_compile = hookimpl(compiler.compile_kernel)
kernelbay_compile_to_cache = hookimpl(compiler.compile_to_cache)
kernelbay_close_kernel = hookimpl(compiler.close_kernel)
kernelbay_module_global = hookimpl(compiler.module_global)
kernelbay_synchronize = hookimpl(streams.synchronize)
kernelbay_cuda_array_interface = hookimpl(interop.cuda_array_interface)
kernelbay_from_external = hookimpl(interop.from_external)
kernelbay_dlpack_device = hookimpl(interop.dlpack_device)
kernelbay_to_dlpack = hookimpl(interop.to_dlpack)
kernelbay_device_timer = hookimpl(timing.device_timer)

# Streams and events (streams.py: the handles kb.Stream and kb.Event hold) and graphs built node
# by node with explicit dependencies (graphs.py).
kernelbay_default_stream = hookimpl(streams.hook_default_stream)
kernelbay_stream_create = hookimpl(streams.hook_stream_create)
kernelbay_stream_destroy = hookimpl(streams.hook_stream_destroy)
kernelbay_stream_query = hookimpl(streams.hook_stream_query)
kernelbay_stream_wait = hookimpl(streams.hook_stream_wait)
kernelbay_event_record = hookimpl(streams.hook_event_record)
kernelbay_event_synchronize = hookimpl(streams.hook_event_synchronize)
kernelbay_event_query = hookimpl(streams.hook_event_query)
kernelbay_event_elapsed = hookimpl(streams.hook_event_elapsed)
kernelbay_kernel_access = hookimpl(graphs.kernel_access)
kernelbay_graph_build = hookimpl(graphs.graph_build)
kernelbay_graph_replay = hookimpl(graphs.graph_replay)
kernelbay_graph_update = hookimpl(graphs.graph_update)
kernelbay_graph_destroy = hookimpl(graphs.graph_destroy)


@hookimpl
def kernelbay_backend() -> BackendSpec:
    return BackendSpec(
        name="cuda",
        priority=300,
        languages=("cuda", "ptx", "cubin", "fatbin", "triton"),
        api_version=1,  # the contract this backend was built for: a literal, never the core's constant
        description="NVIDIA GPUs through the CUDA driver and NVRTC (cuda-python); Triton kernels with kernelbay-cuda[triton]",
    )


@hookimpl
def kernelbay_devices() -> Any:
    return devices.devices()


@hookimpl
def kernelbay_memory_stats(device: Any) -> Any:
    return allocator.allocator(device).stats()


@hookimpl
def kernelbay_clear_cache(device: Any) -> None:
    allocator.allocator(device).clear_cache()
    hostpool.pool().clear()  # the cached page-locked result blocks (shared by the devices)
