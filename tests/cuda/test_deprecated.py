"""kernelbay_cuda.Stream, Event and Graph: deprecated aliases of kb.Stream, kb.Event and kb.Graph.
No GPU needed here (tests/cuda/test_gpu.py runs their 0.1 uses on one)."""

from __future__ import annotations

import re

import kernelbay as kb
import kernelbay_cuda as kc
import pytest

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
