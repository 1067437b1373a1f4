// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): memcpy and memset are NVRTC's own.
// NVRTC compiles no host functions, so the host string functions are not declared.
