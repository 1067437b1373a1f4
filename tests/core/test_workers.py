"""The compile worker pool (kernelbay._workers): results in order, a raising call, a dying
worker and a call past its deadline each reported for that call alone, and a stopped worker's
child processes (its compilers) stopped with it."""

from __future__ import annotations

import os
import time

import pytest
from kernelbay import _precompile, _workers

from tests.core import workers_calls as C

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")


def test_results_come_back_in_order_and_failures_stay_with_their_call() -> None:
    calls = [(3,), (4,), (5,)]
    assert _workers.run(C.square, calls, 2, None) == [("ok", 9), ("ok", 16), ("ok", 25)]
    out = _workers.run(C.fails, [(1,)], 1, None)
    assert out == [("error", "ValueError: bad 1")]


def test_a_dying_worker_fails_its_call_and_the_others_go_on() -> None:
    out = _workers.run(C.dies, [(3,)], 1, None)
    assert out[0][0] == "failed" and "status 3" in out[0][1]
    mixed = _workers.run(_call, [(C.square, 2), (C.dies, 5), (C.square, 3)], 1, None)
    assert mixed[0] == ("ok", 4) and mixed[2] == ("ok", 9)
    assert mixed[1][0] == "failed"


def _call(fn, x):
    return fn(x)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by init) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_a_call_past_its_deadline_is_stopped_with_its_children_and_the_others_finish(tmp_path) -> None:
    pidfile = str(tmp_path / "child.pid")
    t0 = time.monotonic()
    out = _workers.run(_call, [(C.square, 6), (C.hangs_with_a_child, pidfile), (C.square, 7)], 2, 3.0)
    assert time.monotonic() - t0 < 300  # the hang (an hour) was not waited for
    assert out[0] == ("ok", 36) and out[2] == ("ok", 49)
    assert out[1][0] == "timeout" and "longer than 3 s" in out[1][1]
    with open(pidfile) as f:
        child = int(f.read())
    for _ in range(600):  # the group was SIGKILLed: the child goes at once, reaped by init soon
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child), "the hung call's child process outlived its stopped worker"


def test_run_pool_reports_a_timeout_as_such() -> None:
    out = _precompile.run_pool(_pool_call, [("hang",), ("ok",)], 2, "", False, timeout=2.0)
    assert out[1] == ("compiled", "")
    assert out[0][0] == "timeout"


def _pool_call(what: str) -> tuple[str, str]:
    if what == "hang":
        time.sleep(3600)
    return "compiled", ""
