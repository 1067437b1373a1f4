"""Kernels, launchers and references the tuner tests sweep (module level: the tuner's worker
processes import them by name)."""

from __future__ import annotations

from typing import Any

import kernelbay as kb
import numpy as np

# MODE: 0 right, 1 wrong result, 2 null write (a fault: a LaunchError on the cpu too), 3 spins forever
# (a hang), 4 does not compile, 5 abort() (kills the worker: a crash).
ROWSUM = r"""
#ifndef MODE
#define MODE 0
#endif
#if MODE == 4
this is not C++;
#endif
extern "C" __global__ void rowsum(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
#if MODE == 2
    if (r == 0) *(volatile int*)0 = 1;
#endif
#if MODE == 5
    if (r == 0) abort();
#endif
#if MODE == 3
    volatile int spin = 1;
    while (spin) {}
#endif
    float acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = 0.0f;
    int c = 0;
    for (; c + UNROLL <= cols; c += UNROLL)
        for (int u = 0; u < UNROLL; ++u) acc[u] += x[r * cols + c + u];
    float s = 0.0f;
    for (int u = 0; u < UNROLL; ++u) s += acc[u];
    for (; c < cols; ++c) s += x[r * cols + c];
#if MODE == 1
    s += 1.0f;
#endif
    y[r] = s;
}
"""

ROWS, COLS = 512, 256


def source() -> kb.Source:
    return kb.Source(ROWSUM, lang="cuda", name="rowsum")


def launch(kernel: Any, config: dict[str, Any], args: list[Any]) -> None:
    block = config["BLOCK"]
    kernel.launch(grid=-(-ROWS // block), block=block, args=[*args, np.int32(ROWS), np.int32(COLS)])


def host_args() -> list[Any]:
    x = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    return [x, np.zeros(ROWS, np.float32)]


def make_args(device: Any) -> list[Any]:
    x, y = host_args()
    return [kb.asarray(x, device=device), kb.asarray(y, device=device)]


def reference(x: Any, y: Any) -> list[Any]:
    return [None, x.sum(axis=1, dtype=np.float64).astype(np.float32)]


def source_for(config: dict[str, Any]) -> kb.Source:
    """A builder: the config as options (what a template or a Triton kernel would use)."""
    return kb.Source(ROWSUM, lang="cuda", name="rowsum", options=(f"-DUNROLL={config['UNROLL']}", "-DMODE=0"))


@kb.tune.autotune(
    {"BLOCK": [32, 128], "UNROLL": [1, 4]},
    source(),
    args=host_args(),
    check=reference,
    rtol=1e-4,
    atol=1e-3,
    repeats=3,
    progress=False,
)
def rowsum(kernel: Any, config: dict[str, Any], args: list[Any]) -> None:
    """The decorator form: `kernelbay tune run tests.tune.kernels:rowsum` sweeps it."""
    launch(kernel, config, args)


def not_a_tuning() -> None:
    """For the CLI's refusal of a plain function."""


class _Unpicklable:
    """A stand-in for a Triton ``@jit`` function: a module-level callable object that does not
    pickle (it holds a lock), which a tuning worker must import by name."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.__module__ = __name__
        self.__qualname__ = "UNPICKLABLE"

    def __call__(self) -> None:
        pass


UNPICKLABLE = _Unpicklable()


def pyref_double(x: Any, y: Any, n: int) -> None:
    """A kernel of the pyref example backend (a Python function: a function source)."""
    for i in range(n):
        y[i] = 2 * x[i]


PYREF_SOURCE = kb.Source(pyref_double, "python", name="pyref_double")


#: A named pipe nobody writes: a source that includes it makes its compile wait forever (set by
#: the test before the sweep; the builder runs in the tuning process).
HANG_PATH = ""


def hang_source(config: dict[str, Any]) -> kb.Source:
    """A builder whose ``HANG=1`` config never finishes compiling (it includes :data:`HANG_PATH`)."""
    text = (f'#include "{HANG_PATH}"\n' if config["HANG"] else "") + ROWSUM
    return kb.Source(text, lang="cuda", name="rowsum", options=("-DUNROLL=1", "-DMODE=0"))
