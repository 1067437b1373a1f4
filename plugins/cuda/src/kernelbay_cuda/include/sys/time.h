// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): <sys/time.h> is host-only
// (time, clock_gettime, sleep): device code has clock() and clock64() built in, so under NVRTC it declares nothing.
