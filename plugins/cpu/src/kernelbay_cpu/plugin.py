"""The cpu backend's hooks: each one is its module's function, named here.

Importing this module imports the backend's modules and no more: numpy, the compiler probe and
every shared object are loaded by the first device probe, compile or allocation that needs them.
"""

from __future__ import annotations

import os

from kernelbay.hookspecs import hookimpl
from kernelbay.types import BackendSpec, Device

from . import _driver, _threads, allocator, compiler, graphs, launcher, streams, timing

# Each hook is the implementing function itself (no wrapper call): its parameters are the
# spec's, in order, so the core binds and calls it directly.
kernelbay_allocate = hookimpl(allocator.allocate)
kernelbay_free = hookimpl(allocator.free)
kernelbay_memory_stats = hookimpl(allocator.memory_stats)
kernelbay_from_external = hookimpl(allocator.from_external)
kernelbay_to_dlpack = hookimpl(allocator.to_dlpack)
kernelbay_dlpack_device = hookimpl(allocator.dlpack_device)
kernelbay_compile = hookimpl(compiler.compile_source)
kernelbay_close_kernel = hookimpl(compiler.close_kernel)
kernelbay_module_global = hookimpl(compiler.module_global)
kernelbay_launch = hookimpl(launcher.launch)
kernelbay_device_timer = hookimpl(timing.device_timer)

# Copies, memsets, host reads and synchronize wait for queued stream work: streams.py has them,
# with the stream and event hooks (a worker thread per user stream).
kernelbay_copy = hookimpl(streams.copy)
kernelbay_memset = hookimpl(streams.memset)
kernelbay_host_view = hookimpl(streams.host_view)
kernelbay_synchronize = hookimpl(streams.synchronize)
kernelbay_default_stream = hookimpl(streams.default_stream)
kernelbay_stream_create = hookimpl(streams.stream_create)
kernelbay_stream_destroy = hookimpl(streams.stream_destroy)
kernelbay_stream_query = hookimpl(streams.stream_query)
kernelbay_stream_wait = hookimpl(streams.stream_wait)
kernelbay_event_record = hookimpl(streams.event_record)
kernelbay_event_synchronize = hookimpl(streams.event_synchronize)
kernelbay_event_query = hookimpl(streams.event_query)
kernelbay_event_elapsed = hookimpl(streams.event_elapsed)

# Graphs: a replay is one native call over the packed steps (graphs.py).
kernelbay_kernel_access = hookimpl(graphs.kernel_access)
kernelbay_graph_build = hookimpl(graphs.graph_build)
kernelbay_graph_replay = hookimpl(graphs.graph_replay)
kernelbay_graph_update = hookimpl(graphs.graph_update)
kernelbay_graph_destroy = hookimpl(graphs.graph_destroy)


@hookimpl
def kernelbay_backend() -> BackendSpec:
    return BackendSpec(
        name="cpu",
        priority=100,
        # A c++ source was written for the CPU: prefer it over the CUDA text when both are given.
        languages=("c++", "cuda"),
        api_version=1,  # the contract this backend was built for: a literal, never the core's constant
        description="host CPU: CUDA-style and C++ kernels built with the system C++ compiler, OpenMP across cores",
    )


@hookimpl
def kernelbay_devices() -> list[Device]:
    _driver.isolated()  # a bad KERNELBAY_CPU_ISOLATE or _CHECK makes the backend unavailable, saying why
    tc = _driver.toolchain()
    cores = os.cpu_count() or 1
    nthreads, nthreads_from = _threads.probe()
    return [
        Device(
            "cpu",
            0,
            name=f"{tc.cpu_name}, {cores} threads",
            properties={
                "cores": cores,
                "threads": nthreads,
                # what set "threads": KERNELBAY_CPU_THREADS, OMP_NUM_THREADS, affinity or cgroup cpu quota
                "threads_from": nthreads_from,
                "wait_policy": _threads.wait_policy(),  # KERNELBAY_CPU_WAIT
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
