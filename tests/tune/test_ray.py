"""``kb.tune(..., executor="ray")`` on a Ray cluster of two nodes on this machine (loopback only),
each node with its own cache directory and a compiler that logs its command lines there: every
variant is compiled once, on the node that times it; what another node needs (the reference
config, the winner) arrives in its cache through Ray's object store, not by compiling; each
record names the node it was timed on; a segfault and an abort() are fault records, and the node
goes on timing. The cluster runs in a process of its own (tests/tune/ray_cluster.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'kernelbay[ray]')"
)


def _entries(cache: Path) -> dict[str, bytes]:
    """The cpu kernels in a cache directory: key -> payload."""
    from kernelbay._cacheentry import SUFFIX, decode

    out = {}
    for f in cache.glob(f"??/*{SUFFIX}"):
        key = f.name[: -len(SUFFIX)]
        e = decode(key, str(f), f.read_bytes())
        if e is not None and e.meta.get("backend") == "cpu" and e.meta.get("entries") == ["rowsum"]:
            out[key] = e.payload
    return out


def _compiles(log: Path) -> list[str]:
    """The variants a node's compiler built (``-DMODE=m -DUNROLL=u`` of each kernel link)."""
    import re

    text = log.read_text(encoding="utf-8") if log.exists() else ""
    return [
        m.group(0)
        for line in text.splitlines()
        if "kernel.so" in line
        for m in [re.search(r"-DMODE=\d+ -DUNROLL=\d+", line)]
        if m
    ]


def _variant(config: dict[str, Any]) -> str:
    return f"-DMODE={config['MODE']} -DUNROLL={config['UNROLL']}"


def _run_cluster(base: Path, *what: str) -> dict[str, Any]:
    """``python -m tests.tune.ray_cluster OUT [WHAT]`` in a session of its own: its report."""
    out = base / "out.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # A new session: on a hang the whole process group (driver, cluster) is ended; the limit is a
    # guard against a hang, not a speed target (the sweep takes ~40 s on a busy 2-core machine).
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tune.ray_cluster", str(out), *what],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        pytest.fail(f"the Ray sweep did not end within 900 s; its output ends:\n{log[-4000:]}")
    assert proc.returncode == 0, log[-6000:]
    return json.loads(out.read_text(encoding="utf-8"))


def _need_cpu() -> None:
    import kernelbay as kb

    try:
        kb.device("cpu")
    except kb.KernelbayError as exc:
        pytest.skip(f"the cpu backend is not available here: {exc}")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    _need_cpu()
    base = tmp_path_factory.mktemp("ray")
    return base, _run_cluster(base)


def test_the_cluster_is_on_the_loopback_address_only(sweep) -> None:
    _, report = sweep
    assert report["addresses"] == ["127.0.0.1"]
    assert sorted(report["nodes"].values()) == ["a", "b"]


def test_every_variant_is_compiled_once_on_the_node_that_times_it(sweep) -> None:
    base, report = sweep
    names = report["nodes"]
    runs = {n: _compiles(base / n / "cxx.log") for n in ("driver", "a", "b")}
    everywhere = runs["a"] + runs["b"] + runs["driver"]
    assert sorted(everywhere) == sorted(_variant(c) for c, _ in report["records"]), runs
    assert runs["driver"] == [] and runs["a"] and runs["b"]  # both nodes compiled; the driver none
    for config, rec in report["records"]:
        node = names[rec["node"]]
        assert rec["compiled_on"] == rec["node"]
        assert runs[node].count(_variant(config)) == 1, (config, rec, runs)
        assert "compiled_again" not in rec


def test_what_another_node_needs_arrives_through_the_object_store(sweep) -> None:
    base, report = sweep
    names = report["nodes"]
    kernels = {n: _entries(base / n / "cache") for n in ("driver", "a", "b")}
    default, first = report["records"][0]
    home = names[first["node"]]
    other = "b" if home == "a" else "a"
    # The default config (the reference, run by every worker) was compiled on one node only, and
    # the other node's cache holds the very same entry: it was shipped, not compiled there.
    shared = set(kernels["a"]) & set(kernels["b"])
    assert len(shared) == 1, kernels
    (key,) = shared
    assert kernels["a"][key] == kernels["b"][key]
    assert _variant(default) not in _compiles(base / other / "cxx.log")
    # Each node holds the kernels it compiled, and the reference.
    for n in ("a", "b"):
        built = _compiles(base / n / "cxx.log")
        assert len(kernels[n]) == len(built) + (n == other)
    # The winner, timed on one node, is loaded here from its shipped entry.
    win = next(rec for c, rec in report["records"] if c == report["winner"])
    assert len(kernels["driver"]) == 1
    (wkey,) = kernels["driver"]
    assert kernels["driver"][wkey] == kernels[names[win["node"]]][wkey]


def test_faults_are_records_and_the_node_goes_on(sweep) -> None:
    _, report = sweep
    by_mode: dict[int, list[dict[str, Any]]] = {}
    for config, rec in report["records"]:
        by_mode.setdefault(config["MODE"], []).append(rec)
    assert {r["status"] for r in by_mode[0]} == {"ok"}
    assert {r["status"] for r in by_mode[2]} == {"launch_error"}  # a null write: the backend's fault
    assert {r["status"] for r in by_mode[5]} == {"crashed"}  # abort(): the worker died, not the actor
    assert all("SIGABRT" in r["detail"] for r in by_mode[5])
    # every node timed its right config after its faulting ones were checked
    assert {r["node"] for r in by_mode[0]} == set(report["nodes"])
    assert report["winner"]["MODE"] == 0


def test_a_compile_that_hangs_is_stopped_and_reported_as_a_timeout(tmp_path_factory) -> None:
    """A compile on a node that never ends (its source includes a named pipe nobody writes) is
    stopped at the sweep's compile_timeout with the compiler it started, recorded as a timeout,
    and the other config is compiled, timed and chosen (a cluster of its own: its compiles must
    not enter the caches the tests above count)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("needs a named pipe (POSIX)")
    _need_cpu()
    from tests.tune.ray_cluster import HANG_TIMEOUT

    base = tmp_path_factory.mktemp("ray-hang")
    report = _run_cluster(base, "hang")
    by = {c["HANG"]: r for c, r in report["records"]}
    assert by[1]["status"] == "timeout", by[1]
    assert f"longer than {HANG_TIMEOUT:g} s" in by[1]["detail"] and by[1]["compiled_on"] in report["nodes"]
    assert by[0]["status"] == "ok" and report["winner"]["HANG"] == 0
    # the compiler that waited on the pipe was stopped with its worker: nobody reads it now
    assert report["reader_left"] is False


def test_threads_are_the_cpus_ray_granted(sweep) -> None:
    _, report = sweep
    for _, rec in report["records"]:
        if rec["status"] == "ok":
            props = rec["worker_properties"]
            assert props["threads_from"] == "KERNELBAY_CPU_THREADS"
            assert props["threads"] == int(rec["ray_resources"]["CPU"]) == 1
            assert rec["device"].startswith("cpu@")


def test_without_a_connected_ray_the_error_says_what_to_do() -> None:
    code = (
        "import kernelbay as kb\n"
        "from tests.tune import kernels\n"
        "try:\n"
        "    kb.tune(kernels.source(), {'BLOCK': [64], 'UNROLL': [1], 'MODE': [0]}, kernels.launch,"
        " args=kernels.host_args(), devices='cpu', executor='ray')\n"
        "except kb.InvalidArgumentError as e:\n"
        "    print('refused:', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "ray.init(address=" in r.stdout
