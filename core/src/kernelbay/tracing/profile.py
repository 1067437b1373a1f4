"""``kernelbay profile [--trace OUT] [--json] [--png OUT] -- python script.py [args]``.

Runs the command with ``KERNELBAY_TRACE`` set (every Python process of it that imports
kernelbay writes its own trace, ``trace-<pid>.json``, into a temporary directory), then merges
the traces and prints a summary: kernels by device time, copies by direction, compile time
and cache hit rate, allocator peaks. ``--trace`` keeps the merged timeline; ``--png`` draws
the busiest stretch of it (matplotlib, an optional dependency).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from ..errors import InvalidArgumentError, UnsupportedError
from .chrome import check_path, write_doc


def add_parser(sub: Any) -> None:
    """Add the ``profile`` command to the CLI's subparsers ``sub``."""
    p = sub.add_parser("profile", help="run a command under the tracer and summarise where the time went")
    p.add_argument(
        "--trace", default=None, metavar="OUT.json", help="also keep the merged timeline (Perfetto / chrome://tracing)"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--png", default=None, metavar="OUT.png", help="draw the busiest stretch of the timeline (needs matplotlib)"
    )
    p.add_argument("--top", type=int, default=15, help="kernels to list (default 15)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to run, after --")
    p.set_defaults(handler=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    """Run ``kernelbay profile``: the command's exit status (1 where it wrote no trace)."""
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise InvalidArgumentError(
            "kernelbay profile needs a command after --, e.g. kernelbay profile -- python app.py"
        )
    if args.png:
        _need_matplotlib()
    if args.trace:
        check_path(args.trace)
    with tempfile.TemporaryDirectory(prefix="kbprofile-") as tmp:
        env = dict(os.environ, KERNELBAY_TRACE=os.path.join(tmp, "trace-{pid}.json"))
        rc = subprocess.call(cmd, env=env)
        docs = []
        for path in sorted(glob.glob(os.path.join(tmp, "trace-*.json"))):
            with open(path, encoding="utf-8") as f:
                docs.append(json.load(f))
    if not docs:
        print(
            f"kernelbay profile: the command wrote no trace (exit status {rc}); it must be a Python program "
            "that imports kernelbay",
            file=sys.stderr,
        )
        return rc or 1
    doc = merge(docs)
    if args.trace:
        write_doc(os.path.abspath(args.trace), doc)
    summary = summarise(doc["kernelbay"])
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(render(summary, args.top))
    if args.png:
        draw(doc["traceEvents"], args.png)
        print(f"timeline picture: {args.png}")
    if args.trace:
        print(f"trace: {args.trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return rc


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One trace of several processes' (their events keep their pids; the summaries add up)."""
    events: list[Any] = []
    for d in docs:
        events += d["traceEvents"]
    total: dict[str, Any] = {"processes": [d["kernelbay"]["pid"] for d in docs]}
    for d in docs:
        _add(total, d["kernelbay"])
    return {"traceEvents": events, "displayTimeUnit": "ms", "kernelbay": total}


def _add(into: dict[str, Any], part: dict[str, Any]) -> None:
    for k, v in part.items():
        if k in ("pid", "schema"):
            continue
        if isinstance(v, dict):
            _add(into.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            old = into.get(k)
            if old is None:
                into[k] = v
            elif k.endswith("min_ns"):
                into[k] = min(old, v)
            elif k.endswith(("max_ns", "peak", "peak_live", "limit")):
                into[k] = max(old, v)
            else:
                into[k] = old + v
        elif k not in into:
            into[k] = v


def summarise(s: dict[str, Any]) -> dict[str, Any]:
    """The figures ``kernelbay profile`` prints, from a trace's ``kernelbay`` summary."""
    kernels = []
    for name, k in s.get("kernels", {}).items():
        timed = k.get("device_count", 0) > 0
        n = k["device_count"] if timed else k["count"]
        total = k["device_ns"] if timed else k["host_ns"]
        kernels.append(
            {
                "kernel": name,
                "count": k["count"],
                "time": "device" if timed else "host",
                "total_ms": total / 1e6,
                "mean_us": total / n / 1e3 if n else 0.0,
                "min_us": k["device_min_ns"] / 1e3 if timed else None,
                "max_us": k["device_max_ns"] / 1e3 if timed else None,
                "note": k.get("note"),
            }
        )
    kernels.sort(key=lambda r: -r["total_ms"])
    copies = []
    for d, c in sorted(s.get("copies", {}).items()):
        timed = c.get("device_count", 0) > 0
        ns, nbytes = (c["device_ns"], c["device_bytes"]) if timed else (c["host_ns"], c["bytes"])
        copies.append(
            {
                "direction": d,
                "count": c["count"],
                "bytes": c["bytes"],
                "time_ms": ns / 1e6,
                "GBps": nbytes / ns if ns else None,
                "time": "device" if timed else "host",
            }
        )
    comp = s.get("compiles", {})
    count = lambda k: comp.get(k, {}).get("count", 0)
    hits, misses = count("memory") + count("disk"), count("miss")
    compiles = {
        "count": sum(v["count"] for v in comp.values()),
        "time_ms": sum(v["ns"] for v in comp.values()) / 1e6,
        "by_cache": {k: v["count"] for k, v in sorted(comp.items())},
        "hit_rate": hits / (hits + misses) if hits + misses else None,
    }
    alloc = s.get("allocator", {})
    return {
        "calls": s.get("calls", 0),
        "dropped_records": s.get("dropped_records", 0),
        "kernels": kernels,
        "copies": copies,
        "compiles": compiles,
        "synchronize": s.get("synchronize", {}),
        "allocator": {"traced": alloc.get("traced", {}), "backend": alloc.get("backend", {})},
        "failures": s.get("failures", {}),
    }


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render(s: dict[str, Any], top: int = 15) -> str:
    """The text ``kernelbay profile`` prints for summary ``s`` (:func:`summarise`), the
    ``top`` kernels by time."""
    out = [f"kernelbay profile: {s['calls']} calls traced"]
    if s["dropped_records"]:
        out[0] += f" ({s['dropped_records']} oldest left out of the timeline; the figures count them all)"
    out.append("")
    out.append(f"{'kernel':<32} {'count':>8} {'total ms':>10} {'mean us':>10} {'min us':>9} {'max us':>9}  time")
    for k in s["kernels"][:top]:
        mn = "-" if k["min_us"] is None else f"{k['min_us']:.1f}"
        mx = "-" if k["max_us"] is None else f"{k['max_us']:.1f}"
        out.append(
            f"{k['kernel'][:32]:<32} {k['count']:>8} {k['total_ms']:>10.3f} {k['mean_us']:>10.2f} {mn:>9} {mx:>9}  {k['time']}"
        )
    if not s["kernels"]:
        out.append("(no launches)")
    notes = [(k["kernel"], k["note"]) for k in s["kernels"][:top] if k.get("note")]
    if notes:  # how each backend ran the kernel (the cpu: which runner, and why)
        out.append("")
        out.append("how each kernel ran:")
        out.extend(f"  {name}: {note}" for name, note in notes)
    out.append("")
    out.append(f"{'copy':<8} {'count':>8} {'bytes':>12} {'time ms':>10} {'GB/s':>8}  time")
    for c in s["copies"]:
        gb = "-" if c["GBps"] is None else f"{c['GBps']:.2f}"
        out.append(
            f"{c['direction']:<8} {c['count']:>8} {_bytes(c['bytes']):>12} {c['time_ms']:>10.3f} {gb:>8}  {c['time']}"
        )
    if not s["copies"]:
        out.append("(no copies)")
    c = s["compiles"]
    rate = "-" if c["hit_rate"] is None else f"{c['hit_rate']:.0%}"
    kinds = ", ".join(f"{k} {v}" for k, v in c["by_cache"].items()) or "none"
    out += ["", f"compile: {c['count']} in {c['time_ms']:.1f} ms; cache hit rate {rate} ({kinds})"]
    sync = s["synchronize"]
    if sync.get("count"):
        out.append(f"synchronize: {sync['count']} calls, {sync['ns'] / 1e6:.3f} ms waiting")
    for dev, a in sorted(s["allocator"]["traced"].items()):
        line = f"allocator {dev}: {a['allocations']} allocations ({_bytes(a['bytes'])}), peak live {_bytes(a['peak_live'])}"
        b = s["allocator"]["backend"].get(dev)
        if b:
            line += f"; backend peak {_bytes(b['peak'])}, cached {_bytes(b['cached'])}"
        out.append(line)
        counters = (b or {}).get("counters") or {}
        if counters.get("cross_stream_frees"):
            out.append(
                f"  {counters['cross_stream_frees']} frees waited on events of other streams "
                f"({counters.get('cross_stream_events', 0)} events, "
                f"{_bytes(counters.get('cross_stream_bytes', 0))} set aside); "
                f"{counters.get('misses_while_set_aside', 0)} allocations missed the cache meanwhile, "
                f"{counters.get('event_waits', 0)} waits. A block used on a stream other than the one "
                "it was allocated on is kept until that stream's work is done: allocate it inside "
                "`with stream:` where it is used"
            )
        elif counters:
            out.append("  " + ", ".join(f"{k} {v}" for k, v in sorted(counters.items())))
    if s["failures"]:
        out.append("failed calls: " + ", ".join(f"{k} {v}" for k, v in sorted(s["failures"].items())))
    return "\n".join(out)


def _need_matplotlib() -> None:
    try:  # optional (the [profile] extra) and heavy: looked for only when --png asks
        import matplotlib  # noqa: F401
    except ImportError:
        raise UnsupportedError(
            "--png needs matplotlib, which is not installed; install it (pip install matplotlib) or leave out --png"
        ) from None


def busiest(events: list[dict[str, Any]], bins: int = 50) -> tuple[float, float]:
    """The stretch (µs from, to) with the most spans in it: 3 neighbouring bins of ``bins`` equal
    parts of the run (a long compile counts once per bin it covers, a burst of launches once per
    launch)."""
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        return 0.0, 1.0
    lo = min(e["ts"] for e in spans)
    hi = max(e["ts"] + e["dur"] for e in spans)
    width = (hi - lo) / bins or 1.0
    busy = [0] * bins
    for e in spans:
        first = min(bins - 1, int((e["ts"] - lo) / width))
        last = min(bins - 1, int((e["ts"] + e["dur"] - lo) / width))
        for i in range(first, last + 1):
            busy[i] += 1
    best = max(range(bins), key=lambda i: busy[max(0, i - 1)] + busy[i] + busy[min(bins - 1, i + 1)])
    return lo + max(0, best - 1) * width, lo + min(bins, best + 2) * width


def draw(events: list[dict[str, Any]], png: str) -> None:
    """A timeline picture of the busiest stretch: one row per track, spans as bars."""
    _need_matplotlib()
    import matplotlib  # heavy: only when a picture is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0, t1 = busiest(events)
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    rows: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("ph") == "X" and e["ts"] < t1 and e["ts"] + e["dur"] > t0:
            rows.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"], e.get("cat", "")))
    keys = sorted(rows)
    colours = {
        "launch": "tab:blue",
        "device": "tab:orange",
        "copy": "tab:green",
        "compile": "tab:red",
        "synchronize": "tab:gray",
        "allocate": "tab:purple",
        "free": "tab:pink",
        "memset": "tab:olive",
    }
    fig, ax = plt.subplots(figsize=(12, 1 + 0.5 * max(1, len(keys))))
    for y, key in enumerate(keys):
        for cat in sorted({c for _, _, c in rows[key]}):
            bars = [((ts - t0) / 1e3, max(dur / 1e3, 1e-6)) for ts, dur, c in rows[key] if c == cat]
            ax.broken_barh(bars, (y - 0.4, 0.8), color=colours.get(cat, "tab:brown"), label=cat)
    ax.set_xlim(0, (t1 - t0) / 1e3)
    ax.invert_yaxis()  # host threads on top, device tracks below
    ax.set_yticks(range(len(keys)), [f"{names.get(k, k[1])} ({k[0]})" for k in keys])
    ax.set_xlabel(f"ms from {t0 / 1e3:.3f} ms into the trace")
    ax.set_title("kernelbay: the busiest stretch of the timeline")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
