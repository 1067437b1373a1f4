"""How many threads a launch uses: what this process may run on, not what the machine has.

In order: ``KERNELBAY_CPU_THREADS`` (when above 0), else ``OMP_NUM_THREADS`` (its first value:
a Ray task, a job scheduler or the user set it), else the CPUs this process may run on (its
affinity mask) capped by its cgroup's CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), rounded
up. A launch uses exactly this many, and ``dev.properties["threads"]`` reports it.
"""

from __future__ import annotations

import math
import os

from kernelbay import cpus
from kernelbay.cpus import affinity_cpus, quota_cpus
from kernelbay.settings import env_int

ENV_THREADS = "KERNELBAY_CPU_THREADS"
ENV_OMP = "OMP_NUM_THREADS"


def max_threads() -> int:
    """The most threads a launch may ask for: 8 per core (more only costs), at least 64.

    Past what the machine can start, OpenMP crashes the process instead of failing, so the
    setting is refused before it gets there.
    """
    return max(64, 8 * (os.cpu_count() or 1))


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


#: The device probe's answer and what it read that is cheap to read again (see :func:`for_launch`).
_probed: tuple[tuple[object, ...], tuple[int, str]] | None = None


def _cheap_inputs() -> tuple[object, ...]:
    return (os.environ.get(ENV_THREADS), os.environ.get(ENV_OMP), affinity_cpus(), cpus.CGROUP_ROOT, cpus.PROC_CGROUP)


def probe() -> tuple[int, str]:
    """:func:`threads` for the device's properties, kept for :func:`for_launch`."""
    global _probed
    inputs = _cheap_inputs()
    got = threads()
    _probed = (inputs, got)
    return got


def for_launch() -> int:
    """The threads a new kernel module's launches use: what the device reports
    (``dev.properties["threads"]``, from :func:`probe`) while the settings and the affinity mask
    are as they were then, else :func:`threads` anew. The cgroup files are not read again: the
    quota is the one the device reports (a fresh process's first compile saves ~0.2 ms of
    reads)."""
    p = _probed
    if p is not None and p[0] == _cheap_inputs():
        return p[1][0]
    return threads()[0]


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
