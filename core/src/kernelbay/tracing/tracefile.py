"""Folding trace records into a bounded timeline plus whole-run aggregates (:class:`Log`);
:mod:`.chrome` turns a folded log into the file.

Size: the timeline keeps the newest ``max_events`` records (a ring of chunks); a launch with a device
span is about 450 bytes of JSON (host span, device span, flow arrow), so the default 100,000
records stay near 50 MB however long the run. The ``kernelbay`` key of the file holds the
aggregates of *every* call (counts, times, bytes, cache kinds, allocator peaks), which is what
``kernelbay profile`` summarises, and says how many records the ring dropped.
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
import threading
from typing import Any

from .records import ALLOC, COMPILE, COPY, FREE, LAUNCH, MEMSET, SIZE, SYNC, Field

__all__ = ["SCHEMA", "Log"]

#: The version of the file's ``kernelbay`` summary.
SCHEMA = 1
log = logging.getLogger("kernelbay.trace")
F = SIZE  # the stride of one field in a flat chunk


class Log:
    """The folded trace: a ring of record chunks and the aggregates of every call.

    A chunk is a flat list of records (:mod:`.records`: ``SIZE`` items each, in
    :class:`~.records.Field` order), ``reg`` the objects their ids name, ``M0``/``M1`` the
    device timer's marks. The ring holds ``(chunk, spans)``: ``spans`` the
    device spans resolved at fold time as two lists (begins, ends) beside the records, or
    ``None`` where the marks already are the spans (synchronous and host-clock timers), so no
    record is rebuilt. Records are aggregated only when their chunk leaves the ring or the
    trace is written, so a run that fits in the ring pays for aggregation once, at the end.
    """

    def __init__(self, max_events: int, pid: int, chunk: int, reg: dict[int, Any]) -> None:
        self.reg = reg
        # Whole chunks, one more than max_events needs; events() writes the newest max_events.
        #: (flat records, their device spans or None) per chunk
        self.ring: collections.deque[tuple[list[Any], tuple[list[Any], list[Any]] | None]] = collections.deque(
            maxlen=max_events // chunk + 1
        )
        self.max_events = max_events
        self.pid = pid
        self.start_ns = 0
        self.total = 0
        self.dropped = 0
        self.thread_names: dict[int, str] = {}
        self.kernels: dict[Any, list[float]] = {}  # Kernel -> [count, host ns, dev count, dev ns, dev min, dev max]
        self.copies: dict[str, list[float]] = {}  # direction -> [count, bytes, host ns, dev count, dev ns, dev bytes]
        self.compiles: dict[str, list[float]] = {}  # cache kind -> [count, ns]
        self.syncs = [0, 0]
        self.memsets = [0, 0]
        self.alloc: dict[str, dict[str, int]] = {}
        self.failures: dict[str, int] = {}
        self._live: dict[int, int] = {}  # id(handle) -> bytes, for the allocations still live
        self.memory_stats: dict[str, Any] = {}
        self.timing_failed = False
        #: (thread, t0) of a free -> the bytes it gave back, for its span (filled by finish())
        self.freed: dict[tuple[int, int], int] | None = None
        self._key_timer: dict[int, Any] = {}  # record key -> the timer resolving its marks, or None

    def fold(self, chunk: list[Any], timers: dict[str, Any]) -> None:
        """Resolve the device spans of ``chunk`` (flat records; freeing the timer's marks) and
        ring it."""
        for t in threading.enumerate():
            if t.ident is not None:
                self.thread_names.setdefault(t.ident, t.name)
        if not chunk:
            return
        spans = self._resolve(chunk, timers)
        ring = self.ring
        if len(ring) == ring.maxlen:
            old = ring.popleft()
            self.aggregate(old)
            self.dropped += len(old[0]) // F
        ring.append((chunk, spans))
        self.total += len(chunk) // F

    def _timer_of(self, key: int, timers: dict[str, Any]) -> Any:
        """The timer whose marks the records of ``key`` (a kernel or device id) hold, where they
        need resolving (not a host-clock or synchronous one); cached per key."""
        try:
            return self._key_timer[key]
        except KeyError:
            pass
        obj = self.reg[key] if type(key) is int else key  # launches hold their kernel itself
        dev = getattr(obj, "device", obj)  # a kernel's device; a device is its own
        name = getattr(dev, "backend", None)
        timer = timers.get(name) if name is not None else None
        if timer is not None and (getattr(timer, "host_clock", False) or getattr(timer, "synchronous", False)):
            timer = None
        self._key_timer[key] = timer
        return timer

    def _resolve(self, chunk: list[Any], timers: dict[str, Any]) -> tuple[list, list] | None:
        """The device spans of ``chunk`` as two lists (begin, end; ``None`` where unknown), one
        batch call per timer; ``None`` where the records' own ``m0``/``m1`` already are spans."""
        if not any(
            t is not None and not (getattr(t, "host_clock", False) or getattr(t, "synchronous", False))
            for t in timers.values()
        ):
            return None
        keys = chunk[Field.KEY :: F]
        by_key = {k: self._timer_of(k, timers) for k in set(keys)}
        used = {id(t): t for t in by_key.values() if t is not None}
        if not used:
            return None
        s0s, s1s = chunk[Field.M0 :: F], chunk[Field.M1 :: F]
        for t in used.values():
            if len(used) == 1 and None not in by_key.values():
                idx = None  # the whole chunk (the common case: one device backend)
                m0, m1, t0 = s0s, s1s, chunk[Field.T0 :: F]
            else:
                idx = [i for i, k in enumerate(keys) if by_key[k] is t]
                m0, m1, t0 = [s0s[i] for i in idx], [s1s[i] for i in idx], [chunk[i * F + Field.T0] for i in idx]
            got: tuple[list, list] | None = None
            if not self.timing_failed:
                try:
                    got = _resolve_with(t, m0, m1, t0)
                except Exception:  # a timer that fails: host spans only from here
                    log.warning("kernelbay trace: device timing failed; host spans only from here", exc_info=True)
                    self.timing_failed = True
            if got is None:
                got = [None] * len(m0), [None] * len(m0)
            if idx is None:
                s0s, s1s = got
            else:
                for j, i in enumerate(idx):
                    s0s[i] = got[0][j]
                    s1s[i] = got[1][j]
        return s0s, s1s

    def finish(self) -> None:
        """Aggregate what is still in the ring (before :meth:`summary`), noting the bytes each
        free gave back for its span."""
        self.freed = {}
        for entry in self.ring:
            self.aggregate(entry)

    def aggregate(self, entry: tuple[list[Any], tuple[list, list] | None]) -> None:
        # Each field is one strided slice of the flat chunk; the bulk, launches without errors,
        # is summed per kernel with sum() and compress() (C loops); the rest one by one.
        chunk, spans = entry
        s0s, s1s = spans if spans is not None else (chunk[Field.M0 :: F], chunk[Field.M1 :: F])
        kinds = chunk[Field.KIND :: F]
        t0s, t1s, keys, errs = (chunk[f::F] for f in (Field.T0, Field.T1, Field.KEY, Field.ERROR))
        rest: Any = ()
        if kinds.count(LAUNCH) != len(kinds):
            mask = list(map(operator.eq, kinds, itertools.repeat(LAUNCH)))
            other = list(map(operator.not_, mask))
            named = (Field.KIND, Field.T0, Field.T1, Field.THREAD, Field.KEY, Field.A, Field.B, Field.ERROR)
            rest = zip(
                *(itertools.compress(chunk[f::F], other) for f in named),
                itertools.compress(s0s, other),
                itertools.compress(s1s, other),
            )
            t0s, t1s, keys, errs, s0s, s1s = (
                list(itertools.compress(v, mask)) for v in (t0s, t1s, keys, errs, s0s, s1s)
            )
        if errs.count(None) != len(errs):
            self.failures[LAUNCH] = self.failures.get(LAUNCH, 0) + len(errs) - errs.count(None)
            ok = list(map(operator.is_, errs, itertools.repeat(None)))
            t0s, t1s, keys, s0s, s1s = (list(itertools.compress(v, ok)) for v in (t0s, t1s, keys, s0s, s1s))
        if keys:
            kset = set(keys)
            if len(kset) == 1:
                self._launches(kset.pop(), t0s, t1s, s0s, s1s)
            elif len(kset) <= 8:
                for key in kset:
                    sel = list(map(operator.eq, keys, itertools.repeat(key)))
                    self._launches(key, *(list(itertools.compress(v, sel)) for v in (t0s, t1s, s0s, s1s)))
            else:
                for key, a, b, c, d in zip(keys, t0s, t1s, s0s, s1s):
                    self._launches(key, [a], [b], [c], [d])
        for kind, t0, t1, tid, key, a, b, err, s0, s1 in rest:  # the fields named above, in order
            if err is not None:
                self.failures[kind] = self.failures.get(kind, 0) + 1
                if kind != COMPILE:
                    continue
            elif kind == COPY:
                cp = self.copies.get(a)
                if cp is None:
                    cp = self.copies[a] = [0, 0, 0, 0, 0, 0]
                cp[0] += 1
                cp[1] += b
                cp[2] += t1 - t0
                if s0 is not None and s1 > s0:
                    cp[3] += 1
                    cp[4] += s1 - s0
                    cp[5] += b
            elif kind == COMPILE:
                how = "failed" if err is not None else b
                cs = self.compiles.setdefault(how, [0, 0])
                cs[0] += 1
                cs[1] += t1 - t0
            elif kind in (ALLOC, FREE):
                freed = self._memory(kind, str(self.reg[key]), a, b)
                if freed is not None and self.freed is not None:
                    self.freed[(tid, t0)] = freed
            elif kind == SYNC:
                self.syncs[0] += 1
                self.syncs[1] += t1 - t0
            elif kind == MEMSET:
                self.memsets[0] += 1
                self.memsets[1] += a

    def _launches(self, kernel: Any, t0s: list, t1s: list, s0s: list, s1s: list) -> None:
        k = self.kernels.get(kernel)
        if k is None:
            k = self.kernels[kernel] = [0, 0, 0, 0, float("inf"), 0]
        k[0] += len(t0s)
        k[1] += sum(t1s) - sum(t0s)
        untimed = s0s.count(None)
        if untimed == len(s0s):
            return
        if untimed:
            timed = list(map(operator.is_not, s0s, itertools.repeat(None)))
            s0s, s1s = list(itertools.compress(s0s, timed)), list(itertools.compress(s1s, timed))
        ds = list(map(operator.sub, s1s, s0s))
        k[2] += len(ds)
        k[3] += sum(ds)
        k[4] = min(k[4], min(ds))
        k[5] = max(k[5], max(ds))

    def _memory(self, kind: str, dev: str, a: Any, b: Any) -> int | None:
        st = self.alloc.get(dev)
        if st is None:
            st = self.alloc[dev] = {"allocations": 0, "frees": 0, "bytes": 0, "live": 0, "peak_live": 0}
        if kind == ALLOC:
            st["allocations"] += 1
            st["bytes"] += a
            st["live"] += a
            st["peak_live"] = max(st["peak_live"], st["live"])
            self._live[b] = a
        else:
            st["frees"] += 1
            freed = self._live.pop(a, None)
            if freed is not None:
                st["live"] -= freed
            return freed
        return None

    def summary(self) -> dict[str, Any]:
        by_name: dict[str, list[float]] = {}
        notes: dict[str, str] = {}
        for kernel, k in self.kernels.items():
            note = getattr(getattr(kernel, "handle", None), "profile_note", None)  # hookspecs: kernelbay_compile
            if isinstance(note, str) and note:
                notes.setdefault(kernel.name, note)
            m = by_name.setdefault(kernel.name, [0, 0, 0, 0, float("inf"), 0])
            m[0] += k[0]
            m[1] += k[1]
            m[2] += k[2]
            m[3] += k[3]
            m[4] = min(m[4], k[4])
            m[5] = max(m[5], k[5])
        kernels = {
            n: {
                "count": k[0],
                "host_ns": k[1],
                "device_count": k[2],
                "device_ns": k[3],
                "device_min_ns": k[4] if k[2] else None,
                "device_max_ns": k[5] if k[2] else None,
                **({"note": notes[n]} if n in notes else {}),
            }
            for n, k in by_name.items()
        }
        copies = {
            d: {
                "count": c[0],
                "bytes": c[1],
                "host_ns": c[2],
                "device_count": c[3],
                "device_ns": c[4],
                "device_bytes": c[5],
            }
            for d, c in self.copies.items()
        }
        return {
            "schema": SCHEMA,
            "pid": self.pid,
            "calls": self.total,
            "timeline_records": min(self.total, self.max_events),
            "dropped_records": self.total - min(self.total, self.max_events),
            "kernels": kernels,
            "copies": copies,
            "compiles": {k: {"count": v[0], "ns": v[1]} for k, v in self.compiles.items()},
            "synchronize": {"count": self.syncs[0], "ns": self.syncs[1]},
            "memset": {"count": self.memsets[0], "bytes": self.memsets[1]},
            "allocator": {"traced": self.alloc, "backend": self.memory_stats},
            "failures": self.failures,
        }

    def kept(self) -> list[tuple[tuple, Any, Any]]:
        """The newest ``max_events`` records with their device spans, ``(record, begin, end)``,
        oldest first: what the timeline shows."""
        flat: list[tuple[tuple, Any, Any]] = []
        for chunk, spans in self.ring:
            records = zip(*(chunk[i::F] for i in range(F)))
            flat.extend(zip(records, *(spans if spans is not None else (chunk[Field.M0 :: F], chunk[Field.M1 :: F]))))
        return flat[-self.max_events :] if len(flat) > self.max_events else flat


def _resolve_with(timer: Any, m0: list, m1: list, t0: list) -> tuple[list, list]:
    """Device spans for marks ``m0``/``m1`` of calls made at host times ``t0``: the timer's
    batch ``resolve`` where it has one, else ``span`` per pair. A span is clamped to begin no
    earlier than its host call (a mapped device clock can be off by a few microseconds; the
    work cannot have begun before the call that queued it)."""
    batch = getattr(timer, "resolve", None)
    if batch is not None:
        return batch(m0, m1, t0)
    s0s: list[Any] = []
    s1s: list[Any] = []
    span = timer.span
    for a, b, h in zip(m0, m1, t0):
        sp = span(a, b) if a is not None or b is not None else None
        if sp is None:
            s0s.append(None)
            s1s.append(None)
        else:
            begin = max(sp[0], h)
            s0s.append(begin)
            s1s.append(max(sp[1], begin))
    return s0s, s1s
