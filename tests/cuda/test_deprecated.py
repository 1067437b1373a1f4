"""kernelbay_cuda.Stream, Event and Graph: deprecated aliases of kb.Stream, kb.Event and kb.Graph.
No GPU needed here (tests/cuda/test_gpu.py runs their 0.1 uses on one)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import kernelbay as kb
import kernelbay_cuda as kc
import pytest
from kernelbay_cuda import _deprecated

DEV = kb.Device("cuda", 0, "fake")
NEW_WAY = {"Stream": "dev.stream()", "Event": "stream.record()", "Graph": "`with dev.graph() as g:`"}


def test_the_aliases_answer_isinstance_as_the_core_types() -> None:
    stream = kb.Stream(device=DEV, handle=object(), binding=None)  # what dev.stream() gives
    event = kb.Event(DEV, object(), binding=None)
    graph = kb.Graph(DEV, None)
    assert isinstance(stream, kc.Stream) and isinstance(event, kc.Event) and isinstance(graph, kc.Graph)
    assert not isinstance(event, kc.Stream) and not isinstance(stream, kc.Graph)
    assert issubclass(kb.Stream, kc.Stream) and issubclass(kc.Stream, kb.Stream)
    assert issubclass(kb.Graph, kc.Graph) and not issubclass(kb.Event, kc.Graph)


@pytest.mark.parametrize("name", sorted(NEW_WAY))
def test_calling_an_alias_warns_and_names_the_new_way(name, monkeypatch) -> None:
    alias = getattr(kc, name)
    monkeypatch.setattr(alias, "_make", classmethod(lambda cls, *a, **kw: (a, kw)))
    with pytest.warns(
        DeprecationWarning, match=rf"kernelbay_cuda\.{name} is deprecated; use {re.escape(NEW_WAY[name])}"
    ) as w:
        assert alias("cuda:0", 1, x=2) == (("cuda:0", 1), {"x": 2})
    assert w[0].filename == __file__  # the warning points at the caller


def test_looking_a_name_up_does_not_warn(recwarn) -> None:
    assert kc.Stream and kc.Event and kc.Graph and kc.default_stream
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        kc.Nope  # noqa: B018


class _Handle:
    """Stands in for the backend's stream and event handles (no driver here)."""

    def __init__(self, dev, *args, **kwargs) -> None:
        self.made, self.recorded_on = (args, kwargs), []

    def record(self, stream=None):
        self.recorded_on.append(stream)
        return self


class _FakeDevice:
    """What the aliases use of a device: dev.stream(), dev.default_stream, dev.binding."""

    index = 0

    def __init__(self) -> None:
        self.binding = SimpleNamespace(event_record=lambda device, stream: _Handle(device))
        self.default_stream = kb.Stream(device=DEV, handle="default", binding=self.binding, is_default=True)

    def stream(self, priority: int = 0) -> kb.Stream:
        return kb.Stream(device=DEV, handle=("blocking", priority), binding=self.binding, priority=priority)

    def graph(self) -> kb.Graph:
        return kb.Graph(DEV, self.binding)


@pytest.fixture
def fake(monkeypatch) -> _FakeDevice:
    dev = _FakeDevice()
    monkeypatch.setattr(_deprecated, "cuda_device", lambda device: dev)
    monkeypatch.setattr(_deprecated, "_StreamHandle", _Handle)
    monkeypatch.setattr(_deprecated, "_EventHandle", _Handle)
    return dev


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_stream_is_what_dev_stream_gives_non_blocking_where_asked(fake) -> None:
    s = kc.Stream("cuda:0", priority=-1)
    assert type(s) is kb.Stream and s.handle == ("blocking", -1)
    nb = kc.Stream("cuda:0", non_blocking=True, priority=-1)
    assert type(nb) is kb.Stream and not nb.is_default and nb.priority == -1
    assert nb.handle.made == ((), {"non_blocking": True, "priority": -1})
    with pytest.raises(kb.InvalidArgumentError, match="priority"):
        kc.Stream("cuda:0", non_blocking=True, priority=1.5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_event_starts_unrecorded_and_records_on_a_stream(fake) -> None:
    ev = kc.Event("cuda:0", timing=False)
    assert isinstance(ev, kb.Event) and type(ev) is not kb.Event
    assert ev.handle.made == ((False,), {}) and ev.handle.recorded_on == [] and ev.stream is None
    s = fake.stream()
    assert ev.record(s) is ev and ev.handle.recorded_on == [s] and ev.stream is s


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_graph_is_a_kb_graph_with_the_stream_capture(fake) -> None:
    g = kc.Graph("cuda:0")
    assert isinstance(g, kb.Graph) and g.nodes == 0 and g.device is fake
    assert type(g.stream) is kb.Stream and g.stream.handle.made == ((), {"non_blocking": True, "priority": 0})
    with pytest.raises(kb.InvalidArgumentError, match="before a capture"):
        g.replay()
    g.close()
    assert g.closed
