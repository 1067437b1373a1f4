"""kernelbay-pyref runs kernelbay's conformance suite: these few lines are all it takes."""

import kernelbay as kb
import numpy as np
from kernelbay.testing import BackendConformance


def saxpy(t, x, y, a, n):
    i = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
    if i < n:
        y[i] = a * x[i] + y[i]


def scalars(
    t,
    i,
    u,
    f,
    p0: np.bool_,
    p1: np.int8,
    p2: np.int16,
    p3: np.int32,
    p4: np.int64,
    p5: np.uint8,
    p6: np.uint16,
    p7: np.uint32,
    p8: np.uint64,
    p9: np.float32,
    p10: np.float64,
):
    # The scalar kernel of the conformance suite (docs/authoring-a-backend.md, "The scalar
    # kernel"): signed integers into i, unsigned ones and bools into u, floats into f.
    i[:4] = (p1, p2, p3, p4)
    u[:5] = (p0, p5, p6, p7, p8)
    f[:2] = (p9, p10)


def broken(t, *args):  # *args: pyref refuses kernels it cannot count arguments of
    pass


class TestPyref(BackendConformance):
    backend = "pyref"
    sizes = (0, 1, 7, 4096)

    def saxpy_source(self):
        return kb.Source(saxpy, lang="python", name="saxpy")

    def scalar_source(self):
        return kb.Source(scalars, lang="python", name="scalars")

    def bad_source(self):
        return kb.Source(broken, lang="python", name="broken")
