"""The backend conformance suite: what every kernelbay backend must do, as pytest tests.

Subclass :class:`BackendConformance` in a test module and set ``backend``. The class's tests
skip (or fail, under ``--kernelbay-require``) when the backend has no device here.

What a subclass may override:

* :meth:`saxpy_source` -- a kernel computing ``y[i] = a * x[i] + y[i]`` for ``i < n``, launched
  with ``args=(x, y, np.float32(a), np.int32(n))`` where x and y are float32 arrays of length n.
  Default: CUDA C++ (:data:`SAXPY_CUDA`), which the cuda and cpu backends accept.
* :meth:`saxpy_launch` -- the launch geometry for ``n`` elements (default: blocks of 256).
* :meth:`bad_source` -- a source that must fail to compile with a ``CompileError``.
* :meth:`scalar_source` -- the kernel of the scalar-rule tests (:mod:`kernelbay.argrules`), or
  ``None`` to skip them. Default: CUDA C++ generated from the table (:func:`scalar_kernel_cuda`);
  a backend without the ``cuda`` language skips them.
* capability flags: ``validates_arg_count`` (a launch with a missing argument raises
  ``InvalidArgumentError`` before running), ``dtypes`` and ``sizes`` for the copy round trips.

Streams, events and graphs are checked for every backend: through its own hooks where it
declares them (``kernelbay_stream_*``, ``kernelbay_event_*``, ``kernelbay_graph_*``), else
through the core's fallback, which must give the same results.

The checks live by topic: :mod:`.memory` (identity, memory, copies, the NumPy protocol),
:mod:`.launch` (compile and launch, across backends), :mod:`.scalars` (the scalar-argument
rules), :mod:`.streams` (streams, events, graphs), on :mod:`.base` (settings, sources,
fixtures) and :mod:`.kernels` (the CUDA C++ sources).
"""

from __future__ import annotations

from .base import Suite
from .globals import GlobalsTests
from .kernels import BAD_CUDA, SAXPY_CUDA, SCALAR_DTYPES, scalar_kernel_cuda
from .launch import LaunchTests
from .memory import MemoryTests, NumpyProtocolTests
from .scalars import ScalarTests
from .streams import StreamTests

__all__ = ["BackendConformance", "BAD_CUDA", "SAXPY_CUDA", "SCALAR_DTYPES", "scalar_kernel_cuda"]


# pytest runs a class's inherited tests base first: this order keeps the suite's running order
# (memory, launch, scalars, streams, NumPy protocol).
class BackendConformance(GlobalsTests, NumpyProtocolTests, StreamTests, ScalarTests, LaunchTests, MemoryTests, Suite):
    """The conformance suite. Set ``backend`` in a subclass."""
