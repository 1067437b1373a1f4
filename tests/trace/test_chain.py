"""How extensions reach the hot path: positional forms chained by the core, pluggy otherwise;
NVTX ranges (with a stand-in nvtx module)."""

from __future__ import annotations

import gc
import sys
import types
from collections import Counter

import kernelbay as kb
import numpy as np
import pytest
from kernelbay._plugins import runtime
from kernelbay.tracing import hot
from kernelbay.tracing import nvtx as kb_nvtx

from .conftest import load, spans

pytestmark = pytest.mark.kernelbay_device("cpu")

INC = 'extern "C" __global__ void inc(float* y) { y[threadIdx.x] += 1.0f; }'


@pytest.fixture
def kernel():
    dev = kb.device("cpu")
    k = kb.compile(kb.Source(INC, lang="cuda", name="inc"), device=dev)
    y = kb.zeros(8, np.float32, device=dev)
    yield k, y
    y.close()


def _is_tracers(fn) -> bool:
    """Whether ``fn`` is the tracer's launch wrapper: the C one where it builds, else Python's."""
    mod = hot.c_module()
    return type(fn) is mod.Launch if mod is not None else fn.__module__ == "kernelbay.tracing.hot"


def _backend_launch():
    b = runtime.load("cpu")
    return b, runtime.own_impls(b.plugin, "kernelbay_launch")[0].function


def test_tracing_chains_direct_calls_and_unchains_after(tmp_path, kernel) -> None:
    k, y = kernel
    b, raw = _backend_launch()
    assert b.launch is raw  # tracing off: the backend's own function
    with kb.trace(tmp_path / "t.json"):
        assert b.launch is not raw and _is_tracers(b.launch)
        k.launch(1, 8, (y,))
    assert b.launch is raw
    assert float(y.numpy()[0]) == 1.0


class _PlainWrapper:
    """An extension with no positional form: the core must go through pluggy."""

    def __init__(self) -> None:
        self.seen = 0

    @kb.hookimpl(wrapper=True)
    def kernelbay_launch(self, kernel, grid, block, args, shared_mem, stream):
        self.seen += 1
        return (yield)


def test_a_wrapper_without_positional_form_routes_through_pluggy(tmp_path, kernel) -> None:
    k, y = kernel
    other = _PlainWrapper()
    kb.register(other)
    try:
        with kb.trace(tmp_path / "t.json"):
            assert runtime.load("cpu").launch.__module__ == "kernelbay._binding"
            for _ in range(3):
                k.launch(1, 8, (y,))
    finally:
        kb.unregister(other)
    assert other.seen == 3
    assert len(spans(load(str(tmp_path / "t.json")), "launch")) == 3  # the tracer's pluggy wrapper
    assert float(y.numpy()[0]) == 3.0


@pytest.fixture
def fake_nvtx(monkeypatch):
    calls: list[tuple[str, str | None]] = []
    mod = types.ModuleType("nvtx")
    mod.push_range = lambda message=None, domain=None, **kw: calls.append(("push", message, domain))
    mod.pop_range = lambda domain=None: calls.append(("pop", None, domain))
    monkeypatch.setitem(sys.modules, "nvtx", mod)
    yield calls
    kb_nvtx.disable()


def test_nvtx_ranges_around_operations(fake_nvtx, tmp_path, kernel) -> None:
    k, y = kernel
    # Arrays that earlier tests in this process left in reference cycles are freed by the garbage
    # collector whenever it runs, each free a range of its own: free them before the window.
    gc.collect()
    kb_nvtx.enable()
    with kb.trace(tmp_path / "t.json"):  # both extensions at once: still direct calls
        assert _is_tracers(runtime.load("cpu").launch)  # registered last: outermost
        k.launch(1, 8, (y,))
        kb.copy(y, np.zeros(8, np.float32))
        kb.device("cpu").synchronize()
    kb_nvtx.disable()
    k.launch(1, 8, (y,))  # off again: no range
    pushed = [m for op, m, _ in fake_nvtx if op == "push"]
    assert pushed == ["launch inc", "copy HtoD", "synchronize"]
    assert Counter(op for op, _, _ in fake_nvtx) == {"push": 3, "pop": 3}
    assert {d for _, _, d in fake_nvtx} == {"kernelbay"}
    assert Counter(e["cat"] for e in spans(load(str(tmp_path / "t.json")))) == {
        "launch": 1,
        "copy": 1,
        "synchronize": 1,
        "device": 2,
    }


def test_nvtx_without_the_package_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "nvtx", None)
    with pytest.raises(kb.UnsupportedError, match="pip install nvtx"):
        kb_nvtx.enable()


def test_a_backend_without_device_timer_gets_host_spans_only(tmp_path) -> None:
    pytest.importorskip("kernelbay_pyref", reason="the pyref example backend is not installed")

    def double(t, y, n):
        i = t.threadIdx.x
        if i < n:
            y[i] = 2 * y[i]

    dev = kb.device("pyref")
    with kb.trace(tmp_path / "p.json"):
        k = kb.compile(kb.Source(double, lang="python", name="double"), device=dev)
        y = kb.asarray(np.ones(4, np.float32), device=dev)
        k.launch(1, 4, (y, 4))
        dev.synchronize()
    doc = load(str(tmp_path / "p.json"))
    assert Counter(e["cat"] for e in spans(doc)) == {
        "compile": 1,
        "allocate": 1,
        "copy": 1,
        "launch": 1,
        "synchronize": 1,
    }
    k = doc["kernelbay"]["kernels"]["double"]
    assert k["count"] == 1 and k["host_ns"] > 0 and k["device_count"] == 0 and k["device_min_ns"] is None
    assert spans(doc, "compile")[0]["args"]["cache"] == "uncached"  # pyref keeps no disk cache
    assert list(y.numpy()) == [2.0] * 4
