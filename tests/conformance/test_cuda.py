"""The core conformance suite for the cuda backend (its default CUDA C++ saxpy).

Skips where no NVIDIA GPU is available; run with ``--kernelbay-require=cuda`` (or
``KERNELBAY_REQUIRE=cuda``) on a GPU machine so a skip fails instead.
"""

import pytest
from kernelbay.testing import BackendConformance

pytest.importorskip("kernelbay_cuda", reason="kernelbay-cuda is not installed")


class TestCuda(BackendConformance):
    backend = "cuda"
