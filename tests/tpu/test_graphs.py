"""tpu streams and graphs: a graph of launches is one jitted program, replayed in one dispatch."""

from __future__ import annotations

import kernelbay as kb
import numpy as np


def axpy(x_ref, y_ref, a):
    y_ref[...] = a * x_ref[...] + y_ref[...]


def scale(x_ref, o_ref):
    o_ref[...] = 2 * x_ref[...]


def _k(dev, fn, **meta):
    return kb.compile(kb.Source(fn, lang="pallas", name=fn.__name__, meta=meta), dev)


def test_graph_is_one_dispatch_threading_arrays(dev) -> None:
    k = _k(dev, axpy, inplace=("y_ref",))
    s2 = _k(dev, scale, outputs=("o_ref",))
    x = kb.asarray(np.ones((8, 128), np.float32), device=dev)
    y = kb.zeros((8, 128), device=dev)
    o = kb.zeros((8, 128), device=dev)
    with dev.graph() as g:
        k.launch((1,), None, (x, y, np.float32(1)))
        k.launch((1,), None, (x, y, np.float32(2)))
        s2.launch((1,), None, (y, o))
    assert [s.deps for s in g.steps] == [(), (0,), (1,)]
    assert g.steps[0].reads == (x, y) and g.steps[0].writes == (y,)  # x only read; y in place
    assert g.steps[2].writes == (o,)
    calls = []
    fn = g._handle.fn
    g._handle.fn = lambda *a: calls.append(1) or fn(*a)
    g.replay()
    g.replay()
    assert len(calls) == 2  # one dispatch per replay, whatever the number of launches
    np.testing.assert_array_equal(y.numpy(), np.full((8, 128), 6, np.float32))
    np.testing.assert_array_equal(o.numpy(), np.full((8, 128), 12, np.float32))


def test_independent_launches_have_no_dependency(dev) -> None:
    k = _k(dev, axpy, inplace=("y_ref",))
    x = kb.asarray(np.ones((8, 128), np.float32), device=dev)
    y1, y2 = kb.zeros((8, 128), device=dev), kb.zeros((8, 128), device=dev)
    with dev.graph() as g:
        k.launch((1,), None, (x, y1, np.float32(1)))
        k.launch((1,), None, (x, y2, np.float32(1)))
    assert g.steps[1].deps == ()


def test_streams_and_events_over_async_dispatch(dev) -> None:
    k = _k(dev, axpy, inplace=("y_ref",))
    x = kb.asarray(np.ones((8, 128), np.float32), device=dev)
    y = kb.zeros((8, 128), device=dev)
    s = dev.stream()
    with s:
        for _ in range(5):
            k.launch((1,), None, (x, y, np.float32(1)))
    ev = s.record()
    ev.synchronize()
    assert ev.query() and s.query()
    np.testing.assert_array_equal(y.numpy(), np.full((8, 128), 5, np.float32))


def test_a_graph_with_a_copy_is_replayed_step_by_step(dev) -> None:
    k = _k(dev, axpy, inplace=("y_ref",))
    x = kb.asarray(np.ones((8, 128), np.float32), device=dev)
    y = kb.zeros((8, 128), device=dev)
    host = np.zeros((8, 128), np.float32)
    with dev.graph() as g:
        k.launch((1,), None, (x, y, np.float32(3)))
        kb.copy(host, y)
    assert g._handle is None
    g.replay()
    np.testing.assert_array_equal(host, np.full((8, 128), 3, np.float32))


def smem_scaled(x_ref, o_ref, a_ref):
    o_ref[...] = x_ref[...] * a_ref[0]


def test_graph_passes_smem_scalars_as_operands(dev) -> None:
    # A run-time scalar (Source.meta['scalars']) is an operand of the launch's pure function,
    # not an array of the graph: it goes into the program with the arrays, and update changes it.
    k = _k(dev, smem_scaled, outputs=("o_ref",), scalars=("a_ref",))
    x = kb.asarray(np.ones(8, np.float32), device=dev)
    o = kb.zeros(8, device=dev)
    with dev.graph() as g:
        k.launch((), None, (x, o, 2.5))
    assert g.steps[0].reads == (x,) and g.steps[0].writes == (o,)
    g.replay()
    assert g._handle.bufs == [x, o] and g._handle.consts == [2.5]  # one program: arrays, then scalars
    np.testing.assert_array_equal(o.numpy(), np.full(8, 2.5, np.float32))
    g.update(0, args=(x, o, -3.0))
    g.replay()
    np.testing.assert_array_equal(o.numpy(), np.full(8, -3.0, np.float32))
