"""The kernelbay hooks of the CUDA backend: thin, each delegating to its module.

Importing this module imports neither cuda.bindings nor numpy.
"""

from __future__ import annotations

from typing import Any

from kernelbay.hookspecs import API_VERSION, hookimpl
from kernelbay.types import BackendSpec

from . import allocator, copies, devices, interop, launcher, timing

# Hot-path hooks are the implementing functions themselves (no wrapper call): their parameters
# match the specs', in order, so the core binds them directly.
kernelbay_allocate = hookimpl(allocator.allocate)
kernelbay_free = hookimpl(allocator.free)
kernelbay_copy = hookimpl(copies.copy)
kernelbay_launch = hookimpl(launcher.launch)
kernelbay_memset = hookimpl(copies.memset)
kernelbay_compile = hookimpl(launcher.compile_kernel)
kernelbay_synchronize = hookimpl(devices.synchronize)
kernelbay_cuda_array_interface = hookimpl(interop.cuda_array_interface)
kernelbay_from_external = hookimpl(interop.from_external)
kernelbay_dlpack_device = hookimpl(interop.dlpack_device)
kernelbay_to_dlpack = hookimpl(interop.to_dlpack)
kernelbay_device_timer = hookimpl(timing.device_timer)


@hookimpl
def kernelbay_backend() -> BackendSpec:
    return BackendSpec(
        name="cuda",
        priority=300,
        languages=("cuda", "ptx", "cubin", "fatbin"),
        api_version=API_VERSION,
        description="NVIDIA GPUs through the CUDA driver and NVRTC (cuda-python)",
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
