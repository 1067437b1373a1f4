"""Tracing is an extension: ``import kernelbay`` and a plain launch load none of it; ``kb.trace``
loads it when asked for; a trace's end closes the device timers it asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import kernelbay as kb
import numpy as np
import pytest

from .conftest import load, spans

pytestmark = pytest.mark.kernelbay_device("cpu")

INC = 'extern "C" __global__ void inc(float* y) { y[threadIdx.x] += 1.0f; }'


def _run(code: str, **env: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; it prints one JSON line, returned."""
    full = dict(os.environ, **env)
    for name in ("KERNELBAY_TRACE", "KERNELBAY_NVTX"):
        if name not in env:
            full.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_and_a_plain_launch_load_no_tracing(shared_cache) -> None:
    got = _run(
        f"""
        import json, sys
        import numpy as np
        import kernelbay as kb

        dev = kb.device("cpu")
        k = kb.compile(kb.Source({INC!r}, lang="cuda", name="inc"), device=dev)
        y = kb.zeros(8, np.float32, device=dev)
        k.launch(1, 8, (y,))
        dev.synchronize()
        print(json.dumps({{"y": float(y.numpy()[0]), "loaded": sorted(m for m in sys.modules if m.startswith("kernelbay.tracing"))}}))
        """
    )
    assert got == {"y": 1.0, "loaded": []}


def test_kb_trace_loads_the_extension_when_asked_for(tmp_path, shared_cache) -> None:
    path = str(tmp_path / "t.json")
    got = _run(
        f"""
        import json, sys
        import numpy as np
        import kernelbay as kb
        from kernelbay import trace

        dev = kb.device("cpu")
        k = kb.compile(kb.Source({INC!r}, lang="cuda", name="inc"), device=dev)
        y = kb.zeros(8, np.float32, device=dev)
        with trace({path!r}):
            k.launch(1, 8, (y,))
        print(json.dumps({{"same": trace is kb.trace, "loaded": "kernelbay.tracing.tracer" in sys.modules}}))
        """
    )
    assert got == {"same": True, "loaded": True}
    assert [e["name"] for e in spans(load(path), "launch")] == ["launch inc"]


def test_env_trace_still_starts_at_import(tmp_path, cache_dir) -> None:
    path = str(tmp_path / "env.json")
    got = _run(
        """
        import json, sys
        import kernelbay as kb
        from kernelbay.tracing import tracer
        print(json.dumps({"recording": tracer.current() is not None}))
        """,
        KERNELBAY_TRACE=path,
    )
    assert got == {"recording": True}
    assert load(path)["kernelbay"]["calls"] == 0


def test_env_nvtx_still_starts_at_import(tmp_path, cache_dir) -> None:
    (tmp_path / "nvtx.py").write_text(  # a stand-in nvtx package
        "def push_range(message, domain=None): pass\ndef pop_range(domain=None): pass\n"
    )
    got = _run(
        """
        import json
        import kernelbay as kb
        from kernelbay.tracing import nvtx
        print(json.dumps({"on": nvtx._active is not None}))
        """,
        KERNELBAY_NVTX="1",
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    )
    assert got == {"on": True}


def test_trace_is_public_api() -> None:
    assert "trace" in kb.__all__ and callable(kb.trace)
    assert kb.trace.__module__ == "kernelbay.tracing.tracer" and kb.trace.__doc__
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        kb.no_such_name  # noqa: B018


class _ClosingTimer:
    """A synchronous device timer with the optional close()."""

    synchronous = True

    def __init__(self) -> None:
        self.closed = 0

    def mark(self, device: Any, stream: Any) -> None:
        return None

    def span(self, start: Any, end: Any) -> None:
        return None

    def close(self) -> None:
        self.closed += 1


def test_the_end_of_a_trace_closes_its_timers(tmp_path) -> None:
    from kernelbay.tracing.tracer import Tracer

    dev = kb.device("cpu")
    k = kb.compile(kb.Source(INC, lang="cuda", name="inc"), device=dev)
    y = kb.zeros(8, np.float32, device=dev)
    timer = _ClosingTimer()
    tr = Tracer(tmp_path / "t.json")
    tr.timers["cpu"] = timer  # chosen before the start, as the benchmarks do
    with tr:
        k.launch(1, 8, (y,))
        assert timer.closed == 0
    assert timer.closed == 1
    tr.stop()  # stopping twice closes nothing twice
    assert timer.closed == 1
    assert load(str(tmp_path / "t.json"))["kernelbay"]["kernels"]["inc"]["device_count"] == 1
    y.close()


def test_a_timer_whose_close_fails_leaves_the_trace_whole(tmp_path, caplog) -> None:
    from kernelbay.tracing.tracer import Tracer

    class Broken(_ClosingTimer):
        def close(self) -> None:
            raise RuntimeError("close broke")

    dev = kb.device("cpu")
    tr = Tracer(tmp_path / "t.json")
    tr.timers["cpu"] = Broken()
    with tr:
        kb.zeros(4, np.float32, device=dev).close()
    assert "closing the device timer" in caplog.text
    assert load(str(tmp_path / "t.json"))["kernelbay"]["allocator"]["traced"]
