"""The core conformance suite, run for the cpu backend (its default CUDA saxpy included)."""

from kernelbay.testing import BackendConformance


class TestCpu(BackendConformance):
    backend = "cpu"
