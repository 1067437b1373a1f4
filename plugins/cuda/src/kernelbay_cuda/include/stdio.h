// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): device printf is NVRTC's own.
// NVRTC compiles no host functions, so the host stdio API (FILE, fprintf) is not declared.
#ifndef KERNELBAY_SHIM_STDIO_H
#define KERNELBAY_SHIM_STDIO_H
#define EOF (-1)
#endif
