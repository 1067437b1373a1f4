"""The C fast path (FastLaunch in _launch.c) against a stand-in cuLaunchKernel: every call form
it takes, what it hands to the driver, and what it leaves to the slow path. No GPU needed."""

from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np
import pytest
from kernelbay.streams import Stream as KbStream
from kernelbay_cuda import launcher, native, packing
from kernelbay_cuda.streams import _StreamHandle

nat = native.module()
pytestmark = pytest.mark.skipif(nat is None, reason=f"the native helpers are unavailable: {native.status()}")

_PROTO = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)
DEV = object()


class Arr:
    def __init__(self, handle: int) -> None:
        self.device = DEV
        self.handle = handle


class Foreign:
    """A stream of another library (CuPy, cuda.core, recent PyTorch)."""

    def __init__(self, handle: int) -> None:
        self.h = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.h)


class OldTorchStream:
    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


class Rig:
    """A FastLaunch over a real parameter block, with a stand-in driver that records calls."""

    def __init__(self, params: list[tuple[int, int, str]], sample: tuple, kinds: str, rc: int = 0) -> None:
        self.params = packing.layout(params)
        self.block = packing.ParamBlock(self.params)
        self.calls: list[tuple] = []
        self.slow: list[tuple] = []
        self.failed: list[tuple] = []
        self.rc = rc

        def fake(f, gx, gy, gz, bx, by, bz, shm, stream, prm, extra):
            self.calls.append(((gx, gy, gz), (bx, by, bz), shm, stream or 0, bytes(self.block.buf), prm))
            return self.rc

        self._fake = _PROTO(fake)
        nat.set_launch(ctypes.cast(self._fake, ctypes.c_void_p).value)
        self.cell: list = [None, None, None]
        self.fl = nat.FastLaunch(
            0x1234,
            self.block.kernel_params,
            ctypes.addressof(self.block.buf),
            threading.get_ident(),
            (2147483647, 65535, 65535),
            (1024, 1024, 64),
            1024,
            49152,
            (_StreamHandle, KbStream),
            0,
            DEV,
            tuple(type(a) for a in sample),
            kinds,
            tuple(o for *_, o in self.params),
            lambda k, *a: self.slow.append(a),
            "kernel",
            lambda *a: self.failed.append(a),
            self.cell,
            "k",
        )

    def __call__(self, grid, block, args, shm=0, stream=None):
        n = len(self.calls)
        self.fl(grid, block, args, shm, stream)
        return self.calls[-1] if len(self.calls) > n else None


@pytest.fixture(autouse=True)
def _restore_driver():
    yield
    # Leave no stand-in behind: the launcher sets the real entry point again at its next use.
    launcher._native_ready = False
    nat.set_launch(None)


SAXPY = [(8, 8, "pointer"), (8, 8, "pointer"), (4, 4, "float"), (4, 4, "int")]


@pytest.mark.parametrize(
    ("grid", "block", "g", "b"),
    [
        (3, 128, (3, 1, 1), (128, 1, 1)),
        ((3,), (128,), (3, 1, 1), (128, 1, 1)),
        ((3, 2), (16, 8), (3, 2, 1), (16, 8, 1)),
        ((3, 2, 5), (8, 8, 4), (3, 2, 5), (8, 8, 4)),
        ((3, 1, 1), 128, (3, 1, 1), (128, 1, 1)),
    ],
)
def test_every_geometry_form_is_launched_in_c(grid, block, g, b) -> None:
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    call = rig(grid, block, (Arr(0x100), Arr(0x200), 2.5, 7))
    assert call is not None and call[:3] == (g, b, 0)
    assert struct.unpack("<QQfi", call[4][:24]) == (0x100, 0x200, 2.5, 7)
    assert rig.slow == [] and rig.cell == ["k", grid, block]


@pytest.mark.parametrize(
    ("grid", "block", "shm"),
    [
        ([3], 128, 0),
        ((3, 1, 1, 1), 128, 0),
        ((), 128, 0),
        (0, 128, 0),
        ((3, 0), 128, 0),
        (True, 128, 0),
        (3, (1025,), 0),
        (3, (32, 33), 0),
        (3, (1, 1, 65), 0),
        ((1, 65536), 32, 0),
        (3, 128, 49153),
        (3, 128, -1),
        (3.0, 128, 0),
    ],
)
def test_geometry_outside_the_limits_goes_to_the_slow_path(grid, block, shm) -> None:
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    assert rig(grid, block, (Arr(1), Arr(2), 1.0, 1), shm) is None
    assert len(rig.slow) == 1 and rig.slow[0][:2] == (grid, block)


def _stream(handle: int, index: int = 0) -> _StreamHandle:
    """The backend's stream handle (what a kb.Stream holds), made without a driver."""
    s = _StreamHandle.__new__(_StreamHandle)
    s.index, s.handle, s.closed = index, handle, False
    return s


def _core(inner: object) -> KbStream:
    """A kb.Stream (what dev.stream() gives) holding ``inner`` as its backend handle."""
    return KbStream(device=DEV, handle=inner, binding=None)


@pytest.mark.parametrize(
    ("stream", "handle"),
    [(None, 0), (Foreign(0xABC), 0xABC), (OldTorchStream(0xDEF), 0xDEF), (Foreign(0), 0), ("kb", 0x77), ("core", 0x88)],
)
def test_stream_forms(stream, handle) -> None:
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    stream = (
        {"kb": _stream(0x77), "core": _core(_stream(0x88))}.get(stream, stream) if isinstance(stream, str) else stream
    )
    call = rig((2,), (64,), (Arr(1), Arr(2), 1.0, 1), 0, stream)
    assert call is not None and call[3] == handle


@pytest.mark.parametrize(
    "stream", [object(), 5, "kb-other-device", "kb-closed", "core-other-device", "core-closed", "core-foreign"]
)
def test_other_streams_go_to_the_slow_path(stream) -> None:
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    stream = {
        "kb-other-device": lambda: _stream(0x77, index=1),
        "kb-closed": lambda: _stream(0),
        "core-other-device": lambda: _core(_stream(0x77, index=1)),
        "core-closed": lambda: _core(_stream(0)),
        "core-foreign": lambda: _core(Foreign(0x77)),  # not a handle of this backend's
    }.get(stream, lambda: stream)()
    assert rig(1, 64, (Arr(1), Arr(2), 1.0, 1), 0, stream) is None
    assert len(rig.slow) == 1


# kinds: i int, I unsigned, 4 a u32 of unknown sign, ? bool, e half, 8 a u64 of unknown sign
SCALARS = [(4, 4, "int"), (4, 4, "unsigned int"), (4, 4, "u32"), (1, 1, "bool"), (2, 2, "float16"), (8, 8, "u64")]


@pytest.mark.parametrize(
    ("pos", "value", "fits"),
    [
        (0, 2**31 - 1, True),
        (0, -(2**31), True),
        (0, 3_000_000_000, False),
        (0, np.uint32(4_000_000_000), False),
        (0, np.uint32(5), True),
        (1, 2**32 - 1, True),
        (1, -1, False),
        (1, np.int32(-1), False),
        (2, -1, True),
        (2, 3_000_000_000, True),
        (2, 2**32, False),
        (2, -(2**31) - 1, False),
        (4, 1.5, True),
        (4, 70000.0, False),
        (4, float("inf"), True),
        (5, 2**64 - 1, True),
        (5, -(2**63), True),
        (5, 2**64, False),
        (5, -(2**63) - 1, False),
    ],
)
def test_scalar_ranges_are_checked_in_c(pos, value, fits) -> None:
    sample = [1, 1, 1, True, 1.0, 1]
    args = list(sample)
    args[pos] = value
    sample[pos] = value  # the fast path is specialised to the value's type
    rig = Rig(SCALARS, tuple(sample), "iI4?e8")
    call = rig(1, 1, tuple(args))
    if not fits:
        assert call is None and len(rig.slow) == 1
        return
    assert call is not None
    off = rig.params[pos][3]
    raw = call[4]
    if pos == 4:
        assert struct.unpack_from("<e", raw, off)[0] == np.float16(value)
    else:
        size = rig.params[pos][0]
        assert int.from_bytes(raw[off : off + size], "little", signed=int(value) < 0) == int(value)


def test_changed_argument_type_goes_to_the_slow_path() -> None:
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    assert rig(1, 1, (Arr(1), Arr(2), np.float32(1.0), 1)) is None
    assert rig(1, 1, (Arr(1), Arr(2), 1.0)) is None
    assert len(rig.slow) == 2


def test_failed_launch_reports_through_the_python_handler() -> None:
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi", rc=700)
    rig((4, 2), (32,), (Arr(1), Arr(2), 1.0, 1))
    assert rig.failed and rig.failed[0][:3] == (700, (4, 2), (32,))


class Counting:
    """A foreign stream that counts how often its handle is asked for."""

    def __init__(self, handle: int) -> None:
        self.h, self.asked = handle, 0

    def __cuda_stream__(self) -> tuple[int, int]:
        self.asked += 1
        return (0, self.h)


class NoWeakref:
    __slots__ = ("h", "asked")

    def __init__(self, handle: int) -> None:
        self.h, self.asked = handle, 0

    def __cuda_stream__(self) -> tuple[int, int]:
        self.asked += 1
        return (0, self.h)


def test_a_foreign_streams_handle_is_read_once_per_object() -> None:
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    args = (Arr(1), Arr(2), 1.0, 1)
    a, b = Counting(0xA0), Counting(0xB0)
    got = [rig(1, 64, args, 0, s)[3] for s in (a, a, a, b, b, a)]
    assert got == [0xA0, 0xA0, 0xA0, 0xB0, 0xB0, 0xA0]
    assert (a.asked, b.asked) == (2, 1)  # a again after b: asked once more
    assert rig.slow == []
    # A new object (even one at the address of a dead one) is asked for its own handle.
    del a, b
    for h in range(0xC0, 0xC8):
        c = Counting(h)
        assert rig(1, 64, args, 0, c)[3] == h
        assert c.asked == 1
        del c


def test_a_foreign_stream_without_weak_references_is_remembered_too() -> None:
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    s = NoWeakref(0xD0)
    for _ in range(3):
        assert rig(1, 64, (Arr(1), Arr(2), 1.0, 1), 0, s)[3] == 0xD0
    assert s.asked == 1 and rig.slow == []


def test_the_remembered_stream_is_held_and_let_go_with_the_fast_path() -> None:
    """The fast path holds the last stream object (so no other object can take its address) and
    reports it to the collector; dropping the fast path lets the stream go."""
    import gc
    import sys
    import weakref

    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    s = Counting(0xE0)
    alive = weakref.ref(s)
    before = sys.getrefcount(s)
    assert rig(1, 64, (Arr(1), Arr(2), 1.0, 1), 0, s)[3] == 0xE0
    assert sys.getrefcount(s) == before + 1
    assert any(r is s for r in gc.get_referents(rig.fl))
    del s, rig
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("form", ["kb", "core"])
def test_a_kernelbay_stream_is_remembered_until_a_stream_closes(form) -> None:
    """The handle of the last stream object is kept (no attribute reads per launch); closing any
    backend stream handle makes every fast path read its stream again, so a closed stream's
    handle is never launched on: the slow path says what is wrong."""
    rig = Rig(SAXPY, (Arr(1), Arr(2), 1.0, 1), "PPfi")
    args = (Arr(1), Arr(2), 1.0, 1)
    inner = _stream(0x91)
    s = inner if form == "kb" else _core(inner)
    assert rig(1, 64, args, 0, s)[3] == 0x91
    inner.handle = 0x92  # changed behind its back (never done for real): the remembered one is used
    assert rig(1, 64, args, 0, s)[3] == 0x91
    native.stream_closed()  # what _StreamHandle.close() calls
    assert rig(1, 64, args, 0, s)[3] == 0x92
    inner.handle = 0  # as close() leaves it
    native.stream_closed()
    assert rig(1, 64, args, 0, s) is None and len(rig.slow) == 1


def test_closing_a_stream_tells_the_fast_paths(monkeypatch) -> None:
    told: list[int] = []
    monkeypatch.setattr(native, "stream_closed", lambda: told.append(1))
    s = _stream(0)  # a stand-in that owns no CUstream: close() only marks it
    s._owned, s.handle = True, 0x5
    monkeypatch.setattr("kernelbay_cuda._driver.dead_reason", lambda index: "stand-in")
    s.close()
    assert told == [1] and s.handle == 0 and s.closed
