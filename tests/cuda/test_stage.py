"""The native helper's staging threads (``_stage.c``'s ``Stager``) without a GPU: the driver
functions it calls are ctypes callbacks standing in for it, with host memory as the "device".
Every chunk must arrive once, in the right place, in both directions, across back-to-back runs,
a first run right after the threads start, and more workers than chunks."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np
import pytest
from kernelbay_cuda import native

_i, _vp, _sz, _u64, _uint = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint


class FakeDriver:
    """cuCtxSetCurrent, cuStreamWaitEvent, cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2,
    cuEventRecord and cuEventSynchronize, synchronous: a "device pointer" is a host address."""

    def __init__(self) -> None:
        self.calls = {"h2d": 0, "d2h": 0, "record": 0, "sync": 0, "ctx": 0, "wait": 0}
        self.fail_at: int | None = None  # the n-th memcpy returns this code

        def ctx(c):
            self.calls["ctx"] += 1
            return 0

        def wait(s, e, f):
            self.calls["wait"] += 1
            return 0

        def h2d(dst, src, n, s):
            self.calls["h2d"] += 1
            if self.fail_at is not None and self.calls["h2d"] == self.fail_at:
                return 700  # CUDA_ERROR_ILLEGAL_ADDRESS
            ctypes.memmove(dst, src, n)
            return 0

        def d2h(dst, src, n, s):
            self.calls["d2h"] += 1
            ctypes.memmove(dst, src, n)
            return 0

        def record(e, s):
            self.calls["record"] += 1
            return 0

        def sync(e):
            self.calls["sync"] += 1
            return 0

        self.keep = [
            ctypes.CFUNCTYPE(_i, _vp)(ctx),
            ctypes.CFUNCTYPE(_i, _vp, _vp, _uint)(wait),
            ctypes.CFUNCTYPE(_i, _u64, _vp, _sz, _vp)(h2d),
            ctypes.CFUNCTYPE(_i, _vp, _u64, _sz, _vp)(d2h),
            ctypes.CFUNCTYPE(_i, _vp, _vp)(record),
            ctypes.CFUNCTYPE(_i, _vp)(sync),
        ]
        self.fns = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in self.keep)


def _run(st: Any, *args: Any) -> Any:
    """st.run(*args) with a deadline: a run whose threads missed the job would wait forever."""
    out: list[Any] = []

    def call() -> None:
        try:
            out.append(("value", st.run(*args)))
        except BaseException as exc:
            out.append(("raised", exc))

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "Stager.run did not return within 30 s: its threads missed the job"
    kind, v = out[0]
    if kind == "raised":
        raise v
    return v


@pytest.fixture
def stager_type():
    mod = native.module()
    if mod is None or not hasattr(mod, "Stager"):
        pytest.skip(f"the native helpers are unavailable here: {native.status()}")
    return mod.Stager


def _workers(n: int, chunk: int, k: int) -> tuple[tuple, list[np.ndarray]]:
    keep = [np.empty(chunk, np.uint8) for _ in range(n * k)]
    shares = tuple(
        (1000 + w, 2000 + w, tuple(b.ctypes.data for b in keep[w * k : (w + 1) * k]), tuple(range(1, k + 1)))
        for w in range(n)
    )
    return shares, keep


@pytest.mark.parametrize(
    ("threads", "chunk", "k", "nbytes"),
    [
        (4, 4096, 2, 100_003),
        (3, 1000, 4, 7000),
        (8, 1 << 16, 3, 5000),
        (12, 1000, 2, 13_007),
        (5, 512, 3, 512 * 7),
        (8, 128, 3, 200_001),
    ],
)
def test_every_byte_arrives_in_both_directions(stager_type, threads, chunk, k, nbytes) -> None:
    drv = FakeDriver()
    shares, keep = _workers(threads, chunk, k)
    rng = np.random.default_rng(nbytes)
    for _ in range(3):  # a new Stager each time: its first run comes right after its threads start
        st = stager_type(threads)
        host = rng.integers(0, 255, nbytes, dtype=np.uint8)
        dev = np.zeros(nbytes, np.uint8)
        rcs = _run(st, True, drv.fns, 1, 2, dev.ctypes.data, host.ctypes.data, nbytes, chunk, shares)
        assert rcs == [0] * min(threads, -(-nbytes // chunk))
        np.testing.assert_array_equal(dev, host)
        back = np.zeros(nbytes, np.uint8)
        _run(st, False, drv.fns, 1, 2, dev.ctypes.data, back.ctypes.data, nbytes, chunk, shares)
        np.testing.assert_array_equal(back, host)
        for _ in range(5):  # back to back on the same threads
            host2 = rng.integers(0, 255, nbytes, dtype=np.uint8)
            _run(st, True, drv.fns, 1, 2, dev.ctypes.data, host2.ctypes.data, nbytes, chunk, shares)
            np.testing.assert_array_equal(dev, host2)
    chunks = -(-nbytes // chunk)
    assert drv.calls["h2d"] == 3 * 6 * chunks and drv.calls["d2h"] == 3 * chunks
    assert st.threads == threads
    del keep


def test_a_failed_driver_call_is_reported_and_the_threads_go_on(stager_type) -> None:
    drv = FakeDriver()
    shares, keep = _workers(2, 1024, 2)
    st = stager_type(2)
    host = np.arange(10_000, dtype=np.uint8)
    dev = np.zeros_like(host)
    drv.fail_at = 3
    rcs = _run(st, True, drv.fns, 1, 2, dev.ctypes.data, host.ctypes.data, host.nbytes, 1024, shares)
    assert 700 in rcs
    drv.fail_at = None
    assert _run(st, True, drv.fns, 1, 2, dev.ctypes.data, host.ctypes.data, host.nbytes, 1024, shares) == [0, 0]
    np.testing.assert_array_equal(dev, host)
    with pytest.raises(ValueError, match="one event per buffer"):
        _run(st, True, drv.fns, 1, 2, dev.ctypes.data, host.ctypes.data, host.nbytes, 1024, ((1, 2, (3, 4), (5,)),))
    with pytest.raises(ValueError, match="six addresses"):
        _run(st, True, drv.fns[:5], 1, 2, dev.ctypes.data, host.ctypes.data, host.nbytes, 1024, shares)
    del keep


def test_the_caller_runs_a_share_beside_the_threads(stager_type) -> None:
    """n threads and n + 1 workers: the calling thread runs the first share itself."""
    drv = FakeDriver()
    shares, keep = _workers(4, 1000, 2)
    st = stager_type(3)
    host = np.random.default_rng(1).integers(0, 255, 9_500, dtype=np.uint8)
    dev = np.zeros_like(host)
    for _ in range(3):
        dev[:] = 0
        assert _run(st, True, drv.fns, 1, 2, dev.ctypes.data, host.ctypes.data, host.nbytes, 1000, shares) == [0] * 4
        np.testing.assert_array_equal(dev, host)
        back = np.zeros_like(host)
        _run(st, False, drv.fns, 1, 2, dev.ctypes.data, back.ctypes.data, host.nbytes, 1000, shares)
        np.testing.assert_array_equal(back, host)
    one = np.zeros(500, np.uint8)  # one chunk: the caller alone, no thread woken
    assert _run(st, True, drv.fns, 1, 2, one.ctypes.data, host.ctypes.data, 500, 1000, shares) == [0]
    np.testing.assert_array_equal(one, host[:500])
    del keep
