"""DLPack on CUDA arrays. The capsule bookkeeping is checked without a GPU; the exchanges with
PyTorch, CuPy and JAX need one (skip without; fail instead under --kernelbay-require=cuda)."""

from __future__ import annotations

import gc
import os
import weakref

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cuda import interop

gpu = pytest.mark.kernelbay_device("cuda")


class _FakeDevice:
    index = 1


class _FakeArray:
    """Just what the export reads: a device pointer, shape, dtype and device index."""

    def __init__(self, shape, dtype) -> None:
        self.shape, self.dtype, self.device = shape, np.dtype(dtype), _FakeDevice()

    def checked_handle(self) -> int:
        return 0x7F0000001000


@pytest.mark.parametrize(
    ("max_version", "name"), [(None, b"dltensor"), ((1, 0), b"dltensor_versioned"), ((1, 3), b"dltensor_versioned")]
)
def test_capsule_describes_the_array_and_keeps_it_alive(max_version, name) -> None:
    a = _FakeArray((2, 3, 4), "float32")
    alive = weakref.ref(a)
    cap = interop.to_dlpack(a, None, max_version)
    assert interop._is_valid(cap, name)
    del a
    gc.collect()
    assert alive() is not None
    ptr, dev, shape, dt, contiguous, read_only = interop.read_capsule(cap)
    assert (ptr, dev, shape, dt) == (0x7F0000001000, (2, 1), (2, 3, 4), np.float32)
    assert contiguous and not read_only
    del cap  # never consumed: the capsule's destructor releases the array
    gc.collect()
    assert alive() is None


def test_consumed_capsule_lives_until_the_consumer_lets_go_and_cannot_be_consumed_twice() -> None:
    a = _FakeArray((5,), "bool")
    alive = weakref.ref(a)
    cap = interop.to_dlpack(a, None, (1, 0))
    del a
    owner = interop.consume_capsule(cap)
    with pytest.raises(BufferError, match="consumed only once"):
        interop.consume_capsule(cap)
    del cap
    gc.collect()
    assert alive() is not None
    del owner
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "float16", "float64", "complex128", "bool"])
def test_dtypes_round_trip(dtype) -> None:
    _, _, shape, dt, _, _ = interop.read_capsule(interop.to_dlpack(_FakeArray((0, 3), dtype), None, None))
    assert shape == (0, 3) and dt == np.dtype(dtype)


def test_undescribable_dtype_and_stream_zero_are_refused() -> None:
    with pytest.raises(BufferError, match="DLPack cannot describe"):
        interop.to_dlpack(_FakeArray((1,), [("a", "i4")]), None, None)
    with pytest.raises(kb.InvalidArgumentError, match="0 is ambiguous"):
        interop.to_dlpack(_FakeArray((1,), "f4"), 0, None)


def test_a_failing_consumer_keeps_its_own_error() -> None:
    # numpy rejects a CUDA tensor and drops the capsule with its error set: the release must not
    # replace that error (a ctypes-callback destructor would turn it into SystemError).
    class Producer:
        def __dlpack__(self, **kw):
            return interop.to_dlpack(_FakeArray((3,), "int32"), None, kw.get("max_version"))

        def __dlpack_device__(self):
            return (2, 1)

    with pytest.raises((RuntimeError, BufferError, ValueError)) as got:
        np.from_dlpack(Producer())
    assert not isinstance(got.value, SystemError)


# --- on a GPU ------------------------------------------------------------------------------


class _DLPackOnly:
    """A producer offering DLPack and nothing else (no __cuda_array_interface__)."""

    def __init__(self, x) -> None:
        self.x = x

    def __dlpack__(self, **kw):
        return self.x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


@pytest.fixture
def dev() -> kb.Device:
    return kb.device("cuda:0")


@gpu
def test_torch_from_dlpack_shares_memory(dev) -> None:
    torch = pytest.importorskip("torch")
    a = kb.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), device=dev)
    assert a.__dlpack_device__() == (2, 0)
    t = torch.from_dlpack(a)
    assert t.device == torch.device("cuda:0") and t.shape == (3, 4) and t.data_ptr() == a.handle
    t += 1  # torch's default stream is the legacy one, where kernelbay reads
    np.testing.assert_array_equal(a.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
    del a
    gc.collect()
    assert t.sum().item() == sum(range(1, 13))  # the tensor keeps the memory


@gpu
def test_torch_on_a_side_stream_waits_for_kernelbay(dev) -> None:
    torch = pytest.importorskip("torch")
    n = 1 << 24
    a = kb.asarray(np.ones(n, np.float32), device=dev)
    s = torch.cuda.Stream()  # non-blocking: only the event handshake orders it
    with torch.cuda.stream(s):
        t = torch.from_dlpack(a)
        total = t.sum()
    s.synchronize()
    assert total.item() == n


@gpu
def test_cupy_from_dlpack_shares_memory(dev) -> None:
    cp = pytest.importorskip("cupy")
    a = kb.asarray(np.arange(10, dtype=np.int32), device=dev)
    c = cp.from_dlpack(a)
    assert c.data.ptr == a.handle and c.dtype == np.int32
    c *= 3
    np.testing.assert_array_equal(a.numpy(), np.arange(10) * 3)


@gpu
def test_legacy_capsule_is_consumed_once(dev) -> None:
    torch = pytest.importorskip("torch")
    a = kb.asarray(np.arange(6, dtype=np.float64), device=dev)
    cap = a.__dlpack__()  # max_version None: the legacy capsule
    assert interop._is_valid(cap, b"dltensor")
    t = torch.utils.dlpack.from_dlpack(cap)
    assert t.data_ptr() == a.handle
    t[0] = 42
    assert a.numpy()[0] == 42
    with pytest.raises(Exception, match="(?i)consum|invalid|capsule"):
        torch.utils.dlpack.from_dlpack(cap)


@gpu
def test_asarray_adopts_a_dlpack_only_producer(dev) -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(8, dtype=torch.int16, device="cuda:0").reshape(2, 4)
    a = kb.asarray(_DLPackOnly(t))
    assert a.device == dev and a.handle == t.data_ptr() and a.shape == (2, 4) and a.dtype == np.int16
    t += 1
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), np.arange(1, 9).reshape(2, 4))
    del t
    gc.collect()
    np.testing.assert_array_equal(a.numpy(), np.arange(1, 9).reshape(2, 4))  # a owns the capsule now
    # Non-contiguous producers are copied by the core (through the host) instead.
    u = torch.arange(12, dtype=torch.float32, device="cuda:0").reshape(3, 4)[:, ::2]
    assert interop.from_external(_DLPackOnly(u), dev) is None


@gpu
def test_asarray_takes_a_jax_gpu_array_without_a_copy(dev) -> None:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")
    import jax.numpy as jnp

    x = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), gpus[0])
    x.block_until_ready()
    for obj in (x, _DLPackOnly(x)):
        a = kb.asarray(obj, device=dev)
        assert a.handle == x.unsafe_buffer_pointer() and a.shape == (3, 4) and a.dtype == np.float32
        np.testing.assert_array_equal(a.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))


@gpu
def test_dlpack_host_and_copy_requests(dev) -> None:
    a = kb.asarray(np.arange(6, dtype=np.float32), device=dev)
    h = np.from_dlpack(a, device="cpu")  # numpy asks for the host: a host copy
    np.testing.assert_array_equal(h, np.arange(6, dtype=np.float32))
    with pytest.raises(BufferError, match="copy=False"):
        a.__dlpack__(dl_device=(1, 0), copy=False)
    torch = pytest.importorskip("torch")
    t = torch.from_dlpack(a.__dlpack__(max_version=(1, 0), copy=True))
    assert t.data_ptr() != a.handle  # a device copy, not the array's memory
    t += 1
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(6, dtype=np.float32) + 1)
