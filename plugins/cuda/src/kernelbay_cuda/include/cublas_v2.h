// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): <cublas_v2.h> is host-only:
// kernels cannot use it, so under NVRTC it declares nothing (host code that needs it belongs in Python).
