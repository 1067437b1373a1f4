"""The suite's checks of streams, events and graphs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kernelbay as kb

from .base import Suite, rule


class StreamTests(Suite):
    """Ordering on a stream, events between streams, host reads after several streams, graph replay, update and dependencies."""

    # --- streams, events and graphs (a backend without the hooks runs the core's fallback,
    # which must pass these too: one in-order stream, list replay) ----------------------------

    def _saxpy_on(self, saxpy: kb.Kernel, x: kb.Array, y: kb.Array, a: float, stream: Any = None, **kw: Any) -> Any:
        n = y.size
        return saxpy.launch(**self.saxpy_launch(n), args=(x, y, np.float32(a), np.int32(n)), stream=stream, **kw)

    def test_stream_runs_its_work_in_order(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        s = device.stream()
        for _ in range(10):
            self._saxpy_on(saxpy, x, y, 1.0, stream=s)
        with s:  # the current stream takes stream=None work
            for _ in range(10):
                self._saxpy_on(saxpy, x, y, 1.0)
        s.synchronize()
        assert s.query(), rule(
            "one stream",
            "stream.query() is False right after stream.synchronize(): kernelbay_synchronize(device, stream) "
            "must block until the stream's work has finished, and kernelbay_stream_query then say True",
        )
        np.testing.assert_array_equal(
            y.numpy(),
            np.full(n, 20.0, np.float32),
            err_msg=rule(
                "one stream",
                "twenty launches on one user stream (ten of them as its current stream, stream=None) "
                "did not all run, in order, before stream.synchronize() returned",
            ),
        )

    def test_a_closed_stream_finishes_its_queued_work(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        """Rule (closing a stream): ``kernelbay_stream_destroy`` releases the stream, and work
        already queued on it still completes; the device's synchronize sees it."""
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        for _ in range(3):  # several streams made and closed: each release runs
            y = kb.zeros(n, "float32", device=device)
            s = device.stream()
            for _ in range(5):
                self._saxpy_on(saxpy, x, y, 1.0, stream=s)
            s.close()
            s.close()  # closing twice is harmless
            device.synchronize()
            np.testing.assert_array_equal(
                y.numpy(),
                np.full(n, 5.0, np.float32),
                err_msg=rule(
                    "closing a stream",
                    "five launches queued on a user stream did not all complete after stream.close() and "
                    "device.synchronize(): kernelbay_stream_destroy must let queued work finish",
                ),
            )

    def test_user_stream_waits_for_earlier_default_stream_work(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        """Rule (default stream -> user streams): work queued on a user stream starts after the
        work queued earlier on the device's default stream (``kb.zeros``, a copy, a launch)."""
        n = 1 << 14
        x = kb.asarray(np.ones(n, np.float32), device=device)
        zero = kb.zeros(n, "float32", device=device)
        y = kb.asarray(np.full(n, 7.0, np.float32), device=device)
        s = device.stream()
        for _ in range(8):
            kb.copy(y, zero)  # default stream: y = 0
            self._saxpy_on(saxpy, x, y, 1.0, stream=s)  # user stream: y = x + y, after the copy
            s.synchronize()
            got = y.numpy()
            assert (got == 1.0).all(), rule(
                "default stream before user streams",
                f"a launch on a user stream ran before the default stream's earlier copy ended: y[:4] = {got[:4]}",
            )

    def test_default_stream_waits_for_earlier_user_stream_work(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        """Rule (user streams -> default stream): work queued on the default stream starts after
        the work queued earlier on every user stream of the device."""
        n = 1 << 14
        x = kb.asarray(np.ones(n, np.float32), device=device)
        for _ in range(4):
            y = kb.zeros(n, "float32", device=device)
            z = kb.empty(n, "float32", device=device)
            device.synchronize()
            s = device.stream()
            for _ in range(10):
                self._saxpy_on(saxpy, x, y, 1.0, stream=s)
            kb.copy(z, y)  # the default stream: after s's ten launches
            device.default_stream.synchronize()
            got = z.numpy()
            assert (got == 10.0).all(), rule(
                "user streams before the default stream",
                f"a default-stream copy ran before a user stream's earlier launches ended: z[:4] = {got[:4]}",
            )

    def test_event_on_the_default_stream(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        """Rule (``kernelbay_event_record``): an event recorded on the default stream (whose
        ``handle`` is ``kernelbay_default_stream``'s, or ``None`` without that hook) completes
        when the default stream's earlier work has; a user stream can wait for it."""
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        z = kb.zeros(n, "float32", device=device)
        for _ in range(10):
            self._saxpy_on(saxpy, x, y, 1.0, stream=device.default_stream)
        ev = device.default_stream.record()
        s = device.stream()
        s.wait(ev)
        self._saxpy_on(saxpy, y, z, 1.0, stream=s)
        s.synchronize()
        assert ev.query(), rule("event on the default stream", "the event is not complete after the work behind it")
        np.testing.assert_array_equal(
            z.numpy(), np.full(n, 10.0, np.float32), err_msg=rule("event on the default stream", "z = y ran early")
        )

    def test_event_orders_two_streams(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        z = kb.zeros(n, "float32", device=device)
        s1, s2 = device.stream(), device.stream()
        for _ in range(10):
            self._saxpy_on(saxpy, x, y, 1.0, stream=s1)
        ev = s1.record()
        s2.wait(ev)
        self._saxpy_on(saxpy, y, z, 1.0, stream=s2)  # z = y, once s1's work is done
        s2.synchronize()
        assert ev.query(), rule(
            "events",
            "an event recorded on s1, waited for by s2, is not complete after s2.synchronize(): "
            "kernelbay_stream_wait must hold s2's later work until kernelbay_event_record's event completes, "
            "and kernelbay_event_query must then say True",
        )
        np.testing.assert_array_equal(
            z.numpy(),
            np.full(n, 10.0, np.float32),
            err_msg=rule(
                "events",
                "z = y on s2 ran before s1's ten launches ended, although s2 waited for an event "
                "recorded on s1 after them (kernelbay_stream_wait, kernelbay_event_record)",
            ),
        )
        assert ev.elapsed(ev) == pytest.approx(0.0, abs=1e-3), rule(
            "events", "ev.elapsed(ev) is not 0 ms: kernelbay_event_elapsed returns milliseconds from start to end"
        )

    def test_host_reads_see_every_stream(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        ys = [kb.zeros(n, "float32", device=device) for _ in range(3)]
        streams = [device.stream() for _ in range(3)]
        for i, (y, s) in enumerate(zip(ys, streams)):
            for _ in range(i + 3):
                self._saxpy_on(saxpy, x, y, 1.0, stream=s)
        # No synchronize: each read must wait for the writes queued before it, on any stream.
        why = rule("host reads", "a read into host memory must see every write queued before it, on any stream")
        np.testing.assert_array_equal(ys[0].numpy(), np.full(n, 3.0, np.float32), err_msg=why)
        out = kb.copy(np.empty(n, np.float32), ys[1])
        np.testing.assert_array_equal(out, np.full(n, 4.0, np.float32), err_msg=why)
        device.synchronize()
        np.testing.assert_array_equal(
            np.array(ys[2].numpy()),
            np.full(n, 5.0, np.float32),
            err_msg=rule("host reads", "kernelbay_synchronize(device, None) must wait for every stream of the device"),
        )

    def test_graph_replays_repeat_on_one_stream(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        """After a first replay on a stream, later ones there may take the backend's direct
        ``graph_replay`` (hookspecs.py, "Direct"); the device's default stream given as a stream
        may reach it as None. Each replay must still run once, on its stream, in order."""
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        with device.graph() as g:
            self._saxpy_on(saxpy, x, y, 1.0)
        s = device.stream()
        for _ in range(4):
            g.replay(s)
        self._saxpy_on(saxpy, x, y, 10.0, stream=s)  # after the four replays on s
        g.replay(stream=s)
        s.synchronize()
        for _ in range(3):
            g.replay(device.default_stream)
        device.synchronize()
        np.testing.assert_array_equal(
            y.numpy(),
            np.full(n, 18.0, np.float32),
            err_msg=rule(
                "graphs",
                "five replays on a user stream around a launch there and three on device.default_stream "
                "did not each run once, in stream order (kernelbay_graph_replay, its direct callable: the "
                "default stream given as a stream is the default stream)",
            ),
        )

    def test_graph_records_then_replays(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        with device.graph() as g:
            self._saxpy_on(saxpy, x, y, 1.0)
            self._saxpy_on(saxpy, x, y, 2.0)
        assert len(g) == 2 and g.steps[1].deps == (0,)  # both write y
        device.synchronize()
        np.testing.assert_array_equal(  # recorded, not run
            y.numpy(), np.zeros(n, np.float32), err_msg=rule("graphs", "work recorded in `with device.graph()` ran")
        )
        for _ in range(3):
            g.replay()
        s = device.stream()
        g.replay(stream=s)
        s.synchronize()
        np.testing.assert_array_equal(
            y.numpy(),
            np.full(n, 12.0, np.float32),
            err_msg=rule(
                "graphs",
                "three replays on the default stream and one on a user stream did not each run both "
                "launches once, in order (kernelbay_graph_build/kernelbay_graph_replay; a replay on the default "
                "stream is default-stream work and waits for the user streams)",
            ),
        )
        g.update(1, args=(x, y, np.float32(10.0), np.int32(n)))
        g.replay()
        device.synchronize()
        np.testing.assert_array_equal(
            y.numpy(),
            np.full(n, 23.0, np.float32),
            err_msg=rule(
                "graphs",
                "after g.update(1, args) a replay did not run the second launch with a = 10: "
                "kernelbay_graph_update must change the node of step.index (which counts every step), not of 1, "
                "or return False to have the graph rebuilt",
            ),
        )

    def test_graph_dependencies_follow_buffers(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 1024
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y, z, w = (kb.zeros(n, "float32", device=device) for _ in range(3))
        with device.graph() as g:
            self._saxpy_on(saxpy, x, y, 1.0, reads=(x, y), writes=(y,))
            self._saxpy_on(saxpy, x, z, 1.0, reads=(x, z), writes=(z,))
            self._saxpy_on(saxpy, y, w, 1.0, reads=(y, w), writes=(w,))
            self._saxpy_on(saxpy, x, y, 1.0, reads=(x, y), writes=(y,))  # after step 2 read y
        assert [s.deps for s in g.steps] == [(), (), (0,), (0, 2)]
        g.replay()
        device.synchronize()
        why = rule("graphs", "a replay broke the steps' dependencies: a step starts only after the steps in its deps")
        np.testing.assert_array_equal(w.numpy(), np.full(n, 1.0, np.float32), err_msg=why)
        np.testing.assert_array_equal(y.numpy(), np.full(n, 2.0, np.float32), err_msg=why)
        with pytest.raises(kb.InvalidArgumentError, match="cycle"):
            g.add_dependency(0, on=3)
        y.close()
        with pytest.raises(kb.UseAfterFreeError, match="closed"):
            g.replay()
