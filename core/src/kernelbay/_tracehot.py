"""The tracer's positional forms of the hot-path hooks: what runs per call while tracing.

Each is made per backend binding by the core (``kernelbay_positional(tracer, inner, binding)``)
and does the least that still gives a span: two clock reads, one tuple appended to the
tracer's list, and -- where the backend has a device timer -- two ``timer.mark`` calls.
Records hold ids and numbers only (the garbage collector drops such tuples from its lists
after one look, so a ring of 100,000 costs it nothing); the objects they name are appended to
``tracer.refs`` (one list append) and moved into ``tracer.reg`` when the records are folded.
Everything else (names, directions, device times, JSON) happens later, in batches.
"""

from __future__ import annotations

from threading import get_ident
from time import perf_counter_ns
from typing import Any


def _make_launch(tr: Any, inner: Any, b: Any) -> Any:
    from ._trace import CHUNK, LAUNCH, _err

    buf = tr.buf
    append = buf.append
    fold = tr.fold
    clock = perf_counter_ns
    keep = tr.refs.append
    timer = tr._timer(b)
    if timer is not None and getattr(timer, "synchronous", False):
        # The work is done when the call returns: the device span is the backend's call, read
        # by the same two clock reads as the host span (no extra cost).
        def launch_sync(kernel: Any, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> Any:
            t0 = clock()
            try:
                r = inner(kernel, grid, block, args, shared_mem, stream)
            except BaseException as exc:
                keep(kernel)
                if stream is not None:
                    keep(stream)
                append(
                    (
                        LAUNCH,
                        t0,
                        clock(),
                        get_ident(),
                        id(kernel),
                        grid,
                        block,
                        shared_mem,
                        None if stream is None else id(stream),
                        None,
                        None,
                        _err(exc),
                    )
                )
                raise
            t1 = clock()
            keep(kernel)
            if stream is not None:
                keep(stream)
            append(
                (
                    LAUNCH,
                    t0,
                    t1,
                    get_ident(),
                    id(kernel),
                    grid,
                    block,
                    shared_mem,
                    None if stream is None else id(stream),
                    t0,
                    t1,
                    None,
                )
            )
            if len(buf) > CHUNK:
                fold()
            return r

        return launch_sync
    if timer is None:

        def launch(kernel: Any, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> Any:
            t0 = clock()
            try:
                r = inner(kernel, grid, block, args, shared_mem, stream)
            except BaseException as exc:
                keep(kernel)
                if stream is not None:
                    keep(stream)
                append(
                    (
                        LAUNCH,
                        t0,
                        clock(),
                        get_ident(),
                        id(kernel),
                        grid,
                        block,
                        shared_mem,
                        None if stream is None else id(stream),
                        None,
                        None,
                        _err(exc),
                    )
                )
                raise
            keep(kernel)
            if stream is not None:
                keep(stream)
            append(
                (
                    LAUNCH,
                    t0,
                    clock(),
                    get_ident(),
                    id(kernel),
                    grid,
                    block,
                    shared_mem,
                    None if stream is None else id(stream),
                    None,
                    None,
                    None,
                )
            )
            if len(buf) > CHUNK:
                fold()
            return r

        return launch
    mark = timer.mark

    def launch_timed(kernel: Any, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> Any:
        t0 = clock()
        dev = kernel.device
        m0 = mark(dev, stream)
        try:
            r = inner(kernel, grid, block, args, shared_mem, stream)
        except BaseException as exc:
            keep(kernel)
            if stream is not None:
                keep(stream)
            append(
                (
                    LAUNCH,
                    t0,
                    clock(),
                    get_ident(),
                    id(kernel),
                    grid,
                    block,
                    shared_mem,
                    None if stream is None else id(stream),
                    None,
                    None,
                    _err(exc),
                )
            )
            raise
        m1 = mark(dev, stream)
        keep(kernel)
        if stream is not None:
            keep(stream)
        append(
            (
                LAUNCH,
                t0,
                clock(),
                get_ident(),
                id(kernel),
                grid,
                block,
                shared_mem,
                None if stream is None else id(stream),
                m0,
                m1,
                None,
            )
        )
        if len(buf) > CHUNK:
            fold()
        return r

    return launch_timed


def _make_copy(tr: Any, inner: Any, b: Any) -> Any:
    from ._trace import CHUNK, COPY, _err, copy_ends

    buf = tr.buf
    append = buf.append
    clock = perf_counter_ns
    keep = tr.refs.append
    timer = tr._timer(b)
    sync = timer is not None and getattr(timer, "synchronous", False)
    mark = timer.mark if timer is not None and not sync else None

    def copy(dst: Any, src: Any, nbytes: int, stream: Any) -> Any:
        t0 = clock()
        dev, direction = copy_ends(dst, src)
        m0 = mark(dev, stream) if mark is not None else None
        try:
            r = inner(dst, src, nbytes, stream)
        except BaseException as exc:
            keep(dev)
            if stream is not None:
                keep(stream)
            append(
                (
                    COPY,
                    t0,
                    clock(),
                    get_ident(),
                    id(dev),
                    direction,
                    nbytes,
                    None if stream is None else id(stream),
                    None,
                    None,
                    None,
                    _err(exc),
                )
            )
            raise
        if sync:
            t1 = clock()
            keep(dev)
            if stream is not None:
                keep(stream)
            append(
                (
                    COPY,
                    t0,
                    t1,
                    get_ident(),
                    id(dev),
                    direction,
                    nbytes,
                    None if stream is None else id(stream),
                    None,
                    t0,
                    t1,
                    None,
                )
            )
        else:
            m1 = mark(dev, stream) if mark is not None else None
            keep(dev)
            if stream is not None:
                keep(stream)
            append(
                (
                    COPY,
                    t0,
                    clock(),
                    get_ident(),
                    id(dev),
                    direction,
                    nbytes,
                    None if stream is None else id(stream),
                    None,
                    m0,
                    m1,
                    None,
                )
            )
        if len(buf) > CHUNK:
            tr.fold()
        return r

    return copy


def _make_allocate(tr: Any, inner: Any, b: Any) -> Any:
    from ._trace import ALLOC, CHUNK, _err

    buf = tr.buf
    append = buf.append
    clock = perf_counter_ns
    keep = tr.refs.append

    def allocate(device: Any, nbytes: int) -> Any:
        t0 = clock()
        try:
            h = inner(device, nbytes)
        except BaseException as exc:
            keep(device)
            append((ALLOC, t0, clock(), get_ident(), id(device), nbytes, None, None, None, None, None, _err(exc)))
            raise
        keep(device)
        append((ALLOC, t0, clock(), get_ident(), id(device), nbytes, id(h), None, None, None, None, None))
        if len(buf) > CHUNK:
            tr.fold()
        return h

    return allocate


def _make_free(tr: Any, inner: Any, b: Any) -> Any:
    from ._trace import FREE

    append = tr.buf.append
    clock = perf_counter_ns
    keep = tr.refs.append

    def free(device: Any, handle: Any) -> Any:
        # Runs from finalisers too: no fold here (it could block or take a lock mid-collection).
        t0 = clock()
        r = inner(device, handle)
        keep(device)
        append((FREE, t0, clock(), get_ident(), id(device), id(handle), None, None, None, None, None, None))
        return r

    return free


def install(tracer_cls: Any) -> None:
    """Attach the positional forms to the tracer's hook implementations."""
    tracer_cls.kernelbay_launch.kernelbay_positional = _make_launch
    tracer_cls.kernelbay_copy.kernelbay_positional = _make_copy
    tracer_cls.kernelbay_allocate.kernelbay_positional = _make_allocate
    tracer_cls.kernelbay_free.kernelbay_positional = _make_free
