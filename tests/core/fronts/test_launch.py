"""The core's C front of ``Kernel.launch`` / ``__call__`` gives what the Python function gives --
results and errors (type and message) -- for every call form, argument kind and error case, runs
no Python frame of the core on its path, and serves only bindings whose launch is the backend's
direct callable, so that a wrapper still sees every call; ``KERNELBAY_FRONTS=0``,
``KERNELBAY_NATIVE=0`` and a missing compiler keep the Python functions (support.py says how
both paths are run and compared).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import kernelbay as kb
import numpy as np
import pytest
from kernelbay import _fronts

from .support import PY_SCALARS, SCALARS, both, outcome, python_frames, store

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


def test_a_stream_the_backend_does_not_see_stays_on_the_front_and_reaches_the_hook_as_none(dev, k, be):
    """A stream with handle None (what a backend without stream hooks gives, pyref's and tpu's)
    is the device's one stream: the front passes None, and such streams alive anywhere in the
    process cost no launch of any backend its front."""
    from kernelbay import streams as _streams

    a = kb.zeros(8, "float32", dev)
    hidden = _streams.Stream(dev, None, binding=dev.binding)
    other = kb.device("pyref") if "pyref" in {d.backend for d in kb.devices()} else None
    alive = [other.stream(), other.default_stream] if other is not None else []
    assert _streams.intercept == 0, alive
    be.direct.clear()
    be.launch_streams.clear()
    assert python_frames(lambda: k.launch(1, 8, (a, *SCALARS), stream=hidden)) == []
    assert python_frames(lambda: k(1, 8, (a, *SCALARS))) == []
    assert be.direct == ["launch", "launch"] and be.launch_streams == [None, None]
    _fronts.use(False)
    try:
        k.launch(1, 8, (a, *SCALARS), stream=hidden)  # the Python function maps it the same way
    finally:
        _fronts.use(True)
    assert be.launch_streams[-1] is None


def test_graph_replay_front_runs_the_backends_replay_with_no_python_frame(dev, k, be):
    a = kb.zeros(8, "float32", dev)
    with dev.graph() as g:
        k.launch(1, 8, (a, *SCALARS))
    a.numpy().fill(0)
    assert python_frames(g.replay)  # the first replay checks the graph, in Python
    be.direct.clear()
    assert python_frames(g.replay) == [] and python_frames(lambda: g.replay(None)) == []
    assert python_frames(lambda: g.replay(stream=None)) == []
    assert be.direct == ["graph_replay"] * 3
    assert a.numpy()[0] == 12.75  # store() writes: each replay the same
    a2 = kb.zeros(8, "float32", dev)
    a2.close()  # anything closed: the next replay checks again, in Python
    assert python_frames(g.replay)
    be.replay_streams.clear()
    s = dev.stream()
    assert python_frames(lambda: g.replay(dev.default_stream)) == []  # the default stream: as None
    assert python_frames(lambda: g.replay(s)) == [] and python_frames(lambda: g.replay(stream=s)) == []
    assert be.replay_streams == [None, s, s]  # a stream the backend sees: passed on as given
    _fronts.use(False)
    try:
        g.replay(s)  # the Python function passes the same
        g.replay(dev.default_stream)
    finally:
        _fronts.use(True)
    assert be.replay_streams[3] is s
    with s:
        assert python_frames(g.replay)  # a current stream: Python
    a.close()
    front, python = both(g.replay)
    assert front == python and front[:2] == ("raised", kb.UseAfterFreeError)


def test_graph_replay_front_reads_slots_and_leaves_what_it_does_not_serve_to_python(dev, k, be):
    """kb.Graph has __slots__ (the front reads them by offset) and a __dict__: a user's attribute
    stays; a subclass's graph, and one whose slots say nothing was checked, go to the twin."""
    a = kb.zeros(8, "float32", dev)
    with dev.graph() as g:
        k.launch(1, 8, (a, *SCALARS))
    g.note = "mine"  # an attribute of the user's own
    assert g.note == "mine" and "note" in vars(g)
    g.replay()
    assert python_frames(g.replay) == []
    g._fast = None  # as before any checked replay: the twin checks, then the front serves again
    assert python_frames(g.replay)
    assert python_frames(g.replay) == []

    class Mine(kb.Graph):
        pass

    with dev.graph() as g2:
        k.launch(1, 8, (a, *SCALARS))
    g2.__class__ = Mine
    g2.replay()
    assert python_frames(g2.replay)  # not exactly a kb.Graph: the Python function
    a.close()


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


def test_the_fronts_carry_the_twins_docs_and_signatures(be):  # be: the fronts are in place
    import inspect

    assert "A new untyped buffer" in kb.buffer.__doc__ and kb.buffer.__name__ == "buffer"
    assert str(inspect.signature(kb.buffer)).startswith("(nbytes: 'int', device: 'DeviceLike' = None)")
    assert "config: 'LaunchConfig | None' = None" in str(inspect.signature(kb.Kernel.launch))
    assert kb.Kernel.launch is kb.Kernel.__call__ and kb.Buffer.close.__qualname__ == "Buffer.close"

    import pickle

    for fn in (kb.buffer, kb.empty, kb.Kernel.launch, kb.Buffer.close):  # by name, as the functions were
        assert pickle.loads(pickle.dumps(fn)) is fn


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
