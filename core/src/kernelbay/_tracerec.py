"""What a trace record is: its kinds, its size and the helpers that fill one (shared by the
tracer, :mod:`kernelbay._trace`, and its hot-path wrappers, :mod:`kernelbay._tracehot`)."""

from __future__ import annotations

from typing import Any

from .types import Buffer

#: Records folded at a time (bounds the raw list, and how long CUDA events stay in flight).
CHUNK = 8192
#: Items per record: the buffer is flat, each record's items extended onto it in one call.
FIELDS = 12

# Record kinds (the first item of every record).
LAUNCH, COPY, ALLOC, FREE, COMPILE, SYNC, MEMSET = (
    "launch",
    "copy",
    "allocate",
    "free",
    "compile",
    "synchronize",
    "memset",
)


def err_text(exc: BaseException) -> str:
    """The error slot of a record whose call raised."""
    return f"{type(exc).__name__}: {exc}"[:500]


def copy_ends(dst: Any, src: Any) -> tuple[Any, str]:
    """``(device, direction)`` of a copy: the buffer's device and HtoD, DtoH or DtoD."""
    if isinstance(dst, Buffer):
        return dst.device, ("DtoD" if isinstance(src, Buffer) else "HtoD")
    return src.device, "DtoH"
