"""Behaviour on a real NVIDIA GPU. Skips without one; fails instead under --kernelbay-require=cuda."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
import threading
import time

import kernelbay as kb
import kernelbay_cuda as kc
import numpy as np
import pytest

pytestmark = pytest.mark.kernelbay_device("cuda")

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture
def dev() -> kb.Device:
    return kb.device("cuda:0")


def test_device_facts(dev) -> None:
    p = dev.properties
    assert dev.name and p["compute_capability"][0] >= 3
    assert p["total_memory"] > 1 << 30 and p["multiprocessor_count"] > 0


def test_saxpy_with_occupancy_block(dev) -> None:
    n = 1 << 20
    rng = np.random.default_rng()
    xs, ys = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    k = kb.compile(kb.Source(SAXPY, "cuda"), dev)
    x, y = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev)
    block = k.handle.occupancy_block(0)
    k.launch(-(-n // block), None, (x, y, np.float32(3), np.int32(n)))
    np.testing.assert_allclose(y.numpy(), 3 * xs + ys, rtol=1e-5, atol=1e-6)  # the GPU fuses a*x+y


def test_template_kernel_by_name_expression(dev) -> None:
    src = r"""
    template <typename T> __global__ void axpy(const T* x, T* y, T a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }"""
    n = 1000
    xs, ys = np.random.default_rng().standard_normal((2, n))
    k = kb.compile(kb.Source(src, "cuda", name="axpy<double>"), dev)
    x, y = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev)
    k.launch(4, 256, (x, y, np.float64(-2), np.int32(n)))
    np.testing.assert_allclose(y.numpy(), -2 * xs + ys)
    with pytest.raises(kb.InvalidArgumentError, match="float32"):
        k.launch(4, 256, (x, y, np.float32(1), np.int32(n)))


def test_shared_memory_reduction(dev) -> None:
    src = r"""
    extern "C" __global__ void block_sum(const float* x, float* out, int n) {
        __shared__ float s[256];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        s[threadIdx.x] = i < n ? x[i] : 0.0f;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) atomicAdd(out, s[0]);
    }"""
    n = 100_003
    xs = np.random.default_rng().random(n).astype(np.float32)
    k = kb.compile(kb.Source(src, "cuda"), dev)
    out = kb.zeros(1, "float32", device=dev)
    k.launch(-(-n // 256), 256, (kb.asarray(xs, device=dev), out, n))
    assert out.numpy()[0] == pytest.approx(float(xs.astype(np.float64).sum()), rel=1e-4)


def test_dynamic_shared_memory_over_48k(dev) -> None:
    src = r"""
    extern "C" __global__ void big(float* out, int m) {
        extern __shared__ float s[];
        for (int j = threadIdx.x; j < m; j += blockDim.x) s[j] = (float)(j % 7);
        __syncthreads();
        if (threadIdx.x == 0) { float t = 0; for (int j = 0; j < m; ++j) t += s[j]; out[blockIdx.x] = t; }
    }"""
    m = 96 * 1024 // 4
    k = kb.compile(kb.Source(src, "cuda"), dev)
    out = kb.zeros(2, "float32", device=dev)
    k.launch(2, 256, (out, m), shared_mem=m * 4)
    assert out.numpy().tolist() == [float(sum(j % 7 for j in range(m)))] * 2
    too_much = dev.properties["max_shared_per_block_optin"] + 4
    with pytest.raises(kb.InvalidArgumentError, match="dynamic shared memory"):
        k.launch(1, 32, (out, m), shared_mem=too_much)


SPIN = r"""
extern "C" __global__ void spin(long long cycles, int* flag) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    if (threadIdx.x == 0) atomicAdd(flag, 1);
}"""


def test_streams_overlap_and_events_time_them(dev) -> None:
    # kc.Stream and kc.Event as 0.1 documented them: deprecated aliases of kb.Stream and kb.Event.
    k = kb.compile(kb.Source(SPIN, "cuda"), dev)
    flag = kb.zeros(1, "int32", device=dev)
    cycles = np.int64(dev.properties["clock_khz"] * 50)  # about 50 ms
    with pytest.warns(DeprecationWarning, match=r"kernelbay_cuda\.Stream is deprecated"):
        s1, s2 = kc.Stream(dev), kc.Stream(dev)
    assert type(s1) is kb.Stream and isinstance(dev.stream(), kc.Stream) and issubclass(kb.Stream, kc.Stream)
    k.launch(1, 32, (np.int64(1000), flag), stream=s1)
    s1.synchronize()
    with pytest.warns(DeprecationWarning, match=r"kernelbay_cuda\.Event is deprecated"):
        start, end = kc.Event(dev).record(s1), kc.Event(dev)
    assert isinstance(start, kb.Event) and isinstance(s1.record(), kc.Event)
    k.launch(1, 32, (cycles, flag), stream=s1)
    end.record(s1)
    end.synchronize()
    alone = end.elapsed(start)
    # The best of a few tries: a busy host can only delay the second launch (adding time), never
    # make two serial kernels look overlapped, so the first try under 1.6x proves the overlap.
    tries, both = 0, float("inf")
    while tries < 5 and both >= 1.6 * alone:
        t0 = time.perf_counter()
        k.launch(1, 32, (cycles, flag), stream=s1)
        k.launch(1, 32, (cycles, flag), stream=s2)
        s1.synchronize()
        s2.synchronize()
        both = min(both, (time.perf_counter() - t0) * 1e3)
        tries += 1
    assert alone > 20
    assert both < 1.6 * alone, f"two streams took {both:.1f} ms, one kernel {alone:.1f} ms: no overlap"
    assert flag.numpy()[0] == 2 + 2 * tries


def test_graph_capture_and_replay(dev) -> None:
    src = 'extern "C" __global__ void inc(int* p, int by) { atomicAdd(p, by); }'
    k = kb.compile(kb.Source(src, "cuda"), dev)
    acc = kb.zeros(1, "int32", device=dev)
    with pytest.warns(DeprecationWarning, match=r"kernelbay_cuda\.Graph is deprecated"):
        g = kc.Graph(dev)  # 0.1's stream capture, kept by the deprecated alias of kb.Graph
    assert isinstance(g, kb.Graph) and isinstance(dev.graph(), kc.Graph)
    with g.capture() as s:
        for i in range(10):
            k.launch(1, 1, (acc, i), stream=s)
    assert g.nodes == 10
    assert acc.numpy()[0] == 0  # captured, not run
    for _ in range(3):
        g.replay()
    g.synchronize()
    assert acc.numpy()[0] == 3 * 45


def test_a_deprecated_non_blocking_stream(dev) -> None:
    from kernelbay_cuda import _driver

    with pytest.warns(DeprecationWarning):
        s = kc.Stream(dev, non_blocking=True, priority=0)
    assert type(s) is kb.Stream and not s.is_default
    flags = ctypes.c_uint()
    assert _driver.libcuda().cuStreamGetFlags(s.handle.ctypes_handle, ctypes.byref(flags)) == 0
    assert flags.value == 1  # CU_STREAM_NON_BLOCKING
    assert kc.default_stream(dev) is dev.default_stream
    s.close()


def test_out_of_bounds_kernel_raises_launch_error(tmp_path) -> None:
    script = textwrap.dedent(
        r"""
        import numpy as np, kernelbay as kb
        dev = kb.device("cuda:0")
        k = kb.compile(kb.Source('extern "C" __global__ void oob(int* p) { p[threadIdx.x + (1LL << 36)] = 1; }', "cuda"), dev)
        a = kb.zeros(4, "int32", device=dev)
        k.launch(1, 32, (a,))
        try:
            dev.synchronize()
        except kb.LaunchError as e:
            print("FIRST", e)
        try:
            kb.zeros(4, "int32", device=dev).numpy()
        except kb.LaunchError as e:
            print("LATER", e)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert "FIRST" in out.stdout, out.stdout + out.stderr
    first = next(line for line in out.stdout.splitlines() if line.startswith("FIRST"))
    assert "oob" in first and "(1, 1, 1)" in first and "(32, 1, 1)" in first and "ILLEGAL_ADDRESS" in first
    assert "LATER" in out.stdout and "unusable" in out.stdout


def test_allocator_reuses_blocks_and_reports(dev) -> None:
    dev.clear_cache()
    a = kb.buffer(1 << 20, dev)
    p = a.handle
    before = dev.memory_stats()
    a.close()
    assert dev.memory_stats().cached >= 1 << 20
    b = kb.buffer(1 << 20, dev)
    assert b.handle == p
    assert dev.memory_stats().active == before.active
    small = [kb.buffer(4, dev) for _ in range(100)]
    assert len({s.handle for s in small}) == 100
    b.close()
    dev.clear_cache()
    assert dev.memory_stats().cached == 0


def test_out_of_memory_names_the_figures(dev) -> None:
    dev.clear_cache()
    old = kc.set_memory_limit(dev, dev.memory_stats().active + (64 << 20))
    try:
        keep = kb.buffer(32 << 20, dev)
        with pytest.raises(kb.OutOfMemoryError, match=r"active \d+, cached \d+, peak \d+"):
            kb.buffer(48 << 20, dev)
        keep.close()
        kb.buffer(48 << 20, dev).close()  # fits once the other is gone
    finally:
        kc.set_memory_limit(dev, old)
    with pytest.raises(kb.OutOfMemoryError):
        kc.set_memory_limit(dev, None)
        try:
            kb.buffer(dev.properties["total_memory"] * 2, dev)
        finally:
            kc.set_memory_limit(dev, old)


@pytest.mark.parametrize("n", [1000, 3 << 20, 50_000_017])
def test_pageable_and_pinned_round_trips(dev, n) -> None:
    host = np.random.default_rng().integers(0, 255, n, dtype=np.uint8)
    d = kb.asarray(host, device=dev)
    back = np.zeros_like(host)
    kb.copy(back, d)
    np.testing.assert_array_equal(back, host)
    pinned = kc.pinned_empty(n, np.uint8)
    kb.copy(pinned, d)
    np.testing.assert_array_equal(pinned, host)
    d2 = kb.empty(n, np.uint8, dev)
    kb.copy(d2, pinned)
    dev.synchronize()
    np.testing.assert_array_equal(d2.numpy(), host)


def test_repeated_results_land_in_pooled_pinned_memory(dev, monkeypatch) -> None:
    # a.numpy() / np.asarray(a) / np.array(a) of a size asked for before: one DMA into a pooled
    # page-locked block (hostpool.py), the block back in the pool when the array dies; an upload
    # from a result keeps the pageable semantics (read when kb.copy returns, so writing to it or
    # dropping it at once changes nothing); KERNELBAY_CUDA_PINNED_RESULTS=0 turns it off.
    from kernelbay_cuda import copies, hostpool

    monkeypatch.setattr(hostpool, "_pool", hostpool.HostPool(1 << 30))
    n = (6 << 20) + 7
    host = np.random.default_rng(3).integers(0, 255, n, dtype=np.uint8)
    d = kb.asarray(host, device=dev)
    first = d.numpy()
    assert not copies.is_pinned(first)  # a one-off: the pageable path
    results = [d.numpy(), np.asarray(d), np.array(d)]
    for r in [first, *results]:
        np.testing.assert_array_equal(r, host)
    assert all(type(copies.pinned_owner(r)) is hostpool.Lease for r in results)
    assert len({r.ctypes.data for r in results}) == 3
    held = hostpool.pool().stats()["held"]
    del results, r
    assert hostpool.pool().stats()["cached"] == held  # every block back
    d2 = kb.empty(n, np.uint8, dev)
    s = dev.stream()
    other = kb.asarray(host[::-1].copy(), device=dev)
    for _ in range(5):  # an upload from a result array on a busy stream, then written and dropped
        src = d.numpy()
        assert copies.is_pinned(src)
        busy = kb.empty(64 << 20, np.uint8, dev)
        kb.copy(busy, np.zeros(64 << 20, np.uint8), stream=s)  # keep the stream busy first
        kb.copy(d2, src, stream=s)
        src[:] = 0
        del src
        for _ in range(3):
            np.testing.assert_array_equal(other.numpy(), host[::-1])
        s.synchronize()
        np.testing.assert_array_equal(d2.numpy(), host)
        busy.close()
    s.close()
    monkeypatch.setattr(hostpool, "_pool", None)
    monkeypatch.setenv("KERNELBAY_CUDA_PINNED_RESULTS", "0")
    assert not copies.is_pinned(d.numpy()) and not copies.is_pinned(d.numpy())
    monkeypatch.setattr(hostpool, "_pool", None)


def test_pinned_results_behave_as_numpy_arrays_across_fork(dev, monkeypatch) -> None:
    # A result in page-locked memory (a shared mapping) read and written in a forked child: the
    # child sees the data, and its writes stay its own, as with any numpy array.
    import os

    from kernelbay_cuda import copies, hostpool

    monkeypatch.setattr(hostpool, "_pool", hostpool.HostPool(1 << 30))
    d = kb.asarray(np.arange(1 << 20, dtype=np.float32), device=dev)
    d.numpy()
    r = d.numpy()
    assert copies.is_pinned(r)
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ok = float(r[12345]) == 12345.0
            r[:] = -1.0
            os.write(wr, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(wr)
    got = os.read(rd, 1)
    os.waitpid(pid, 0)
    os.close(rd)
    assert got == b"1"
    np.testing.assert_array_equal(r, np.arange(1 << 20, dtype=np.float32))
    monkeypatch.setattr(hostpool, "_pool", None)


@pytest.mark.parametrize("path", ["native", "python"])
def test_staged_pageable_copies_keep_order_and_data(dev, path, monkeypatch) -> None:
    # The staging pipeline (C threads, or Python threads without the native helper): sizes that
    # are not a multiple of a chunk, an unaligned view, back-to-back copies reusing the pinned
    # buffers, a user stream, and two Python threads copying at once.
    from kernelbay.concurrency import OnceMap
    from kernelbay_cuda import copies

    monkeypatch.setattr(copies, "_stagers", OnceMap())
    if path == "python":
        monkeypatch.setattr(copies, "_native_stager", lambda threads: (None, ()))
    rng = np.random.default_rng(7)
    n = (37 << 20) + 12345
    a, b = (rng.integers(0, 255, n, dtype=np.uint8) for _ in range(2))
    d = kb.empty(n, np.uint8, dev)
    kb.copy(d, a)
    kb.copy(d, b)  # queued behind the first: b wins
    out = np.empty(n, np.uint8)
    kb.copy(out, d)
    np.testing.assert_array_equal(out, b)
    assert (copies._stager(dev.index).stage is None) == (path == "python")
    big = rng.integers(0, 255, n + 3, dtype=np.uint8)
    kb.copy(d, big[3:])  # an unaligned start
    kb.copy(out, d)
    np.testing.assert_array_equal(out, big[3:])
    s = dev.stream()
    kb.copy(d, a, stream=s)
    again = np.zeros(n, np.uint8)
    kb.copy(again, d, stream=s)
    np.testing.assert_array_equal(again, a)
    s.close()
    d2 = kb.empty(n, np.uint8, dev)
    errors: list[BaseException] = []

    def other() -> None:
        try:
            for _ in range(3):
                kb.copy(d2, b)
                got = np.empty(n, np.uint8)
                kb.copy(got, d2)
                np.testing.assert_array_equal(got, b)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    for _ in range(3):
        kb.copy(d, a)
        kb.copy(out, d)
        np.testing.assert_array_equal(out, a)
    t.join()
    assert not errors


def test_launch_from_another_thread(dev) -> None:
    k = kb.compile(kb.Source(SAXPY, "cuda"), dev)
    n = 1024
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y = kb.zeros(n, "float32", device=dev)
    k.launch(4, 256, (x, y, np.float32(1), np.int32(n)))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                k.launch(4, 256, (x, y, np.float32(1), np.int32(n)))
            dev.synchronize()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors
    np.testing.assert_array_equal(y.numpy(), np.full(n, 6, np.float32))


def test_cuda_array_interface_both_ways(dev) -> None:
    cp = pytest.importorskip("cupy")
    a = kb.asarray(np.arange(10, dtype=np.float32), device=dev)
    c = cp.asarray(a)
    assert c.data.ptr == a.handle
    np.testing.assert_array_equal(cp.asnumpy(c * 2), np.arange(10) * 2)
    src = cp.arange(6, dtype=cp.int32).reshape(2, 3)
    b = kb.asarray(src, device=dev)
    assert b.shape == (2, 3) and b.dtype == np.int32 and b.handle == src.data.ptr
    np.testing.assert_array_equal(b.numpy(), np.arange(6).reshape(2, 3))
    s = cp.cuda.Stream()
    k = kb.compile(kb.Source(SAXPY, "cuda"), dev)
    y = kb.zeros(10, "float32", device=dev)
    k.launch(1, 32, (a, y, np.float32(1), np.int32(10)), stream=s)
    s.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.arange(10, dtype=np.float32))


def test_torch_tensor_without_copy(dev) -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32, device="cuda:0")
    torch.cuda.synchronize()
    a = kb.asarray(t, device=dev)
    assert a.handle == t.data_ptr() and a.shape == (12,)
    np.testing.assert_array_equal(a.numpy(), np.arange(12, dtype=np.float32))


def test_precompiled_ptx_and_cubin(dev, tmp_path) -> None:
    from kernelbay_cuda import nvrtc

    cc = dev.properties["compute_capability"]
    img = nvrtc.compile_image(kb.Source(SAXPY, "cuda", name="saxpy"), cc)
    ptx = nvrtc.compile_image(
        kb.Source(SAXPY, "cuda", name="saxpy", options=(f"--gpu-architecture=compute_{cc[0]}{cc[1]}",)), cc
    )
    assert img.kind == "cubin" and ptx.kind == "ptx"
    for lang, code in (("cubin", img.data), ("ptx", ptx.data.rstrip(b"\0").decode())):
        k = kb.compile(kb.Source(code, lang, name="saxpy"), dev)
        y = kb.zeros(8, "float32", device=dev)
        k.launch(1, 8, (kb.asarray(np.ones(8, np.float32), device=dev), y, 2.0, 8))
        np.testing.assert_array_equal(y.numpy(), np.full(8, 2, np.float32))
