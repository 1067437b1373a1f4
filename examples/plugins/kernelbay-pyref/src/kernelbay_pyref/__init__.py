"""kernelbay-pyref: a pure-Python reference backend, the worked example of docs/authoring-a-backend.md.

Kernels are Python functions called once per thread with a :class:`ThreadIndex` first and the
launch arguments after it (arrays as numpy views)::

    def saxpy(t, x, y, a, n):
        i = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
        if i < n:
            y[i] = a * x[i] + y[i]

    k = kb.compile(kb.Source(saxpy, lang="python", name="saxpy"), device="pyref")

Slow by design: it exists to be read, and to check other backends against.
"""

__version__ = "0.2.0"

from .launcher import Dim3, ThreadIndex

__all__ = ["Dim3", "ThreadIndex"]
