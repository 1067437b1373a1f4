"""Run a benchmark suite: ``python -m benchmarks.run --suite cpu|gpu [--quick] [--out DIR]``.

Discovers ``benchmarks/bench_*.py`` whose ``SUITE`` matches and runs each in a fresh Python
process (so one module's imports, environment variables or crash cannot touch another's); a
module that fails or cannot run here gets a line saying so and the others go on. Writes
``<suite>-<date>.json`` (machine, versions, date, every record and goal), ``<suite>-<date>.md``
and ``<suite>-<date>.png`` (kernelbay's cost relative to each peer) into ``--out``, and prints
the markdown last.

Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

from . import _report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def module_suite(path: str) -> str | None:
    """A module's ``SUITE``, read from its source without importing it (imports may be heavy)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SUITE" for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def discover(suite: str) -> list[str]:
    """Names (``bench_core``...) of the modules of ``suite``, sorted."""
    out = []
    for fn in sorted(os.listdir(HERE)):
        if fn.startswith("bench_") and fn.endswith(".py"):
            if module_suite(os.path.join(HERE, fn)) == suite:
                out.append(fn[:-3])
    return out


def run_module(name: str, quick: bool) -> dict:
    """Import ``benchmarks.<name>`` here and run it: {"records", "goals", "error"}."""
    try:
        mod = importlib.import_module(f"benchmarks.{name}")
        records = list(mod.run(quick))
        goals = list(mod.goals(records)) if hasattr(mod, "goals") else []
        for r in records:
            r.setdefault("module", name)
        return {"records": records, "goals": goals, "error": None}
    except Exception as exc:  # a benchmark that breaks says so; the suite goes on
        tb = traceback.format_exc(limit=4)
        return {"records": [], "goals": [], "error": f"{type(exc).__name__}: {exc}", "traceback": tb}


def run_isolated(name: str, quick: bool, timeout: float) -> dict:
    """Run one module in a child interpreter; its result comes back through a JSON file."""
    fd, path = tempfile.mkstemp(prefix=f"kb-{name}-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "benchmarks.run", "--module", name, "--emit", path] + (["--quick"] if quick else [])
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, stdout=None, stderr=subprocess.PIPE, text=True)
        if proc.stderr:
            sys.stderr.write(proc.stderr)
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            tail = " | ".join((proc.stderr or "").strip().splitlines()[-3:])
            return {"records": [], "goals": [], "error": f"the process exited {proc.returncode} with no result: {tail}"}
    except subprocess.TimeoutExpired:
        return {"records": [], "goals": [], "error": f"did not finish within {timeout:.0f} s"}
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def run_suite(suite: str, quick: bool, out_dir: str, only: list[str] | None = None, timeout: float = 1800) -> dict:
    """Run every module of ``suite`` and write the JSON, markdown and PNG. Returns the result."""
    date = _dt.datetime.now(_dt.UTC).astimezone()
    result: dict = {
        "suite": suite,
        "date": date.isoformat(timespec="seconds"),
        "quick": quick,
        "machine": _report.machine(suite),
        "modules": {},
        "records": [],
        "goals": [],
        "notes": [],
    }
    names = discover(suite)
    if only:
        names = [n for n in names if n in only or n.removeprefix("bench_") in only]
    if not names:
        result["notes"].append(f"no benchmark modules for suite {suite!r} in {HERE}")
    for name in names:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        got = run_isolated(name, quick, timeout)
        took = time.perf_counter() - t0
        result["modules"][name] = {"seconds": round(took, 1), "error": got.get("error")}
        result["records"] += got["records"]
        result["goals"] += got["goals"]
        if got.get("error"):
            line = f"{name}: could not run: {_report.one_line(got['error'])}"
            result["notes"].append(line)
            print(f"[bench] {line}", file=sys.stderr, flush=True)
        for r in got["records"]:
            if "skipped" in r:
                result["notes"].append(f"{name}: {r['group']} / {r['name']}: skipped: {_report.one_line(r['skipped'])}")
        print(f"[bench] {name}: {len(got['records'])} records in {took:.1f} s", file=sys.stderr, flush=True)

    result["load_average_after"] = _report._load()
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, f"{suite}-{date.strftime('%Y%m%d-%H%M%S')}")
    png = stem + ".png"
    why = _report.plot(result, png)
    if why is not None:
        result["notes"].append(f"plot: {why}")
        png = None
    result["files"] = {"json": stem + ".json", "md": stem + ".md", "png": png}
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    md = _report.markdown(result)
    with open(stem + ".md", "w", encoding="utf-8") as f:
        f.write(md)
    print(f"[bench] wrote {stem}.json, {stem}.md" + (f", {png}" if png else ""), file=sys.stderr)
    print(md)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    p.add_argument("--suite", choices=("cpu", "gpu"), help="which modules to run")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few repetitions (the smoke test)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="where results go (default benchmarks/results)")
    p.add_argument("--only", nargs="*", help="module names to run (bench_cpu or cpu), default all of the suite")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per module")
    p.add_argument("--module", help=argparse.SUPPRESS)  # internal: run one module in this process
    p.add_argument("--emit", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.module:
        got = run_module(a.module, a.quick)
        with open(a.emit, "w", encoding="utf-8") as f:
            json.dump(got, f, default=str)
        if got.get("traceback"):
            sys.stderr.write(got["traceback"])
        return 0
    if not a.suite:
        p.error("--suite is required")
    run_suite(a.suite, a.quick, a.out, a.only, a.timeout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
