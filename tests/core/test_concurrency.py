import threading

import pytest
from kernelbay.concurrency import OnceMap


def test_made_once_under_contention():
    m = OnceMap()
    calls = []
    start = threading.Barrier(8)

    def make(k):
        calls.append(k)
        return object()

    got = []

    def work():
        start.wait()
        got.append(m.get_or_make("k", make, "k"))

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert calls == ["k"] and len({id(v) for v in got}) == 1 and m["k"] is got[0]


def test_a_failed_make_stores_nothing_and_falsy_values_are_kept():
    m = OnceMap()

    def boom():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        m.get_or_make(1, boom)
    assert 1 not in m
    assert m.get_or_make(1, lambda: False) is False
    assert m.get_or_make(1, boom) is False  # made once: a falsy value is a value
