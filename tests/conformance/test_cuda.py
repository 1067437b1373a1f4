"""The core conformance suite for the cuda backend (its default CUDA C++ saxpy; a Triton saxpy
for the ``kernelbay_compile_to_cache`` promise on function sources).

Skips where no NVIDIA GPU is available; run with ``--kernelbay-require=cuda`` (or
``KERNELBAY_REQUIRE=cuda``) on a GPU machine so a skip fails instead.
"""

from typing import Any

import kernelbay as kb
import pytest
from kernelbay.testing import BackendConformance
from kernelbay.testing.plugin import required_backends

pytest.importorskip("kernelbay_cuda", reason="kernelbay-cuda is not installed")

try:
    import triton
    import triton.language as tl
except ImportError:  # the function-source check says so; the rest of the suite needs no Triton
    triton = None

if triton is not None:
    # Module level: the check's compile worker imports it by module and name, as the tuner's does.
    @triton.jit
    def saxpy_triton(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


TRITON_BLOCK = 256


class TestCuda(BackendConformance):
    backend = "cuda"

    def function_source(self) -> kb.Source:
        if triton is None:
            # cuda declares the "triton" language: where cuda is required, not checking the promise fails
            why = "Triton is not installed (pip install 'kernelbay-cuda[triton]'): no triton source to check"
            if "cuda" in required_backends():
                pytest.fail(f"cuda is required (--kernelbay-require) and declares triton sources, but {why}")
            pytest.skip(why)
        meta = {
            "signature": {"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32"},
            "constexprs": {"BLOCK": TRITON_BLOCK},
            "num_warps": 4,
        }
        return kb.Source(saxpy_triton, "triton", meta=meta)

    def function_launch(self, n: int) -> dict[str, Any]:
        return {"grid": (max(1, -(-n // TRITON_BLOCK)),)}  # the block is Triton's: 32 x num_warps
