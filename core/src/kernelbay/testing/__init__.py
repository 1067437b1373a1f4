"""Test support for kernelbay backends, third-party ones included.

* :class:`BackendConformance`: the conformance suite. A backend runs it with a few lines::

      # tests/test_conformance.py
      from kernelbay.testing import BackendConformance

      class TestMyBackend(BackendConformance):
          backend = "mybackend"

  The defaults compile CUDA C++ test kernels; a backend in another language overrides
  :meth:`BackendConformance.saxpy_source`, :meth:`~BackendConformance.scalar_source` and
  :meth:`~BackendConformance.bad_source` (and :meth:`~BackendConformance.saxpy_launch`).

* The pytest plugin (installed with kernelbay, see :mod:`kernelbay.testing.plugin`):
  ``--kernelbay-require=cuda,tpu`` or ``KERNELBAY_REQUIRE=cuda`` turns "no such device"
  skips into failures, so a GPU run cannot pass having run nothing. A backend that is broken
  or not installed fails the conformance suite with its reason, flag or no flag.

* :func:`reprobe`: make the core probe a backend again after the environment changed (a
  driver installed, an interpret-mode flag set).
"""

from __future__ import annotations

from .conformance import SAXPY_CUDA, BackendConformance
from .plugin import reprobe, require_device, required_backends

__all__ = ["BackendConformance", "SAXPY_CUDA", "reprobe", "require_device", "required_backends"]
