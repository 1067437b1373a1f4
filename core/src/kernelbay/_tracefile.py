"""Folding trace records into a bounded timeline plus whole-run aggregates, and writing the
Chrome trace-event JSON (the format https://ui.perfetto.dev and chrome://tracing open).

Size: the timeline keeps the newest ``max_events`` records (a ring); a launch with a device
span is about 450 bytes of JSON (host span, device span, flow arrow), so the default 100,000
records stay near 50 MB however long the run. The ``kernelbay`` key of the file holds the
aggregates of *every* call (counts, times, bytes, cache kinds, allocator peaks), which is what
``kernelbay profile`` summarises, and says how many records the ring dropped.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import tempfile
import threading
from typing import Any

from .errors import InvalidArgumentError

SCHEMA = 1
log = logging.getLogger("kernelbay.trace")
#: Device tracks get thread ids from here up, so they sort after the host threads.
DEVICE_TID0 = 1_000_000


def check_path(path: str) -> str:
    """The absolute trace path (``{pid}`` filled in) after proving its directory takes a file."""
    if not path:
        raise InvalidArgumentError("the trace path is empty; give a file name such as trace.json")
    path = os.path.abspath(os.path.expanduser(path.replace("{pid}", str(os.getpid()))))
    if os.path.isdir(path):
        raise InvalidArgumentError(f"cannot write the trace to {path!r}: it is a directory; give a file name")
    d = os.path.dirname(path)
    try:
        fd, probe = tempfile.mkstemp(prefix=".kbtrace-", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot write the trace to {path!r}: {exc.strerror or exc} in {d!r}; choose a writable path"
        ) from None
    return path


def stream_label(stream: Any) -> str:
    if stream is None:
        return "default stream"
    h = getattr(stream, "handle", None)
    if isinstance(h, int):
        return f"stream 0x{h:x}"
    return f"stream {type(stream).__name__}@{id(stream):x}"


class Log:
    """The folded trace: a ring of finished records and the aggregates of every call."""

    def __init__(self, max_events: int, pid: int) -> None:
        self.ring: collections.deque[tuple] = collections.deque(maxlen=max_events)
        self.pid = pid
        self.start_ns = 0
        self.total = 0
        self.thread_names: dict[int, str] = {}
        self.kernels: dict[str, list[float]] = {}  # name -> [count, host ns, dev count, dev ns, dev min, dev max]
        self.copies: dict[str, list[float]] = {}  # direction -> [count, bytes, host ns, dev count, dev ns, dev bytes]
        self.compiles: dict[str, list[float]] = {}  # cache kind -> [count, ns]
        self.syncs = [0, 0]
        self.memsets = [0, 0]
        self.alloc: dict[str, dict[str, int]] = {}
        self.failures: dict[str, int] = {}
        self._live: dict[int, int] = {}  # id(handle) -> bytes, for the allocations still live
        self.memory_stats: dict[str, Any] = {}
        self.timing_failed = False
        self.objs: dict[int, Any] = {}  # id -> the kernel, device, stream or source a ring record names

    def fold(self, chunk: list[tuple]) -> None:
        """Resolve device spans, update the aggregates and keep each record in the ring as a
        tuple of ids and numbers (objects go to ``self.objs`` once): tuples of atoms are left
        alone by the garbage collector, which would otherwise walk the whole ring again and
        again and cost more per launch than the tracing itself."""
        for t in threading.enumerate():
            if t.ident is not None:
                self.thread_names.setdefault(t.ident, t.name)
        ring, kernels, objs = self.ring, self.kernels, self.objs
        for r in chunk:
            kind, t0, t1, tid, key, a, b, c, d, marks, err = r
            s0 = s1 = None
            if marks is not None and not self.timing_failed:
                try:
                    span = marks[0].span(marks[1], marks[2])
                except Exception:  # a timer that fails: host spans only from here
                    log.warning("kernelbay trace: device timing failed; host spans only from here", exc_info=True)
                    self.timing_failed = True
                    span = None
                if span is not None:
                    s0, s1 = span
            if kind == "launch":
                if err is None:
                    k = kernels.get(key)  # by Kernel object: merged by name in summary()
                    if k is None:
                        k = kernels[key] = [0, 0, 0, 0, float("inf"), 0]
                    k[0] += 1
                    k[1] += t1 - t0
                    if s0 is not None:
                        ds = s1 - s0
                        k[2] += 1
                        k[3] += ds
                        if ds < k[4]:
                            k[4] = ds
                        if ds > k[5]:
                            k[5] = ds
                else:
                    self.failures[kind] = self.failures.get(kind, 0) + 1
                if d is not None:
                    objs[id(d)] = d
                    d = id(d)
                if type(a) is list or type(b) is list:
                    a, b = _dims(a), _dims(b)
            else:
                self._other(r, s0, s1)
                if kind == "copy" and c is not None:
                    objs[id(c)] = c
                    c = id(c)
                elif kind == "synchronize" and a is not None:
                    objs[id(a)] = a
                    a = id(a)
                elif kind == "compile":
                    objs[id(a)] = a
                    a = id(a)
            objs[id(key)] = key
            ring.append((kind, t0, t1, tid, id(key), a, b, c, d, s0, s1, err))
        self.total += len(chunk)

    def _other(self, r: tuple, s0: int | None, s1: int | None) -> None:
        kind, t0, t1, _tid, dev, a, b, _c, _d, _m, err = r
        if err is not None:
            self.failures[kind] = self.failures.get(kind, 0) + 1
            if kind != "compile":
                return
        if kind == "copy":
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
        elif kind == "compile":
            how = "failed" if err is not None else b
            cs = self.compiles.get(how)
            if cs is None:
                cs = self.compiles[how] = [0, 0]
            cs[0] += 1
            cs[1] += t1 - t0
        elif kind == "allocate" or kind == "free":
            self._memory(kind, str(dev), a, b)
        elif kind == "synchronize":
            self.syncs[0] += 1
            self.syncs[1] += t1 - t0
        elif kind == "memset":
            self.memsets[0] += 1
            self.memsets[1] += a

    def _memory(self, kind: str, dev: str, a: Any, b: Any) -> None:
        st = self.alloc.get(dev)
        if st is None:
            st = self.alloc[dev] = {"allocations": 0, "frees": 0, "bytes": 0, "live": 0, "peak_live": 0}
        if kind == "allocate":
            st["allocations"] += 1
            st["bytes"] += a
            st["live"] += a
            st["peak_live"] = max(st["peak_live"], st["live"])
            self._live[b] = a
        else:
            st["frees"] += 1
            st["live"] -= self._live.pop(a, 0)

    def summary(self) -> dict[str, Any]:
        by_name: dict[str, list[float]] = {}
        for kern, k in self.kernels.items():
            m = by_name.setdefault(kern.name, [0, 0, 0, 0, float("inf"), 0])
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
            }
            for n, k in by_name.items()
        }
        copies = {
            d: {"count": c[0], "bytes": c[1], "host_ns": c[2], "device_count": c[3], "device_ns": c[4], "device_bytes": c[5]}
            for d, c in self.copies.items()
        }
        return {
            "schema": SCHEMA,
            "pid": self.pid,
            "calls": self.total,
            "timeline_records": len(self.ring),
            "dropped_records": self.total - len(self.ring),
            "kernels": kernels,
            "copies": copies,
            "compiles": {k: {"count": v[0], "ns": v[1]} for k, v in self.compiles.items()},
            "synchronize": {"count": self.syncs[0], "ns": self.syncs[1]},
            "memset": {"count": self.memsets[0], "bytes": self.memsets[1]},
            "allocator": {"traced": self.alloc, "backend": self.memory_stats},
            "failures": self.failures,
        }

    def events(self) -> list[dict[str, Any]]:
        pid, t00 = self.pid, self.start_ns
        out: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"kernelbay (pid {pid})"}}
        ]
        tids: dict[int, int] = {}
        tracks: dict[tuple[str, str], int] = {}
        flow = 0
        objs = self.objs
        for r in self.ring:
            kind, t0, t1, ident = r[0], r[1], r[2], r[3]
            span = None if r[9] is None else (r[9], r[10])
            t = tids.get(ident)
            if t is None:
                t = tids[ident] = len(tids) + 1
                name = self.thread_names.get(ident, f"thread {t}")
                out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": f"host: {name}"}})
                out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": t, "args": {"sort_index": t}})
            title, args, track = _describe(r, objs)
            ts = round((t0 - t00) / 1000, 3)
            out.append({"name": title, "cat": kind, "ph": "X", "ts": ts, "dur": round((t1 - t0) / 1000, 3), "pid": pid, "tid": t, "args": args})
            if span is None or track is None:
                continue
            if span[1] > span[0] and kind == "copy":
                args["device_GBps"] = round(r[6] / (span[1] - span[0]), 3)
            dt = tracks.get(track)
            if dt is None:
                dt = tracks[track] = DEVICE_TID0 + len(tracks)
                out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": dt, "args": {"name": f"{track[0]} {track[1]}"}})
                out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": dt, "args": {"sort_index": dt}})
            flow += 1
            args["flow"] = flow
            ds = round((span[0] - t00) / 1000, 3)
            out.append({"name": args.get("kernel", title), "cat": "device", "ph": "X", "ts": ds, "dur": round((span[1] - span[0]) / 1000, 3), "pid": pid, "tid": dt, "args": {"flow": flow}})
            out.append({"name": kind, "cat": "flow", "ph": "s", "id": flow, "ts": ts, "pid": pid, "tid": t})
            out.append({"name": kind, "cat": "flow", "ph": "f", "bp": "e", "id": flow, "ts": ds, "pid": pid, "tid": dt})
        return out


def _describe(r: tuple, objs: dict[int, Any]) -> tuple[str, dict[str, Any], tuple[str, str] | None]:
    """A ring record's span title, arguments and device track."""
    kind, t0, t1, _tid, key, a, b, c, d, _s0, _s1, err = r
    dev = objs[key]
    track = None
    if kind == "launch":
        name = dev.name
        args: dict[str, Any] = {"kernel": name, "device": str(dev.device), "grid": _dims(a), "block": _dims(b), "shared_mem": c, "stream": stream_label(objs.get(d))}
        title, track = f"launch {name}", (str(dev.device), stream_label(objs.get(d)))
    elif kind == "copy":
        args = {"direction": a, "bytes": b, "device": str(dev), "stream": stream_label(objs.get(c))}
        if t1 > t0:
            args["host_GBps"] = round(b / (t1 - t0), 3)
        title, track = f"copy {a}", (str(dev), stream_label(objs.get(c)))
    elif kind == "compile":
        src = objs[a]
        name = getattr(src, "name", None) or "<kernel>"
        args = {"kernel": name, "lang": src.lang, "device": str(dev), "cache": b}
        title = f"compile {name}"
    elif kind == "allocate":
        title, args = kind, {"device": str(dev), "bytes": a}
    elif kind == "free":
        title, args = kind, {"device": str(dev)}
    elif kind == "synchronize":
        title, args = kind, {"device": str(dev), "stream": stream_label(objs.get(a))}
    else:
        title, args = kind, {"device": str(dev), "bytes": a}
    if err is not None:
        args["error"] = err
    return title, args, track


def _dims(v: Any) -> Any:
    if v is None or isinstance(v, int):
        return v
    try:
        return [int(x) for x in v]
    except (TypeError, ValueError):
        return str(v)


def write(path: str, log: Log) -> None:
    """Write the trace atomically: a temporary file in the same directory, renamed into place,
    so a reader (or a second process writing the same path) never sees half a file."""
    doc = {"traceEvents": log.events(), "displayTimeUnit": "ms", "kernelbay": log.summary()}
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".kbtrace-", suffix=".json", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"), default=str)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the trace from the viewer's user
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
