"""kb.Graph in the core: recording, dependencies from buffers, cycles, closed buffers, the
fallback replay and update."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay.graphs import pointer_access


def axpy(x, y, a):
    y += a * x


def bump(y):
    y += 1


@pytest.fixture
def k(dev) -> kb.Kernel:
    return kb.compile(kb.Source(axpy, "python", "axpy"), dev)


def test_recording_does_not_run_and_replay_runs_in_order(dev, plain, k) -> None:
    x = kb.asarray(np.ones(4, np.float32), device=dev)
    y = kb.zeros(4, "float32", device=dev)
    with dev.graph() as g:
        step = k.launch(1, args=(x, y, np.float32(2)))
        kb.copy(x, y)  # x = y, after the launch wrote y
        z = kb.zeros(4, "float32", device=dev)  # allocated now, zeroed at each replay
    assert isinstance(step, kb.graphs.Step) and step.index == 0
    assert [s.kind for s in g.steps] == ["launch", "copy", "memset"]
    np.testing.assert_array_equal(y.numpy(), np.zeros(4, np.float32))
    g.replay()
    np.testing.assert_array_equal(x.numpy(), np.full(4, 2, np.float32))
    g.replay()
    np.testing.assert_array_equal(y.numpy(), np.full(4, 6, np.float32))
    np.testing.assert_array_equal(z.numpy(), np.zeros(4, np.float32))


def test_dependencies_come_from_buffers(dev, k) -> None:
    x, y, z = (kb.zeros(4, "float32", device=dev) for _ in range(3))
    with dev.graph() as g:
        k.launch(1, args=(x, y, 1.0), reads=(x,), writes=(y,))  # 0: y <- x
        k.launch(1, args=(x, z, 1.0), reads=(x,), writes=(z,))  # 1: independent of 0
        k.launch(1, args=(y, z, 1.0), reads=(y,), writes=(z,))  # 2: after 0 (y), after 1 (z)
        k.launch(1, args=(z, x, 1.0), reads=(z,), writes=(x,))  # 3: after 2 (z); x read by 0 and 1
        k.launch(1, args=(x, y, 1.0))  # 4: unknown access: reads and writes all of x, y
    assert [s.deps for s in g.steps] == [(), (), (0, 1), (0, 1, 2), (0, 2, 3)]


def test_a_serial_graph_runs_its_steps_in_recorded_order(dev, k) -> None:
    x, y, z = (kb.zeros(4, "float32", device=dev) for _ in range(3))
    with dev.graph(serial=True) as g:
        k.launch(1, args=(x, y, 1.0), reads=(x,), writes=(y,))  # 0
        k.launch(1, args=(x, z, 1.0), reads=(x,), writes=(z,))  # 1: independent of 0 by data
        k.launch(1, args=(y, z, 1.0), reads=(y,), writes=(z,))  # 2: after 0 and 1
    assert g.serial and [s.deps for s in g.steps] == [(), (0,), (0, 1)]
    with pytest.raises(kb.InvalidArgumentError, match="serial must be True or False"):
        dev.graph(serial=1)


def test_events_inside_a_recording_order_streams(dev, k) -> None:
    x, y = kb.zeros(4, "float32", device=dev), kb.zeros(4, "float32", device=dev)
    s1, s2 = dev.stream(), dev.stream()
    with dev.graph() as g:
        k.launch(1, args=(x, x, 1.0), stream=s1, reads=(), writes=(x,))
        ev = s1.record()
        s2.wait(ev)
        k.launch(1, args=(y, y, 1.0), stream=s2, reads=(), writes=(y,))
    assert g.steps[1].deps == (0,)


def test_a_cycle_is_refused_and_the_graph_kept(dev, k) -> None:
    x, y = kb.zeros(4, "float32", device=dev), kb.zeros(4, "float32", device=dev)
    with dev.graph() as g:
        k.launch(1, args=(x, y, 1.0), reads=(x,), writes=(y,))
        k.launch(1, args=(x, x, 1.0), reads=(), writes=(x,))
    g.add_dependency(1, on=0)
    assert g.steps[1].deps == (0,)
    with pytest.raises(kb.InvalidArgumentError, match="cycle through step 0 .*step 1"):
        g.add_dependency(0, on=1)
    assert g.steps[0].deps == () and g.steps[1].deps == (0,)
    with pytest.raises(kb.InvalidArgumentError, match="no step 5"):
        g.add_dependency(5, on=0)
    g.replay()


def test_a_closed_buffer_is_a_clear_error(dev, k) -> None:
    x, y = kb.zeros(4, "float32", device=dev), kb.zeros(4, "float32", device=dev)
    with dev.graph() as g:
        k.launch(1, args=(x, y, 1.0))
    g.replay()  # checked once; later replays re-check only when something was closed since
    g.replay()
    kb.zeros(4, "float32", device=dev).close()  # another buffer closed: re-checked, still fine
    g.replay()
    y.close()
    with pytest.raises(kb.UseAfterFreeError, match=r"step 0 \(launch of 'axpy'\).*closed"):
        g.replay()
    with pytest.raises(kb.UseAfterFreeError, match=r"step 0 \(launch of 'axpy'\).*closed"):
        g.replay()  # and again: a failed check is not remembered as a pass
    g.update(0, args=(x, x, 1.0))  # new arguments make it usable again
    g.replay()


def test_a_closed_kernel_is_a_clear_error(dev, k) -> None:
    """A closed kernel's code may be unloaded (kernelbay_close_kernel): replaying or updating a
    graph that launches it is refused, not run."""
    x, y = kb.zeros(4, "float32", device=dev), kb.zeros(4, "float32", device=dev)
    with dev.graph() as g:
        k.launch(1, args=(x, y, 1.0))
    g.replay()
    k.close()
    with pytest.raises(kb.UseAfterFreeError, match=r"kernel of step 0 \(launch of 'axpy'\).*closed"):
        g.replay()
    with pytest.raises(kb.UseAfterFreeError, match="kernel of step 0"):
        g.update(0, args=(x, y, 2.0))


def test_update_changes_arguments_without_recording_again(dev, k) -> None:
    x = kb.asarray(np.ones(4, np.float32), device=dev)
    y = kb.zeros(4, "float32", device=dev)
    with dev.graph() as g:
        k.launch(1, args=(x, y, 1.0))
    g.update(0, args=(x, y, 10.0))
    g.replay()
    np.testing.assert_array_equal(y.numpy(), np.full(4, 10, np.float32))
    with pytest.raises(kb.InvalidArgumentError, match="no launch 1"):
        g.update(1, args=())


def test_misuse_is_refused(dev, k) -> None:
    x = kb.zeros(4, "float32", device=dev)
    g = dev.graph()
    with pytest.raises(kb.InvalidArgumentError, match="record with"):
        g.replay()
    with g:
        with pytest.raises(kb.InvalidArgumentError, match="already recording"), dev.graph():
            pass
        with pytest.raises(kb.InvalidArgumentError, match="while a graph records"):
            dev.synchronize()
        k.launch(1, args=(x, x, 1.0))
    with pytest.raises(kb.InvalidArgumentError, match="records once"), g:
        pass
    with pytest.raises(ValueError), dev.graph() as h:
        k.launch(1, args=(x, x, 1.0))
        raise ValueError("user code failed")
    assert len(h) == 0  # an exception discards the recording
    g.close()
    with pytest.raises(kb.InvalidArgumentError, match="closed"):
        g.replay()


def test_pointer_access_reads_const_pointers() -> None:
    src = """
    // a comment with k(int* p) {
    template <typename T> __global__ void k(const T* __restrict__ a, T const* b, T* const c,
                                            float* d, int n, Pair<int, float> p) { d[0] = a[0]; }
    void caller() { k(nullptr, nullptr, nullptr, nullptr, 0, {}); }
    """
    assert pointer_access(src, "k") == ("r", "r", "rw", "rw", None, None)
    assert pointer_access(src, "missing") is None
    assert pointer_access("void f(void) {}", "f") == ()
