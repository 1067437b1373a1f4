"""The trace file: Chrome trace-event JSON of a folded trace (:class:`.tracefile.Log`), the
events https://ui.perfetto.dev and chrome://tracing draw, written atomically. Runs once, when
the file is written (and :func:`check_path` when a trace is asked for).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from ..errors import InvalidArgumentError
from .records import COMPILE, COPY, FREE, LAUNCH, SYNC, Field
from .tracefile import Log

__all__ = ["DEVICE_TID0", "check_path", "events", "stream_label", "write", "write_doc"]

#: Device tracks get thread ids from here up, so they sort after the host threads.
DEVICE_TID0 = 1_000_000


def stream_label(stream: Any) -> str:
    """How the timeline names a stream: its handle where it has one."""
    if stream is None:
        return "default stream"
    h = getattr(stream, "handle", None)
    if isinstance(h, int):
        return f"stream 0x{h:x}"
    return f"stream {type(stream).__name__}@{id(stream):x}"


def events(log: Log) -> list[dict[str, Any]]:
    """The trace events of ``log``'s timeline: host spans on one track per thread, device spans on
    one track per device stream, a flow arrow from each host call to its device span."""
    pid, t00 = log.pid, log.start_ns
    out: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"kernelbay (pid {pid})"}}
    ]
    tids: dict[int, int] = {}
    tracks: dict[tuple[str, str], int] = {}
    flow = 0
    for r, s0, s1 in log.kept():
        kind, t0, t1, ident = r[Field.KIND], r[Field.T0], r[Field.T1], r[Field.THREAD]
        span = None if s0 is None else (s0, s1)
        t = tids.get(ident)
        if t is None:
            t = tids[ident] = len(tids) + 1
            name = log.thread_names.get(ident, f"thread {t}")
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": f"host: {name}"}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": t, "args": {"sort_index": t}})
        title, args, track = _describe(r, log.reg)
        if kind == FREE and log.freed and (ident, t0) in log.freed:
            args["bytes"] = log.freed[(ident, t0)]
        ts = round((t0 - t00) / 1000, 3)
        out.append(
            {
                "name": title,
                "cat": kind,
                "ph": "X",
                "ts": ts,
                "dur": round((t1 - t0) / 1000, 3),
                "pid": pid,
                "tid": t,
                "args": args,
            }
        )
        if span is None or track is None:
            continue
        if span[1] > span[0] and kind == COPY:
            args["device_GBps"] = round(r[Field.B] / (span[1] - span[0]), 3)
        dt = tracks.get(track)
        if dt is None:
            dt = tracks[track] = DEVICE_TID0 + len(tracks)
            out.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": pid,
                    "tid": dt,
                    "args": {"name": f"{track[0]} {track[1]}"},
                }
            )
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": dt, "args": {"sort_index": dt}})
        flow += 1
        args["flow"] = flow
        ds = round((span[0] - t00) / 1000, 3)
        out.append(
            {
                "name": args.get("kernel", title),
                "cat": "device",
                "ph": "X",
                "ts": ds,
                "dur": round((span[1] - span[0]) / 1000, 3),
                "pid": pid,
                "tid": dt,
                "args": {"flow": flow},
            }
        )
        out.append({"name": kind, "cat": "flow", "ph": "s", "id": flow, "ts": ts, "pid": pid, "tid": t})
        out.append({"name": kind, "cat": "flow", "ph": "f", "bp": "e", "id": flow, "ts": ds, "pid": pid, "tid": dt})
    return out


def _describe(r: tuple, reg: dict[int, Any]) -> tuple[str, dict[str, Any], tuple[str, str] | None]:
    """A ring record's span title, arguments and device track (``reg`` maps the ids in it)."""
    kind, t0, t1, key, err = r[Field.KIND], r[Field.T0], r[Field.T1], r[Field.KEY], r[Field.ERROR]
    a, b, c, d = r[Field.A], r[Field.B], r[Field.C], r[Field.D]  # what each holds: records.Field
    track = None
    if kind == LAUNCH:  # the kernel and stream themselves
        dev = key
        name = dev.name
        args: dict[str, Any] = {
            "kernel": name,
            "device": str(dev.device),
            "grid": _dims(a),
            "block": _dims(b),
            "shared_mem": c,
            "stream": stream_label(d),
        }
        title, track = f"launch {name}", (str(dev.device), args["stream"])
        if err is not None:
            args["error"] = err
        return title, args, track
    dev = reg[key]
    if kind == COPY:
        args = {"direction": a, "bytes": b, "device": str(dev), "stream": stream_label(reg.get(c))}
        if t1 > t0:
            args["host_GBps"] = round(b / (t1 - t0), 3)
        title, track = f"copy {a}", (str(dev), args["stream"])
    elif kind == COMPILE:
        src = reg[a]
        name = getattr(src, "name", None) or "<kernel>"
        args = {"kernel": name, "lang": src.lang, "device": str(dev), "cache": b}
        title = f"compile {name}"
    elif kind == "allocate":
        title, args = kind, {"device": str(dev), "bytes": a}
    elif kind == "free":
        title, args = kind, {"device": str(dev)}
    elif kind == SYNC:
        title, args = kind, {"device": str(dev), "stream": stream_label(reg.get(a))}
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


def check_path(path: str) -> str:
    """The absolute trace path (``{pid}`` filled in) after proving its directory takes a file.

    :raises InvalidArgumentError: the path is empty, a directory, or cannot be written.
    """
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


def write(path: str, log: Log) -> None:
    """Write the trace of ``log`` (finished: :meth:`.tracefile.Log.finish`) to ``path``
    (see :func:`write_doc`)."""
    write_doc(path, {"traceEvents": events(log), "displayTimeUnit": "ms", "kernelbay": log.summary()})


def write_doc(path: str, doc: dict[str, Any]) -> None:
    """Write a trace atomically: a temporary file in the same directory, renamed into place,
    so a reader (or a second process writing the same path) never sees half a file."""
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
