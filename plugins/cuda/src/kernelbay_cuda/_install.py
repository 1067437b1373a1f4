"""Which install extra fits which CUDA major version, for hints that name real packages.

kernelbay-cuda is split by CUDA major as CuPy (``cupy-cuda12x``/``13x``), JAX
(``jax[cuda12]``/``[cuda13]``) and numba-cuda (``[cu12]``/``[cu13]``) are: the base install
carries no CUDA libraries, and the extra ``cu12`` or ``cu13`` brings the bindings and NVRTC of
that major. The driver decides which fits: a driver supports every CUDA up to its own version.
"""

from __future__ import annotations

__all__ = ["EXTRAS", "extra_for", "nvrtc_package", "install_hint"]

#: CUDA major -> (extra, NVRTC wheel name). Keep in step with plugins/cuda/pyproject.toml.
EXTRAS: dict[int, tuple[str, str]] = {
    12: ("cu12", "nvidia-cuda-nvrtc-cu12"),
    13: ("cu13", "nvidia-cuda-nvrtc"),
}


def extra_for(driver_major: int) -> str | None:
    """The newest extra a driver of CUDA ``driver_major`` can run, or None (too old for any)."""
    fitting = [m for m in EXTRAS if m <= driver_major]
    return EXTRAS[max(fitting)][0] if fitting else None


def nvrtc_package(cuda_major: int) -> str:
    """The NVRTC wheel of that CUDA major (``nvidia-cuda-nvrtc-cu12`` for 12)."""
    if cuda_major in EXTRAS:
        return EXTRAS[cuda_major][1]
    return f"nvidia-cuda-nvrtc (CUDA {cuda_major}.x)"


def install_hint(driver_major: int | None) -> str:
    """``pip install 'kernelbay-cuda[cu12]'`` for this driver, or every choice when unknown."""
    extra = extra_for(driver_major) if driver_major else None
    if extra is None and driver_major:
        oldest = min(EXTRAS)
        return f"the driver (CUDA {driver_major}.x) is older than CUDA {oldest}: upgrade the NVIDIA driver"
    if extra is None:
        return (
            " or ".join(f"pip install 'kernelbay-cuda[{e}]'" for e, _ in EXTRAS.values())
            + " (by your driver's CUDA major)"
        )
    return f"pip install 'kernelbay-cuda[{extra}]' (the driver supports CUDA {driver_major}.x)"
