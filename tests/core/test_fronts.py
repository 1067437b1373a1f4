"""The core's C fronts (kernelbay._fronts): ``Kernel.launch`` / ``__call__``, ``kb.buffer``,
``kb.empty`` and ``Buffer.close`` give what their Python twins give -- results, errors (type and
message), counters -- for every call form, argument kind and error case, and serve only bindings
whose hooks are the backend's direct callables, so that wrappers still see every call.

The backend is pyref's memory and launcher (its launch checks scalars with kernelbay.argrules)
with direct callables that count their calls. Each case runs once with the fronts in place and
once with the Python functions back (``_fronts.use``), and the two outcomes are compared; a
profiler hook checks that the front path really ran no Python frame of the core's twin.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import kernelbay as kb
import numpy as np
import pytest
from kernelbay import _fronts, memory
from kernelbay import streams as _streams
from kernelbay.memory import Buffer

pyref = pytest.importorskip("kernelbay_pyref.plugin", reason="examples/plugins/kernelbay-pyref is not installed")
from kernelbay_pyref import allocator, launcher  # noqa: E402


class Counted:
    """pyref's hooks, each offering a direct callable that counts its calls."""

    name = "counted"

    def __init__(self) -> None:
        self.direct: list[str] = []
        cls = type(self)
        for hook, fn in (("allocate", allocator.allocate), ("free", allocator.free), ("launch", launcher.launch)):
            getattr(cls, f"kernelbay_{hook}").kernelbay_direct = self._counting(hook, fn)

    def _counting(self, hook: str, fn: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
        def make() -> Callable[..., Any]:
            def direct(*args: Any) -> Any:
                self.direct.append(hook)
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

    # Streams the backend sees (pyref has none: each of its streams would make the core take its
    # stream-routing path for every launch while it lives, fronts or not).
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


@pytest.fixture
def be(add_backend) -> Counted:
    gc.collect()  # streams of earlier tests' backends without stream hooks, which raise streams.intercept
    assert _streams.intercept == 0
    b = add_backend(Counted())
    kb.device("counted")  # the probe: the direct callables go in, and with them the fronts
    if not _fronts.active():
        pytest.skip(f"the C fronts cannot be used here: {_fronts.status()}")
    yield b
    _fronts.use(True)


@pytest.fixture
def dev(be: Counted) -> kb.Device:
    return kb.device("counted")


@pytest.fixture
def k(dev: kb.Device) -> kb.Kernel:
    return kb.compile(kb.Source(store, lang="python", name="store"), dev)


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

LAUNCH_FORMS: dict[str, Callable[[kb.Kernel, Any], Any]] = {
    "int grid and block": lambda k, a: k.launch(1, 8, (a, *SCALARS)),
    "tuple": lambda k, a: k.launch((1,), (8,), (a, *SCALARS)),
    "3-tuple": lambda k, a: k.launch((1, 1, 1), (8, 1, 1), (a, *SCALARS)),
    "2 blocks": lambda k, a: k.launch((2,), (4,), (a, *SCALARS)),
    "list args": lambda k, a: k.launch(1, 8, [a, *SCALARS]),
    "call": lambda k, a: k(1, 8, (a, *SCALARS)),
    "call tuple": lambda k, a: k((1,), (8,), (a, *SCALARS)),
    "keywords": lambda k, a: k.launch(grid=(1,), block=(8,), args=(a, *SCALARS)),
    "call keywords": lambda k, a: k(args=(a, *SCALARS), block=8, grid=1),
    "config": lambda k, a: k.launch(config=kb.LaunchConfig((1,), (8,)), args=(a, *SCALARS)),
    "config beats grid": lambda k, a: k.launch(99, 99, (a, *SCALARS), config=kb.LaunchConfig(1, 8)),
    "block None": lambda k, a: k.launch(8, None, (a, *SCALARS)),
    "shared_mem": lambda k, a: k.launch(1, 8, (a, *SCALARS), 64),
    "stream None": lambda k, a: k.launch(1, 8, (a, *SCALARS), 0, None),
    "default stream": lambda k, a: k.launch(1, 8, (a, *SCALARS), stream=a.device.default_stream),
    "reads and writes": lambda k, a: k.launch(1, 8, (a, *SCALARS), reads=[a], writes=[a]),
    "Python scalars": lambda k, a: k.launch(1, 8, (a, *PY_SCALARS)),
    "Method called on the class": lambda k, a: kb.Kernel.launch(k, 1, 8, (a, *SCALARS)),
}


@pytest.mark.parametrize("form", list(LAUNCH_FORMS))
def test_every_launch_form_gives_the_python_paths_result_with_no_python_frame(form, dev, k, be):
    a = kb.zeros(8, "float32", dev)
    front, python = both(lambda: (LAUNCH_FORMS[form](k, a), a)[1], before=lambda: a.numpy().fill(0))
    assert front == python and front[0] == "array"
    assert np.frombuffer(front[-1], np.float32)[:3].tolist() == [12.75, 13.75, 14.75]
    be.direct.clear()
    assert python_frames(lambda: LAUNCH_FORMS[form](k, a)) == []
    assert be.direct == ["launch"]


BAD_LAUNCHES: dict[str, Callable[[kb.Kernel, Any], Any]] = {
    "no grid": lambda k, a: k.launch(block=8, args=(a, *SCALARS)),
    "grid None": lambda k, a: k.launch(None, 8, (a, *SCALARS)),
    "grid 0": lambda k, a: k.launch(0, 8, (a, *SCALARS)),
    "grid float": lambda k, a: k.launch(2.5, 8, (a, *SCALARS)),
    "grid str": lambda k, a: k.launch("4", 8, (a, *SCALARS)),
    "grid 4-d": lambda k, a: k.launch((1, 1, 1, 1), 8, (a, *SCALARS)),
    "block 0": lambda k, a: k.launch(1, (0,), (a, *SCALARS)),
    "block too big": lambda k, a: k.launch(1, 2048, (a, *SCALARS)),
    "args None": lambda k, a: k.launch(1, 8, None),
    "too few args": lambda k, a: k.launch(1, 8, (a,)),
    "too many positional": lambda k, a: k.launch(1, 8, (a, *SCALARS), 0, None, "extra"),
    "unknown keyword": lambda k, a: k.launch(1, 8, (a, *SCALARS), strean=None),
    "grid twice": lambda k, a: k.launch(1, 8, (a, *SCALARS), grid=1),
    "config not a LaunchConfig": lambda k, a: k.launch(config=(1, 8), args=(a, *SCALARS)),
    "int out of range": lambda k, a: k.launch(1, 8, (a, 1.5, 2**31, 3, True, 0.25, 5)),
    "uint8 negative": lambda k, a: k.launch(1, 8, (a, 1.5, 2, -1, True, 0.25, 5)),
    "float for an int": lambda k, a: k.launch(1, 8, (a, 1.5, 2.0, 3, True, 0.25, 5)),
    "int for a bool": lambda k, a: k.launch(1, 8, (a, 1.5, 2, 3, 1, 0.25, 5)),
    "numpy scalar of the wrong size": lambda k, a: k.launch(1, 8, (a, np.float64(1.5), 2, 3, True, 0.25, 5)),
    "0-d array": lambda k, a: k.launch(1, 8, (a, np.array(1.5, np.float32), 2, 3, True, 0.25, 5)),
    "None scalar": lambda k, a: k.launch(1, 8, (a, None, 2, 3, True, 0.25, 5)),
    "Python float for a half": lambda k, a: k.launch(1, 8, (a, 1.5, 2, 3, True, 0.25, 5.0)),
    "closed buffer": lambda k, a: (a.close(), k.launch(1, 8, (a, *SCALARS))),
    "closed kernel": lambda k, a: (k.close(), k.launch(1, 8, (a, *SCALARS))),
    "not a kernel": lambda k, a: kb.Kernel.launch(a, 1, 8, ()),
}


@pytest.mark.parametrize("case", list(BAD_LAUNCHES))
def test_every_launch_error_is_the_python_paths(case, dev):
    outs = []
    for on in (True, False):
        _fronts.use(on)
        k = kb.compile(kb.Source(store, lang="python", name="store"), dev)
        a = kb.zeros(8, "float32", dev)
        outs.append(outcome(lambda k=k, a=a: BAD_LAUNCHES[case](k, a)))
    _fronts.use(True)
    assert outs[0] == outs[1]
    assert outs[0][0] == "raised", outs[0]


def test_launch_in_a_stream_context_or_graph_goes_the_python_way_and_still_runs(dev, k, be):
    a = kb.zeros(8, "float32", dev)
    s = dev.stream()  # pyref has no stream hooks: a stream the backend does not see
    with s:
        assert python_frames(lambda: k.launch(1, 8, (a, *SCALARS)))  # through streams.launch
    s.close()
    g = dev.graph()
    with g:
        front = outcome(lambda: k.launch(1, 8, (a, *SCALARS)))
    assert front[:2] == ("value", "Step")
    a.numpy().fill(0)
    g.replay()
    assert a.numpy()[0] == 12.75


BUFFER_CASES: dict[str, Callable[[kb.Device], Any]] = {
    "positional": lambda d: kb.buffer(16, d),
    "keywords": lambda d: kb.buffer(nbytes=16, device=d),
    "zero bytes": lambda d: kb.buffer(0, d),
    "device by name": lambda d: kb.buffer(16, "counted"),
    "default device": lambda d: kb.buffer(16),
    "numpy int": lambda d: kb.buffer(np.int64(16), d),
    "bool": lambda d: kb.buffer(True, d),
    "negative": lambda d: kb.buffer(-1, d),
    "float": lambda d: kb.buffer(16.0, d),
    "too large": lambda d: kb.buffer((1 << 48) + 1, d),
    "huge": lambda d: kb.buffer(1 << 70, d),
    "bad device": lambda d: kb.buffer(16, 5),
    "unknown device": lambda d: kb.buffer(16, "nosuch"),
    "extra argument": lambda d: kb.buffer(16, d, 1),
    "unknown keyword": lambda d: kb.buffer(16, devic=d),
    "nothing": lambda d: kb.buffer(),
    "empty": lambda d: kb.empty(4, "float32", d),
    "empty default dtype": lambda d: kb.empty(4, device=d),
    "empty numpy dtype": lambda d: kb.empty(4, np.int16, d),
    "empty dtype object": lambda d: kb.empty(4, np.dtype("uint8"), d),
    "empty 2-d": lambda d: kb.empty((2, 3), "float64", d),
    "empty zero": lambda d: kb.empty(0, "float32", d),
    "empty keywords": lambda d: kb.empty(shape=3, dtype="int32", device=d),
    "empty default device": lambda d: kb.empty(4, "float32"),
    "empty negative": lambda d: kb.empty(-1, "float32", d),
    "empty bool shape": lambda d: kb.empty(True, "float32", d),
    "empty too large": lambda d: kb.empty(1 << 46, "float64", d),
    "empty object dtype": lambda d: kb.empty(4, object, d),
    "empty unknown dtype": lambda d: kb.empty(4, "float33", d),
    "empty unhashable dtype": lambda d: kb.empty(4, [("a", "i4")], d),
    "empty extra argument": lambda d: kb.empty(4, "float32", d, 1),
}


@pytest.mark.parametrize("case", list(BUFFER_CASES))
def test_buffer_and_empty_give_the_python_paths_result_or_error(case, dev):
    front, python = both(lambda: BUFFER_CASES[case](dev))
    assert front == python


@pytest.mark.parametrize("case", ["positional", "keywords", "empty", "empty default dtype", "empty keywords"])
def test_buffer_and_empty_run_no_python_frame_of_the_core(case, dev, be):
    kept = [BUFFER_CASES[case](dev)]  # the dtype seen once: the front serves the memo's dtypes
    be.direct.clear()
    assert python_frames(lambda: kept.append(BUFFER_CASES[case](dev))) == []
    assert be.direct == ["allocate"]


@pytest.mark.parametrize("path", ["front", "python"])
def test_close_frees_once_counts_and_marks_closed(path, dev, be):
    _fronts.use(path == "front")
    for make in (lambda: kb.buffer(16, dev), lambda: kb.zeros(4, "int32", dev)):
        buf = make()
        n = memory.closes
        be.direct.clear()
        buf.close()
        buf.close()
        assert buf.closed and memory.closes == n + 1 and be.direct == ["free"]
        with pytest.raises(kb.UseAfterFreeError, match="was used after close"):
            buf.checked_handle()
        with make() as b2:
            pass
        assert b2.closed and memory.closes == n + 2
    if path == "front":
        b3 = kb.buffer(8, dev)
        assert python_frames(b3.close) == []


@pytest.mark.parametrize("path", ["front", "python"])
def test_a_buffer_collected_unclosed_is_freed_once_and_a_closed_one_costs_no_frame(path, dev, be):
    _fronts.use(path == "front")
    n = memory.closes
    be.direct.clear()
    b = kb.buffer(16, dev)
    del b
    gc.collect()
    assert be.direct == ["allocate", "free"] and memory.closes == n  # a collection is not a close()
    closed = kb.buffer(16, dev)
    closed.close()
    assert python_frames(closed.__del__) == ([] if path == "front" else ["__del__"])


@pytest.mark.parametrize("self", [object(), None, 3])
def test_close_of_an_object_that_is_not_a_buffer_is_the_python_paths_error(self, dev):
    front, python = both(lambda: Buffer.close(self))
    assert front == python and front[:2] == ("raised", AttributeError)
    front, python = both(lambda: Buffer.__del__(self))
    assert front == python and front[:2] == ("raised", AttributeError)


def test_a_backend_without_direct_callables_runs_the_python_functions(add_backend, fake, be, dev):
    fdev = kb.device("fake")
    kept: list[kb.Buffer] = []
    assert python_frames(lambda: kept.append(kb.buffer(8, fdev))) == ["buffer"]
    assert python_frames(kept[0].close) == ["close"] and fake.freed == 1


class Watcher:
    """An extension wrapping the hot hooks through pluggy."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @kb.hookimpl(wrapper=True)
    def kernelbay_launch(self, kernel, grid, block, args, shared_mem, stream):
        self.seen.append("launch")
        return (yield)

    @kb.hookimpl(wrapper=True)
    def kernelbay_allocate(self, device, nbytes):
        self.seen.append("allocate")
        return (yield)

    @kb.hookimpl(wrapper=True)
    def kernelbay_free(self, device, handle):
        self.seen.append("free")
        return (yield)


def test_a_wrapper_sees_every_call_and_the_fronts_serve_again_after(dev, k, be):
    w = Watcher()
    kb.register(w)
    try:
        a = kb.empty(8, "float32", dev)
        k.launch(1, 8, (a, *SCALARS))
        k((1,), (8,), (a, *SCALARS))
        kb.buffer(4, dev).close()
        a.close()
        assert w.seen == ["allocate", "launch", "launch", "allocate", "free", "free"]
        assert be.direct == []  # the hooks ran, not the direct callables
    finally:
        kb.unregister(w)
    be.direct.clear()
    kb.buffer(4, dev).close()
    assert be.direct == ["allocate", "free"]


def test_the_fronts_carry_the_twins_docs_and_signatures():
    import inspect

    if not _fronts.active():
        pytest.skip("the fronts are not in place in this process")
    assert "A new untyped buffer" in kb.buffer.__doc__ and kb.buffer.__name__ == "buffer"
    assert str(inspect.signature(kb.buffer)).startswith("(nbytes: 'int', device: 'DeviceLike' = None)")
    assert "config: 'LaunchConfig | None' = None" in str(inspect.signature(kb.Kernel.launch))
    assert kb.Kernel.launch is kb.Kernel.__call__ and kb.Buffer.close.__qualname__ == "Buffer.close"


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, "native"),
        ({"KERNELBAY_FRONTS": "0"}, "python (turned off by KERNELBAY_FRONTS='0')"),
        ({"KERNELBAY_NATIVE": "0"}, "python (turned off by KERNELBAY_NATIVE='0')"),
    ],
)
def test_kernelbay_fronts_0_keeps_the_python_functions(env, expected):
    code = (
        "import kernelbay as kb, kernelbay._fronts as f; kb.device('pyref'); "
        "print(f.status()); print(type(kb.buffer).__name__, type(kb.Kernel.__dict__['launch']).__name__)"
    )
    envs = {**os.environ, "KERNELBAY_BACKENDS": "pyref", **env}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=envs, timeout=120)
    assert r.returncode == 0, r.stderr
    status, kinds = r.stdout.splitlines()[-2:]
    assert status == expected
    assert kinds == ("Front Front" if expected == "native" else "function function")


def test_without_a_compiler_the_python_functions_run_and_say_so_once(tmp_path):
    code = (
        "import kernelbay as kb, kernelbay._fronts as f\n"
        "d = kb.device('pyref')\n"
        "kb.buffer(8, d).close(); kb.empty(4, 'int32', d).close()\n"
        "k = kb.compile(kb.Source(lambda t, x: None, lang='python', name='k'), d)\n"
        "k.launch(1, 1, (kb.zeros(1, 'int32', d),))\n"
        "print(f.status())\n"
    )
    envs = {
        **os.environ,
        "KERNELBAY_BACKENDS": "pyref",
        "KERNELBAY_CACHE_DIR": str(tmp_path / "cache"),  # no build of an earlier run to load
        "PATH": "/nonexistent",
        "CC": "",
    }
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=envs, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].startswith("python (no C compiler found")
    assert r.stderr.count("native helper _kb_fronts unavailable") == 1
