"""The hook implementations: thin functions that delegate to allocator.py and launcher.py."""

from __future__ import annotations

from typing import Any

import kernelbay as kb
from kernelbay import hookimpl

from . import allocator, launcher


@hookimpl
def kernelbay_backend() -> kb.BackendSpec:
    return kb.BackendSpec(
        name="pyref",
        priority=10,  # below every real backend: never picked unless asked for
        languages=("python",),
        api_version=kb.API_VERSION,
        description="pure-Python reference backend (one Python call per thread)",
    )


@hookimpl
def kernelbay_devices() -> list[kb.Device]:
    return [kb.Device("pyref", 0, "Python interpreter", {"threads_per_block_max": 1024})]


@hookimpl
def kernelbay_allocate(device: kb.Device, nbytes: int) -> Any:
    return allocator.allocate(nbytes)


@hookimpl
def kernelbay_free(device: kb.Device, handle: Any) -> None:
    allocator.free(handle)


@hookimpl
def kernelbay_copy(dst: Any, src: Any, nbytes: int, stream: Any) -> None:
    allocator.copy(dst, src, nbytes)


@hookimpl
def kernelbay_host_view(array: kb.Array) -> Any:
    return allocator.view(array)


@hookimpl
def kernelbay_compile(device: kb.Device, source: kb.Source) -> Any:
    return launcher.compile(source)


@hookimpl
def kernelbay_launch(kernel: kb.Kernel, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> None:
    launcher.launch(kernel, grid, block, args)


@hookimpl
def kernelbay_synchronize(device: kb.Device, stream: Any) -> None:
    return None  # every launch finishes before it returns


# Streams and events: left out on purpose. The core's fallback applies (every stream is the
# device's one in-order stream, events complete when recorded), which is exactly right for a
# backend whose every call finishes before it returns. Graphs: graphs.py.


@hookimpl
def kernelbay_graph_build(device: kb.Device, steps: Any) -> Any:
    from . import graphs

    return graphs.graph_build(device, steps)


@hookimpl
def kernelbay_graph_replay(device: kb.Device, graph: Any, stream: Any) -> None:
    from . import graphs

    graphs.graph_replay(device, graph, stream)


@hookimpl
def kernelbay_graph_update(device: kb.Device, graph: Any, step: Any) -> bool:
    from . import graphs

    return graphs.graph_update(device, graph, step)
