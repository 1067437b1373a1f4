"""kb.Stream, kb.Event and kb.Graph on a real NVIDIA GPU. Skips without one; fails instead under
--kernelbay-require=cuda."""

from __future__ import annotations

import kernelbay as kb
import kernelbay_cuda as kc
import numpy as np
import pytest

pytestmark = pytest.mark.kernelbay_device("cuda")

SRC = r"""
extern "C" __global__ void spin_write(long long cycles, float* out, float v, int n) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
extern "C" __global__ void add(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
"""


@pytest.fixture
def dev() -> kb.Device:
    return kb.device("cuda:0")


@pytest.fixture
def kernels(dev) -> tuple[kb.Kernel, kb.Kernel]:
    return kb.compile(kb.Source(SRC, "cuda", name="spin_write"), dev), kb.compile(
        kb.Source(SRC, "cuda", name="add"), dev
    )


def _ms(dev: kb.Device, ms: float) -> np.int64:
    return np.int64(dev.properties["clock_khz"] * ms)


def test_kb_stream_is_a_cuda_stream(dev) -> None:
    s = dev.stream()
    assert isinstance(s.handle, kc.streams._StreamHandle)
    version, handle = s.__cuda_stream__()
    assert version == 0 and handle == s.handle.handle != 0
    assert dev.default_stream.__cuda_stream__() == (0, 0)
    assert kc.streams.as_stream(s, dev) is s.handle


def test_host_read_waits_for_a_user_stream(dev, kernels) -> None:
    spin, _ = kernels
    n = 1 << 16
    y = kb.zeros(n, device=dev)
    s = dev.stream()
    # The read must meet the kernel still running: a busy host may reach query() after a short
    # kernel ended, so each try spins longer (and writes another value) until it is caught running.
    for v, ms in enumerate((50, 200, 1000, 5000), start=7):
        spin.launch(n // 256, 256, (_ms(dev, ms), y, np.float32(v), np.int32(n)), stream=s)
        if not s.query():  # queued, still running
            break
        assert ms < 5000, "a 5 s kernel had ended before the host asked"
    np.testing.assert_array_equal(y.numpy(), np.full(n, v, np.float32))  # no synchronize


def test_closed_buffer_is_not_reused_while_a_stream_uses_it(dev, kernels) -> None:
    spin, _ = kernels
    n = 1 << 20
    s = dev.stream()
    a = kb.empty(n, device=dev)
    ptr = int(a.handle)
    before = dev.memory_stats()
    spin.launch(n // 256, 256, (_ms(dev, 100), a, np.float32(1), np.int32(n)), stream=s)
    a.close()
    during = dev.memory_stats()
    assert during.cached >= before.cached + 4 * n  # set aside, counted as cached
    b = kb.empty(n, device=dev)
    assert int(b.handle) != ptr  # the kernel still writes the old block
    s.synchronize()
    b.close()
    c, d = kb.empty(n, device=dev), kb.empty(n, device=dev)
    assert ptr in (int(c.handle), int(d.handle))  # reused once the work is done


def test_graph_of_independent_chains_runs_them_concurrently(dev, kernels) -> None:
    spin, add = kernels
    n = 1 << 12
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y1, y2 = kb.zeros(n, device=dev), kb.zeros(n, device=dev)
    with dev.graph() as g:
        spin.launch(1, 256, (_ms(dev, 30), y1, np.float32(1), np.int32(256)))
        spin.launch(1, 256, (_ms(dev, 30), y2, np.float32(1), np.int32(256)))
        for _ in range(5):
            add.launch(n // 256, 256, (x, y1, np.int32(n)))
            add.launch(n // 256, 256, (x, y2, np.int32(n)))
    assert g.steps[1].deps == ()  # the chains share only x, which both only read
    assert g.steps[2].deps == (0,) and g.steps[3].deps == (1,)
    # The best of a few replays: a busy host between the event records can only add time, never
    # make the two 30 ms chains look concurrent, so one replay under 50 ms proves it.
    replays, took = 0, float("inf")
    while replays < 5 and took >= 50:
        start = dev.default_stream.record()
        g.replay()
        end = dev.default_stream.record()
        took = min(took, end.elapsed(start))
        replays += 1
    assert took < 50, f"two independent 30 ms chains took {took:.1f} ms: not concurrent"
    expect = np.ones(n, np.float32) * 5 * replays
    expect[:256] = 1 + 5  # spin_write sets the first 256 to 1 each replay; the 5 adds follow it
    np.testing.assert_array_equal(y1.numpy(), expect)
    np.testing.assert_array_equal(y2.numpy(), expect)


def test_graph_update_and_copy_nodes(dev, kernels) -> None:
    _, add = kernels
    n = 4096
    x = kb.asarray(np.arange(n, dtype=np.float32), device=dev)
    y, z = kb.zeros(n, device=dev), kb.zeros(n, device=dev)
    pinned = kc.pinned_empty(n, "float32")
    with dev.graph() as g:
        add.launch(n // 256, 256, (x, y, np.int32(n)))
        kb.copy(z, y)
        kb.copy(pinned, z)
    assert g._handle is not None  # built natively: kernel and memcpy nodes
    g.replay()
    dev.synchronize()
    np.testing.assert_array_equal(pinned, np.arange(n, dtype=np.float32))
    g.update(0, args=(x, x, np.int32(n)))  # x += x
    g.replay()
    dev.synchronize()
    np.testing.assert_array_equal(x.numpy(), 2 * np.arange(n, dtype=np.float32))


def test_kb_stream_launch_takes_a_cupy_stream(dev, kernels) -> None:
    cp = pytest.importorskip("cupy")
    _, add = kernels
    n = 1024
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y = kb.zeros(n, device=dev)
    cs = cp.cuda.Stream()
    add.launch(n // 256, 256, (x, y, np.int32(n)), stream=cs)
    cs.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.ones(n, np.float32))


def test_a_block_freed_on_its_own_stream_is_reused_there_without_an_event(dev, kernels) -> None:
    spin, _ = kernels
    n = 1 << 20
    s = dev.stream()
    with s:
        a = kb.empty(n, device=dev)
        ptr = int(a.handle)
        spin.launch(n // 256, 256, (_ms(dev, 50), a, np.float32(1), np.int32(n)))
        a.close()
        b = kb.empty(n, device=dev)  # reused at once: later work on s runs after the spin
        assert int(b.handle) == ptr
        spin.launch(n // 256, 256, (np.int64(0), b, np.float32(2), np.int32(n)))
    np.testing.assert_array_equal(b.numpy(), np.full(n, 2, np.float32))
    s.close()


def test_allocate_on_s1_use_on_s2_free_reallocate_on_s1_while_s2_runs(dev, kernels) -> None:
    # The use on s2 is noted; the block waits for s2's work before s1 gets it again.
    spin, _ = kernels
    n = 1 << 20
    s1, s2 = dev.stream(), dev.stream()
    with s1:
        a = kb.zeros(n, device=dev)
    ptr = int(a.handle)
    s1.synchronize()
    spin.launch(n // 256, 256, (_ms(dev, 100), a, np.float32(7), np.int32(n)), stream=s2)
    before = dev.memory_stats()
    a.close()
    assert dev.memory_stats().cached >= before.cached + 4 * n  # set aside behind s2's event
    with s1:
        b = kb.empty(n, device=dev)
        assert int(b.handle) != ptr
        spin.launch(n // 256, 256, (np.int64(0), b, np.float32(3), np.int32(n)))
    s1.synchronize()
    np.testing.assert_array_equal(b.numpy(), np.full(n, 3, np.float32))  # not overwritten by s2's spin
    s2.synchronize()
    b.close()
    with s1:
        c, d = kb.empty(n, device=dev), kb.empty(n, device=dev)
    assert ptr in (int(c.handle), int(d.handle))  # reused once s2's work is done
    s1.close()
    s2.close()


def test_memory_stats_stay_exact_across_streams(dev) -> None:
    kc.allocator.allocator(dev).clear_cache()
    base = dev.memory_stats()
    s = dev.stream()
    with s:
        xs = [kb.empty(1 << 18, device=dev) for _ in range(4)]
    ys = [kb.empty(1 << 18, device=dev) for _ in range(4)]
    st = dev.memory_stats()
    assert st.active - base.active == 8 * (1 << 20)
    for x in xs + ys:
        x.close()
    st = dev.memory_stats()
    assert st.active == base.active and st.cached - base.cached == 8 * (1 << 20)
    s.close()  # its cached blocks go to the default stream: still cached, not lost
    assert dev.memory_stats().cached - base.cached == 8 * (1 << 20)


def test_a_graph_replayed_on_another_stream_holds_its_buffers_until_that_work_is_done(dev, kernels) -> None:
    spin, _ = kernels
    n = 1 << 20
    a = kb.zeros(n, device=dev)  # home: the default stream
    ptr = int(a.handle)
    with dev.graph() as g:
        spin.launch(n // 256, 256, (_ms(dev, 100), a, np.float32(5), np.int32(n)))
    s = dev.stream()
    g.replay(s)
    g.close()
    a.close()
    b = kb.empty(n, device=dev)
    assert int(b.handle) != ptr  # the replay on s still writes the old block
    spin.launch(n // 256, 256, (np.int64(0), b, np.float32(1), np.int32(n)))
    np.testing.assert_array_equal(b.numpy(), np.full(n, 1, np.float32))
    s.synchronize()
    s.close()


def test_a_wide_graph_is_built_as_a_few_chains(dev, kernels) -> None:
    # 64 independent launches: at most MAX_WIDTH of them start the graph (host cost per replay
    # stays near a stream capture's), and every launch still runs.
    _, add = kernels
    n = 256
    xs = [kb.asarray(np.full(n, i, np.float32), device=dev) for i in range(64)]
    ys = [kb.zeros(n, device=dev) for _ in range(64)]
    with dev.graph() as g:
        for x, y in zip(xs, ys):
            add.launch(1, n, (x, y, np.int32(n)))
    g.replay()
    g.replay()
    for i, y in enumerate(ys):
        np.testing.assert_array_equal(y.numpy(), np.full(n, 2 * i, np.float32))
    import ctypes

    count = ctypes.c_size_t(0)
    rc = kc._driver.libcuda().cuGraphGetRootNodes(g._handle.graph, None, ctypes.byref(count))
    assert rc == 0 and count.value == kc.graphs.MAX_WIDTH


def test_a_serial_graph_is_built_as_one_chain(dev, kernels) -> None:
    # dev.graph(serial=True): one root, every launch after the one before it, as a stream capture
    # (the cheapest replay for the host), and every launch still runs.
    import ctypes

    _, add = kernels
    n = 256
    xs = [kb.asarray(np.full(n, i, np.float32), device=dev) for i in range(16)]
    ys = [kb.zeros(n, device=dev) for _ in range(16)]
    with dev.graph(serial=True) as g:
        for x, y in zip(xs, ys):
            add.launch(1, n, (x, y, np.int32(n)))
    g.replay()
    g.replay()
    for i, y in enumerate(ys):
        np.testing.assert_array_equal(y.numpy(), np.full(n, 2 * i, np.float32))
    lib, h = kc._driver.libcuda(), g._handle
    count = ctypes.c_size_t(0)
    assert lib.cuGraphGetRootNodes(h.graph, None, ctypes.byref(count)) == 0 and count.value == 1
    for i, node in enumerate(h.nodes[1:], 1):
        deps = (ctypes.c_void_p * 4)()
        count = ctypes.c_size_t(4)
        assert lib.cuGraphNodeGetDependencies(node, deps, ctypes.byref(count)) == 0
        assert [deps[j] for j in range(count.value)] == [h.nodes[i - 1].value], f"node {i}"
