"""kernelbay backend for NVIDIA GPUs: NVRTC compilation, a caching allocator, fast launches.

The backend itself is used through ``kernelbay`` (``kb.device("cuda")``); this package adds the
CUDA-only extras:

* :class:`Stream`, :func:`default_stream`, :class:`Event` -- streams and timing events;
* :class:`Graph` -- capture a sequence of launches and replay it;
* :func:`pinned_empty` -- numpy arrays in page-locked host memory (fast, async copies);
* :func:`set_memory_limit` -- the caching allocator's limit.

Importing this package imports nothing from cuda.bindings; that happens on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ below gives, for type checkers and editors
    from ._driver import CudaError
    from .allocator import set_memory_limit
    from .copies import pinned_empty
    from .streams import Event, Graph, Stream, default_stream

__all__ = ["Stream", "Event", "Graph", "default_stream", "pinned_empty", "set_memory_limit", "CudaError"]


def __getattr__(name: str) -> Any:
    if name in ("Stream", "Event", "Graph", "default_stream"):
        from . import streams  # deferred for speed: importing the package stays cheap

        return getattr(streams, name)
    if name == "pinned_empty":
        from .copies import pinned_empty  # deferred for speed

        return pinned_empty
    if name == "set_memory_limit":
        from .allocator import set_memory_limit  # deferred for speed

        return set_memory_limit
    if name == "CudaError":
        from ._driver import CudaError  # deferred for speed

        return CudaError
    raise AttributeError(f"module 'kernelbay_cuda' has no attribute {name!r}")
