"""Turn benchmark results into the machine description, markdown tables and a bar chart.

A result (what ``python -m benchmarks.run`` writes as JSON) is::

    {"suite": "cpu", "date": "2025-...", "quick": false,
     "machine": {...}, "records": [record, ...], "goals": [goal, ...], "notes": [str, ...]}

with records and goals as built by :mod:`benchmarks._timing`.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from typing import Any

from ._timing import is_figure, relative_cost

#: Distributions whose versions go into every result, when installed (metadata only: nothing
#: is imported to read them).
DISTRIBUTIONS = (
    "kernelbay",
    "kernelbay-cpu",
    "kernelbay-cuda",
    "kernelbay-tpu",
    "kernelbay-pyref",
    "pluggy",
    "numpy",
    "jax",
    "jaxlib",
    "cupy",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "torch",
    "cuda-bindings",
    "cuda-core",
    "cuda-python",
    "matplotlib",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler() -> str | None:
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout else None


def _gpu() -> dict[str, str] | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    first = [p.strip() for p in out.stdout.strip().splitlines()[0].split(",")]
    keys = ("name", "driver", "memory")
    return dict(zip(keys, first)) | {"count": str(len(out.stdout.strip().splitlines()))}


def _load() -> list[float] | None:
    """1, 5 and 15-minute load averages: a busy machine shows here, not as silent noise."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine(suite: str) -> dict[str, Any]:
    """Where the figures come from: CPU, cores, OS, Python, package versions (and the GPU)."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str] = {}
    for dist in DISTRIBUTIONS:
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            pass
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "compiler": _compiler(),
        "versions": versions,
        "load_average": _load(),
    }
    if suite == "gpu":
        info["gpu"] = _gpu()
    return info


# --- formatting ---------------------------------------------------------------------------


def fmt(x: float | None) -> str:
    """Three significant figures, no exponent for everyday magnitudes."""
    if x is None:
        return "—"
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:#.3g}"


def one_line(text: str) -> str:
    """The first line of ``text``, safe inside a markdown table cell."""
    return str(text).strip().splitlines()[0].replace("|", "\\|") if str(text).strip() else ""


def groups(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["group"], []).append(r)
    return out


def _reference(recs: list[dict]) -> dict | None:
    for r in recs:
        if r["name"] == "kernelbay" and is_figure(r):
            return r
    return None


def _is_variant(r: dict, ref: dict | None) -> bool:
    """The reference itself, or another kernelbay figure (``kernelbay + kb.device()``): not a peer."""
    return r is ref or r["name"].startswith("kernelbay")


def ratios(records: list[dict]) -> list[tuple[str, str, float]]:
    """(group, peer, kernelbay cost ÷ peer cost) for every group with a kernelbay figure."""
    out = []
    for group, recs in groups(records).items():
        ref = _reference(recs)
        if ref is None:
            continue
        for r in recs:
            if _is_variant(r, ref):
                continue
            rel = relative_cost(ref, r)
            if rel is not None:
                out.append((group, r["name"], rel))
    return out


def markdown_tables(records: list[dict], heading: str = "###") -> str:
    """One table per group: name, median, p10–p90, kernelbay's cost relative to the row."""
    parts: list[str] = []
    for group, recs in groups(records).items():
        ref = _reference(recs)
        lines = [f"{heading} {group}", ""]
        notes = any(r.get("note") for r in recs)
        head = "| | median | p10 – p90 | kernelbay ÷ this |" + (" note |" if notes else "")
        lines += [head, "|---|---:|---:|---:|" + ("---|" if notes else "")]
        for r in recs:
            note = f" {r.get('note', '')} |" if notes else ""
            if not is_figure(r):
                lines.append(f"| {r['name']} | skipped: {one_line(r.get('skipped') or 'no figure')} | | |{note}")
                continue
            unit = "µs" if r["unit"] == "us" else r["unit"]
            peers = ref is not None and any(is_figure(p) and not _is_variant(p, ref) for p in recs)
            rel = relative_cost(ref, r) if peers and (r is ref or not _is_variant(r, ref)) else None
            lines.append(
                f"| {r['name']} | {fmt(r['median'])} {unit} | {fmt(r['p10'])} – {fmt(r['p90'])} {unit} "
                f"| {fmt(rel) + '×' if rel is not None else '—'} |{note}"
            )
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def markdown_goals(goals: list[dict]) -> str:
    if not goals:
        return "_No goals for this suite here (modules skipped or none defined)._"
    lines = ["| goal | measured | limit | |", "|---|---:|---:|---|"]
    for g in goals:
        unit = g.get("unit", "")
        sep = " " if unit and unit != "×" else ""
        verdict = "**met**" if g["met"] else "**not met**"
        lines.append(f"| {g['goal']} | {fmt(g['value'])}{sep}{unit} | {fmt(g['limit'])}{sep}{unit} | {verdict} |")
    return "\n".join(lines)


def markdown_machine(result: dict) -> str:
    m = result.get("machine", {})
    vers = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    lines = [
        f"- date: {result.get('date', '?')}"
        + (" (quick run: tiny sizes, not figures to quote)" if result.get("quick") else ""),
        f"- machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('os', '?')}",
        f"- python: {m.get('python', '?')}" + (f"; compiler: {m['compiler']}" if m.get("compiler") else ""),
    ]
    load = [m.get("load_average"), result.get("load_average_after")]
    if any(load):
        fmt_load = lambda la: "/".join(f"{x:.2f}" for x in la) if la else "?"
        cores = m.get("cores")
        peak = max((x for la in load if la for x in la), default=0.0)
        busy = isinstance(cores, int) and peak > cores
        lines.append(
            f"- load average (1/5/15 min) before the run: {fmt_load(load[0])}, after: {fmt_load(load[1])}"
            f" on {cores or '?'} cores" + (" (above the core count: other work competed for the CPU)" if busy else "")
        )
    gpu = m.get("gpu")
    if gpu:
        lines.append(
            f"- gpu: {gpu.get('name')} ×{gpu.get('count', 1)}, driver {gpu.get('driver')}, {gpu.get('memory')}"
        )
    if vers:
        lines.append(f"- versions: {vers}")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The whole result as markdown: machine, goals, notes (skips, failures), tables."""
    parts = [f"## kernelbay benchmarks: {result['suite']} suite", "", markdown_machine(result), "", "### Goals", ""]
    parts.append(markdown_goals(result.get("goals", [])))
    if result.get("notes"):
        parts += ["", "### Notes", ""] + [f"- {n}" for n in result["notes"]]
    parts += [
        "",
        "Figures are medians over batches (p10 – p90 spread); peers were timed interleaved in one "
        "process. *kernelbay ÷ this*: kernelbay's cost as a multiple of that row's (below 1: "
        "kernelbay is faster).",
        "",
        markdown_tables(result.get("records", [])),
    ]
    return "\n".join(parts) + "\n"


# --- plot ---------------------------------------------------------------------------------


def plot(result: dict, path: str) -> str | None:
    """A horizontal bar chart of kernelbay's cost relative to each peer; ``None`` if written,
    else why not (matplotlib missing, nothing to plot)."""
    rows = ratios(result.get("records", []))
    if not rows:
        return "no kernelbay-vs-peer ratios to plot"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no PNG"
    labels = [f"{g}\nvs {p}" for g, p, _ in rows]
    values = [v for _, _, v in rows]
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.6))
    colors = ["#2a9d8f" if v <= 1 else "#e76f51" for v in values]
    y = list(range(len(rows)))[::-1]
    ax.barh(y, values, color=colors)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(y, labels, fontsize=8)
    for yi, v in zip(y, values):
        ax.text(v, yi, f" {fmt(v)}×", va="center", fontsize=8)
    m = result.get("machine", {})
    where = m.get("gpu", {}).get("name") if m.get("gpu") else m.get("cpu", "")
    ax.set_title(
        f"kernelbay {result['suite']} suite: kernelbay cost ÷ peer cost (< 1: kernelbay faster)\n"
        f"{where}, {result.get('date', '')[:10]}",
        fontsize=9,
    )
    lo, hi = min(values + [1.0]), max(values + [1.0])
    ax.set_xlim(lo / 1.6, hi * 2.2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
