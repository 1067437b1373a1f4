"""Copies: host<->device (pinned direct, pageable staged), device<->device, peer; memset.

A copy between two GPUs (:class:`_PeerLink`) is ordered with both devices' default streams.

A pageable numpy array of at least :data:`STAGE_MIN` bytes is moved through a pipeline of
pinned buffers. With the native helper (``_stage.c``, C threads that run the whole copy without
the GIL) the copy is a row of 1 MiB DMAs on one stream through a ring of pinned buffers, the
calling thread and the C threads copying 128 KiB subs between the numpy array and the buffers in
order: the DMA of one piece overlaps the host copies of the next. Without it, Python threads
each copy chunks between the array and their own pinned buffers on their own stream. Pinned
host arrays (:func:`pinned_empty`) go straight to ``cuMemcpy*Async``; so do copies into the
pooled page-locked arrays ``a.numpy()`` returns (hostpool.py), while uploads from those are
staged like any pageable array's.
"""

from __future__ import annotations

import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kernelbay.concurrency import OnceMap
from kernelbay.cpus import usable_cpus
from kernelbay.types import Buffer

from . import _driver, native
from .allocator import note_uses
from .devices import peer_access, sync_failed
from .hostpool import Lease
from .streams import ctypes_stream

__all__ = ["copy", "memset", "PinnedMemory", "pinned_empty", "is_pinned"]

STAGE_MIN = 1 << 20
#: The native helper's staging (_stage.c): a copy is cut into pieces of PIECE bytes, each one DMA
#: on one stream through one of SLOTS page-locked buffers, and into subs of SUB bytes that the
#: calling thread and up to WORKERS C threads copy in order between the numpy array and the
#: buffers (with non-temporal stores). H200 host, 4 / 16 / 64 / 256 MiB, x pinned, H2D / D2H:
#: 0.63 / 0.62, 0.70 / 0.76, 0.75 / 0.80, 0.78 / 0.88; one stream per thread with 192 KiB chunks
#: (the earlier design) 0.47 / 0.45, 0.66 / 0.53, 0.72 / 0.73, 0.77 / 0.86 in the same run.
#: 512 KiB pieces fell to 0.45x for D2H at 256 MiB; 64 or 256 KiB subs were no better.
PIECE = 1 << 20
SUB = 128 << 10
SLOTS = 48
#: Threads that copy between pageable and pinned memory (C threads of the native helper; Python
#: threads without it). One thread's memcpy from pageable into pinned memory is the limit: about
#: 7 GB/s on an H200 host (16 cores), against 54 GB/s of DMA.
WORKERS = max(1, min(12, usable_cpus() * 3 // 4))
#: Without the native helper, each Python thread has its own stream and BUFFERS buffers of CHUNK
#: bytes; a copy smaller than WORKERS * PER_WORKER * CHUNK is cut into smaller chunks (down to
#: MIN_CHUNK) so that every thread has PER_WORKER of them to pipeline.
CHUNK = 1 << 20
BUFFERS = 4
PER_WORKER = 2
MIN_CHUNK = 128 << 10


def chunk_for(nbytes: int, workers: int, cap: int) -> int:
    """The chunk size of one staged copy of ``nbytes`` over ``workers`` threads (at most ``cap``,
    the pinned buffers' size), a multiple of 64 KiB."""
    want = -(-nbytes // (workers * PER_WORKER))
    want = -(-want // (64 << 10)) * (64 << 10)
    return max(min(MIN_CHUNK, cap), min(want, cap))


_memmove = ctypes.memmove
_u64 = ctypes.c_uint64
_sz = ctypes.c_size_t
_vp = ctypes.c_void_p


class PinnedMemory:
    """Page-locked host memory from ``cuMemHostAlloc`` (portable across devices).

    numpy sees it through ``__array_interface__``; :func:`pinned_empty` is the usual way in.
    """

    def __init__(self, nbytes: int, device_index: int = 0) -> None:
        self.ptr = 0
        self.nbytes = nbytes
        _driver.ensure_current(device_index)
        p = ctypes.c_void_p()
        rc = _driver.libcuda().cuMemHostAlloc(ctypes.byref(p), _sz(max(1, nbytes)), 1)  # PORTABLE
        _driver.check(rc, f"cuMemHostAlloc({nbytes})", device_index)
        self.ptr = p.value or 0

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    def __del__(self) -> None:
        if self.ptr:
            try:
                _driver.libcuda().cuMemFreeHost(_vp(self.ptr))
            except Exception:
                pass
            self.ptr = 0


def pinned_empty(shape: Any, dtype: Any = "float32", device: Any = None):
    """A numpy array in pinned (page-locked) host memory: copies to and from the GPU run at full
    speed and asynchronously on a stream. Keep it alive until such a copy has finished."""
    import numpy as np  # deferred for speed: importing the plugin stays cheap

    dt = np.dtype(dtype)
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    n = dt.itemsize
    for s in shp:
        n *= s
    idx = 0 if device is None else getattr(device, "index", 0)
    mem = PinnedMemory(n, idx)
    return np.asarray(mem).view(dt).reshape(shp)


def pinned_owner(arr: Any) -> Any:
    """The page-locked memory under ``arr`` (a :class:`PinnedMemory` or a pooled result's
    :class:`~kernelbay_cuda.hostpool.Lease`), or None for pageable memory."""
    b = arr
    for _ in range(32):
        if b is None:
            return None
        t = type(b)
        if t is PinnedMemory or t is Lease:
            return b
        b = getattr(b, "base", None)
    return None


def is_pinned(arr: Any) -> bool:
    return pinned_owner(arr) is not None


def _lib() -> ctypes.CDLL:
    return _driver.libcuda()


def _sync(s: Any, index: int) -> None:
    rc = _lib().cuStreamSynchronize(s)
    if rc:
        sync_failed(index, rc)


def copy(dst: Any, src: Any, nbytes: int, stream: Any) -> None:
    """The ``kernelbay_copy`` hook."""
    if nbytes == 0:
        return
    lib = _lib()
    if isinstance(dst, Buffer):
        dev = dst.device
        idx = dev.index
        if isinstance(src, Buffer) and src.device.index != idx:
            _peer_copy(dst, src, nbytes, ctypes_stream(stream, dev, "a copy"))
            return
        _driver.ensure_current(idx)
        s = ctypes_stream(stream, dev, "a copy")
        if s is not None:
            note_uses(dev, (dst, src), s)
        if isinstance(src, Buffer):
            rc = lib.cuMemcpyDtoDAsync_v2(_u64(dst.handle), _u64(src.handle), _sz(nbytes), s)
            _driver.check(rc, f"device copy of {nbytes} bytes", idx)
            return
        host = src.ctypes.data
        # A pooled result array (hostpool.Lease) is page-locked but not the user's choice: an
        # upload from it keeps the pageable semantics (the array is read when copy returns, so
        # the user may write to it at once), i.e. the staged path.
        if nbytes >= STAGE_MIN and type(pinned_owner(src)) is not PinnedMemory:
            _stager(idx).h2d(dst.handle, host, nbytes, s)
            return
        rc = lib.cuMemcpyHtoDAsync_v2(_u64(dst.handle), _vp(host), _sz(nbytes), s)
        _driver.check(rc, f"host-to-device copy of {nbytes} bytes", idx)
        return
    dev = src.device
    idx = dev.index
    _driver.ensure_current(idx)
    s = ctypes_stream(stream, dev, "a copy")
    if s is not None:
        note_uses(dev, (src,), s)
    host = dst.ctypes.data
    if nbytes >= STAGE_MIN and not is_pinned(dst):
        _stager(idx).d2h(host, src.handle, nbytes, s)
        return
    rc = lib.cuMemcpyDtoHAsync_v2(_vp(host), _u64(src.handle), _sz(nbytes), s)
    _driver.check(rc, f"device-to-host copy of {nbytes} bytes", idx)
    _sync(s, idx)


def memset(dst: Any, value: int, nbytes: int, stream: Any) -> None:
    """The ``kernelbay_memset`` hook."""
    if nbytes == 0:
        return
    idx = dst.device.index
    _driver.ensure_current(idx)
    s = ctypes_stream(stream, dst.device, "a copy")
    note_uses(dst.device, (dst,), s)
    rc = _lib().cuMemsetD8Async(_u64(dst.handle), value & 0xFF, _sz(nbytes), s)
    _driver.check(rc, f"memset of {nbytes} bytes", idx)


# --- peer copies ------------------------------------------------------------------------

_NO_TIMING = 2  # CU_EVENT_DISABLE_TIMING


def _event(index: int) -> ctypes.c_void_p:
    """A new event in device ``index``'s context (made current by the caller)."""
    ev = ctypes.c_void_p()
    _driver.check(_lib().cuEventCreate(ctypes.byref(ev), _NO_TIMING), "cuEventCreate", index)
    return ev


class _PeerLink:
    """What copies from device ``src`` to device ``dst`` share: peer access, enabled once where
    the hardware allows it, and two reusable events that order the copy with the source device.

    ``cuMemcpyPeerAsync`` orders only with the stream it is queued on (the destination's), not
    with anything on the source device. So the copy stream first waits for ``on_src``, recorded
    on the source's legacy default stream, which itself waits for the source's blocking streams
    (not its non-blocking ones: synchronise those before copying). Then the source's default
    stream waits for ``on_dst``, recorded after the copy, so later work there (a kernel, or a
    block the caching allocator hands out again once the source is freed) cannot overwrite the
    source while the copy reads it.

    Reusing the events is safe: ``cuStreamWaitEvent`` waits for the record made before it was
    called, not for later ones; ``lock`` keeps each record-then-wait pair together.
    """

    def __init__(self, src: int, dst: int) -> None:
        self.src = src
        self.dst = dst
        self.lock = threading.Lock()
        # Without peer access cuMemcpyPeerAsync still works, staged through host memory by the
        # driver; with it the copy runs directly over NVLink/PCIe.
        self.src_ctx = _vp(int(_driver.context(src)))
        self.dst_ctx = _vp(int(_driver.context(dst)))
        self.direct = peer_access(dst, src)
        peer_access(src, dst)  # the copy back, which usually follows, then needs nothing new
        _driver.ensure_current(src)
        self.on_src = _event(src)
        _driver.ensure_current(dst)
        self.on_dst = _event(dst)


_links = OnceMap()  # (src, dst) -> _PeerLink


def _link(src: int, dst: int) -> _PeerLink:
    return _links.get_or_make((src, dst), _PeerLink, src, dst)


def _peer_copy(dst: Buffer, src: Buffer, nbytes: int, s: Any) -> None:
    """Copy between two devices on stream ``s`` of the destination (``None``: its default stream).

    Leaves the context that was current on this thread current again, so a copy does not move
    later work of this thread to another device.
    """
    lib = _lib()
    si, di = src.device.index, dst.device.index
    before = _driver.current_index()
    try:
        link = _link(si, di)
        check = _driver.check
        with link.lock:
            _driver.ensure_current(si)
            check(lib.cuEventRecord(link.on_src, None), "cuEventRecord (before a peer copy)", si)
            _driver.ensure_current(di)
            check(lib.cuStreamWaitEvent(s, link.on_src, 0), "cuStreamWaitEvent (before a peer copy)", di)
            rc = lib.cuMemcpyPeerAsync(_u64(dst.handle), link.dst_ctx, _u64(src.handle), link.src_ctx, _sz(nbytes), s)
            check(rc, f"peer copy of {nbytes} bytes from cuda:{si} to cuda:{di}", di)
            check(lib.cuEventRecord(link.on_dst, s), "cuEventRecord (after a peer copy)", di)
            _driver.ensure_current(si)
            check(lib.cuStreamWaitEvent(None, link.on_dst, 0), "cuStreamWaitEvent (after a peer copy)", si)
    finally:
        if before >= 0:
            _driver.ensure_current(before)


# --- the staging pipeline --------------------------------------------------------------


class _Worker:
    def __init__(self, index: int, chunk: int, buffers: int) -> None:
        self.index = index
        lib = _lib()
        self.bufs = [PinnedMemory(chunk, index) for _ in range(buffers)]
        st = ctypes.c_void_p()
        _driver.check(lib.cuStreamCreate(ctypes.byref(st), 1), "cuStreamCreate", index)  # non-blocking
        self.stream = st
        self.events = []  # one per buffer (its last DMA), then "done"
        for _ in range(buffers + 1):
            ev = ctypes.c_void_p()
            _driver.check(lib.cuEventCreate(ctypes.byref(ev), 2), "cuEventCreate", index)  # no timing
            self.events.append(ev)
        self.pending = [False] * buffers
        self.buf_ptrs = tuple(b.ptr for b in self.bufs)
        self.event_ptrs = tuple(e.value or 0 for e in self.events[:buffers])


def _native_stager(threads: int) -> tuple[Any, tuple[int, ...]]:
    """The native helper's ``Stager`` (C threads) and the driver addresses it calls, or ``(None, ())``."""
    mod = native.module()
    cls = getattr(mod, "Stager", None) if mod is not None else None
    if cls is None:
        return None, ()
    lib = _lib()
    names = (
        "cuCtxSetCurrent",
        "cuStreamWaitEvent",
        "cuMemcpyHtoDAsync_v2",
        "cuMemcpyDtoHAsync_v2",
        "cuEventRecord",
        "cuEventSynchronize",
    )
    return cls(threads), tuple(ctypes.cast(getattr(lib, n), ctypes.c_void_p).value or 0 for n in names)


class _Stager:
    def __init__(self, index: int) -> None:
        self.index = index
        self.lock = threading.Lock()
        self.workers: list[_Worker] | None = None
        self.pre = ctypes.c_void_p()
        self.stage, self.fns = _native_stager(WORKERS)
        # the settings of this stager's life (its buffers are this size)
        if self.stage is not None:  # one DMA stream through SLOTS buffers, the C threads copying
            self.chunk, self.buffers, self.nworkers = PIECE, SLOTS, 1
            self.sub = SUB
        else:  # Python threads (the GIL held between driver calls), each with its stream and buffers
            self.chunk, self.buffers, self.nworkers = CHUNK, max(2, BUFFERS), WORKERS
        self.pool = (
            ThreadPoolExecutor(self.nworkers, thread_name_prefix="kernelbay-cuda-copy") if self.stage is None else None
        )

    def _setup(self) -> list[_Worker]:
        if self.workers is None:
            _driver.ensure_current(self.index)
            workers = [_Worker(self.index, self.chunk, self.buffers) for _ in range(self.nworkers)]
            _driver.check(_lib().cuEventCreate(ctypes.byref(self.pre), 2), "cuEventCreate", self.index)
            if self.stage is not None:  # what every run uses, given to the C threads once
                w = workers[0]
                self.stage.setup(
                    self.fns,
                    int(_driver.context(self.index)),
                    w.stream.value or 0,
                    self.pre.value or 0,
                    w.events[-1].value or 0,
                    self.sub,
                    self.chunk,
                    w.buf_ptrs,
                    w.event_ptrs,
                )
            self.workers = workers
        return self.workers

    def _run(self, h2d: bool, dptr: int, hptr: int, nbytes: int, s: Any) -> None:
        with self.lock:
            workers = self._setup()
            if self.stage is not None:
                # The whole copy in C threads, without the GIL: it orders itself after the work
                # queued on the caller's stream and makes that stream wait for its DMAs.
                rc = self.stage.run(h2d, 0 if s is None else (s.value or 0), dptr, hptr, nbytes)
                if rc:
                    _driver.check(rc, "staged host-to-device copy" if h2d else "staged device-to-host copy", self.index)
                return
            lib = _lib()
            # Order after work already queued on the caller's stream.
            _driver.check(lib.cuEventRecord(self.pre, s), "cuEventRecord", self.index)
            assert self.pool is not None
            chunk = chunk_for(nbytes, len(workers), self.chunk)
            n = min(len(workers), -(-nbytes // chunk))
            chunks = [(off, min(chunk, nbytes - off)) for off in range(0, nbytes, chunk)]
            fn = self._h2d if h2d else self._d2h
            futs = [self.pool.submit(fn, workers[w], dptr, hptr, chunks[w::n]) for w in range(n)]
            errors = [f.exception() for f in futs]
            for e in errors:
                if e is not None:
                    raise e
            # Later work on the caller's stream waits for every worker's last DMA.
            for w in workers[:n]:
                _driver.check(lib.cuStreamWaitEvent(s, w.events[-1], 0), "cuStreamWaitEvent", self.index)

    def h2d(self, dptr: int, hptr: int, nbytes: int, s: Any) -> None:
        self._run(True, dptr, hptr, nbytes, s)

    def d2h(self, hptr: int, dptr: int, nbytes: int, s: Any) -> None:
        self._run(False, dptr, hptr, nbytes, s)

    def _h2d(self, w: _Worker, dptr: int, hptr: int, chunks: list[tuple[int, int]]) -> None:
        _driver.ensure_current(self.index)
        lib = _lib()
        lib.cuStreamWaitEvent(w.stream, self.pre, 0)
        for j, (off, n) in enumerate(chunks):
            b = j % self.buffers
            if w.pending[b]:
                lib.cuEventSynchronize(w.events[b])  # the DMA that last read this buffer is done
            buf = w.bufs[b].ptr
            _memmove(buf, hptr + off, n)
            rc = lib.cuMemcpyHtoDAsync_v2(_u64(dptr + off), _vp(buf), _sz(n), w.stream)
            _driver.check(rc, "staged host-to-device copy", self.index)
            lib.cuEventRecord(w.events[b], w.stream)
            w.pending[b] = True
        lib.cuEventRecord(w.events[-1], w.stream)

    def _d2h(self, w: _Worker, dptr: int, hptr: int, chunks: list[tuple[int, int]]) -> None:
        _driver.ensure_current(self.index)
        lib = _lib()
        lib.cuStreamWaitEvent(w.stream, self.pre, 0)
        prev: tuple[int, int, int] | None = None
        for j, (off, n) in enumerate(chunks):
            b = j & 1
            rc = lib.cuMemcpyDtoHAsync_v2(_vp(w.bufs[b].ptr), _u64(dptr + off), _sz(n), w.stream)
            _driver.check(rc, "staged device-to-host copy", self.index)
            lib.cuEventRecord(w.events[b], w.stream)
            if prev is not None:
                self._drain(w, *prev, hptr)
            prev = (b, off, n)
        if prev is not None:
            self._drain(w, *prev, hptr)
        w.pending = [False] * self.buffers
        lib.cuEventRecord(w.events[-1], w.stream)

    def _drain(self, w: _Worker, b: int, off: int, n: int, hptr: int) -> None:
        rc = _lib().cuEventSynchronize(w.events[b])
        if rc:
            sync_failed(self.index, rc)
        _memmove(hptr + off, w.bufs[b].ptr, n)


_stagers = OnceMap()  # device index -> _Stager


def _stager(index: int) -> _Stager:
    return _stagers.get_or_make(index, _Stager, index)
