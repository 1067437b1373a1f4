"""The kernel ``kernelbay demo`` runs: saxpy, in every language a shipped backend accepts.

``kb.compile`` takes the first of :func:`sources` that the selected backend accepts, so one
list serves every device.
"""

from __future__ import annotations

from typing import Any

from .types import Source

SAXPY_CUDA = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def _saxpy_python(t: Any, x: Any, y: Any, a: Any, n: Any) -> None:
    i = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
    if i < n:
        y[i] = a * x[i] + y[i]


def _saxpy_pallas(x_ref: Any, y_ref: Any, a: Any, n: Any) -> None:
    y_ref[...] = a * x_ref[...] + y_ref[...]


def sources() -> list[Source]:
    return [
        Source(SAXPY_CUDA, lang="cuda", name="saxpy"),
        Source(_saxpy_pallas, lang="pallas", name="saxpy", meta={"inplace": ("y_ref",)}),
        Source(_saxpy_python, lang="python", name="saxpy"),
    ]


def geometry(lang: str, n: int) -> dict[str, Any]:
    """Launch geometry for n elements in the chosen language's convention."""
    if lang == "pallas":
        return {"grid": (1,)}
    return {"grid": (-(-n // 256),), "block": (256,)}


def size_for(lang: str) -> int:
    # The pure-Python reference backend pays one Python call per element. The Pallas kernel
    # uses whole-array blocks, which must fit VMEM double-buffered (3 x 2 x 1 MiB here).
    return {"python": 1 << 12, "pallas": 1 << 18}.get(lang, 1 << 20)
