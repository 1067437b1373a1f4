"""Host memory: alignment, zero-copy views, DLPack in and out."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest

INC = "__global__ void inc(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] += 1.0f; }"


def test_buffers_are_64_byte_aligned(cpu):
    for n in (1, 3, 100, 4097):
        a = kb.empty(n, "uint8", device=cpu)
        assert a.numpy().ctypes.data % 64 == 0


@pytest.mark.parametrize("nbytes", [(1 << 21) - 64, 1 << 21, (4 << 20) + 100, 3 << 20])
def test_large_buffers_start_on_a_huge_page_and_keep_their_guard_page(cpu, nbytes):
    from kernelbay_cpu import allocator
    from kernelbay_cpu.guards import PAGE, guards

    a = kb.zeros(nbytes, "uint8", device=cpu)
    h = a.checked_handle()
    end = h.ptr + -(-nbytes // 64) * 64
    assert end % PAGE == 0 and guards[end] == (h.ptr, nbytes)  # the guard page right after it
    if allocator.HUGE and nbytes >= allocator.HUGE_MIN:
        assert (end - -(-nbytes // PAGE) * PAGE) % allocator.HUGE_PAGE == 0  # its pages from a 2 MiB boundary
    a.numpy()[:] = 7  # every byte is the buffer's
    assert int(a.numpy().sum()) == 7 * nbytes


def test_host_view_shares_memory_with_kernels(cpu):
    a = kb.zeros(8, device=cpu)
    view = a.numpy()
    view[:] = np.arange(8)
    kb.compile(kb.Source(INC, lang="cuda", name="inc"), cpu).launch(1, 8, (a, 8))
    np.testing.assert_array_equal(view, np.arange(8) + 1)  # the kernel's write shows in the old view
    assert np.shares_memory(view, a.numpy())


def test_host_view_outlives_close(cpu):
    a = kb.asarray(np.arange(5, dtype=np.int64), device=cpu)
    view = a.numpy()
    a.close()
    assert view.tolist() == [0, 1, 2, 3, 4]  # still valid memory, not freed under the view


def test_memset_and_memory_stats(cpu):
    before = cpu.memory_stats().active
    a = kb.zeros(1000, "int32", device=cpu)
    assert cpu.memory_stats().active == before + 4000
    assert not a.numpy().any()
    a.close()
    assert cpu.memory_stats().active == before
    assert cpu.memory_stats().peak >= before + 4000


def test_dlpack_export_to_numpy_is_zero_copy(cpu):
    a = kb.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), device=cpu)
    assert a.__dlpack_device__() == (1, 0)
    b = np.from_dlpack(a)
    assert b.shape == (3, 4) and b.dtype == np.float32
    # numpy asks for a versioned capsule, so the view is writable and shares the memory.
    assert b.flags.writeable
    b[2, 3] = 7
    assert a.numpy()[2, 3] == 7
    a.numpy()[1, 2] = 99
    assert b[1, 2] == 99
    assert np.shares_memory(b, a.numpy())


def test_dlpack_copy_and_device_requests(cpu):
    a = kb.asarray(np.arange(5, dtype=np.int32), device=cpu)
    c = np.from_dlpack(a, copy=True)  # a copy: changing it leaves the array alone
    c[0] = 100
    assert a.numpy()[0] == 0
    same = np.from_dlpack(a, copy=False)
    assert np.shares_memory(same, a.numpy())
    host = np.from_dlpack(a, device="cpu")  # the host is this array's own device: no copy needed
    assert np.shares_memory(host, a.numpy())
    with pytest.raises(BufferError, match=r"only this array's own device and the host"):
        a.__dlpack__(dl_device=(2, 0))


class _Producer:
    """A foreign kDLCPU array that is not a numpy array (as torch or jax would be)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, **kw):
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_dlpack_import_is_zero_copy(cpu):
    host = np.arange(6, dtype=np.float32)
    a = kb.asarray(_Producer(host), device=cpu)
    assert a.shape == (6,) and a.dtype == np.float32 and a.device == cpu
    kb.compile(kb.Source(INC, lang="cuda", name="inc"), cpu).launch(1, 8, (a, 6))
    np.testing.assert_array_equal(host, np.arange(6) + 1)  # the kernel wrote into the producer's memory


def test_dlpack_import_of_readonly_memory_copies(cpu):
    host = np.arange(4, dtype=np.int32)
    host.flags.writeable = False
    a = kb.asarray(_Producer(host), device=cpu)
    assert a.numpy().tolist() == [0, 1, 2, 3]
    assert not np.shares_memory(a.numpy(), host)


def test_dlpack_round_trip(cpu):
    a = kb.asarray(np.arange(10, dtype=np.int16), device=cpu)
    shared = np.from_dlpack(a)
    a.numpy()[0] = -5
    assert shared[0] == -5
    writable = np.arange(3, dtype=np.int16)
    b = kb.asarray(_Producer(writable), device=cpu)
    back = np.from_dlpack(b)
    writable[2] = 7
    assert back.tolist() == [0, 1, 7]


def test_copies_between_buffers_and_numpy(cpu):
    src = np.random.default_rng(0).standard_normal(1001)
    a = kb.asarray(src, device=cpu)
    b = kb.empty(1001, "float64", device=cpu)
    kb.copy(b, a)
    out = np.empty(1001)
    kb.copy(out, b)
    np.testing.assert_array_equal(out, src)
    with pytest.raises(kb.InvalidArgumentError):
        kb.copy(b, np.zeros(3))
