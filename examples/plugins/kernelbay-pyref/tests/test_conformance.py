"""kernelbay-pyref runs kernelbay's conformance suite: these few lines are all it takes."""

import kernelbay as kb
from kernelbay.testing import BackendConformance


def saxpy(t, x, y, a, n):
    i = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
    if i < n:
        y[i] = a * x[i] + y[i]


def broken(t, *args):  # *args: pyref refuses kernels it cannot count arguments of
    pass


class TestPyref(BackendConformance):
    backend = "pyref"
    sizes = (0, 1, 7, 4096)

    def saxpy_source(self):
        return kb.Source(saxpy, lang="python", name="saxpy")

    def bad_source(self):
        return kb.Source(broken, lang="python", name="broken")
