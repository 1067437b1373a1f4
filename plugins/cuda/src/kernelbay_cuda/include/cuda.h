// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): <cuda.h> (the driver API) is host-only:
// kernels cannot call it, and NVRTC compiles no host functions, so under NVRTC it declares nothing.
