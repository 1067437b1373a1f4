"""The CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota.

One rule for the core (the compile pool's size, deadlines that scale with load) and for backends
(the cpu backend's threads per launch): what a container, a job scheduler or ``taskset`` grants,
not what the machine has.
"""

from __future__ import annotations

import math
import os

__all__ = ["affinity_cpus", "quota_cpus", "usable_cpus"]

#: Where cgroups are read (tests point these at a tree of their own).
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"


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


def usable_cpus() -> int:
    """The CPUs this process may keep busy: its affinity mask, capped by its cgroup CPU quota
    (rounded up), at least 1."""
    cpus = affinity_cpus()
    q = quota_cpus()
    return max(1, min(cpus, math.ceil(q))) if q is not None else cpus
