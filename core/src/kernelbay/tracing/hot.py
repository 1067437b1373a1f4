"""The tracer's positional forms of the hot-path hooks: what runs per call while tracing.

Each is made per backend binding by the core (``kernelbay_positional(tracer, inner, binding)``)
and does the least that still gives a span: two clock reads, one record extended onto the
tracer's flat list (:mod:`.records`), and -- where the backend has a device timer -- two
``timer.mark`` calls. Everything else (names, directions, device times, JSON) happens later,
in batches (:mod:`.tracefile`).

The wrappers use a tracer only through :class:`Recorder`, the wrapper protocol; the launch
wrapper is C (``hot.c``) where it can be built, with the Python one here as its twin.
"""

from __future__ import annotations

import logging
from importlib import resources
from threading import get_ident
from time import perf_counter_ns
from typing import Any, Protocol

from .. import native
from .records import ALLOC, COPY, FREE, LAUNCH, NAMES, SIZE, copy_ends, err_text

__all__ = ["Recorder", "c_module", "make_allocate", "make_copy", "make_free", "make_launch"]

log = logging.getLogger("kernelbay.trace")
_c: list[Any] = []  # [the C wrapper module, or None where it cannot be built here]


class Recorder(Protocol):
    """The wrapper protocol: all the hot wrappers use of a tracer (:class:`.tracer.Tracer`
    implements it; a test can hand them anything that does).

    * ``buf``: the flat list of records. A wrapper adds one record, :data:`.records.SIZE` items
      in :class:`.records.Field` order, with one ``buf.extend`` call.
    * ``chunk``: records per fold. A wrapper calls ``fold()`` once ``len(buf)`` passes
      ``chunk * SIZE`` (read when the wrapper is made).
    * ``reg``: id -> object, for the ids records hold; ``ref(obj)`` puts ``obj`` there and
      returns its id (``None`` for ``None``). A wrapper may add to ``reg`` itself.
    * ``fold()``: move the records out of ``buf`` (may block; never called from ``free``, which
      runs from finalisers).
    * ``timer(binding)``: the device timer of that backend binding, or ``None`` for host spans.
    """

    buf: list[Any]
    chunk: int
    reg: dict[int, Any]

    def fold(self) -> None: ...

    def ref(self, obj: Any) -> int | None: ...

    def timer(self, binding: Any) -> Any: ...


def c_module() -> Any:
    """The C launch wrapper (``hot.c``), built once with :mod:`kernelbay.native` (kept in the
    disk cache, so later processes load it in about a millisecond); ``None`` where it cannot be
    built (no compiler, ``KERNELBAY_NATIVE=0``): the Python wrappers below run."""
    if not _c:
        try:
            src = resources.files("kernelbay.tracing").joinpath("hot.c").read_text(encoding="utf-8")
            mod = native.load_extension("_kb_tracehot", src)
        except (native.NativeUnavailable, OSError) as exc:
            log.info("kernelbay trace: the C launch wrapper is unavailable, the Python one runs: %s", exc)
            mod = None
        _c.append(mod)
    return _c[0]


def _failed(
    tr: Recorder, kind: str, t0: int, key: Any, a: Any, b: Any, c: Any, stream: Any, exc: BaseException
) -> None:
    """The record of a call that raised (not hot: kept out of the wrappers' bodies)."""
    rec: tuple[Any, ...]
    if kind == COPY:  # KEY device id, A direction, B nbytes, C stream id
        rec = (kind, t0, perf_counter_ns(), get_ident(), tr.ref(key), a, b, tr.ref(stream))
    else:  # launch: KEY the kernel, A grid, B block, C shared_mem, D the stream (the objects)
        rec = (kind, t0, perf_counter_ns(), get_ident(), key, a, b, c, stream)
    tr.buf.extend((*rec, *(None,) * (SIZE - 1 - len(rec)), err_text(exc)))


def _unmark(timer: Any, m0: Any) -> None:
    """Give back the start mark of a call that raised (the timer recycles a mark passed to
    ``span``; with no end mark it returns no span)."""
    if m0 is not None:
        try:
            timer.span(m0, None)
        except Exception:  # tracing never adds an error to the one the call raised
            pass


# The records below are tuple literals in Field order (KIND, T0, T1, THREAD, KEY, A, B, C, D,
# M0, M1, ERROR): a literal is what keeps the Python wrapper within a microsecond.
# tests/trace/test_hot_c.py reads the records of both wrappers by Field name.


def make_launch(tr: Recorder, inner: Any, b: Any, use_c: bool = True) -> Any:
    """The launch wrapper of binding ``b``: the C one where it can be built (``use_c``), else
    one of the Python ones below; both add the same records."""
    buf = tr.buf
    add = buf.extend
    fold = tr.fold
    clock = perf_counter_ns
    limit = tr.chunk * SIZE
    timer = tr.timer(b)
    sync = timer is not None and getattr(timer, "synchronous", False)
    mod = c_module() if use_c else None
    if mod is not None:

        def on_error(t0: int, kernel: Any, grid: Any, block: Any, shm: int, stream: Any, m0: Any, exc: Any) -> None:
            if timer is not None and not sync:
                _unmark(timer, m0)
            _failed(tr, LAUNCH, t0, kernel, grid, block, shm, stream, exc)

        mode = 0 if timer is None else 1 if sync else 2
        mark = timer.mark if timer is not None and mode == 2 else None
        return mod.Launch(inner, buf, limit, fold, on_error, mode, mark, LAUNCH, NAMES)
    if timer is None:

        def launch(kernel: Any, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> Any:
            t0 = clock()
            try:
                r = inner(kernel, grid, block, args, shared_mem, stream)
            except BaseException as exc:
                _failed(tr, LAUNCH, t0, kernel, grid, block, shared_mem, stream, exc)
                raise
            add((LAUNCH, t0, clock(), get_ident(), kernel, grid, block, shared_mem, stream, None, None, None))
            if len(buf) > limit:
                fold()
            return r

        return launch
    if sync:
        # The work is done when the call returns: the device span is the backend's call, read
        # by the same two clock reads as the host span (no extra cost).
        def launch_sync(kernel: Any, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> Any:
            t0 = clock()
            try:
                r = inner(kernel, grid, block, args, shared_mem, stream)
            except BaseException as exc:
                _failed(tr, LAUNCH, t0, kernel, grid, block, shared_mem, stream, exc)
                raise
            t1 = clock()
            add((LAUNCH, t0, t1, get_ident(), kernel, grid, block, shared_mem, stream, t0, t1, None))
            if len(buf) > limit:
                fold()
            return r

        return launch_sync
    mark = timer.mark

    def launch_timed(kernel: Any, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> Any:
        t0 = clock()
        dev = kernel.device
        m0 = mark(dev, stream)
        try:
            r = inner(kernel, grid, block, args, shared_mem, stream)
        except BaseException as exc:
            _unmark(timer, m0)
            _failed(tr, LAUNCH, t0, kernel, grid, block, shared_mem, stream, exc)
            raise
        m1 = mark(dev, stream)
        add((LAUNCH, t0, clock(), get_ident(), kernel, grid, block, shared_mem, stream, m0, m1, None))
        if len(buf) > limit:
            fold()
        return r

    return launch_timed


def make_copy(tr: Recorder, inner: Any, b: Any) -> Any:
    """The copy wrapper of binding ``b``."""
    buf = tr.buf
    add = buf.extend
    reg = tr.reg
    clock = perf_counter_ns
    limit = tr.chunk * SIZE
    timer = tr.timer(b)
    sync = timer is not None and getattr(timer, "synchronous", False)
    mark = timer.mark if timer is not None and not sync else None

    def copy(dst: Any, src: Any, nbytes: int, stream: Any) -> Any:
        t0 = clock()
        dev, direction = copy_ends(dst, src)
        m0: Any = mark(dev, stream) if mark is not None else None
        try:
            r = inner(dst, src, nbytes, stream)
        except BaseException as exc:
            _unmark(timer, m0)
            _failed(tr, COPY, t0, dev, direction, nbytes, None, stream, exc)
            raise
        m1: Any
        if sync:
            m0 = t0
            m1 = clock()
        else:
            m1 = mark(dev, stream) if mark is not None else None
        did = id(dev)
        if did not in reg:
            reg[did] = dev
        if stream is None:
            sid = None
        else:
            sid = id(stream)
            if sid not in reg:
                reg[sid] = stream
        add((COPY, t0, m1 if sync else clock(), get_ident(), did, direction, nbytes, sid, None, m0, m1, None))
        if len(buf) > limit:
            tr.fold()
        return r

    return copy


def make_allocate(tr: Recorder, inner: Any, b: Any) -> Any:
    """The allocate wrapper of binding ``b``."""
    buf = tr.buf
    add = buf.extend
    clock = perf_counter_ns
    limit = tr.chunk * SIZE
    ref = tr.ref

    def allocate(device: Any, nbytes: int) -> Any:
        t0 = clock()
        try:
            h = inner(device, nbytes)
        except BaseException as exc:
            add((ALLOC, t0, clock(), get_ident(), ref(device), nbytes, None, None, None, None, None, err_text(exc)))
            raise
        add((ALLOC, t0, clock(), get_ident(), ref(device), nbytes, id(h), None, None, None, None, None))
        if len(buf) > limit:
            tr.fold()
        return h

    return allocate


def make_free(tr: Recorder, inner: Any, b: Any) -> Any:
    """The free wrapper of binding ``b``."""
    add = tr.buf.extend
    clock = perf_counter_ns
    ref = tr.ref

    def free(device: Any, handle: Any) -> Any:
        # Runs from finalisers too: no fold here (it could block or take a lock mid-collection).
        t0 = clock()
        r = inner(device, handle)
        add((FREE, t0, clock(), get_ident(), ref(device), id(handle), None, None, None, None, None, None))
        return r

    return free
