"""Timing helpers shared by every benchmark module.

Method: warm up first; time many repetitions in batches; report the median batch (per call)
and the spread (10th/90th percentiles). Peers that are compared are timed *interleaved* in one
process -- A, B, C, then B, A, C... -- so machine noise hits them alike and the ratio is honest.
Each round takes the cases in a new order (a seeded shuffle): a case that always ran right
after the same other one would carry that one's after-effects (on a GPU, the driver's state
after another library's launch and wait), and a fixed rotation keeps every neighbour.

A benchmark module ``benchmarks/bench_<name>.py`` defines::

    SUITE = "cpu"          # or "gpu": which entry point runs it
    def run(quick: bool) -> list[dict]   # records, see record() below
    def goals(records: list[dict]) -> list[dict]  # see goal() below

``quick=True`` (the smoke test) uses tiny sizes and few repetitions.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable


def stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    n = len(s)
    return {
        "median": statistics.median(s),
        "p10": s[max(0, int(n * 0.1) - (1 if n > 1 else 0))] if n else float("nan"),
        "p90": s[min(n - 1, int(n * 0.9))] if n else float("nan"),
        "n": n,
    }


def per_call_us(fn: Callable[[], object], number: int) -> float:
    """Microseconds per call of ``fn`` over one batch of ``number`` calls."""
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number * 1e6


def interleaved(
    cases: dict[str, Callable[[], object]],
    *,
    number: int = 1000,
    repeat: int = 30,
    warmup: int = 2,
    after_batch: Callable[[], object] | None = None,
) -> dict[str, dict[str, float]]:
    """Time each case in batches of ``number`` calls, cases interleaved batch by batch.

    ``after_batch`` runs after each batch, untimed (e.g. a device synchronise so the launch
    queue never fills). Returns per-case stats of microseconds per call.
    """
    samples = interleaved_samples(cases, number=number, repeat=repeat, warmup=warmup, after_batch=after_batch)
    return {k: stats(v) for k, v in samples.items()}


def record(group: str, name: str, st: dict[str, float], unit: str = "us", **extra: object) -> dict:
    """One figure: ``group`` is what is measured ("launch"), ``name`` who ("kernelbay", "cupy")."""
    return {"group": group, "name": name, "unit": unit, **st, **extra}


def goal(text: str, value: float, limit: float, higher_is_better: bool = False) -> dict:
    """One target: ``value`` (a ratio or a time) against ``limit``."""
    met = value >= limit if higher_is_better else value <= limit
    return {"goal": text, "value": value, "limit": limit, "met": bool(met)}


def find(records: list[dict], group: str, name: str) -> dict | None:
    for r in records:
        if r["group"] == group and r["name"] == name:
            return r
    return None


def ratio(records: list[dict], group: str, a: str, b: str) -> float | None:
    """median(a) / median(b) within ``group``, or None when either is missing."""
    ra, rb = find(records, group, a), find(records, group, b)
    if not ra or not rb or not rb["median"]:
        return None
    return ra["median"] / rb["median"]


# --- additions for the runner and the subprocess benchmarks -------------------------------

#: Units where more is better; every other unit is a cost (a time).
RATE_UNITS = frozenset({"GB/s", "GiB/s", "Gflop/s", "1/s"})


def interleaved_samples(
    cases: dict[str, Callable[[], object]],
    *,
    number: int = 1000,
    repeat: int = 30,
    warmup: int = 2,
    after_batch: Callable[[], object] | None = None,
) -> dict[str, list[float]]:
    """As :func:`interleaved`, but the raw per-batch samples (microseconds per call).

    Batch ``i`` of every case ran back to back, so ``samples[a][i] - samples[b][i]`` is a
    paired difference (see :func:`paired_diff`).
    """
    for _ in range(warmup):
        for fn in cases.values():
            per_call_us(fn, number)
            if after_batch:
                after_batch()
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for names in rounds(list(cases), repeat):
        for name in names:
            samples[name].append(per_call_us(cases[name], number))
            if after_batch:
                after_batch()
    return samples


def rounds(names: list[str], repeat: int, seed: int = 0) -> list[list[str]]:
    """``repeat`` orders of ``names``, the first as given, each later one a seeded shuffle (see
    the module's doc): the same orders on every run, no case always after the same one."""
    rng = random.Random(seed)
    out = [list(names)]
    while len(out) < repeat:
        order = list(names)
        rng.shuffle(order)
        out.append(order)
    return out[:repeat]


def paired_diff(a: list[float], b: list[float]) -> dict[str, float]:
    """Stats of ``a[i] - b[i]``: what ``a`` adds over ``b``, robust to drifting machine load."""
    return stats([x - y for x, y in zip(a, b)])


def subprocess_samples(
    cases: dict[str, tuple[list[str], dict[str, str] | None]],
    *,
    repeat: int = 20,
    warmup: int = 1,
    timeout: float = 120.0,
) -> dict[str, list[float]]:
    """Run each case's command ``repeat`` times, cases interleaved, each in a fresh process.

    Each child must print, as its last line of stdout, the seconds it measured itself (so the
    interpreter's start-up is left out). Returns microseconds per case. ``env`` (or ``None``
    for the parent's) is the child's whole environment.
    """
    import subprocess

    def once(cmd: list[str], env: dict[str, str] | None) -> float:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"{' '.join(cmd[:3])}... exited {out.returncode}: {' | '.join(tail)}")
        return float(out.stdout.strip().splitlines()[-1]) * 1e6

    for _ in range(warmup):
        for cmd, env in cases.values():
            once(cmd, env)
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for name, (cmd, env) in cases.items():
            samples[name].append(once(cmd, env))
    return samples


def skipped(group: str, name: str, why: str) -> dict:
    """A record for a figure that could not be taken here (peer not installed, no device)."""
    return {"group": group, "name": name, "unit": None, "skipped": why}


def run_parts(parts: tuple[Callable[..., object], ...], *args: object, out: list[dict]) -> list[dict]:
    """Call each ``part(*args, out)`` in turn; one that raises leaves a :func:`skipped` record
    naming it and the error, and the others go on. Returns ``out``."""
    for part in parts:
        try:
            part(*args, out)
        except Exception as exc:
            out.append(skipped(part.__name__.strip("_"), "kernelbay", f"failed: {exc!r}"))
    return out


def median_of(records: list[dict], group: str, name: str) -> float | None:
    """The median of the record ``(group, name)``, or None when it is missing or skipped."""
    r = find(records, group, name)
    return r.get("median") if r else None


def is_figure(rec: dict) -> bool:
    """True for a measured record, False for a :func:`skipped` one."""
    return "skipped" not in rec and rec.get("median") is not None


def relative_cost(kernelbay: dict, peer: dict) -> float | None:
    """kernelbay's cost as a multiple of ``peer``'s (< 1: kernelbay is faster).

    Times are divided as they are; for rate units (GB/s...) the inverse ratio is taken, so the
    number always reads the same way.
    """
    if not (is_figure(kernelbay) and is_figure(peer)) or kernelbay["unit"] != peer["unit"]:
        return None
    a, b = kernelbay["median"], peer["median"]
    if kernelbay["unit"] in RATE_UNITS:
        a, b = b, a
    return a / b if b else None
