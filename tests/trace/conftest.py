"""Helpers for the trace tests: run tests/trace/workload.py in a child process and read traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "workload.py")


def run_workload(device: str, env_extra: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_extra)
    proc = subprocess.run(
        [sys.executable, WORKLOAD, device, *args], env=env, capture_output=True, text=True, timeout=600
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def spans(doc: dict[str, Any], cat: str | None = None) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and (cat is None or e.get("cat") == cat)]


def track_names(doc: dict[str, Any]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}


def check_device_spans(doc: dict[str, Any], synchronous: bool, clock_error_us: float = 0.002) -> int:
    """Each host launch/copy with a device span is joined to it by one flow arrow (s on the host
    span's start, f on the device span's start); the device span lies within the launch's
    lifetime: it starts after the host call began and ends before the call returned (a
    synchronous backend) or before the next synchronize on the host ended, give or take
    ``clock_error_us`` (a device clock mapped onto the host's). Returns how many."""
    ev = doc["traceEvents"]
    host = {e["args"]["flow"]: e for e in spans(doc) if e.get("cat") in ("launch", "copy") and "flow" in e["args"]}
    dev = {e["args"]["flow"]: e for e in spans(doc, "device")}
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert set(host) == set(dev) == set(starts) == set(ends)
    syncs = sorted(e["ts"] + e["dur"] for e in spans(doc, "synchronize"))
    eps = 0.002  # µs: the file rounds to nanoseconds
    names = track_names(doc)
    for fid, h in host.items():
        d = dev[fid]
        assert starts[fid]["ts"] == h["ts"] and starts[fid]["tid"] == h["tid"]
        assert ends[fid]["ts"] == d["ts"] and ends[fid]["tid"] == d["tid"] and ends[fid]["bp"] == "e"
        assert d["ts"] >= h["ts"] - eps
        if synchronous:
            assert d["ts"] + d["dur"] <= h["ts"] + h["dur"] + eps
        else:
            later = [t for t in syncs if t >= h["ts"]]
            assert later and d["ts"] + d["dur"] <= later[0] + clock_error_us
        assert names[d["tid"]] == f"{h['args']['device']} {h['args']['stream']}"
    return len(host)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> str:
    d = str(tmp_path / "cache")
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", d)
    return d


@pytest.fixture(scope="module")
def warm_cache_dir(tmp_path_factory) -> str:
    """A disk cache that already holds the workload's kernel: one cold compile (seconds on the
    cpu backend) per module, for the tests that check something other than the cold compile."""
    d = str(tmp_path_factory.mktemp("warm") / "cache")
    run_workload("cpu", {"KERNELBAY_CACHE_DIR": d})
    return d


@pytest.fixture
def warm_cache(warm_cache_dir, monkeypatch) -> str:
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", warm_cache_dir)
    return warm_cache_dir


@pytest.fixture(scope="module")
def module_cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("shared") / "cache")


@pytest.fixture
def shared_cache(module_cache_dir, monkeypatch) -> str:
    """One disk cache for a module's tests whose checks hold whatever it holds (hit or miss):
    the first compile fills it, the others find it there instead of compiling again."""
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", module_cache_dir)
    return module_cache_dir
