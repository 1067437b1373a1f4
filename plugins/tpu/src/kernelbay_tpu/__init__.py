"""kernelbay backend for JAX Pallas kernels on TPUs."""
