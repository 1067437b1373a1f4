"""The tracer on a real NVIDIA GPU: device spans from CUPTI's activity records and from CUDA
events (each test runs with both timers), one track per stream. Skips without a GPU; fails
instead under --kernelbay-require=cuda. The CUPTI runs skip where libcupti or the native
helpers are missing, and fail where libcupti loads but CUPTI cannot be enabled."""

from __future__ import annotations

from collections import Counter

import kernelbay as kb
import numpy as np
import pytest

from .conftest import check_device_spans, load, run_workload, spans, track_names

pytestmark = pytest.mark.kernelbay_device("cuda")

TIMERS = ["cupti", "events"]


def _skip_without_cupti() -> None:
    """Skip where the CUPTI timer cannot exist: no native helpers, or no libcupti."""
    from kernelbay_cuda import cupti, native

    if native.module() is None:
        pytest.skip(f"the CUPTI timer needs the native helpers: {native.status()}")
    try:
        cupti.load_library()
    except cupti.CuptiUnavailable as exc:
        pytest.skip(f"no libcupti here (an optional dependency): {exc}")


@pytest.fixture(params=TIMERS)
def timer(request, monkeypatch) -> str:
    """KERNELBAY_TRACE_TIMER for this test, and a fresh choice of timer under it."""
    from kernelbay_cuda import cupti, timing

    monkeypatch.setenv("KERNELBAY_TRACE_TIMER", request.param)
    monkeypatch.setattr(timing, "_timer", None)
    if request.param == "cupti":
        _skip_without_cupti()
        got = timing.device_timer()  # libcupti loads: the CUPTI timer must then work
        assert isinstance(got, cupti.Timer), "CUPTI could not be enabled (see the kernelbay.trace log)"
    return request.param


BUSY = r"""
extern "C" __global__ void busy(float* y, int iters) {
    float v = y[threadIdx.x];
    for (int i = 0; i < iters; ++i) v = v * 0.999f + 0.001f;
    y[threadIdx.x] = v;
}
"""


def test_cuda_workload_trace_event_by_event(tmp_path, cache_dir, timer) -> None:
    path = str(tmp_path / "t.json")
    proc = run_workload(
        "cuda", {"KERNELBAY_TRACE": path, "KERNELBAY_TRACE_TIMER": timer, "KERNELBAY_LOG": "info"}, "20"
    )
    if timer == "cupti":
        assert "not CUPTI" not in proc.stderr
    doc = load(path)
    by_cat = Counter(e["cat"] for e in spans(doc))
    assert by_cat["compile"] == 2 and by_cat["launch"] == 21 and by_cat["synchronize"] == 2
    assert Counter(e["args"]["direction"] for e in spans(doc, "copy")) == {"HtoD": 2, "DtoD": 1, "DtoH": 1}
    assert [e["args"]["cache"] for e in spans(doc, "compile")] == ["miss", "memory"]
    # Every launch and copy has a device span (CUPTI or events), within its lifetime: after the
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


def test_cuda_streams_get_their_own_tracks_and_long_kernels_outlive_their_launch(tmp_path, timer) -> None:
    dev = kb.device("cuda:0")
    k = kb.compile(kb.Source(BUSY, lang="cuda", name="busy"), device=dev)
    y = kb.zeros(32, np.float32, device=dev)
    ks1, ks2 = dev.stream(), dev.stream()
    s1, s2 = ks1.handle, ks2.handle  # the backend's stream handles: their tracks show the CUstream
    for s in (s1, s2, None):  # warm: a first launch also builds its fast path (hundreds of us)
        k.launch(1, 32, (y, np.int32(1)), stream=s)
    dev.synchronize()
    path = tmp_path / "s.json"
    with kb.trace(path):
        for s in (s1, s2, None):
            k.launch(1, 32, (y, np.int32(2_000_000)), stream=s)
        dev.synchronize()
    doc = load(str(path))
    names = track_names(doc)
    tracks = {names[e["tid"]] for e in spans(doc, "device")}
    assert tracks == {"cuda:0 default stream", f"cuda:0 stream 0x{s1.handle:x}", f"cuda:0 stream 0x{s2.handle:x}"}
    check_device_spans(doc, synchronous=False, clock_error_us=20)
    # 2M dependent multiply-adds (about a millisecond) take far longer than queueing the launch.
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


@pytest.mark.parametrize("timer_path", ["native", "python", "cupti"])
def test_cuda_device_spans_are_sane_on_the_c_the_ctypes_and_the_cupti_timer(tmp_path, monkeypatch, timer_path) -> None:
    """Many launches on three kinds of stream, folded every 16 records (so marks are resolved
    in many batches): every launch gets a device span inside its lifetime, durations >= 0, and
    the spans of one stream follow each other in launch order."""
    from kernelbay.tracing import tracer
    from kernelbay_cuda import cupti, native, timing

    if timer_path == "native" and not hasattr(native.module(), "Timer"):
        pytest.skip(f"the C timer is unavailable here: {native.status()}")
    if timer_path == "cupti":
        _skip_without_cupti()
    if timer_path == "python":
        monkeypatch.setattr(native, "module", lambda: None)  # as KERNELBAY_NATIVE=0
    monkeypatch.setenv("KERNELBAY_TRACE_TIMER", "cupti" if timer_path == "cupti" else "events")
    monkeypatch.setattr(timing, "_timer", None)
    monkeypatch.setattr(tracer, "CHUNK", 16)
    t = timing.device_timer()
    assert isinstance(t, cupti.Timer) == (timer_path == "cupti"), "CUPTI is unavailable (see the kernelbay.trace log)"
    is_c = type(t.mark).__name__ == "builtin_function_or_method"
    assert is_c == (timer_path != "python")
    dev = kb.device("cuda:0")
    k = kb.compile(kb.Source(BUSY, lang="cuda", name="busy"), device=dev)
    y = kb.zeros(32, np.float32, device=dev)
    owner = dev.stream()
    streams = [None, owner.handle, dev.stream()]  # the default stream, a backend handle, a kb.Stream
    path = tmp_path / f"{timer_path}.json"
    n = 60
    with kb.trace(path):
        for i in range(n):
            k.launch(1, 32, (y, np.int32(2_000)), stream=streams[i % 3])
        dev.synchronize()
    if timer_path == "cupti":  # the trace's end closed the timer: CUPTI is off again
        assert not t._mod.cupti_state()["enabled"]
    doc = load(str(path))
    assert check_device_spans(doc, synchronous=False, clock_error_us=20) == n
    assert doc["kernelbay"]["kernels"]["busy"]["device_count"] == n
    by_track: dict[int, list] = {}
    for d in spans(doc, "device"):
        assert d["dur"] >= 0
        by_track.setdefault(d["tid"], []).append(d)
    assert len(by_track) == 3
    for ds in by_track.values():
        ds.sort(key=lambda e: e["args"]["flow"])  # launch order
        for a, b in zip(ds, ds[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 0.5  # event resolution is about 0.5 µs
    y.close()
