"""The backend and helpers of the fronts' tests (test_launch.py, test_memory.py; the fixtures
are in conftest.py).

The backend is pyref's memory and launcher (its launch checks scalars with kernelbay.argrules)
with direct callables that count their calls. :func:`both` runs a call once with the core's C
fronts in place and once with the Python functions back (``_fronts.use``) and gives both
outcomes (result, or exception type and message) to compare; :func:`python_frames` names the
Python functions the fronts stand for that ran in a call (a profiler hook), so a test can check
that the front path really ran none.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import kernelbay as kb
import numpy as np
import pytest
from kernelbay import _fronts
from kernelbay.memory import Buffer

pyref = pytest.importorskip("kernelbay_pyref.plugin", reason="examples/plugins/kernelbay-pyref is not installed")
from kernelbay_pyref import allocator, graphs, launcher  # noqa: E402


class Counted:
    """pyref's hooks, each offering a direct callable that counts its calls."""

    name = "counted"

    def __init__(self) -> None:
        self.direct: list[str] = []
        self.launch_streams: list[Any] = []  # the stream argument of each direct launch
        self.replay_streams: list[Any] = []  # the stream argument of each graph replay
        cls = type(self)
        for hook, fn in (("allocate", allocator.allocate), ("free", allocator.free), ("launch", launcher.launch)):
            getattr(cls, f"kernelbay_{hook}").kernelbay_direct = self._counting(hook, fn)

    def _counting(self, hook: str, fn: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
        def make() -> Callable[..., Any]:
            def direct(*args: Any) -> Any:
                self.direct.append(hook)
                if hook == "launch":
                    self.launch_streams.append(args[5])
                return fn(*args)

            return direct

        return make

    @kb.hookimpl
    def kernelbay_backend(self):
        return kb.BackendSpec("counted", 50, ("python",), kb.API_VERSION, "pyref with counted direct callables")

    @kb.hookimpl
    def kernelbay_devices(self):
        return [kb.Device("counted", 0, "counted device")]

    @kb.hookimpl
    def kernelbay_allocate(self, device, nbytes):
        return allocator.allocate(device, nbytes)

    @kb.hookimpl
    def kernelbay_free(self, device, handle):
        return allocator.free(device, handle)

    @kb.hookimpl
    def kernelbay_copy(self, dst, src, nbytes, stream):
        allocator.copy(dst, src, nbytes, stream)

    @kb.hookimpl
    def kernelbay_host_view(self, array):
        return allocator.host_view(array)

    @kb.hookimpl
    def kernelbay_compile(self, device, source):
        return launcher.compile(device, source)

    @kb.hookimpl
    def kernelbay_launch(self, kernel, grid, block, args, shared_mem, stream):
        return launcher.launch(kernel, grid, block, args, shared_mem, stream)

    @kb.hookimpl
    def kernelbay_synchronize(self, device, stream):
        return None

    @kb.hookimpl
    def kernelbay_graph_build(self, device, steps):
        return graphs.graph_build(device, steps)

    @kb.hookimpl
    def kernelbay_graph_replay(self, device, graph, stream):
        self.direct.append("graph_replay")
        self.replay_streams.append(stream)
        graphs.graph_replay(device, graph, stream)

    # Streams the backend sees (pyref has none; its streams reach its hooks as None).
    @kb.hookimpl
    def kernelbay_default_stream(self, device):
        return "default"

    @kb.hookimpl
    def kernelbay_stream_create(self, device, priority):
        return ["user stream"]

    @kb.hookimpl
    def kernelbay_stream_destroy(self, device, handle):
        return None


def store(t, out, a: np.float32, i: np.int32, u: np.uint8, b: np.bool_, h: np.float16, s: np.int64):
    # out[thread] = a value that depends on every scalar, so that a mis-passed one shows
    k = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
    if k < out.shape[0]:
        out[k] = a + i + u + (1 if b else 0) + h + s + k


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call gave, comparably: its result described, or its exception's type and message."""
    try:
        r = fn()
    except Exception as exc:
        return ("raised", type(exc), str(exc))
    if isinstance(r, kb.Array):
        return ("array", r.shape, r.dtype, r.nbytes, r.device, r.numpy().tobytes())
    if isinstance(r, Buffer):
        return ("buffer", type(r), r.nbytes, r.device, bytes(r.handle))
    return ("value", type(r).__name__)


def python_frames(fn: Callable[[], Any]) -> list[str]:
    """The core functions the fronts stand for (their Python twins) that ran in fn()."""
    twins = {f.__code__ for f in _fronts.twins().values()}
    seen: list[str] = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code in twins:
            seen.append(frame.f_code.co_name)

    sys.setprofile(prof)
    try:
        fn()
    except Exception:
        pass
    finally:
        sys.setprofile(None)
    return seen


def both(fn: Callable[[], Any], before: Callable[[], Any] | None = None) -> tuple[tuple, tuple]:
    out = []
    for on in (True, False):
        _fronts.use(on)
        if before is not None:
            before()
        out.append(outcome(fn))
    _fronts.use(True)
    return out[0], out[1]


SCALARS = (np.float32(1.5), np.int32(2), np.uint8(3), np.bool_(True), np.float16(0.25), np.int64(5))
PY_SCALARS = (1.5, 2, 3, True, 0.25, 5)
