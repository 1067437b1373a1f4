"""The conformance suite's CUDA C++ kernels, which the cuda and cpu backends accept."""

from __future__ import annotations

from kernelbay.argrules import DTYPES

__all__ = ["BAD_CUDA", "SAXPY_CUDA", "SCALAR_DTYPES", "scalar_kernel_cuda"]

SAXPY_CUDA = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

BAD_CUDA = r"""
extern "C" __global__ void broken(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x
    if (i < n) y[i] = undeclared_name;
}
"""


#: The scalar parameters the scalar-rule tests cover: every dtype of the table with a C spelling.
SCALAR_DTYPES = tuple(d for d in DTYPES if d.param and d.c)


def scalar_kernel_cuda() -> str:
    """``scalars(long long* i, unsigned long long* u, double* f, <one parameter per dtype>)``:
    stores each parameter, signed integers into ``i``, unsigned ones and bools into ``u``,
    floats into ``f``, in the table's order."""
    params, stores, n = [], [], {"i": 0, "u": 0, "f": 0}
    for j, d in enumerate(SCALAR_DTYPES):
        params.append(f"{d.c} p{j}")
        slot = "u" if d.kind in "ub" else d.kind
        stores.append(f"{slot}[{n[slot]}] = p{j};")
        n[slot] += 1
    return (
        'extern "C" __global__ void scalars(long long* i, unsigned long long* u, double* f, '
        + ", ".join(params)
        + ") {\n    if (blockIdx.x == 0 && threadIdx.x == 0) {\n        "
        + "\n        ".join(stores)
        + "\n    }\n}\n"
    )
