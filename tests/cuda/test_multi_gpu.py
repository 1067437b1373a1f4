"""Two GPUs: peer copies and their ordering, arrays and streams of the wrong device, per-device
allocators. Skips where there are fewer than two CUDA devices, also under
``--kernelbay-require=cuda`` (a 1-GPU machine runs the CUDA suite, not these); a machine with
no usable CUDA device still fails under that flag."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading

import kernelbay as kb
import kernelbay_cuda as kc
import numpy as np
import pytest
from kernelbay.testing import require_device

pytestmark = pytest.mark.kernelbay_device("cuda")

# Spins ``spin`` clock cycles, then writes p[i] = seed * 2654435761 + i: a kernel slow enough
# that a copy not ordered after it reads the old contents.
FILL = r"""
extern "C" __global__ void fill(unsigned int* p, unsigned int seed, long long n, long long spin) {
    long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = seed * 2654435761u + (unsigned int)i;
}
"""

ADD = r"""
extern "C" __global__ void add(unsigned int* p, unsigned int by, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += by;
}
"""

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

MIB = 1 << 20


@pytest.fixture(scope="module")
def devs() -> tuple[kb.Device, kb.Device]:
    require_device("cuda")  # no CUDA at all: skip, or fail under --kernelbay-require=cuda
    cuda = [d for d in kb.devices() if d.backend == "cuda"]
    if len(cuda) < 2:
        pytest.skip(f"only {len(cuda)} CUDA device(s) here; these tests need 2")
    return cuda[0], cuda[1]


def pattern(seed: int, n: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint64) + seed * 2654435761) & 0xFFFFFFFF).astype(np.uint32)


def fill(dev: kb.Device, a: kb.Array, seed: int, spin_ms: float = 0.0, stream=None) -> None:
    """Queue FILL on ``dev`` writing ``pattern(seed)`` into ``a`` (no synchronisation)."""
    k = kb.compile(kb.Source(FILL, "cuda"), dev)
    spin = np.int64(dev.properties["clock_khz"] * spin_ms)
    k.launch(256, 256, (a, np.uint32(seed), np.int64(a.size), spin), stream=stream)


def spin(dev: kb.Device, ms: float, stream=None) -> kb.Array:
    """Keep ``stream`` of ``dev`` busy for about ``ms`` milliseconds; keep the result alive
    until then."""
    scratch = kb.empty(1, np.uint32, dev)
    fill(dev, scratch, 0, ms, stream)
    return scratch


@pytest.mark.parametrize(
    ("shape", "dtype"), [((1000,), np.uint8), ((3, 5), np.float32), ((64 * MIB,), np.uint8)], ids=["1KB", "2d", "64MiB"]
)
def test_peer_copy_both_ways(devs, shape, dtype) -> None:
    d0, d1 = devs
    host = np.random.default_rng().integers(0, 255, shape).astype(dtype)
    a0 = kb.asarray(host, device=d0)
    a1 = kb.empty(shape, dtype, d1)
    assert kb.copy(a1, a0) is a1
    np.testing.assert_array_equal(a1.numpy(), host)
    b0 = kb.zeros(shape, dtype, d0)
    kb.copy(b0, a1)
    np.testing.assert_array_equal(b0.numpy(), host)


@pytest.mark.parametrize("source_stream", ["default", "blocking"])
@pytest.mark.parametrize("direction", ["1->0", "0->1"])
def test_copy_waits_for_a_kernel_on_the_source(devs, direction, source_stream) -> None:
    src_dev, dst_dev = (devs[1], devs[0]) if direction == "1->0" else devs
    n = MIB
    src = kb.zeros(n, np.uint32, src_dev)
    dst = kb.zeros(n, np.uint32, dst_dev)
    s = src_dev.stream() if source_stream == "blocking" else None
    for seed in (1, 2, 3):
        fill(src_dev, src, seed, spin_ms=20, stream=s)
        kb.copy(dst, src)  # no synchronisation: the copy must wait for the kernel by itself
        np.testing.assert_array_equal(dst.numpy(), pattern(seed, n), err_msg=f"round {seed}")


@pytest.mark.parametrize("overwrite", ["kernel", "freed-and-reused"])
def test_later_work_on_the_source_waits_for_the_copy(devs, overwrite) -> None:
    d0, d1 = devs
    n = 16 * MIB  # 64 MiB of uint32
    src = kb.empty(n, np.uint32, d1)
    fill(d1, src, 7)
    dst = kb.zeros(n, np.uint32, d0)
    s0 = d0.stream()
    busy = spin(d0, 50, s0)  # the copy queued behind this starts about 50 ms from now
    kb.copy(dst, src, stream=s0)
    if overwrite == "kernel":
        fill(d1, src, 8)  # must not run before the copy has read src
        again = src
    else:
        handle = src.handle
        src.close()
        again = kb.empty(n, np.uint32, d1)
        assert again.handle == handle, "the caching allocator did not hand the block out again"
        fill(d1, again, 8)
    s0.synchronize()
    del busy
    np.testing.assert_array_equal(dst.numpy(), pattern(7, n))
    np.testing.assert_array_equal(again.numpy(), pattern(8, n))


@pytest.mark.parametrize("non_blocking", [False, True])
def test_async_copy_on_a_stream_of_the_destination(devs, non_blocking) -> None:
    d0, d1 = devs
    n = 4 * MIB
    src = kb.empty(n, np.uint32, d0)
    fill(d0, src, 11, spin_ms=10)
    dst = kb.zeros(n, np.uint32, d1)
    d1.synchronize()  # dst's zeros are in place before a non-blocking stream writes it
    if non_blocking:  # kb.Stream is blocking; the deprecated 0.1 name still makes non-blocking ones
        with pytest.warns(DeprecationWarning):
            s1 = kc.Stream(d1, non_blocking=True)
    else:
        s1 = d1.stream()
    add = kb.compile(kb.Source(ADD, "cuda"), d1)
    kb.copy(dst, src, stream=s1)
    add.launch(-(-n // 256), 256, (dst, 1, n), stream=s1)  # ordered after the copy on s1
    s1.synchronize()
    np.testing.assert_array_equal(dst.numpy(), pattern(11, n) + np.uint32(1))


def test_copy_with_a_stream_of_the_wrong_device_raises(devs) -> None:
    d0, d1 = devs
    a0, a1 = kb.zeros(16, np.float32, d0), kb.zeros(16, np.float32, d1)
    with pytest.raises(kb.InvalidArgumentError, match="stream of cuda:0"):
        kb.copy(a1, a0, stream=d0.stream())


def test_concurrent_peer_copies_from_threads(devs) -> None:
    d0, d1 = devs
    n = 256 * 1024
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for r in range(10):
                seed = 100 * t + r
                a = kb.asarray(pattern(seed, n), device=d0 if r % 2 else d1)
                b = kb.empty(n, np.uint32, d1 if r % 2 else d0)
                kb.copy(b, a)
                np.testing.assert_array_equal(b.numpy(), pattern(seed, n))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_peer_access_enabled_where_possible(devs) -> None:
    import ctypes

    from kernelbay_cuda import _driver, devices

    _driver.context(1)  # the driver initialised, as any copy would have
    lib = _driver.libcuda()
    d = _driver.driver()
    for a, b in ((0, 1), (1, 0)):
        can = ctypes.c_int()
        _driver.check(lib.cuDeviceCanAccessPeer(ctypes.byref(can), int(d.cuDeviceGet(a)[1]), int(d.cuDeviceGet(b)[1])))
        assert devices.peer_access(a, b) is bool(can.value)


def test_copies_without_peer_access(devs) -> None:
    # A fresh process that never enables peer access: the driver stages the copy through the host.
    script = textwrap.dedent(
        """
        import numpy as np, kernelbay as kb
        from kernelbay_cuda import devices
        devices.peer_access = lambda a, b: False
        d0, d1 = kb.device("cuda:0"), kb.device("cuda:1")
        host = np.arange(3 << 20, dtype=np.uint32)
        a0 = kb.asarray(host, device=d0)
        a1 = kb.empty(host.shape, host.dtype, d1)
        kb.copy(a1, a0)
        b0 = kb.zeros(host.shape, host.dtype, d0)
        kb.copy(b0, a1)
        assert (a1.numpy() == host).all() and (b0.numpy() == host).all()
        print("OK")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=600)
    assert out.stdout.strip().endswith("OK"), out.stdout + out.stderr


def test_kernel_rejects_an_array_of_the_other_device(devs) -> None:
    d0, d1 = devs
    k = kb.compile(kb.Source(SAXPY, "cuda"), d0)
    n = 64
    x0, y0 = kb.asarray(np.ones(n, np.float32), device=d0), kb.zeros(n, np.float32, d0)
    x1 = kb.asarray(np.ones(n, np.float32), device=d1)
    with pytest.raises(kb.InvalidArgumentError, match="lives on cuda:1"):
        k.launch(1, n, (x1, y0, np.float32(1), np.int32(n)))
    k.launch(1, n, (x0, y0, np.float32(1), np.int32(n)))  # sets up the fast path for these types
    k.launch(1, n, (x0, y0, np.float32(1), np.int32(n)))
    with pytest.raises(kb.InvalidArgumentError, match="lives on cuda:1"):
        k.launch(1, n, (x1, y0, np.float32(1), np.int32(n)))
    np.testing.assert_array_equal(y0.numpy(), np.full(n, 2, np.float32))


def test_launch_rejects_a_stream_of_the_other_device(devs) -> None:
    d0, d1 = devs
    k = kb.compile(kb.Source(ADD, "cuda"), d0)
    a = kb.zeros(32, np.int32, d0)
    s0, s1 = d0.stream(), d1.stream()
    with pytest.raises(kb.InvalidArgumentError, match="stream of cuda:1"):
        k.launch(1, 32, (a, 1, 32), stream=s1)
    k.launch(1, 32, (a, 1, 32), stream=s0)
    k.launch(1, 32, (a, 1, 32), stream=s0)
    with pytest.raises(kb.InvalidArgumentError, match="stream of cuda:1"):
        k.launch(1, 32, (a, 1, 32), stream=s1)
    s0.synchronize()
    np.testing.assert_array_equal(a.numpy(), np.full(32, 2, np.int32))


def test_kernels_on_both_devices_interleaved_from_one_thread(devs) -> None:
    # Before each launch the other device's context was made current (by kb.zeros there): a
    # launch must run on its kernel's device all the same.
    d0, d1 = devs
    n = 4096
    k0, k1 = kb.compile(kb.Source(ADD, "cuda"), d0), kb.compile(kb.Source(ADD, "cuda"), d1)
    a0, a1 = kb.zeros(n, np.int32, d0), kb.zeros(n, np.int32, d1)
    for _ in range(10):
        kb.zeros(8, np.int32, d1)
        k0.launch(n // 256, 256, (a0, 1, n))
        kb.zeros(8, np.int32, d0)
        k1.launch(n // 256, 256, (a1, 2, n))
    peer = kb.empty(n, np.int32, d0)
    kb.copy(peer, a1)
    np.testing.assert_array_equal(a0.numpy(), np.full(n, 10, np.int32))
    np.testing.assert_array_equal(a1.numpy(), np.full(n, 20, np.int32))
    np.testing.assert_array_equal(peer.numpy(), np.full(n, 20, np.int32))


def test_allocator_stats_are_per_device(devs) -> None:
    d0, d1 = devs
    gc.collect()  # arrays of earlier tests are freed now, not in the middle of this one
    d0.clear_cache()
    d1.clear_cache()
    before0, before1 = d0.memory_stats(), d1.memory_stats()
    assert before0.cached == 0 and before1.cached == 0
    b = kb.buffer(8 * MIB, d1)
    assert d1.memory_stats().active == before1.active + 8 * MIB
    assert d0.memory_stats().active == before0.active
    b.close()
    assert d1.memory_stats().cached >= 8 * MIB
    assert d0.memory_stats().cached == 0
    d1.clear_cache()
    assert d1.memory_stats().cached == 0
    old = kc.set_memory_limit(d1, before1.active + 16 * MIB)
    try:
        assert d1.memory_stats().limit == before1.active + 16 * MIB
        assert d0.memory_stats().limit == before0.limit
        kb.buffer(32 * MIB, d0).close()  # cuda:1's limit does not bound cuda:0
        with pytest.raises(kb.OutOfMemoryError, match="cuda:1"):
            kb.buffer(32 * MIB, d1)
    finally:
        kc.set_memory_limit(d1, old)


@pytest.mark.parametrize("n", [1000, 16 * MIB])
def test_asarray_and_numpy_across_devices(devs, n) -> None:
    d0, d1 = devs
    host = pattern(5, n)
    x0 = kb.asarray(host, device=d0)
    x1 = kb.asarray(x0, device=d1)
    assert x1.device == d1 and x0.device == d0 and x1.handle != x0.handle
    np.testing.assert_array_equal(x1.numpy(), host)
    np.testing.assert_array_equal(np.asarray(x1), host)
    assert kb.asarray(x1) is x1
    f1 = kb.asarray(x0, dtype=np.float64, device=d1)
    assert f1.device == d1 and f1.dtype == np.float64
    np.testing.assert_array_equal(f1.numpy(), host.astype(np.float64))
    back = kb.asarray(x1, device=d0)
    np.testing.assert_array_equal(back.numpy(), host)
