"""The tracer on a real NVIDIA GPU: device spans from CUDA events, one track per stream.
Skips without a GPU; fails instead under --kernelbay-require=cuda."""

from __future__ import annotations

from collections import Counter

import kernelbay as kb
import numpy as np
import pytest

from .conftest import check_device_spans, load, run_workload, spans, track_names

pytestmark = pytest.mark.kernelbay_device("cuda")

BUSY = r"""
extern "C" __global__ void busy(float* y, int iters) {
    float v = y[threadIdx.x];
    for (int i = 0; i < iters; ++i) v = v * 0.999f + 0.001f;
    y[threadIdx.x] = v;
}
"""


def test_cuda_workload_trace_event_by_event(tmp_path, cache_dir) -> None:
    path = str(tmp_path / "t.json")
    run_workload("cuda", {"KERNELBAY_TRACE": path}, "20")
    doc = load(path)
    by_cat = Counter(e["cat"] for e in spans(doc))
    assert by_cat["compile"] == 2 and by_cat["launch"] == 21 and by_cat["synchronize"] == 2
    assert Counter(e["args"]["direction"] for e in spans(doc, "copy")) == {"HtoD": 2, "DtoD": 1, "DtoH": 1}
    assert [e["args"]["cache"] for e in spans(doc, "compile")] == ["miss", "memory"]
    # Every launch and copy has a device span from CUDA events, within its lifetime: after the
    # host call began, done by the end of the next synchronize (launches are asynchronous).
    assert check_device_spans(doc, synchronous=False, clock_error_us=20) == 21 + 4
    names = track_names(doc)
    assert {names[e["tid"]] for e in spans(doc, "device")} == {"cuda:0 default stream"}
    k = doc["kernelbay"]["kernels"]["saxpy"]
    assert k["count"] == 21 and k["device_count"] == 21 and 0 < k["device_min_ns"] <= k["device_max_ns"]
    # Device spans on one stream do not overlap: the stream runs them in order.
    dev = sorted(spans(doc, "device"), key=lambda e: e["ts"])
    for a, b in zip(dev, dev[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 0.5  # event resolution is about 0.5 µs


def test_cuda_streams_get_their_own_tracks_and_long_kernels_outlive_their_launch(tmp_path) -> None:
    import kernelbay_cuda as kc

    dev = kb.device("cuda:0")
    k = kb.compile(kb.Source(BUSY, lang="cuda", name="busy"), device=dev)
    y = kb.zeros(32, np.float32, device=dev)
    s1, s2 = kc.Stream(dev), kc.Stream(dev)
    path = tmp_path / "s.json"
    with kb.trace(path):
        for s in (s1, s2, None):
            k.launch(1, 32, (y, np.int32(200_000)), stream=s)
        dev.synchronize()
    doc = load(str(path))
    names = track_names(doc)
    tracks = {names[e["tid"]] for e in spans(doc, "device")}
    assert tracks == {"cuda:0 default stream", f"cuda:0 stream 0x{s1.handle:x}", f"cuda:0 stream 0x{s2.handle:x}"}
    check_device_spans(doc, synchronous=False, clock_error_us=20)
    # 200k dependent multiply-adds take far longer than queueing the launch.
    launches = {e["args"]["flow"]: e for e in spans(doc, "launch")}
    for d in spans(doc, "device"):
        h = launches[d["args"]["flow"]]
        assert d["dur"] > h["dur"]
    y.close()


def test_cuda_device_timing_off(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KERNELBAY_TRACE_DEVICE", "0")
    dev = kb.device("cuda:0")
    k = kb.compile(kb.Source(BUSY, lang="cuda", name="busy"), device=dev)
    y = kb.zeros(32, np.float32, device=dev)
    with kb.trace(tmp_path / "o.json"):
        k.launch(1, 32, (y, np.int32(10)))
        dev.synchronize()
    doc = load(str(tmp_path / "o.json"))
    assert len(spans(doc, "launch")) == 1 and spans(doc, "device") == []
    y.close()
