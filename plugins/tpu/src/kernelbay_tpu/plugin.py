"""The tpu backend's hooks: each one is its module's function, named here.

Importing this module does not import jax (about 2 s): the modules import it inside the
functions that need it, so listing and selecting backends never pays for it.
"""

from __future__ import annotations

from kernelbay.hookspecs import hookimpl
from kernelbay.types import Array, BackendSpec

from . import _driver, allocator, compiler, graphs, launcher, streams, timing

# Each hook is the implementing function itself (no wrapper call): its parameters are the
# spec's, in order, so the core binds and calls it directly.
kernelbay_devices = hookimpl(_driver.probe)
kernelbay_allocate = hookimpl(allocator.allocate)
kernelbay_free = hookimpl(allocator.free)
kernelbay_copy = hookimpl(allocator.copy)
kernelbay_memset = hookimpl(allocator.memset)
kernelbay_from_external = hookimpl(allocator.from_external)
kernelbay_to_dlpack = hookimpl(allocator.to_dlpack)
kernelbay_dlpack_device = hookimpl(allocator.dlpack_device)
kernelbay_compile = hookimpl(compiler.compile)
kernelbay_launch = hookimpl(launcher.launch)
kernelbay_synchronize = hookimpl(launcher.synchronize)
kernelbay_device_timer = hookimpl(timing.device_timer)

# Streams: one ordering domain per device (streams.py; kernelbay_stream_create is left out, so
# every stream's work reaches the launcher as the default stream's). Graphs: the recorded
# launches become one jitted program (graphs.py).
kernelbay_stream_query = hookimpl(streams.stream_query)
kernelbay_event_record = hookimpl(streams.event_record)
kernelbay_event_synchronize = hookimpl(streams.event_synchronize)
kernelbay_event_query = hookimpl(streams.event_query)
kernelbay_event_elapsed = hookimpl(streams.event_elapsed)
kernelbay_graph_build = hookimpl(graphs.graph_build)
kernelbay_graph_replay = hookimpl(graphs.graph_replay)
kernelbay_kernel_access = hookimpl(graphs.kernel_access)


@hookimpl
def kernelbay_backend() -> BackendSpec:
    return BackendSpec(
        name="tpu",
        priority=200,
        languages=("pallas",),
        api_version=1,  # the contract this backend was built for: a literal, never the core's constant
        description="JAX Pallas kernels on TPUs (KERNELBAY_TPU_INTERPRET=1: interpret mode on the CPU)",
    )


@hookimpl
def kernelbay_host_view(array: Array) -> None:
    # JAX arrays are immutable: a writable view cannot exist, so the core copies.
    return None
