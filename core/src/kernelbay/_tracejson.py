"""The Chrome trace-event JSON of a folded trace (:class:`kernelbay._tracefile.Log`): the
events https://ui.perfetto.dev and chrome://tracing draw. Runs once, when the file is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._tracefile import Log

#: Device tracks get thread ids from here up, so they sort after the host threads.
DEVICE_TID0 = 1_000_000


def stream_label(stream: Any) -> str:
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
        kind, t0, t1, ident = r[0], r[1], r[2], r[3]
        span = None if s0 is None else (s0, s1)
        t = tids.get(ident)
        if t is None:
            t = tids[ident] = len(tids) + 1
            name = log.thread_names.get(ident, f"thread {t}")
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": f"host: {name}"}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": t, "args": {"sort_index": t}})
        title, args, track = _describe(r, log.reg)
        if kind == "free" and log._freed and (ident, t0) in log._freed:
            args["bytes"] = log._freed[(ident, t0)]
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
        if span[1] > span[0] and kind == "copy":
            args["device_GBps"] = round(r[6] / (span[1] - span[0]), 3)
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
    kind, t0, t1, _tid, key, a, b, c, d, _s0, _s1, err = r
    track = None
    if kind == "launch":  # the kernel and stream themselves
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
    if kind == "copy":
        args = {"direction": a, "bytes": b, "device": str(dev), "stream": stream_label(reg.get(c))}
        if t1 > t0:
            args["host_GBps"] = round(b / (t1 - t0), 3)
        title, track = f"copy {a}", (str(dev), args["stream"])
    elif kind == "compile":
        src = reg[a]
        name = getattr(src, "name", None) or "<kernel>"
        args = {"kernel": name, "lang": src.lang, "device": str(dev), "cache": b}
        title = f"compile {name}"
    elif kind == "allocate":
        title, args = kind, {"device": str(dev), "bytes": a}
    elif kind == "free":
        title, args = kind, {"device": str(dev)}
    elif kind == "synchronize":
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
