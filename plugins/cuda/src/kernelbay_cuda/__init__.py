"""kernelbay backend for NVIDIA GPUs: NVRTC compilation, a caching allocator, fast launches.

The backend itself is used through ``kernelbay`` (``kb.device("cuda")``, ``dev.stream()``,
``with dev.graph() as g:``); this package adds the CUDA-only extras:

* :func:`pinned_empty` -- numpy arrays in page-locked host memory (fast, async copies);
* :func:`set_memory_limit` -- the caching allocator's limit;
* :func:`default_stream` -- the device's default stream (``dev.default_stream``).

``Stream``, ``Event`` and ``Graph`` are deprecated aliases of ``kb.Stream``, ``kb.Event`` and
``kb.Graph`` (``Graph`` keeps the CUDA stream capture of 0.1); each warns when called.

Importing this package imports nothing from cuda.bindings; that happens on first use.
"""

from __future__ import annotations

__version__ = "0.2.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ below gives, for type checkers and editors
    from ._deprecated import Event, Graph, Stream
    from ._driver import CudaError
    from .allocator import set_memory_limit
    from .copies import pinned_empty
    from .streams import default_stream

__all__ = ["Stream", "Event", "Graph", "default_stream", "pinned_empty", "set_memory_limit", "CudaError"]


# Each name is imported on first use, so that `import kernelbay_cuda` stays cheap: the plugin
# modules load when kernelbay first needs the backend.
def __getattr__(name: str) -> Any:
    if name in ("Stream", "Event", "Graph"):
        from . import _deprecated

        return getattr(_deprecated, name)
    if name == "default_stream":
        from .streams import default_stream

        return default_stream
    if name == "pinned_empty":
        from .copies import pinned_empty

        return pinned_empty
    if name == "set_memory_limit":
        from .allocator import set_memory_limit

        return set_memory_limit
    if name == "CudaError":
        from ._driver import CudaError

        return CudaError
    raise AttributeError(f"module 'kernelbay_cuda' has no attribute {name!r}")
