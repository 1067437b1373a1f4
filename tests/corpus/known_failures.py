"""Corpus cases expected to fail today, per backend, with the reason (the lead edits this file).

A listed case runs as a strict expected failure: when it starts passing, the test fails with
"XPASS(strict)" so the entry gets removed. A mismatch, crash or hang is never listed here.
"""

from __future__ import annotations

KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "cpu": {
        "sgemm_cuda/1_naive:sgemm_naive": "cpu prelude has no <cublas_v2.h> (upstream includes it unused)",
        "sgemm_cuda/2_coalesce:sgemm_global_mem_coalesce<32>": "cpu prelude has no <cublas_v2.h>",
        "sgemm_cuda/3_smem:sgemm_shared_mem_block<32>": "cpu prelude has no <cublas_v2.h>",
        "sgemm_cuda/4_1d_blocktiling:sgemm1DBlocktiling<64,64,8,8>": "cpu prelude has no <cublas_v2.h>",
        "sgemm_cuda/5_2d_blocktiling:sgemm2DBlocktiling<128,128,8,8,8>": "cpu prelude has no <cublas_v2.h>",
        "sgemm_cuda/6_vectorize:sgemmVectorize<128,128,8,8,8>": "cpu prelude has no <cublas_v2.h>",
        "cuda_samples/vectorAdd:vectorAdd": "cpu prelude has no <cuda_runtime.h>",
        "cuda_samples/simpleAtomicIntrinsics:testKernel": "cpu atomics lack the mixed int/unsigned overloads (atomicExch(int*, unsigned) etc.)",
    },
    "cuda": {},
}
