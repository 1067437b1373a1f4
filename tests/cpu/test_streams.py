"""Asynchronous cpu streams: queued work, worker order, events, failures, stream-ordered memory,
and graphs replayed by one native call."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import kernelbay as kb
import numpy as np
import pytest

SRC = r"""
#include <stdexcept>
extern "C" __global__ void spin_write(float* y, long long iters, float v) {
    volatile float acc = 0.0f;
    for (long long i = 0; i < iters; ++i) acc = acc * 0.5f + 1.0f;
    if (blockIdx.x == 0 && threadIdx.x == 0) y[0] = v + 0.0f * acc;
}
extern "C" __global__ void add(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
extern "C" __global__ void boom(float* y) {
    if (threadIdx.x == 0) throw std::runtime_error("boom on purpose");
}
"""

LONG = np.int64(60_000_000)  # a few hundred ms on one core


@pytest.fixture(scope="module")
def k(dev):
    return {n: kb.compile(kb.Source(SRC, "cuda", name=n), dev) for n in ("spin_write", "add", "boom")}


def test_work_on_a_user_stream_is_queued(dev, k) -> None:
    y = kb.zeros(1, device=dev)
    s = dev.stream()
    k["spin_write"].launch(1, 1, (y, LONG, np.float32(5)), stream=s)
    assert not s.query()  # returned before the kernel finished
    s.synchronize()
    assert s.query()
    assert y.numpy()[0] == 5


def test_default_stream_and_host_reads_wait_for_user_streams(dev, k) -> None:
    n = 1000
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y = kb.zeros(n, device=dev)
    s = dev.stream()
    k["spin_write"].launch(1, 1, (y, LONG, np.float32(5)), stream=s)
    k["add"].launch(4, 256, (x, y, np.int32(n)))  # default stream: after s's work
    out = y.numpy()
    assert out[0] == 6 and out[1] == 1


def test_a_failure_is_raised_by_the_next_synchronize(dev, k) -> None:
    y = kb.zeros(4, device=dev)
    s = dev.stream()
    k["boom"].launch(1, 1, (y,), stream=s)  # queued: no error yet
    with pytest.raises(kb.LaunchError, match="boom on purpose"):
        s.synchronize()
    s.synchronize()  # reported once


def test_event_orders_a_second_stream(dev, k) -> None:
    n = 1000
    y = kb.zeros(n, device=dev)
    z = kb.zeros(n, device=dev)
    s1, s2 = dev.stream(), dev.stream()
    k["spin_write"].launch(1, 1, (y, LONG, np.float32(3)), stream=s1)
    e = s1.record()
    s2.wait(e)
    k["add"].launch(4, 256, (y, z, np.int32(n)), stream=s2)
    assert not e.query()
    s2.synchronize()
    assert e.query() and z.numpy()[0] == 3
    assert e.elapsed(e) == 0.0


def test_a_buffer_closed_while_queued_stays_alive_until_the_work_is_done(dev, k) -> None:
    s = dev.stream()
    y = kb.zeros(1 << 20, device=dev)
    view = y.handle.array
    k["spin_write"].launch(1, 1, (y, LONG, np.float32(9)), stream=s)
    del view
    y.close()
    gc.collect()
    s.synchronize()  # the worker wrote into memory it kept alive: no crash


def test_queued_launch_checks_its_arguments_at_once(dev, k) -> None:
    s = dev.stream()
    with pytest.raises(kb.InvalidArgumentError, match="takes 3 arguments"):
        k["add"].launch(1, 1, (kb.zeros(1, device=dev),), stream=s)
    with pytest.raises(kb.InvalidArgumentError, match="kb.Stream of a cpu device"):
        k["add"].launch(1, 1, (), stream="not a stream")


def test_graph_replays_natively_on_any_stream(dev, k) -> None:
    n = 1000
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y = kb.zeros(n, device=dev)
    with dev.graph() as g:
        for _ in range(100):
            k["add"].launch(4, 256, (x, y, np.int32(n)))
        kb.copy(x, y)
    assert g._handle is not None and g.steps[1].deps == (0,)
    assert g.steps[0].reads == (x, y) and g.steps[0].writes == (y,)  # const float* x: read only
    g.replay()
    np.testing.assert_array_equal(x.numpy(), np.full(n, 100, np.float32))
    s = dev.stream()
    g.replay(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(n, 100 + 100 * 100, np.float32))
    g.update(0, args=(y, x, np.int32(n)))  # the first launch now writes x
    assert g.steps[100].deps == tuple(range(100))  # x: written by 0, read by 1..99


def test_graph_replay_reports_a_failing_step(dev, k) -> None:
    y = kb.zeros(4, device=dev)
    with dev.graph() as g:
        k["boom"].launch(1, 1, (y,))
    with pytest.raises(kb.LaunchError, match="boom on purpose"):
        g.replay()


# A barrier kernel (dynamic shared memory, __syncthreads): it runs as fibers, and a stream or a
# graph must hand it the launch's shared memory as the default stream does.
FIBER_SRC = r"""
extern "C" __global__ void reverse_block(const float* x, float* y) {
    extern __shared__ float tile[];
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    tile[t] = x[base + t];
    __syncthreads();
    y[base + t] = tile[blockDim.x - 1 - t];
}
"""


def test_barrier_kernels_on_streams_and_in_graphs(dev) -> None:
    rev = kb.compile(kb.Source(FIBER_SRC, "cuda", name="reverse_block"), dev)
    assert rev.handle.fibers
    b, blocks = 128, 8
    xs = np.arange(b * blocks, dtype=np.float32)
    want = xs.reshape(blocks, b)[:, ::-1].reshape(-1)
    x = kb.asarray(xs, device=dev)
    y, z = kb.zeros(b * blocks, device=dev), kb.zeros(b * blocks, device=dev)
    s = dev.stream()
    rev.launch(blocks, b, (x, y), shared_mem=4 * b, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(y.numpy(), want)
    with pytest.raises(kb.InvalidArgumentError, match="shared memory"):
        rev.launch(blocks, b, (x, y), shared_mem=1 << 30, stream=s)  # checked in the caller
    with dev.graph() as g:
        rev.launch(blocks, b, (x, z), shared_mem=4 * b)
        rev.launch(blocks, b, (z, y), shared_mem=4 * b)  # reversed twice: x again
    g.replay()
    np.testing.assert_array_equal(z.numpy(), want)
    np.testing.assert_array_equal(y.numpy(), xs)
    kb.copy(y, np.zeros(b * blocks, np.float32))
    g.replay(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(y.numpy(), xs)


# fork() with work queued on a user stream: the child has no worker thread, and that work runs in
# the parent only. The child must not hang on a host read, must be told at the stream's next
# synchronize, must reach the events recorded then, and must release the memory that work held.
FORK_SCRIPT = r'''
import os, signal, sys, numpy as np, kernelbay as kb
SRC = """
extern "C" __global__ void gate(const volatile int* flag, long long limit) {
    for (long long i = 0; i < limit && flag[0] == 0; ++i) {}
}
extern "C" __global__ void fill(float* y, float v) { y[threadIdx.x] = v; }
"""
dev = kb.device("cpu")
gate = kb.compile(kb.Source(SRC, "cuda", name="gate"), dev)
fill = kb.compile(kb.Source(SRC, "cuda", name="fill"), dev)
flag = kb.zeros(1, dtype="int32", device=dev)
open_gate = flag.numpy()
y, x = kb.zeros(4, device=dev), kb.zeros(1024, device=dev)
before = dev.memory_stats()
s = dev.stream()
gate.launch(1, 1, (flag, np.int64(4_000_000_000)), stream=s)
fill.launch(1, 4, (y, np.float32(5)), stream=s)
fill.launch(1, 4, (x, np.float32(1)), stream=s)
e = s.record()
x.close()  # held by queued work: set aside
pid = os.fork()
if pid == 0:
    signal.alarm(600)  # a stuck child ends; generous for a loaded machine
    out = []
    out.append(f"read {y.numpy()[0]}")  # the child's memory as it was at fork
    try:
        s.synchronize()
        out.append("sync ok")
    except kb.LaunchError as exc:
        out.append("sync LaunchError" if "fork()" in str(exc) else f"sync other {exc}")
    s.synchronize()  # reported once
    out.append(f"event {e.query()}")
    out.append(f"cached {dev.memory_stats().cached - before.cached}")
    fill.launch(1, 4, (y, np.float32(7)), stream=s)  # the stream works again in the child
    s.synchronize()
    out.append(f"again {y.numpy()[0]}")
    print("child:", ", ".join(out), flush=True)
    os._exit(0)
open_gate[0] = 1
_, st = os.waitpid(pid, 0)
s.synchronize()
print("child exit", os.waitstatus_to_exitcode(st), flush=True)
print("parent:", y.numpy()[0], dev.memory_stats().cached - before.cached, flush=True)
'''


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_work_queued_before_fork_is_reported_in_the_child(dev) -> None:
    r = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "child: read 0.0, sync LaunchError, event True, cached 0, again 7.0" in r.stdout, r.stdout
    assert "child exit 0" in r.stdout and "parent: 5.0 0" in r.stdout, r.stdout
