"""Kernel sources and launch helpers the benchmark modules share."""

from __future__ import annotations

import os

#: y[i] = a * x[i] + y[i]: four arguments (two pointers, a float, an int), CUDA C++ as the cpu
#: and cuda backends accept it. The same text as the conformance suite's, so caches agree.
SAXPY_CUDA = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def pyref_saxpy(t, x, y, a, n):
    i = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
    if i < n:
        y[i] = a * x[i] + y[i]


def backend_for_host() -> tuple[str | None, str]:
    """The backend that runs host kernels here: ``cpu`` if it is available, else the pure-Python
    ``pyref`` example; ``(None, why)`` when neither is."""
    import kernelbay as kb

    recs = {b.name: b for b in kb.backends()}
    why = []
    for name in ("cpu", "pyref"):
        rec = recs.get(name)
        if rec is None:
            why.append(f"{name}: not installed")
            continue
        if rec.status == "available":
            return name, ""
        why.append(f"{name}: {rec.status}: {(rec.reason or '').splitlines()[0]}")
    return None, "; ".join(why)


def saxpy_kernel(backend: str, device):
    """The 4-argument saxpy kernel, compiled for ``device`` of ``backend``."""
    import kernelbay as kb

    if backend == "pyref":
        return kb.compile(kb.Source(pyref_saxpy, lang="python", name="saxpy"), device=device)
    return kb.compile(kb.Source(SAXPY_CUDA, lang="cuda", name="saxpy"), device=device)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a benchmark's child process: this one's, with the repository on
    PYTHONPATH so ``import benchmarks`` works there too."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env
