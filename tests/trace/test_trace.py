"""The tracer on the cpu backend (and the tpu backend in interpret mode): the file a run
writes, event by event; the raise, unwritable-path, two-process and long-run cases."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import kernelbay as kb
import numpy as np
import pytest
from kernelbay._plugins import runtime
from kernelbay.tracing import tracer

from .conftest import check_device_spans, load, run_workload, spans, track_names

pytestmark = pytest.mark.kernelbay_device("cpu")


def test_cpu_workload_trace_event_by_event(tmp_path, cache_dir) -> None:
    path = str(tmp_path / "t.json")
    run_workload("cpu", {"KERNELBAY_TRACE": path}, "5")
    doc = load(path)
    by_cat = Counter(e["cat"] for e in spans(doc))
    # 2 compiles; 5 + 1 launches; x, y, z allocated (and freed at exit); copies HtoD x, y,
    # DtoD y -> z, DtoH z; 2 synchronizes.
    assert by_cat["compile"] == 2
    assert by_cat["launch"] == 6
    assert by_cat["allocate"] == 3 and by_cat["free"] == 3
    assert by_cat["synchronize"] == 2
    copies = Counter(e["args"]["direction"] for e in spans(doc, "copy"))
    assert copies == {"HtoD": 2, "DtoD": 1, "DtoH": 1}
    assert all(e["args"]["bytes"] == 1024 for e in spans(doc, "copy"))
    assert all(e["args"]["bytes"] == 1024 for e in spans(doc, "allocate"))
    assert all(e["args"]["bytes"] == 1024 and e["args"]["device"] == "cpu:0" for e in spans(doc, "free"))
    # The first compile misses the (empty) cache, the second is an in-memory hit.
    assert [e["args"]["cache"] for e in spans(doc, "compile")] == ["miss", "memory"]
    launch = spans(doc, "launch")[0]
    assert launch["name"] == "launch saxpy"
    assert launch["args"] | {"flow": 0} == {
        "kernel": "saxpy",
        "device": "cpu:0",
        "grid": 1,
        "block": 256,
        "shared_mem": 0,
        "stream": "default stream",
        "flow": 0,
    }
    # Order on the main thread: compiles, then allocations and copies, then launches, sync.
    main = [e for e in spans(doc) if e["tid"] == 1]
    cats = [e["cat"] for e in main]
    assert cats.index("compile") < cats.index("allocate") < cats.index("launch") < cats.index("synchronize")
    assert all(a["ts"] <= b["ts"] for a, b in zip(main, main[1:]))
    for a, b in zip(main, main[1:]):  # one thread's host spans do not overlap: nothing nests
        assert a["ts"] + a["dur"] <= b["ts"] + 0.002
    # The worker thread's launch is on its own track.
    names = track_names(doc)
    worker = [e for e in spans(doc, "launch") if e["tid"] != 1]
    assert len(worker) == 1 and worker[0]["tid"] < 1_000_000 and names[worker[0]["tid"]].startswith("host: ")
    # Device spans: one per launch and per copy, on the cpu:0 default-stream track.
    assert check_device_spans(doc, synchronous=True) == 6 + 4
    assert {names[e["tid"]] for e in spans(doc, "device")} == {"cpu:0 default stream"}
    s = doc["kernelbay"]
    assert s["calls"] == len(spans(doc)) - len(spans(doc, "device"))
    assert s["kernels"]["saxpy"]["count"] == 6 and s["kernels"]["saxpy"]["device_count"] == 6
    assert s["compiles"]["miss"]["count"] == 1 and s["compiles"]["memory"]["count"] == 1
    assert s["allocator"]["traced"]["cpu:0"]["peak_live"] == 3 * 1024


def test_second_process_hits_the_disk_cache(tmp_path, warm_cache) -> None:
    # warm_cache was filled by another process (its compile a miss, stored on disk)
    path = str(tmp_path / "t.json")
    run_workload("cpu", {"KERNELBAY_TRACE": path})
    assert [e["args"]["cache"] for e in spans(load(path), "compile")] == ["disk", "memory"]


def test_tpu_interpret_mode_trace(tmp_path, cache_dir) -> None:
    pytest.importorskip("kernelbay_tpu", reason="kernelbay-tpu is not installed")
    pytest.importorskip("jax", reason="jax is not installed")
    path = str(tmp_path / "t.json")
    run_workload("tpu", {"KERNELBAY_TRACE": path, "KERNELBAY_TPU_INTERPRET": "1", "JAX_PLATFORMS": "cpu"}, "2")
    doc = load(path)
    by_cat = Counter(e["cat"] for e in spans(doc))
    assert by_cat["compile"] == 2 and by_cat["launch"] == 3
    assert {e["args"]["kernel"] for e in spans(doc, "launch")} == {"add"}
    # The tpu backend keeps no disk cache: its first compile says so.
    assert spans(doc, "compile")[0]["args"]["cache"] == "uncached"
    # Device spans run from dispatch to completion, inside the launch's host call.
    assert check_device_spans(doc, synchronous=True) >= 3
    assert doc["kernelbay"]["kernels"]["add"]["device_count"] == 3


def test_context_manager_writes_when_the_block_raises(tmp_path) -> None:
    path = tmp_path / "r.json"
    dev = kb.device("cpu")
    with pytest.raises(RuntimeError, match="on purpose"), kb.trace(path):
        a = kb.asarray(np.ones(4, np.float32), device=dev)
        raise RuntimeError("on purpose")
    assert Counter(e["cat"] for e in spans(load(str(path)))) == {"allocate": 1, "copy": 1, "device": 1}
    a.close()
    # Tracing is off again: the core calls the backend's functions directly.
    assert runtime.load("cpu").launch is runtime.own_impls(runtime.load("cpu").plugin, "kernelbay_launch")[0].function
    assert tracer.current() is None


def test_env_trace_written_when_the_program_raises(tmp_path, warm_cache) -> None:
    path = str(tmp_path / "t.json")
    proc = run_workload("cpu", {"KERNELBAY_TRACE": path}, "--raise", check=False)
    assert proc.returncode == 1 and "on purpose" in proc.stderr
    assert Counter(e["cat"] for e in spans(load(path)))["launch"] == 4


def test_unwritable_path_fails_at_start(tmp_path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "t.json"
    with pytest.raises(kb.InvalidArgumentError, match="cannot write the trace"):
        kb.trace(missing)
    with pytest.raises(kb.InvalidArgumentError, match="is a directory"):
        kb.trace(tmp_path)
    env = dict(os.environ, KERNELBAY_TRACE=str(missing))
    proc = subprocess.run([sys.executable, "-c", "import kernelbay"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "KERNELBAY_TRACE=" in proc.stderr and "cannot write the trace" in proc.stderr


def test_one_trace_at_a_time(tmp_path) -> None:
    with kb.trace(tmp_path / "a.json"), pytest.raises(kb.InvalidArgumentError, match="already recording"):
        kb.trace(tmp_path / "b.json").start()


def test_two_processes_writing_one_path_leave_one_whole_trace(tmp_path, warm_cache) -> None:
    # The cache is warm, so both children are quick.
    path = str(tmp_path / "same.json")
    env = dict(os.environ, KERNELBAY_TRACE=path)
    from .conftest import WORKLOAD

    procs = [
        subprocess.Popen([sys.executable, WORKLOAD, "cpu", "300"], env=env, stdout=subprocess.DEVNULL) for _ in range(2)
    ]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    doc = load(path)  # valid JSON: one process's whole trace, not a mix
    assert {e["pid"] for e in doc["traceEvents"]} == {doc["kernelbay"]["pid"]}
    assert doc["kernelbay"]["kernels"]["saxpy"]["count"] == 301
    assert [f for f in os.listdir(tmp_path) if f.startswith(".kbtrace-")] == []


def test_pid_in_the_path(tmp_path, warm_cache) -> None:
    run_workload("cpu", {"KERNELBAY_TRACE": str(tmp_path / "t-{pid}.json")})
    (name,) = [f for f in os.listdir(tmp_path) if f.startswith("t-")]
    assert name == f"t-{load(str(tmp_path / name))['kernelbay']['pid']}.json"


def test_ring_buffer_bounds_the_timeline(tmp_path) -> None:
    dev = kb.device("cpu")
    src = kb.Source(
        textwrap.dedent("""
        extern "C" __global__ void inc(float* y) { y[threadIdx.x] += 1.0f; }
    """),
        lang="cuda",
        name="inc",
    )
    k = kb.compile(src, device=dev)
    y = kb.zeros(32, np.float32, device=dev)
    n = 5 * tracer.CHUNK
    path = tmp_path / "ring.json"
    keep = 2 * tracer.CHUNK + 100
    with kb.trace(path, max_events=keep):
        for _ in range(n):
            k.launch(1, 32, (y,))
    doc = load(str(path))
    s = doc["kernelbay"]
    assert s["kernels"]["inc"]["count"] == n and s["kernels"]["inc"]["device_count"] == n
    kept = len(spans(doc, "launch"))
    assert kept == s["timeline_records"] and s["dropped_records"] == n - kept
    assert kept == keep
    # The newest are kept: the last launch span is the last call before the trace ended.
    assert spans(doc, "launch")[-1]["ts"] == max(e["ts"] for e in spans(doc) if e["cat"] != "device")
    assert float(y.numpy()[0]) == n
    y.close()
