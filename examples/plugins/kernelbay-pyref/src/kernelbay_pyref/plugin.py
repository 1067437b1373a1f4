"""The hooks: each one is a function of allocator.py, launcher.py or graphs.py, named here.

``kernelbay_x = hookimpl(module.fn)`` marks ``module.fn`` as the hook ``kernelbay_x``. Its
parameters are the spec's, in order, so the core calls it directly, with no wrapper between.
Only the declaration and the device list, a few lines each, are written here.
"""

from __future__ import annotations

import kernelbay as kb
from kernelbay import hookimpl

from . import allocator, graphs, launcher

kernelbay_allocate = hookimpl(allocator.allocate)
kernelbay_free = hookimpl(allocator.free)
kernelbay_copy = hookimpl(allocator.copy)
kernelbay_host_view = hookimpl(allocator.host_view)
kernelbay_compile = hookimpl(launcher.compile)
kernelbay_launch = hookimpl(launcher.launch)

# Direct callables (hookspecs.py, *Direct*): what the core calls instead of a hook while no
# extension wraps it; with them in place, kb.buffer, Buffer.close and Kernel.launch are the
# core's C fronts, which add no Python frame of their own. A C backend returns a C function
# here; pyref's hooks already take the spec's parameters in order, so each is its own.
allocator.allocate.kernelbay_direct = lambda: allocator.allocate  # type: ignore[attr-defined]
allocator.free.kernelbay_direct = lambda: allocator.free  # type: ignore[attr-defined]
launcher.launch.kernelbay_direct = lambda: launcher.launch  # type: ignore[attr-defined]

# Streams and events: left out on purpose. The core's fallback applies (every stream is the
# device's one in-order stream, events complete when recorded), which is exactly right for a
# backend whose every call finishes before it returns. Graphs: graphs.py.
kernelbay_graph_build = hookimpl(graphs.graph_build)
kernelbay_graph_replay = hookimpl(graphs.graph_replay)
kernelbay_graph_update = hookimpl(graphs.graph_update)


@hookimpl
def kernelbay_backend() -> kb.BackendSpec:
    return kb.BackendSpec(
        name="pyref",
        priority=0,  # a reference backend: never chosen unless named (KERNELBAY_DEVICE=pyref)
        languages=("python",),
        api_version=1,  # the contract this backend was built for: a literal, never the core's constant
        description="pure-Python reference backend (one Python call per thread)",
    )


@hookimpl
def kernelbay_devices() -> list[kb.Device]:
    return [kb.Device("pyref", 0, "Python interpreter", {"threads_per_block_max": 1024})]


@hookimpl
def kernelbay_synchronize(device: kb.Device, stream: object) -> None:
    return None  # every launch finishes before it returns
