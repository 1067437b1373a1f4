"""The generated launch fast path: skipping the re-pack of unchanged values must never launch
with stale arguments. Real GPU only; skips without one (fails under --kernelbay-require=cuda)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import kernelbay as kb
import numpy as np
import pytest

pytestmark = pytest.mark.kernelbay_device("cuda")

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
N = 256


@pytest.fixture
def dev() -> kb.Device:
    return kb.device("cuda:0")


@pytest.fixture(params=["native", "bindings"])
def launcher(request, monkeypatch) -> str:
    """Each test runs with the native launch helper and with the cuda.bindings fallback."""
    from kernelbay_cuda import native

    if request.param == "native":
        if native.module() is None:
            pytest.skip(f"the native helpers are unavailable here: {native.status()}")
    else:
        native.module()
        monkeypatch.setattr(native, "_state", [None, "turned off by the test"])
    return request.param


@pytest.fixture
def k(dev, launcher) -> kb.Kernel:
    # A distinct source per launcher: kernels are cached per source, each with its fast path.
    return kb.compile(kb.Source(SAXPY, "cuda", name="saxpy", options=("-DFASTPATH_TEST", f"-DVIA_{launcher}")), dev)


def test_fast_path_uses_the_chosen_launcher(dev, k, launcher) -> None:
    from kernelbay_cuda import native

    x, y = _arr(dev, 1.0), _arr(dev, 0.0)
    for _ in range(3):
        k.launch(1, N, (x, y, np.float32(1), np.int32(N)))
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 3.0, np.float32))
    fast = k.handle.entry
    if launcher == "native":
        assert type(fast) is native.module().FastLaunch  # the whole fast path in C
    else:
        assert fast.__globals__["LAUNCH"] is not getattr(native.module(), "launch", None)


def test_every_1d_spelling_takes_the_fast_path(dev, k, launcher) -> None:
    # The README writes grid=(n,): in C and in the generated Python path alike, (n,), (n, 1, 1)
    # and n are one launch and none of them takes the slow path.
    if launcher == "native":
        pytest.skip("the C fast path takes every geometry: tests/cuda/test_call_forms.py")
    x, y = _arr(dev, 1.0), _arr(dev, 0.0)
    args = (x, y, np.float32(1), np.int32(N))
    k.launch(1, N, args)  # makes the fast path
    slow = []
    from kernelbay_cuda import launcher as L

    original = L.slow_launch
    fast = k.handle.entry
    fast.__globals__["slow"] = lambda *a: (slow.append(a[1:3]), original(*a))[1]
    try:
        for grid, block in (((1,), (N,)), ((1, 1, 1), (N, 1, 1)), ((1, 1), N), (1, (N,))):
            k.launch(grid, block, args)
    finally:
        fast.__globals__["slow"] = original
    dev.synchronize()
    assert slow == []
    np.testing.assert_array_equal(y.numpy(), np.full(N, 5.0, np.float32))


ALLKINDS = r"""
extern "C" __global__ void kinds(double* o, signed char b, short h, int i, long long q, unsigned char B,
                                 unsigned short H, unsigned int I, unsigned long long Q, float f, double d, bool t) {
    o[0] = b; o[1] = h; o[2] = i; o[3] = (double)q; o[4] = B; o[5] = H; o[6] = I; o[7] = (double)Q;
    o[8] = f; o[9] = d; o[10] = t ? 1.0 : 0.0;
}
"""


def test_every_scalar_kind_on_the_fast_path(dev, launcher) -> None:
    k = kb.compile(kb.Source(ALLKINDS, "cuda", options=(f"-DVIA_{launcher}",)), dev)
    o = kb.zeros(11, "float64", device=dev)

    def args(b, h, i, q, B, H, I, Q, f, d, t):  # noqa: E741
        return (
            o,
            np.int8(b),
            np.int16(h),
            np.int32(i),
            np.int64(q),
            np.uint8(B),
            np.uint16(H),
            np.uint32(I),
            np.uint64(Q),
            np.float32(f),
            np.float64(d),
            np.bool_(t),
        )

    for vals in [
        (-1, -2, -3, -4, 1, 2, 3, 4, 0.5, 0.25, True),
        (-128, 32767, -(2**31), -(2**62), 255, 65535, 2**32 - 1, 2**53, -1.5, 1e300, False),
    ]:
        k.launch(1, 1, args(*vals))
        k.launch(1, 1, args(*vals))  # the second launch takes the fast path
        dev.synchronize()
        want = [float(v) for v in vals]
        np.testing.assert_array_equal(o.numpy(), np.array(want, np.float64))
    # Python numbers where the parameter's size makes them unambiguous
    k2 = kb.compile(kb.Source(SAXPY, "cuda", name="saxpy", options=(f"-DPYNUM_{launcher}",)), dev)
    x, y = _arr(dev, 1.0), _arr(dev, 0.0)
    for a in (1.0, 2, 3.5):
        k2.launch(1, N, (x, y, a, N))
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 6.5, np.float32))
    with pytest.raises(kb.InvalidArgumentError):  # too big for a float parameter: the slow path says so
        k2.launch(1, N, (x, y, 1e300, N))


def test_half_float_argument_uses_the_python_fast_path(dev, launcher) -> None:
    # A 2-byte struct parameter (PTX .b8[2]): a float16 value is accepted for it.
    src = 'struct H2 { unsigned short x; }; extern "C" __global__ void bits(unsigned int* o, H2 h) { o[0] = h.x; }'
    k = kb.compile(kb.Source(src, "cuda", name="bits", options=(f"-DVIA_{launcher}",)), dev)
    o = kb.zeros(1, "uint32", device=dev)
    for v in (1.0, 2.0, -2.0):
        k.launch(1, 1, (o, np.float16(v)))
    dev.synchronize()
    assert o.numpy()[0] == np.float16(-2.0).view(np.uint16)
    assert callable(k.handle.entry) and hasattr(k.handle.entry, "__globals__")  # generated Python


def test_dynamic_shared_memory_raised_after_the_fast_path_exists(dev, launcher) -> None:
    src = r"""
    extern "C" __global__ void smem(float* o, int n) {
        extern __shared__ float s[];
        for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = (float)i;
        __syncthreads();
        if (threadIdx.x == 0) o[0] = s[n - 1];
    }
    """
    k = kb.compile(kb.Source(src, "cuda", name="smem", options=(f"-DVIA_{launcher}",)), dev)
    o = kb.zeros(1, "float32", device=dev)
    k.launch(1, 128, (o, np.int32(16)), shared_mem=64)
    k.launch(1, 128, (o, np.int32(16)), shared_mem=64)  # fast path made with the 48 KiB limit
    big = 80 * 1024
    for _ in range(3):  # the first raises the kernel's limit; the next ones are fast again
        k.launch(1, 128, (o, np.int32(big // 4)), shared_mem=big)
    dev.synchronize()
    assert o.numpy()[0] == big // 4 - 1


def test_closed_stream_is_refused(dev, k) -> None:
    x, y = _arr(dev, 1.0), _arr(dev, 0.0)
    args = (x, y, np.float32(1), np.int32(N))
    s = dev.stream()
    k.launch(1, N, args, stream=s)
    k.launch(1, N, args, stream=s)  # the fast path with this stream
    s.synchronize()
    s.close()
    with pytest.raises(kb.InvalidArgumentError, match="was closed"):
        k.launch(1, N, args, stream=s)
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 2.0, np.float32))


def _arr(dev, value: float) -> kb.Array:
    return kb.asarray(np.full(N, value, np.float32), device=dev)


def test_same_tuple_relaunched_accumulates(dev, k) -> None:
    x, y = _arr(dev, 1.0), _arr(dev, 0.0)
    args = (x, y, np.float32(2), np.int32(N))
    for _ in range(5):
        k.launch(1, N, args)
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 10.0, np.float32))


def test_switching_one_array_repacks(dev, k) -> None:
    x, y1, y2 = _arr(dev, 1.0), _arr(dev, 0.0), _arr(dev, 0.0)
    a, n = np.float32(1), np.int32(N)
    k.launch(1, N, (x, y1, a, n))
    k.launch(1, N, (x, y1, a, n))
    k.launch(1, N, (x, y2, a, n))  # same types, same scalars, another output
    dev.synchronize()
    np.testing.assert_array_equal(y1.numpy(), np.full(N, 2.0, np.float32))
    np.testing.assert_array_equal(y2.numpy(), np.full(N, 1.0, np.float32))


def test_new_scalar_of_equal_type_repacks(dev, k) -> None:
    x, y = _arr(dev, 1.0), _arr(dev, 0.0)
    for a in (1.0, 2.0, 4.0):
        k.launch(1, N, (x, y, np.float32(a), np.int32(N)))
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 7.0, np.float32))


def test_slow_path_in_between_invalidates_the_packed_values(dev, k) -> None:
    x, y1, y2 = _arr(dev, 1.0), _arr(dev, 0.0), _arr(dev, 0.0)
    a, n = np.float32(1), np.int32(N)
    args1 = (x, y1, a, n)
    k.launch(1, N, args1)  # fast path packs args1
    k.launch((1,), (N,), (x, y2, a, n))  # tuple geometry: slow path packs other values
    k.launch(1, N, args1)  # fast path: must not trust its memo
    dev.synchronize()
    np.testing.assert_array_equal(y1.numpy(), np.full(N, 2.0, np.float32))
    np.testing.assert_array_equal(y2.numpy(), np.full(N, 1.0, np.float32))


def test_freed_array_and_reused_pointer(dev, k) -> None:
    x = _arr(dev, 1.0)
    y = _arr(dev, 0.0)
    k.launch(1, N, (x, y, np.float32(1), np.int32(N)))
    dev.synchronize()
    y.close()
    y2 = _arr(dev, 5.0)  # may get the same pointer back from the cache: then equal values
    k.launch(1, N, (x, y2, np.float32(1), np.int32(N)))
    dev.synchronize()
    np.testing.assert_array_equal(y2.numpy(), np.full(N, 6.0, np.float32))
    with pytest.raises(kb.UseAfterFreeError):
        k.launch(1, N, (x, y, np.float32(1), np.int32(N)))


def test_out_of_range_python_int_on_the_fast_path(dev) -> None:
    src = 'extern "C" __global__ void setn(int* p, int n) { p[0] = n; }'
    k = kb.compile(kb.Source(src, "cuda", name="setn"), dev)
    p = kb.zeros(1, "int32", device=dev)
    k.launch(1, 1, (p, 5))
    k.launch(1, 1, (p, 7))
    dev.synchronize()
    assert p.numpy()[0] == 7
    with pytest.raises(kb.InvalidArgumentError, match="does not fit"):
        k.launch(1, 1, (p, 1 << 40))
    k.launch(1, 1, (p, 9))
    dev.synchronize()
    assert p.numpy()[0] == 9


def test_failure_after_fast_path_launch_names_the_kernel() -> None:
    script = textwrap.dedent(
        r"""
        import kernelbay as kb
        dev = kb.device("cuda:0")
        ok = kb.compile(kb.Source('extern "C" __global__ void fine(int* p) { p[0] = 1; }', "cuda"), dev)
        bad = kb.compile(kb.Source('extern "C" __global__ void oob2(int* p, int s) { p[threadIdx.x + ((long long)s << 30)] = 1; }', "cuda"), dev)
        a = kb.zeros(4, "int32", device=dev)
        ok.launch(1, 1, (a,)); ok.launch(1, 1, (a,))
        bad.launch(1, 32, (a, 0)); dev.synchronize()
        bad.launch(1, 32, (a, 64))  # the fast path this time
        try:
            dev.synchronize()
        except kb.LaunchError as e:
            print("FAILED", e)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("FAILED")), "")
    assert "oob2" in line and "(1, 1, 1)" in line and "(32, 1, 1)" in line, out.stdout + out.stderr
