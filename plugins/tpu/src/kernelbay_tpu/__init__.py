"""kernelbay backend for JAX Pallas kernels on TPUs."""

__version__ = "0.2.0"
