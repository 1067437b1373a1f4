"""The cost of the cpu backend's safety modes (docs/reliability.md, "Faults in cpu kernels").

Each mode is a setting read at import, so each runs in its own child process; the children
run in turn (A, B, C, D, A, B, ...) so machine noise hits them alike, and each figure is the
median of the children's medians.

* runtime off (``KERNELBAY_CPU_RUNTIME=0``): no Ctrl-C cancellation, fault report or fork care
  (the floor the default is measured against);
* default: the runtime on (Ctrl-C, the fatal-signal report, fork()ed children);
* isolated (``KERNELBAY_CPU_ISOLATE=1``): launches in a worker process over shared memory;
* checked (``KERNELBAY_CPU_CHECK=address``): isolated, and kernels built with ASan and UBSan.

Rows: the launch host cost of a 4-argument kernel on 1 block of 256 threads, and saxpy on
2^22 float32 (2^16 with ``--quick``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from . import _kernels
from ._timing import find, goal, record, skipped

SUITE = "cpu"

LAUNCH = "cpu modes: launch host cost, 4-arg kernel, 1 block of 256 threads"
SAXPY = "cpu modes: saxpy 2^22 float32 (launch + synchronize)"
SAXPY_QUICK = "cpu modes: saxpy 2^16 float32 (launch + synchronize)"
MODES = {
    "runtime off": {"KERNELBAY_CPU_RUNTIME": "0"},
    "default": {},
    "isolated": {"KERNELBAY_CPU_ISOLATE": "1"},
    "checked (ASan+UBSan)": {"KERNELBAY_CPU_CHECK": "address"},
}

_CHILD = """
import json, statistics, sys, time, numpy as np, kernelbay as kb
from benchmarks import _kernels
n, number, repeat = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
d = kb.device("cpu"); k = _kernels.saxpy_kernel("cpu", d)
xs = np.ones(256, np.float32); x, y = kb.asarray(xs, device=d), kb.asarray(xs, device=d)
args = (x, y, np.float32(0.5), np.int32(256)); launch = k.launch
def batch(fn, number):
    t = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t) / number
batch(lambda: launch(1, 256, args), number)
lat = statistics.median(batch(lambda: launch(1, 256, args), number) for _ in range(repeat)) * 1e6
X, Y = kb.asarray(np.ones(n, np.float32), device=d), kb.asarray(np.ones(n, np.float32), device=d)
big = (X, Y, np.float32(0.5), np.int32(n)); g = (n + 255) // 256
def saxpy():
    k.launch(g, 256, big); d.synchronize()
saxpy()
sx = statistics.median(batch(saxpy, 1) for _ in range(repeat)) * 1e3
print(json.dumps({"launch_us": lat, "saxpy_ms": sx}))
"""


def _usable() -> str:
    import kernelbay as kb

    rec = {b.name: b for b in kb.backends()}.get("cpu")
    if rec is None or rec.status != "available":
        return "the cpu backend is not available"
    return ""


def run(quick: bool) -> list[dict]:
    why = _usable()
    n = 1 << (16 if quick else 22)
    saxpy_group = SAXPY_QUICK if quick else SAXPY
    if why:
        return [skipped(g, m, why) for g in (LAUNCH, saxpy_group) for m in MODES]
    number, repeat, rounds = (50, 3, 1) if quick else (500, 9, 5)
    got: dict[str, list[dict]] = {m: [] for m in MODES}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for mode, extra in MODES.items():
            if mode in errors:
                continue
            env = _kernels.child_env(**extra)
            for k in ("KERNELBAY_CPU_ISOLATE", "KERNELBAY_CPU_CHECK", "KERNELBAY_CPU_RUNTIME"):
                if k not in extra:
                    env.pop(k, None)
            r = subprocess.run(
                [sys.executable, "-c", _CHILD, str(n), str(number), str(repeat)],
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
                cwd=os.path.dirname(os.path.dirname(__file__)),
            )
            if r.returncode != 0:
                errors[mode] = (r.stderr.strip().splitlines() or ["failed"])[-1][:300]
                continue
            got[mode].append(json.loads(r.stdout.strip().splitlines()[-1]))
    out = []
    for mode in MODES:
        if mode in errors:
            out += [skipped(LAUNCH, mode, errors[mode]), skipped(saxpy_group, mode, errors[mode])]
            continue
        lat = [g["launch_us"] for g in got[mode]]
        sx = [g["saxpy_ms"] for g in got[mode]]
        out.append(record(LAUNCH, mode, _st(lat)))
        out.append(record(saxpy_group, mode, _st(sx), unit="ms"))
    return out


def _st(v: list[float]) -> dict[str, float]:
    return {"median": statistics.median(v), "p10": min(v), "p90": max(v), "n": len(v)}


def goals(records: list[dict]) -> list[dict]:
    out = []
    for group, what in ((LAUNCH, "launch host cost"), (SAXPY, "saxpy 2^22"), (SAXPY_QUICK, "saxpy 2^16")):
        off, on = find(records, group, "runtime off"), find(records, group, "default")
        if off and on and "median" in off and "median" in on:
            out.append(
                goal(
                    f"cpu: the runtime (Ctrl-C, fault report, fork) costs ≤ 10% of the {what}",
                    on["median"] / off["median"],
                    1.10,
                )
                | {"unit": "×"}
            )
    return out
