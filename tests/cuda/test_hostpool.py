"""The pool of page-locked result arrays (``hostpool.py``) without a GPU: the driver's
``cuMemHostAlloc``/``cuMemFreeHost`` stand in as Python functions over host memory,
so the pool's rules (second request, size classes, limit, reuse, fork) are checked
here; tests/cuda/test_gpu.py checks the real copies."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np
import pytest
from kernelbay_cuda import _driver, copies, hostpool

MiB = 1 << 20


class FakeLib:
    """Host memory as "page-locked" memory."""

    def __init__(self) -> None:
        self.live: dict[int, ctypes.Array[Any]] = {}
        self.allocs = self.frees = 0
        self.fail = False

    def cuMemHostAlloc(self, pp: Any, size: Any, flags: int) -> int:
        if self.fail:
            return 2  # CUDA_ERROR_OUT_OF_MEMORY
        buf = (ctypes.c_char * size.value)()
        addr = ctypes.addressof(buf)
        self.live[addr] = buf
        pp._obj.value = addr
        self.allocs += 1
        return 0

    def cuMemFreeHost(self, p: Any) -> int:
        del self.live[p.value]
        self.frees += 1
        return 0


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> FakeLib:
    fake = FakeLib()
    monkeypatch.setattr(_driver, "libcuda", lambda: fake)
    monkeypatch.setattr(_driver, "ensure_current", lambda index: None)
    return fake


def test_size_classes_round_up_by_at_most_an_eighth() -> None:
    assert hostpool.size_class(MiB) == MiB
    assert hostpool.size_class(4 * MiB) == 4 * MiB
    assert hostpool.size_class(4 * MiB + 1) == 5 * MiB
    assert hostpool.size_class(257 * MiB) == 288 * MiB
    for n in (MiB + 7, 3 * MiB, 17 * MiB + 3, 100 * MiB, (1 << 30) + 5):
        c = hostpool.size_class(n)
        assert n <= c <= n + max(MiB, n // 8) and c % MiB == 0


def test_a_size_is_pooled_from_its_second_request(lib: FakeLib) -> None:
    pool = hostpool.HostPool(1 << 30)
    assert pool.take(4 * MiB, 0) is None  # one-off copies keep the pageable path
    assert lib.allocs == 0
    lease = pool.take(4 * MiB, 0)
    assert lease is not None and lib.allocs == 1
    arr = np.asarray(lease)
    assert arr.nbytes == 4 * MiB and arr.flags.writeable and arr.base is lease
    ptr = arr.ctypes.data
    del arr, lease  # the last view gone: back to the pool
    again = pool.take(4 * MiB - 100, 0)  # the same class
    assert again is not None and lib.allocs == 1 and again.block.ptr == ptr
    assert np.asarray(again).nbytes == 4 * MiB - 100
    assert pool.take(MiB - 1, 0) is None  # below the minimum: never pooled


def test_live_results_never_share_a_block(lib: FakeLib) -> None:
    pool = hostpool.HostPool(1 << 30)
    pool.take(2 * MiB, 0)
    arrays = [np.asarray(pool.take(2 * MiB, 0)) for _ in range(3)]
    assert len({a.ctypes.data for a in arrays}) == 3
    for i, a in enumerate(arrays):
        a[:] = i
    assert [int(a[0]) for a in arrays] == [0, 1, 2]
    assert pool.stats()["in_use"] == 6 * MiB


def test_the_limit_counts_blocks_in_use_and_cached(lib: FakeLib) -> None:
    pool = hostpool.HostPool(8 * MiB)
    pool.take(4 * MiB, 0)
    a = pool.take(4 * MiB, 0)
    b = pool.take(4 * MiB, 0)
    assert a is not None and b is not None
    assert pool.take(4 * MiB, 0) is None  # 12 MiB would pass the limit: np.empty instead
    del a
    pool.take(2 * MiB, 0)  # first request of its class
    c = pool.take(2 * MiB, 0)  # fits only once the cached 4 MiB block is freed
    assert c is not None and lib.frees == 1 and pool.stats()["held"] == 6 * MiB
    assert hostpool.HostPool(0).take(4 * MiB, 0) is None  # KERNELBAY_CUDA_PINNED_RESULTS=0


def test_a_failed_allocation_gives_a_pageable_array(lib: FakeLib) -> None:
    pool = hostpool.HostPool(1 << 30)
    lib.fail = True
    pool.take(2 * MiB, 0)
    assert pool.take(2 * MiB, 0) is None and pool.stats()["held"] == 0


def test_result_arrays_and_their_views_are_pinned(lib: FakeLib) -> None:
    """copies.copy lands a copy into a pooled result (or any view of it) with one DMA."""
    pool = hostpool.HostPool(1 << 30)
    pool.take(2 * MiB, 0)
    arr = np.asarray(pool.take(2 * MiB, 0)).view(np.float32)[10:]
    assert copies.pinned_owner(arr).__class__ is hostpool.Lease and copies.is_pinned(arr)
    assert copies.pinned_owner(np.empty(4)) is None


def test_cleared_pool_frees_cached_blocks_only(lib: FakeLib) -> None:
    pool = hostpool.HostPool(1 << 30)
    pool.take(2 * MiB, 0)
    keep = pool.take(2 * MiB, 0)
    drop = pool.take(2 * MiB, 0)
    del drop
    pool.clear()
    assert lib.frees == 1 and pool.stats() == {"held": 2 * MiB, "cached": 0, "in_use": 2 * MiB, "limit": 1 << 30}
    assert keep is not None
    del keep
    assert pool.stats()["cached"] == 2 * MiB


def test_a_forked_child_neither_reuses_nor_frees_the_parents_blocks(
    lib: FakeLib, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = hostpool.HostPool(1 << 30)
    pool.take(2 * MiB, 0)
    lease = pool.take(2 * MiB, 0)
    pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: pid + 1)
    del lease
    assert pool.stats()["cached"] == 0  # not returned in the "child"
    assert pool.take(2 * MiB, 0) is None
    pool.clear()
    assert lib.frees == 0


def test_the_limit_setting_is_checked(lib: FakeLib, monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelbay as kb

    monkeypatch.setattr(hostpool, "_pool", None)
    monkeypatch.setenv(hostpool.ENV_LIMIT, "lots")
    with pytest.raises(kb.InvalidArgumentError, match=hostpool.ENV_LIMIT):
        hostpool.pool()
    monkeypatch.setenv(hostpool.ENV_LIMIT, "64MiB")
    assert hostpool.pool().limit == 64 * MiB
    monkeypatch.setattr(hostpool, "_pool", None)


def test_a_forked_child_gets_private_copies_of_live_results(lib: FakeLib) -> None:
    """Page-locked memory is a shared mapping: a child's writes would reach the parent. Here the
    "block" is a shared anonymous mapping, as cuMemHostAlloc's is."""
    import mmap

    shared = mmap.mmap(-1, 2 * MiB, flags=mmap.MAP_SHARED)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(shared))
    block = hostpool._Block(addr, 2 * MiB)
    pool = hostpool.HostPool(1 << 30)
    arr = np.asarray(hostpool.Lease(block, 2 * MiB, pool))
    arr[:] = 7
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reads the parent's values, writes its own
        try:
            ok = int(arr[123]) == 7 and int(arr[-1]) == 7
            arr[:] = 9
            os.write(w, b"1" if ok and int(arr[5]) == 9 else b"0")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    os.close(r)
    assert got == b"1", "the child did not see the result array's contents"
    assert int(arr[5]) == 7 and int(arr.max()) == 7, "the child's writes reached the parent"
    del arr
    pool.cached.clear()
    shared.close()
