"""kb.Graph replay's hot path on a GPU: after one checked replay on the default stream or on a
kb.Stream, later ones there run in C (the cuda backend's armed GraphEntry, reached through its
direct graph_replay) while nothing was closed, no stream is current and no stream was closed;
everything else runs the checks and the Python hook, with the same results. Skips without a GPU."""

from __future__ import annotations

import threading

import kernelbay as kb
import numpy as np
import pytest
from kernelbay import _api

pytestmark = pytest.mark.kernelbay_device("cuda")

SRC = r"""
extern "C" __global__ void add(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
"""
N = 4096


@pytest.fixture
def dev() -> kb.Device:
    return kb.device("cuda:0")


@pytest.fixture
def add(dev) -> kb.Kernel:
    return kb.compile(kb.Source(SRC, "cuda", name="add"), dev)


def _graph(dev, add, x, y):
    with dev.graph() as g:
        add.launch(N // 256, 256, (x, y, np.int32(N)))
    return g


def _native() -> bool:
    from kernelbay_cuda import native

    return native.module() is not None


def test_replays_on_the_default_stream_run_in_c_and_count(dev, add) -> None:
    x = kb.asarray(np.ones(N, np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    g = _graph(dev, add, x, y)
    b = _api.binding("cuda")
    if _native():
        assert type(b.graph_replay).__name__ == "Direct", "the direct graph replay is in place"
    for _ in range(50):
        g.replay()
    if _native():
        assert g._handle.entry.armed
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 50, np.float32))


def test_a_closed_buffer_or_graph_is_still_refused_after_fast_replays(dev, add) -> None:
    x = kb.asarray(np.ones(N, np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    g = _graph(dev, add, x, y)
    g.replay()
    g.replay()
    y.close()
    with pytest.raises(kb.UseAfterFreeError, match="closed"):
        g.replay()
    g.update(0, args=(x, x, np.int32(N)))  # usable again, with a buffer the graph did not have
    g.replay()
    g.replay()
    dev.synchronize()
    np.testing.assert_array_equal(x.numpy(), np.full(N, 4, np.float32))
    g.close()
    with pytest.raises(kb.InvalidArgumentError, match="closed"):
        g.replay()


def test_a_current_stream_a_closed_stream_and_another_thread_take_the_hook(dev, add) -> None:
    x = kb.asarray(np.ones(N, np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    g = _graph(dev, add, x, y)
    g.replay()
    g.replay()  # armed: in C
    s = dev.stream()
    with s:  # a current stream: the replay is queued there (the hook)
        g.replay()
    s.synchronize()
    s.close()  # a closed stream: the default stream's notes are made again by the next replay
    if _native():
        assert g._handle.entry.armed  # armed, but at an older closed_streams: C gives it to the hook
    g.replay()
    errors: list[BaseException] = []

    def other() -> None:
        try:
            for _ in range(3):
                g.replay()
            dev.synchronize()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert not errors, errors
    g.replay()
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 8, np.float32))


def test_a_replay_inside_another_recording_is_refused_after_fast_replays(dev, add) -> None:
    x = kb.asarray(np.ones(N, np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    g = _graph(dev, add, x, y)
    g.replay()
    g.replay()
    with pytest.raises(kb.InvalidArgumentError, match="inside another graph"), dev.graph():
        g.replay()
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 2, np.float32))


def test_replays_on_a_kb_stream_run_in_c_in_that_streams_order(dev, add) -> None:
    x = kb.asarray(np.ones(N, np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    g = _graph(dev, add, x, y)
    s = dev.stream()
    for _ in range(3):
        for _ in range(20):
            g.replay(s)
        add.launch(N // 256, 256, (x, y, np.int32(N)), stream=s)  # queued after those replays
    if _native():
        assert g._handle.entry.armed_stream is s
    s.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 63, np.float32))
    s2 = dev.stream()
    for st in (s, s2, s, s2):  # the armed stream moves to the last one given; each replay on its own
        g.replay(st)
        g.replay(stream=st)
        st.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 71, np.float32))
    s2.close()  # closed: its replays are refused, and the other stream's are checked again
    with pytest.raises(kb.InvalidArgumentError, match="closed"):
        g.replay(s2)
    g.replay(s)
    g.replay(dev.default_stream)  # the default stream given as a stream: the default stream's path
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 73, np.float32))
    if _native():
        assert g._handle.entry.armed_stream is s and g._handle.entry.armed


def test_a_replay_on_a_stream_keeps_stream_ordered_memory_safe(dev, add) -> None:
    """A buffer the graph reads on a stream is noted there: freed while that stream still runs
    the replays, its block is not handed to work on a third stream before they are done."""
    fill = kb.compile(
        kb.Source(
            'extern "C" __global__ void fill(float* y, float v, int n) {'
            " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = v; }",
            "cuda",
            name="fill",
        ),
        dev,
    )
    s, s3 = dev.stream(), dev.stream()
    x = kb.asarray(np.ones(N, np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    g = _graph(dev, add, x, y)
    dev.synchronize()
    for _ in range(400):
        g.replay(s)  # after the first, in C
    x.close()  # freed while s may still run the replays that read it
    z = kb.empty(N, "float32", dev)  # the same size: x's block, once s is done with it
    fill.launch(N // 256, 256, (z, np.float32(7), np.int32(N)), stream=s3)
    s3.synchronize()
    s.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 400, np.float32))
    np.testing.assert_array_equal(z.numpy(), np.full(N, 7, np.float32))
    g.close()
