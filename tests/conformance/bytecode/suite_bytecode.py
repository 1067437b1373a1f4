"""The function-source check of the conformance suite on ``bytecode`` (run by
test_function_source.py in a subprocess, where a ``.dist-info`` folder announces the backend):
a backend that keeps the promise passes; one that breaks it, or gives no function source that a
worker can import, fails."""

from __future__ import annotations

import kernelbay as kb
from kernelbay.testing.conformance.tocache import FunctionSourceTests
from kernelbay_bytecode import kernels


class TestKeeps(FunctionSourceTests):
    backend = "bytecode"

    def saxpy_source(self) -> kb.Source:
        return kb.Source(kernels.saxpy, lang="python", name="saxpy")

    def function_source(self) -> kb.Source | None:
        return kb.Source(kernels.saxpy_function, lang="python", name="saxpy")


class TestKeepsInItsProcess(TestKeeps):
    def function_source(self) -> kb.Source | None:
        return kb.Source(kernels.saxpy_function, lang="python", name="saxpy", meta={"compile_to_cache": "process"})


class TestCompilesNothing(TestKeeps):
    def function_source(self) -> kb.Source | None:
        return kb.Source(kernels.saxpy_function, lang="python", name="saxpy", meta={"compile_to_cache": "nowhere"})


class TestGivesNoFunctionSource(TestKeeps):
    def function_source(self) -> kb.Source | None:
        return None


class TestGivesANestedFunction(TestKeeps):
    def function_source(self) -> kb.Source | None:
        def saxpy(t, x, y, a, n):
            i = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
            if i < n:
                y[i] = a * x[i] + y[i]

        return kb.Source(saxpy, lang="python", name="saxpy")
