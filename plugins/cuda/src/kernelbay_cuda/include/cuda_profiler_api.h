// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): <cuda_profiler_api.h> is
// host-only (cudaProfilerStart/Stop): the toolkit's declares them __host__, which NVRTC's JIT mode refuses, so under
// NVRTC it declares nothing (host code that calls them still fails, naming its line).
