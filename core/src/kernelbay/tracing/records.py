"""What a trace record is: its named fields (defined here, once), its kinds, and the helpers that
fill one. Every module of :mod:`kernelbay.tracing` reads records through :class:`Field`; the C
launch wrapper (``hot.c``) is handed the field names in order when it is made (:data:`NAMES`),
so it places what it records by the same definition the Python wrappers use.

A record is not an object: the tracer's buffer is one flat list, record after record, each
:data:`SIZE` items in :class:`Field` order, added by one ``list.extend`` call (atomic under the
GIL, so records of several threads never interleave, and no tuple outlives its call: nothing
for the garbage collector to track). A fold reads one field of a whole chunk as one strided
slice, ``chunk[Field.T0::SIZE]``.
"""

from __future__ import annotations

import enum
from typing import Any

from ..types import Buffer

__all__ = [
    "ALLOC",
    "CHUNK",
    "COMPILE",
    "COPY",
    "FREE",
    "LAUNCH",
    "MEMSET",
    "NAMES",
    "SIZE",
    "SYNC",
    "Field",
    "copy_ends",
    "err_text",
]


@enum.unique
class Field(enum.IntEnum):
    """The items of a record, in order (the values are the indices). ``KEY`` and ``A`` to ``D``
    hold what the record's kind says:

    ===========  ===========  =========  ==========  ==========  ==========
    kind         KEY          A          B           C           D
    ===========  ===========  =========  ==========  ==========  ==========
    launch       the kernel   grid       block       shared_mem  the stream
    copy         device id    direction  nbytes      stream id
    compile      device id    source id  cache kind
    allocate     device id    nbytes     handle id
    free         device id    handle id
    synchronize  device id    stream id
    memset       device id    nbytes     stream id
    ===========  ===========  =========  ==========  ==========  ==========

    An id is ``id(obj)`` of an object kept in the tracer's ``reg`` (so it cannot be reused by
    another object while the trace runs); a launch holds its kernel and stream themselves (no
    lookup per call on the hottest path). Unused slots are ``None``.
    """

    KIND = 0  #: the kind: :data:`LAUNCH`, :data:`COPY`, ...
    T0 = 1  #: host clock (:func:`time.perf_counter_ns`) when the call began
    T1 = 2  #: host clock when it returned (or raised)
    THREAD = 3  #: :func:`threading.get_ident` of the caller
    KEY = 4  #: the kernel (launch) or the device's id
    A = 5
    B = 6
    C = 7
    D = 8
    M0 = 9  #: the device timer's start mark; for a synchronous timer, the device span's begin
    M1 = 10  #: the device timer's end mark; for a synchronous timer, the device span's end
    ERROR = 11  #: ``None``, or :func:`err_text` of the exception the call raised


#: Items per record.
SIZE = len(Field)
#: The field names in record order: what the C launch wrapper is handed.
NAMES = tuple(f.name for f in sorted(Field))
#: Records folded at a time (bounds the raw list, and how long CUDA events stay in flight).
CHUNK = 8192

# Record kinds (the KIND field of every record).
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
    """The ``ERROR`` field of a record whose call raised."""
    return f"{type(exc).__name__}: {exc}"[:500]


def copy_ends(dst: Any, src: Any) -> tuple[Any, str]:
    """``(device, direction)`` of a copy: the buffer's device and HtoD, DtoH or DtoD."""
    if isinstance(dst, Buffer):
        return dst.device, ("DtoD" if isinstance(src, Buffer) else "HtoD")
    return src.device, "DtoH"
