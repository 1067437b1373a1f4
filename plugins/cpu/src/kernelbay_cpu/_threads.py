"""How many threads a launch uses: what this process may run on, not what the machine has.

In order: ``KERNELBAY_CPU_THREADS`` (when above 0), else ``OMP_NUM_THREADS`` (its first value:
a Ray task, a job scheduler or the user set it), else the CPUs this process may run on (its
affinity mask) capped by its cgroup's CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), rounded
up. A launch uses exactly this many, and ``dev.properties["threads"]`` reports it.
"""

from __future__ import annotations

import math
import os

from kernelbay.settings import env_int

ENV_THREADS = "KERNELBAY_CPU_THREADS"
ENV_OMP = "OMP_NUM_THREADS"
#: Where cgroups are read (tests point these at a tree of their own).
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"


def max_threads() -> int:
    """The most threads a launch may ask for: 8 per core (more only costs), at least 64.

    Past what the machine can start, OpenMP crashes the process instead of failing, so the
    setting is refused before it gets there.
    """
    return max(64, 8 * (os.cpu_count() or 1))


def affinity_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; all of them where there is none)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_dirs() -> list[tuple[str, str]]:
    """(version, directory) of the cgroups that may hold this process's CPU quota, innermost first."""
    out: list[tuple[str, str]] = []
    for line in (_read(PROC_CGROUP) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            bases = [("v2", CGROUP_ROOT), ("v2", os.path.join(CGROUP_ROOT, "unified"))]
        elif "cpu" in controllers.split(","):
            bases = [("v1", os.path.join(CGROUP_ROOT, c)) for c in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
        else:
            continue
        for version, base in bases:
            # Inside a container the cgroup's own directory is mounted at the root: walk up.
            p = path.strip("/")
            while True:
                out.append((version, os.path.join(base, p) if p else base))
                if not p:
                    break
                p = os.path.dirname(p)
    return out


def quota_cpus() -> float | None:
    """The smallest CPU quota of this process's cgroups, in CPUs (``None`` where none is set)."""
    best: float | None = None
    for version, d in _cgroup_dirs():
        q: float | None = None
        if version == "v2":
            raw = _read(os.path.join(d, "cpu.max"))
            if raw:
                quota, _, period = raw.partition(" ")
                if quota != "max" and quota.isdigit() and period.strip().isdigit() and int(period) > 0:
                    q = int(quota) / int(period)
        else:
            quota_s, period_s = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
            if quota_s and period_s and quota_s.lstrip("-").isdigit() and period_s.isdigit():
                if int(quota_s) > 0 and int(period_s) > 0:
                    q = int(quota_s) / int(period_s)
        if q is not None and (best is None or q < best):
            best = q
    return best


def _omp_threads() -> int:
    raw = os.environ.get(ENV_OMP, "").split(",")[0].strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 0


def threads() -> tuple[int, str]:
    """The threads a launch uses, and where that number came from (for the device's properties)."""
    n = env_int(
        ENV_THREADS, default=0, minimum=0, maximum=max_threads(), what="the threads a launch uses (0: what it may use)"
    )
    if n > 0:
        return n, ENV_THREADS
    omp = _omp_threads()
    if omp > 0:
        return min(omp, max_threads()), ENV_OMP
    cpus, why = affinity_cpus(), "affinity"
    q = quota_cpus()
    if q is not None and math.ceil(q) < cpus:
        cpus, why = max(1, math.ceil(q)), "cgroup cpu quota"
    return cpus, why


ENV_WAIT = "KERNELBAY_CPU_WAIT"
_WAITS = ("passive", "spin")


def wait_policy() -> str:
    """``KERNELBAY_CPU_WAIT``: how OpenMP's threads wait between launches.

    ``passive`` (default): they sleep at once. On a busy machine (CI runners, ``pytest -n``,
    two kernelbay processes, a laptop) spinning threads take the cores the working ones need:
    saxpy 2^20 measured 16 ms spinning against 0.19 ms passive on a loaded 2-core box
    (benchmarks/bench_cpu_busy.py). ``spin``: OpenMP's default (spin a while, then sleep), a few
    microseconds less per launch on an idle machine.

    :raises SettingError: for another value.
    """
    raw = os.environ.get(ENV_WAIT, "").strip().lower() or "passive"
    if raw not in _WAITS:
        from kernelbay.errors import SettingError  # only on the error path

        raise SettingError(f"{ENV_WAIT}={raw!r} must be one of {', '.join(_WAITS)} (or unset: passive)")
    return raw


def openmp_env() -> dict[str, str]:
    """What OpenMP's runtime must read when it first loads, for :func:`wait_policy`: nothing where
    the user set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` (theirs is kept)."""
    if wait_policy() == "spin" or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return {}
    return {"OMP_WAIT_POLICY": "passive"}
