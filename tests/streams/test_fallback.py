"""Streams and events on a backend without their hooks: one in-order stream, events complete
when recorded, and kb.Stream objects reach the backend as None."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay import streams as kbs


def add_one(x):
    x += 1


@pytest.fixture
def k(dev) -> kb.Kernel:
    return kb.compile(kb.Source(add_one, "python", "add_one"), dev)


def test_streams_of_a_plain_backend_are_its_one_stream(dev, plain, k) -> None:
    x = kb.zeros(4, "float32", device=dev)
    s = dev.stream(priority=-1)
    plain.log.clear()
    assert s.handle is None and s.device == dev and s.priority == -1
    k.launch(1, args=(x,), stream=s)
    with s:
        k.launch(1, args=(x,))
        kb.copy(np.empty(4, np.float32), x)
    assert [stream for _, stream in plain.log if _ in ("launch", "copy")] == [None, None, None]
    # the same with no current stream anywhere (the direct paths, the C fronts included)
    assert kbs.intercept == 0
    plain.log.clear()
    k.launch(1, args=(x,), stream=s)
    k(1, args=(x,), stream=s)
    kb.copy(np.empty(4, np.float32), x, stream=s)
    kb.copy(x, np.full(4, 2, np.float32), stream=s)
    assert [stream for _, stream in plain.log if _ in ("launch", "copy")] == [None, None, None, None]
    np.testing.assert_array_equal(x.numpy(), np.full(4, 2, np.float32))
    assert s.query()
    s.synchronize()
    assert plain.log[-1] == ("sync", None)


def test_events_complete_when_recorded_and_time_on_the_host(dev) -> None:
    s1, s2 = dev.stream(), dev.stream()
    a = s1.record()
    b = s1.record()
    assert a.query() and b.query()
    s2.wait(a)
    assert b.elapsed(a) >= 0.0
    with pytest.raises(kb.InvalidArgumentError, match="kb.Event"):
        s2.wait("not an event")


def test_current_stream_is_per_thread_and_nests(dev) -> None:
    s1, s2 = dev.stream(), dev.stream()
    assert kbs.current_stream(dev) is None
    with s1:
        assert kbs.current_stream(dev) is s1
        with s2:
            assert kbs.current_stream(dev) is s2
        assert kbs.current_stream(dev) is s1
    assert kbs.current_stream(dev) is None


def test_the_hot_path_looks_up_streams_only_while_needed(dev) -> None:
    base = kbs.intercept
    s = dev.stream()  # the backend does not see it (handle None): it costs the hot path nothing
    assert s.handle is None
    assert kbs.intercept == base
    with s:
        assert kbs.intercept == base + 1
    assert kbs.intercept == base
    s.close()
    s.close()  # twice is harmless
    with pytest.raises(kb.InvalidArgumentError, match="closed"):
        s.synchronize()


def test_default_stream_is_one_object(dev) -> None:
    assert dev.default_stream is dev.default_stream
    assert dev.default_stream.is_default
    dev.default_stream.close()  # never closed
    assert not dev.default_stream.closed


def test_kb_stream_has_no_cuda_stream_protocol_without_a_cuda_handle(dev) -> None:
    assert not hasattr(dev.stream(), "__cuda_stream__")
