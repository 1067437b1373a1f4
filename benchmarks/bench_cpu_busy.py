"""The cpu backend on a busy machine: saxpy 2^20 float32 and a tiny launch + synchronize, alone,
beside busy loops (one per CPU this process may use) and as two kernelbay processes at once,
with numpy's ``y += a*x`` measured alone in the same run for scale.

Each case runs in child processes (benchmarks/_busy_child.py) so that the busy loops and the
second kernelbay process are real, separate processes competing for the same cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ._timing import goal, record, stats

SUITE = "cpu"

SAXPY = "busy machine: saxpy 2^20 float32 (launch + synchronize)"
TINY = "busy machine: tiny kernel launch + synchronize (1 block of 32)"

_BUSY = "import time\nend = time.time() + {secs}\nwhile time.time() < end:\n    pass\n"


def _child(case: str, n: int, reps: int, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks._busy_child", case, str(n), str(reps)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


def _samples(p: subprocess.Popen[str]) -> list[float]:
    out, _ = p.communicate(timeout=600)
    return json.loads(out.strip().splitlines()[-1])


def _busy(secs: float) -> list[subprocess.Popen[str]]:
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return [subprocess.Popen([sys.executable, "-c", _BUSY.format(secs=secs)]) for _ in range(ncpu)]


def _case(case: str, n: int, reps: int) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {}
    got["alone"] = _samples(_child(case, n, reps))
    busy = _busy(60)
    try:
        time.sleep(0.3)
        got["beside busy loops"] = _samples(_child(case, n, reps))
    finally:
        for b in busy:
            b.kill()
            b.wait()
    a, b = _child(case, n, reps), _child(case, n, reps)
    got["two kernelbay processes at once"] = _samples(a) + _samples(b)
    return got


def run(quick: bool) -> list[dict]:
    n, reps = (1 << 16, 50) if quick else (1 << 20, 400)
    recs: list[dict] = []
    recs.append(record(SAXPY, "numpy y += a*x, alone", stats(_samples(_child("numpy", n, reps)))))
    for where, s in _case("saxpy", n, reps).items():
        recs.append(record(SAXPY, f"kernelbay, {where}", stats(s)))
    for where, s in _case("tiny", 32, reps).items():
        recs.append(record(TINY, f"kernelbay, {where}", stats(s)))
    return recs


def goals(records: list[dict]) -> list[dict]:
    out = []
    med = {(r["group"], r["name"]): r["median"] for r in records if "median" in r}
    np_alone = med.get((SAXPY, "numpy y += a*x, alone"))
    for where in ("alone", "beside busy loops", "two kernelbay processes at once"):
        kb_t = med.get((SAXPY, f"kernelbay, {where}"))
        if np_alone and kb_t:
            out.append(
                goal(f"cpu busy: saxpy 2^20 {where} ≤ 1.5× numpy alone (kernelbay ÷ numpy)", kb_t / np_alone, 1.5)
            )
    idle = med.get((TINY, "kernelbay, alone"))
    for where in ("beside busy loops", "two kernelbay processes at once"):
        t = med.get((TINY, f"kernelbay, {where}"))
        if idle and t:
            out.append(goal(f"cpu busy: tiny launch + sync {where} ≤ 2× its idle cost", t / idle, 2.0))
    return out
