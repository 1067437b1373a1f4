"""Stream-ordered memory on the cpu backend: a buffer closed while queued work on a user stream
still uses it stays in place, counted as cached by ``memory_stats``, until that work is done.

Each test holds its stream behind a gate kernel (it spins until the host writes a flag through a
view taken beforehand), so the work using the closed buffer is certainly still queued while the
figures are read; the gate gives up after a few seconds, so a failing test cannot hang.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import kernelbay as kb
import numpy as np
import pytest

SRC = r"""
extern "C" __global__ void gate(const volatile int* flag, long long limit) {
    for (long long i = 0; i < limit && flag[0] == 0; ++i) {}
}
extern "C" __global__ void add(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
"""

N = 1 << 16  # floats: 256 KiB per buffer
LIMIT = np.int64(4_000_000_000)  # the gate gives up after seconds, not minutes


@pytest.fixture(scope="module")
def k(dev):
    return {n: kb.compile(kb.Source(SRC, "cuda", name=n), dev) for n in ("gate", "add")}


def _queue(how: str, k, dev, s, x, y) -> None:
    """Queue on ``s`` work that reads ``x`` (and writes ``y``)."""
    if how == "launch":
        k["add"].launch(N // 256, 256, (x, y, np.int32(N)), stream=s)
    elif how == "copy":
        kb.copy(y, x, stream=s)
    elif how == "memset":  # writes x: no read, but the memory must stay until it has run
        x._binding.memset(x, 7, x.nbytes, s)
    else:
        with dev.graph() as g:
            k["add"].launch(N // 256, 256, (x, y, np.int32(N)))
        g.replay(stream=s)


@pytest.mark.parametrize("how", ["launch", "copy", "memset", "graph replay"])
def test_a_closed_buffer_in_use_counts_as_cached_until_the_stream_is_done(dev, k, how) -> None:
    flag = kb.zeros(1, dtype="int32", device=dev)
    open_gate = flag.numpy()  # a view: writing it needs no wait for the streams
    x = kb.asarray(np.arange(N, dtype=np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    s = dev.stream()
    gc.collect()
    before = dev.memory_stats()
    try:
        k["gate"].launch(1, 1, (flag, LIMIT), stream=s)
        _queue(how, k, dev, s, x, y)
        x.close()
        during = dev.memory_stats()
        assert not s.query()  # the work using x was still queued when the figures were read
    finally:
        open_gate[0] = 1
    assert during.active == before.active - x.nbytes
    assert during.cached == before.cached + x.nbytes
    assert during.peak >= before.active + before.cached
    s.synchronize()
    after = dev.memory_stats()
    assert after.active == during.active
    assert after.cached == before.cached  # released once the work was done
    if how != "memset":  # the queued work read the closed buffer's data
        np.testing.assert_array_equal(y.numpy(), np.arange(N, dtype=np.float32))


def test_a_buffer_closed_twice_over_is_released_once(dev, k) -> None:
    flag = kb.zeros(1, dtype="int32", device=dev)
    open_gate = flag.numpy()
    x = kb.asarray(np.ones(N, np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    s1, s2 = dev.stream(), dev.stream()
    gc.collect()
    before = dev.memory_stats()
    try:
        k["gate"].launch(1, 1, (flag, LIMIT), stream=s1)
        k["add"].launch(N // 256, 256, (x, y, np.int32(N)), stream=s1)
        s2.wait(s1.record())
        k["add"].launch(N // 256, 256, (x, y, np.int32(N)), stream=s2)  # x used on two streams
        x.close()
        x.close()  # harmless
        assert dev.memory_stats().cached == before.cached + x.nbytes
    finally:
        open_gate[0] = 1
    dev.synchronize()
    assert dev.memory_stats().cached == before.cached
    assert dev.memory_stats().active == before.active - x.nbytes
    np.testing.assert_array_equal(y.numpy(), np.full(N, 2, np.float32))


# Isolated mode (a worker process runs the kernels in shared memory) is chosen at import: a
# subprocess. There the closed buffer's shared region must stay mapped for the queued launch.
ISOLATED = (
    textwrap.dedent(
        """
    import numpy as np, kernelbay as kb
    SRC = '''%s'''
    dev = kb.device("cpu")
    gate = kb.compile(kb.Source(SRC, "cuda", name="gate"), dev)
    add = kb.compile(kb.Source(SRC, "cuda", name="add"), dev)
    n = 4096
    flag = kb.zeros(1, dtype="int32", device=dev)
    open_gate = flag.numpy()
    x = kb.asarray(np.arange(n, dtype=np.float32), device=dev)
    y = kb.zeros(n, device=dev)
    s = dev.stream()
    before = dev.memory_stats()
    gate.launch(1, 1, (flag, np.int64(4_000_000_000)), stream=s)
    add.launch(n // 256, 256, (x, y, np.int32(n)), stream=s)
    x.close()
    during = dev.memory_stats()
    queued = not s.query()
    open_gate[0] = 1
    s.synchronize()
    after = dev.memory_stats()
    print(queued, during.cached - before.cached, after.cached - before.cached, y.numpy()[n - 1])
    """
    )
    % SRC
)


@pytest.mark.skipif(sys.platform != "linux", reason="isolated mode uses Linux's memfd")
def test_isolated_mode_keeps_a_closed_buffer_mapped_for_queued_work(dev) -> None:
    env = dict(os.environ, KERNELBAY_CPU_ISOLATE="1")
    r = subprocess.run([sys.executable, "-c", ISOLATED], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", str(4096 * 4), "0", "4095.0"]


def test_a_graph_closed_while_its_replay_is_queued_still_runs(dev, k) -> None:
    flag = kb.zeros(1, dtype="int32", device=dev)
    open_gate = flag.numpy()
    x = kb.asarray(np.ones(N, np.float32), device=dev)
    y = kb.zeros(N, device=dev)
    with dev.graph() as g:
        for _ in range(3):
            k["add"].launch(N // 256, 256, (x, y, np.int32(N)))
    s = dev.stream()
    try:
        k["gate"].launch(1, 1, (flag, LIMIT), stream=s)
        g.replay(stream=s)
        g.close()  # the queued replay keeps the steps' argument slots
        del g
        gc.collect()
    finally:
        open_gate[0] = 1
    s.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 3, np.float32))
