"""The cuda backend's CUPTI timer (_cupti.c, cupti.py) without a GPU: records built with
struct at the offsets _cupti.c reads (test_cupti_layout.py checks those against CUPTI's
headers), fed through the same parse step CUPTI's buffer callback runs, and a stand-in CUPTI
whose functions are ctypes callbacks; the timer's selection falling back to CUDA events."""

from __future__ import annotations

import ctypes
import logging
import struct
import time

import pytest

pytest.importorskip("kernelbay_cuda", reason="kernelbay-cuda is not installed")

from kernelbay_cuda import cupti, native, timing

KERNEL, MEMCPY, MEMSET, DRIVER, EXTERNAL = 10, 1, 2, 4, 39
SIZE = 208  # CUpti_ActivityKernel9's size: every record here is padded to it


def kernel(corr: int, start: int, end: int) -> bytes:
    r = bytearray(SIZE)
    struct.pack_into("<I", r, 0, KERNEL)
    struct.pack_into("<QQ", r, 16, start, end)
    struct.pack_into("<I", r, 92, corr)
    return bytes(r)


def copy(kind: int, corr: int, start: int, end: int) -> bytes:
    r = bytearray(SIZE)
    struct.pack_into("<I", r, 0, kind)
    struct.pack_into("<QQ", r, 16, start, end)
    struct.pack_into("<I", r, 44, corr)
    return bytes(r)


def external(ext: int, corr: int) -> bytes:
    r = bytearray(SIZE)
    struct.pack_into("<IIQI", r, 0, EXTERNAL, 3, ext, corr)
    return bytes(r)


@pytest.fixture
def nat():
    mod = native.module()
    if mod is None or not hasattr(mod, "cupti_mark"):
        pytest.skip(f"the native helpers are unavailable here: {native.status()}")
    mod.cupti_disable()
    mod.cupti_reset()
    yield mod
    mod.cupti_disable()
    mod.cupti_reset()
    if cupti._timer is not None:  # the real library's functions again, for later tests
        mod.cupti_set_api(*cupti._timer._addr)


def test_records_in_either_order_give_each_external_id_its_span(nat) -> None:
    nat.cupti_feed(
        [
            external(1, 100),  # correlation first, then the kernel
            kernel(100, 5_000, 6_000),
            kernel(101, 7_000, 9_000),  # kernel first, then the correlation
            copy(DRIVER, 0, 0, 0),  # an API record: only there for the correlation
            external(2, 101),
            external(3, 102),  # a copy of two records, and a memset, under one id
            copy(MEMCPY, 102, 10_000, 11_000),
            copy(MEMCPY, 102, 10_500, 12_500),
            external(3, 103),
            copy(MEMSET, 103, 13_000, 13_100),
            kernel(104, 1, 2),  # another library's kernel: no id of ours
        ]
    )
    begins, ends = nat.cupti_resolve([1, 2, 3, None, 4], [-1, -2, -3, None, -4], [0, 8_000, 0, 0, 0])
    assert begins == [5_000, 8_000, 10_000, None, None]  # the second clamped to its host call
    assert ends == [6_000, 9_000, 13_100, None, None]


def test_mismatched_or_unknown_marks_give_none_and_old_entries_go(nat) -> None:
    nat.cupti_feed([external(7, 70), kernel(70, 100, 200), kernel(71, 300, 400), external(8, 80)])
    assert nat.cupti_resolve([7, 7, 9], [-8, None, -9], [None] * 3) == ([None] * 3, [None] * 3)
    assert nat.cupti_resolve([7], [-7], [None]) == ([100], [200])
    assert nat.cupti_resolve([7], [-7], [None]) == ([None], [None])  # a span is handed out once
    for _ in range(3):  # what no resolve asked for goes after two more
        nat.cupti_resolve([], [], [])
    state = nat.cupti_state()
    assert state["pending_corr"] == 0 and state["pending_ext"] == 0 and state["lost"] == 0
    with pytest.raises(ValueError, match="differ in length"):
        nat.cupti_resolve([1], [], [])
    with pytest.raises(ValueError, match="at least"):
        nat.cupti_feed([b"\x0a\x00\x00\x00"])


def test_the_c_clock_is_perf_counter_ns(nat) -> None:
    a = time.perf_counter_ns()
    c = nat.cupti_host_ns()
    b = time.perf_counter_ns()
    assert a <= c <= b


_P = ctypes.c_void_p
_PUSH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_uint64)
_POP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))
_FLUSH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32)
_NEXT = ctypes.CFUNCTYPE(ctypes.c_int, _P, ctypes.c_size_t, ctypes.POINTER(_P))
_KIND = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)
_REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(_P), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
_DONE = ctypes.CFUNCTYPE(None, _P, ctypes.c_uint32, _P, ctypes.c_size_t, ctypes.c_size_t)
_CALLBACKS = ctypes.CFUNCTYPE(ctypes.c_int, _P, _P)
_TS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))
_TSREG = ctypes.CFUNCTYPE(ctypes.c_int, _P)


class FakeCupti:
    """A per-thread stack of external ids; each push of an id is "a launch" whose kernel record
    (corr = 1000 + id, running 1 ms behind the host clock... on CUPTI's clock, which is the host
    clock minus LAG) is written with its correlation into a buffer CUPTI asked the client for,
    and handed back on flush through the client's completed callback."""

    LAG = 1_000_000

    def __init__(self, refuse_enable: int = 0, with_ts_register: bool = False) -> None:
        self.stack: list[int] = []
        self.pending: list[bytes] = []
        self.enabled: list[int] = []
        self.cbs: tuple | None = None
        self.refuse = refuse_enable

        def push(kind, ext):
            assert kind == 3  # CUSTOM0
            self.stack.append(ext)
            now = time.perf_counter_ns() - self.LAG
            self.pending += [external(ext, 1000 + ext), kernel(1000 + ext, now + 10, now + 20)]
            return 0

        def pop(kind, out):
            out[0] = self.stack.pop()
            return 0

        def flush(flag):
            req, done = self.cbs
            buf, size, most = _P(), ctypes.c_size_t(), ctypes.c_size_t()
            _REQ(req)(ctypes.byref(buf), ctypes.byref(size), ctypes.byref(most))
            assert size.value >= len(self.pending) * SIZE and buf.value % 8 == 0
            data = b"".join(self.pending)
            ctypes.memmove(buf.value, data, len(data))
            self.pending = []
            _DONE(done)(None, 0, buf.value, size.value, len(data))
            return 0

        def next_record(buf, valid, rec):
            cur = rec[0] or None
            nxt = buf if cur is None else cur + SIZE
            if nxt + SIZE > buf + valid:
                return 1  # CUPTI_ERROR_MAX_LIMIT_REACHED
            rec[0] = nxt
            return 0

        def enable(kind):
            if kind == self.refuse:
                return 39
            self.enabled.append(kind)
            return 0

        def disable(kind):
            self.enabled.remove(kind)
            return 0

        def callbacks(req, done):
            self.cbs = (req, done)
            return 0

        def get_ts(out):
            out[0] = time.perf_counter_ns() - self.LAG
            return 0

        self.funcs = [
            _PUSH(push),
            _POP(pop),
            _FLUSH(flush),
            _NEXT(next_record),
            _KIND(enable),
            _KIND(disable),
            _CALLBACKS(callbacks),
            _TS(get_ts),
        ]

    def addresses(self) -> list[int]:
        return [ctypes.cast(f, _P).value for f in self.funcs] + [0]  # no timestamp callback


def test_marks_push_and_pop_and_spans_come_back_through_the_buffer_callback(nat) -> None:
    fake = FakeCupti()
    nat.cupti_set_api(*fake.addresses())
    assert nat.cupti_mark(None, None) is None  # not enabled: no mark
    assert nat.cupti_enable() is None
    assert sorted(fake.enabled) == sorted([DRIVER, MEMCPY, MEMSET, KERNEL, EXTERNAL])
    assert nat.cupti_state()["clock"] == "offset"
    m0s, m1s, t0s, t1s = [], [], [], []
    for _ in range(50):
        t0s.append(time.perf_counter_ns())
        m0s.append(nat.cupti_mark(None, None))
        assert fake.stack == [m0s[-1]]
        m1s.append(nat.cupti_mark(None, None))
        assert fake.stack == []
        t1s.append(time.perf_counter_ns())
    assert m1s == [-m for m in m0s] and len(set(m0s)) == 50
    assert nat.cupti_flush() == 0
    begins, ends = nat.cupti_resolve(m0s, m1s, t0s)
    for b, e, t0, t1 in zip(begins, ends, t0s, t1s):
        # CUPTI's clock ran 1 ms behind: the measured offset puts each span inside its call.
        assert t0 <= b <= e <= t1 + 100_000
    # A call that raised: its start mark is popped by cancel, the next mark starts afresh.
    m = nat.cupti_mark(None, None)
    nat.cupti_cancel(m)
    assert fake.stack == []
    assert nat.cupti_mark(None, None) > m and len(fake.stack) == 1
    nat.cupti_mark(None, None)
    nat.cupti_disable()
    assert fake.enabled == []
    assert nat.cupti_mark(None, None) is None


def test_close_turns_cupti_off_and_a_resolve_leaves_it_on(nat, monkeypatch) -> None:
    # The tracer calls close() when a trace ends; a resolve alone (a fold) never turns CUPTI off.
    fake = FakeCupti()
    nat.cupti_set_api(*fake.addresses())
    assert nat.cupti_enable() is None
    t = object.__new__(cupti.Timer)  # no driver here: only what resolve and close use
    t._mod = nat
    monkeypatch.setattr(t, "_settle", nat.cupti_flush)  # no context to wait for
    t0 = time.perf_counter_ns()
    m0, m1 = nat.cupti_mark(None, None), nat.cupti_mark(None, None)
    begins, _ends = t.resolve([m0], [m1], [t0])
    assert begins[0] is not None and sorted(fake.enabled) == sorted([DRIVER, MEMCPY, MEMSET, KERNEL, EXTERNAL])
    t.close()
    assert fake.enabled == [] and nat.cupti_mark(None, None) is None


def test_a_refused_enable_leaves_nothing_enabled(nat) -> None:
    fake = FakeCupti(refuse_enable=MEMSET)
    nat.cupti_set_api(*fake.addresses())
    assert nat.cupti_enable() == ("cuptiActivityEnable(MEMSET)", 39)
    assert fake.enabled == [] and nat.cupti_mark(None, None) is None


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(cupti, "_timer", None)
    monkeypatch.setattr(cupti, "_failed", None)
    monkeypatch.setattr(timing, "_timer", None)
    monkeypatch.delenv("KERNELBAY_TRACE_TIMER", raising=False)


@pytest.mark.parametrize("lib", ["missing", "not-cupti"])
def test_a_bad_cupti_library_falls_back_to_events_saying_why(fresh, monkeypatch, caplog, lib) -> None:
    import _ctypes

    other = _ctypes.__file__  # a shared object that is not CUPTI
    path = "/no/such/libcupti.so" if lib == "missing" else other
    monkeypatch.setenv("KERNELBAY_CUPTI_LIB", path)
    monkeypatch.setenv("KERNELBAY_TRACE_TIMER", "cupti")
    with caplog.at_level(logging.INFO, logger="kernelbay.trace"):
        t = timing.device_timer()
    assert isinstance(t, timing.Timer)
    why = "no such file" if lib == "missing" else "not libcupti"
    assert any("CUDA events time the device spans, not CUPTI" in r.message and why in r.message for r in caplog.records)
    assert all(r.levelno == logging.WARNING for r in caplog.records if "not CUPTI" in r.message)


def test_events_on_request_and_a_bad_choice_is_auto(fresh, monkeypatch, caplog) -> None:
    monkeypatch.setenv("KERNELBAY_TRACE_TIMER", "events")
    called = []
    monkeypatch.setattr(cupti, "make_timer", lambda: called.append(1))
    assert isinstance(timing.device_timer(), timing.Timer) and called == []
    monkeypatch.setenv("KERNELBAY_TRACE_TIMER", "hardware")
    with caplog.at_level(logging.WARNING, logger="kernelbay.trace"):
        timing.device_timer()
    assert called == [1] and "is not one of auto, cupti, events" in caplog.text


def test_library_search_order(fresh, monkeypatch, tmp_path) -> None:
    home = tmp_path / "cuda"
    (home / "extras/CUPTI/lib64").mkdir(parents=True)
    (home / "extras/CUPTI/lib64/libcupti.so.12").write_bytes(b"")
    monkeypatch.delenv("KERNELBAY_CUPTI_LIB", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(home))
    found = cupti.candidates()
    where = [w for _, w in found]
    assert (str(home / "extras/CUPTI/lib64/libcupti.so.12"), f"the CUDA toolkit in {home}") in found
    assert where[-1] == "the loader's search path"
    wheel = [i for i, w in enumerate(where) if w in ("the nvidia-cuda-cupti wheel", "Triton's bundled copy")]
    assert all(i < where.index(f"the CUDA toolkit in {home}") for i in wheel)
    monkeypatch.setenv("KERNELBAY_CUPTI_LIB", "/x/libcupti.so")
    assert cupti.candidates() == [("/x/libcupti.so", "KERNELBAY_CUPTI_LIB")]
