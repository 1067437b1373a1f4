"""The cpu backend's hooks: thin, delegating to allocator, compiler and launcher.

Importing this module imports only kernelbay's core; numpy, ctypes work and the compiler probe
happen inside the hooks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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
            },
        )
    ]


# The hot-path hooks are bound once by the core and called directly; they reach their
# implementation through a module global that the first call fills in, so the import happens
# on first use and each later call costs one global lookup.


def _load_hot() -> None:
    global _allocate, _free, _copy, _launch
    from . import allocator, launcher

    _allocate, _free, _copy, _launch = allocator.allocate, allocator.free, allocator.copy, launcher.launch


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
    from . import allocator

    allocator.memset(dst, value, nbytes, stream)


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
    # Every launch and copy has finished when its call returns: nothing is ever queued.
    return None


@hookimpl
def kernelbay_host_view(array: Array) -> Any:
    from . import allocator

    return allocator.host_view(array)


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
