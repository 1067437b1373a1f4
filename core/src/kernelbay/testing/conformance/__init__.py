"""The backend conformance suite: what every kernelbay backend must do, as pytest tests.

Subclass :class:`BackendConformance` in a test module and set ``backend``. A backend that is
broken or not installed fails every check with its reason; a healthy backend with no device
here skips (and fails under ``--kernelbay-require``). Nothing else skips: what a backend lacks
by design it declares.

What a subclass may override:

* :meth:`saxpy_source` -- a kernel computing ``y[i] = a * x[i] + y[i]`` for ``i < n``, launched
  with ``args=(x, y, np.float32(a), np.int32(n))`` where x and y are float32 arrays of length n.
  Default: CUDA C++ (:data:`SAXPY_CUDA`), which the cuda and cpu backends accept.
* :meth:`saxpy_launch` -- the launch geometry for ``n`` elements (default: blocks of 256).
* :meth:`bad_source` -- a source that must fail to compile with a ``CompileError``.
* :meth:`function_source` -- a saxpy whose code is a module-level Python function: required of a
  backend that implements ``kernelbay_compile_to_cache`` and takes a function language
  (:data:`FUNCTION_LANGUAGES`, or ``function_languages``), whose check fails without it; with
  :meth:`function_launch` (default: :meth:`saxpy_launch`).
* :meth:`scalar_source` -- the kernel of the scalar-rule checks (:mod:`kernelbay.argrules`) in
  the backend's own language: parameters ``(i, u, f, p0, p1, ...)``, one scalar per dtype of
  :meth:`scalar_params`. Required unless the backend compiles ``cuda`` (default:
  :func:`scalar_kernel_cuda`); without it the scalar checks fail saying what to add.
* declarations: ``dtypes`` (the array dtypes the round trips cover; default every dtype of the
  core's table that numpy has), ``sizes``, ``scalar_bool`` (False: the language has no bool
  parameters), ``scalar_split64`` (True: the language has no 64-bit arrays, and the scalar
  kernel stores each value as two uint32 words), ``validates_arg_count`` (a launch with a
  missing argument raises ``InvalidArgumentError`` before running).

Every optional hook is checked either way: where the backend implements it, against its rule;
where it does not, against the core fallback's documented behaviour. Streams, events and graphs
run for every backend, through its own hooks or the fallback, which must give the same results.
A failure names the rule it checks (``[rule: ...]``), each written in :mod:`kernelbay.hookspecs`
or docs/authoring-a-backend.md.

The checks live by topic: :mod:`.memory` (identity, memory, copies, the NumPy protocol),
:mod:`.launch` (compile and launch), :mod:`.tocache` (``kernelbay_compile_to_cache`` of a
function source, compiled in a spawned worker and found on disk), :mod:`.scalars` (the scalar-argument
rules), :mod:`.streams` (streams, events, graphs), :mod:`.interop` (DLPack, foreign arrays, the
CUDA array interface, other backends), on :mod:`.base` (settings, sources, fixtures) and
:mod:`.kernels` (the CUDA C++ sources).
"""

from __future__ import annotations

import pytest

from .base import ARRAY_DTYPES, FUNCTION_LANGUAGES, Suite
from .globals import GlobalsTests
from .interop import InteropTests
from .kernels import BAD_CUDA, SAXPY_CUDA, SCALAR_DTYPES, scalar_kernel_cuda
from .launch import LaunchTests
from .memory import MemoryTests, NumpyProtocolTests
from .scalars import ScalarTests
from .streams import StreamTests
from .tocache import FunctionSourceTests

__all__ = [
    "ARRAY_DTYPES",
    "BackendConformance",
    "FUNCTION_LANGUAGES",
    "BAD_CUDA",
    "SAXPY_CUDA",
    "SCALAR_DTYPES",
    "scalar_kernel_cuda",
]


# pytest runs a class's inherited tests base first: this order keeps the suite's running order
# (memory, launch, compile_to_cache of a function, scalars, streams, NumPy protocol, interop,
# module globals).
class BackendConformance(
    GlobalsTests,
    InteropTests,
    NumpyProtocolTests,
    StreamTests,
    ScalarTests,
    FunctionSourceTests,
    LaunchTests,
    MemoryTests,
    Suite,
):
    """The conformance suite. Set ``backend`` in a subclass."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        # The round trips run once per dtype the backend declares (default: the core's table).
        if "dtype" in metafunc.fixturenames and metafunc.function.__name__ == "test_round_trip_dtypes":
            metafunc.parametrize("dtype", list(self.dtypes))
