"""The conformance suite on ``bare`` (run by test_fallbacks.py in a subprocess, where a
``.dist-info`` folder announces the backend): the fallbacks of every optional hook."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import kernelbay as kb
from kernelbay.testing import BackendConformance

_spec = importlib.util.spec_from_file_location(
    "pyref_conformance", Path(__file__).parents[3] / "examples/plugins/kernelbay-pyref/tests/test_conformance.py"
)
assert _spec is not None and _spec.loader is not None
pyref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pyref)


class TestBare(BackendConformance):
    backend = "bare"
    sizes = (0, 1, 7, 4096)

    def saxpy_source(self) -> kb.Source:
        return kb.Source(pyref.saxpy, lang="python", name="saxpy")

    def scalar_source(self) -> kb.Source:
        return kb.Source(pyref.scalars, lang="python", name="scalars")

    def bad_source(self) -> kb.Source:
        return kb.Source(pyref.broken, lang="python", name="broken")
