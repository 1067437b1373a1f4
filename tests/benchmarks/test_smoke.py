"""The benchmarks cannot rot: each runs once on tiny sizes. Nothing here asserts a time."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import _report, run  # noqa: E402

RECORD_KEYS = {"group", "name", "unit"}
FIGURE_KEYS = {"median", "p10", "p90", "n"}
GOAL_KEYS = {"goal", "value", "limit", "met"}


def check_record(r: dict) -> None:
    assert set(r) >= RECORD_KEYS, r
    assert isinstance(r["group"], str) and r["group"] and isinstance(r["name"], str) and r["name"]
    if "skipped" in r:
        assert isinstance(r["skipped"], str) and r["skipped"], r
        return
    assert set(r) >= FIGURE_KEYS, r
    assert isinstance(r["unit"], str) and r["unit"]
    for k in ("median", "p10", "p90"):
        assert isinstance(r[k], float) and math.isfinite(r[k]), r
    assert r["n"] >= 1


def check_goal(g: dict) -> None:
    assert set(g) >= GOAL_KEYS, g
    assert isinstance(g["goal"], str) and isinstance(g["met"], bool)
    assert math.isfinite(g["value"]) and math.isfinite(g["limit"])


# What one `--suite cpu --quick` run checked, in parts a parallel run spreads over its workers:
# the command runs once, on one module (CLI_MODULE: a few seconds, with peers to plot), to check
# what it writes; every other cpu module runs in its own test, in the child process
# `benchmarks.run` gives each module; and the suite's loop is checked to reach every module.
CLI_MODULE = "bench_cpu"


@pytest.mark.parametrize("name", [n for n in run.discover("cpu") if n != CLI_MODULE])
def test_every_cpu_module_runs_and_writes_records(name: str) -> None:
    got = run.run_isolated(name, quick=True, timeout=600)
    assert got["error"] is None, f"{name}: {got['error']}\n{got.get('traceback', '')}"
    assert got["records"], f"{name} returned no record (not even a skip)"
    assert {r["module"] for r in got["records"]} == {name}
    for r in got["records"]:
        check_record(r)
    for g in got["goals"]:
        check_goal(g)


def test_the_suite_runs_every_module_of_its_kind(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --only, `--suite cpu` runs each cpu module (the modules' own runs are the test above)."""
    ran: list[str] = []

    def one(name: str, quick: bool, timeout: float) -> dict:
        ran.append(name)  # a skip record: this test checks the suite's loop, not the module
        rec = {"group": name, "name": "kernelbay", "unit": None, "skipped": "not run by this test", "module": name}
        return {"records": [rec], "goals": [], "error": None}

    monkeypatch.setattr(run, "run_isolated", one)
    result = run.run_suite("cpu", True, str(tmp_path))
    assert ran == run.discover("cpu") and set(result["modules"]) == set(ran)
    assert {r["module"] for r in result["records"]} == set(result["modules"])


@pytest.fixture(scope="module")
def quick_cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, str]:
    """``python -m benchmarks.run --suite cpu --quick --only bench_cpu``, as a user would run it."""
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--suite", "cpu", "--quick", "--only", CLI_MODULE, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jsons = [f for f in os.listdir(out) if f.endswith(".json")]
    assert len(jsons) == 1, os.listdir(out)
    with open(out / jsons[0], encoding="utf-8") as f:
        return json.load(f), str(out), proc.stdout


def test_the_command_writes_its_records(quick_cpu_run: tuple[dict, str, str]) -> None:
    result, _, _ = quick_cpu_run
    assert set(result["modules"]) == {CLI_MODULE} and result["modules"][CLI_MODULE]["error"] is None
    assert result["records"] and {r["module"] for r in result["records"]} == {CLI_MODULE}
    for r in result["records"]:
        check_record(r)
    for g in result["goals"]:
        check_goal(g)


def test_result_files_and_machine(quick_cpu_run: tuple[dict, str, str]) -> None:
    result, out, stdout = quick_cpu_run
    stem = os.path.join(out, os.path.basename(result["files"]["json"])[: -len(".json")])
    assert os.path.isfile(stem + ".md")
    md = open(stem + ".md", encoding="utf-8").read()
    assert "| median |" in md and md.strip() in stdout  # the table is printed last
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert any("matplotlib" in n for n in result["notes"])
    else:
        assert os.path.isfile(stem + ".png") and os.path.getsize(stem + ".png") > 1000
    m = result["machine"]
    assert m["cores"] and m["python"] and m["versions"]["kernelbay"]
    assert result["date"] and result["quick"] is True


@pytest.mark.parametrize("name", run.discover("gpu"))
def test_gpu_modules_import(name: str) -> None:
    """GPU modules import everywhere (their heavy imports stay inside run()) and follow the contract."""
    mod = importlib.import_module(f"benchmarks.{name}")
    assert mod.SUITE == "gpu" and callable(mod.run) and callable(mod.goals)
    assert mod.goals([]) == [] or all(set(g) >= GOAL_KEYS for g in mod.goals([]))


def test_a_broken_module_is_reported_not_fatal(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    got = run.run_module("no_such_bench_module", quick=True)
    assert got["records"] == [] and "ModuleNotFoundError" in got["error"]


def test_report_renders_skips_and_ratios() -> None:
    recs = [
        {"group": "g", "name": "kernelbay", "unit": "us", "median": 2.0, "p10": 1.9, "p90": 2.2, "n": 5},
        {"group": "g", "name": "peer", "unit": "us", "median": 4.0, "p10": 3.9, "p90": 4.4, "n": 5},
        {"group": "bw", "name": "kernelbay", "unit": "GB/s", "median": 10.0, "p10": 9.0, "p90": 11.0, "n": 5},
        {"group": "bw", "name": "raw", "unit": "GB/s", "median": 20.0, "p10": 19.0, "p90": 21.0, "n": 5},
        {"group": "g", "name": "cupy", "unit": None, "skipped": "cupy is not installed"},
    ]
    assert _report.ratios(recs) == [("g", "peer", 0.5), ("bw", "raw", 2.0)]
    md = _report.markdown_tables(recs)
    assert "0.500×" in md and "skipped: cupy is not installed" in md


def test_interleaved_rounds_change_every_cases_neighbours() -> None:
    """Each round of an interleaved timing is a new order: the same on every run (seeded), every
    round a permutation, the first as listed, and no case always right after the same one (a
    rotation of the list would keep every neighbour)."""
    from benchmarks import _timing

    names = ["a", "b", "c", "d", "e"]
    rounds = _timing.rounds(names, 40)
    assert rounds == _timing.rounds(names, 40) and len(rounds) == 40
    assert rounds[0] == names and all(sorted(r) == names for r in rounds)
    for case in names:
        before = {r[r.index(case) - 1] if r.index(case) else None for r in rounds}
        assert len(before) >= 3, (case, before)
    seen: dict[str, list[str]] = {}
    samples = _timing.interleaved_samples(
        {n: (lambda n=n: seen.setdefault("calls", []).append(n)) for n in names}, number=1, repeat=7, warmup=0
    )
    assert all(len(v) == 7 for v in samples.values())
    assert [seen["calls"][i * 5 : i * 5 + 5] for i in range(7)] == _timing.rounds(names, 7)
