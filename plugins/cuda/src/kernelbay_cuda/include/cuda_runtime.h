// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): under nvcc, <cuda_runtime.h>
// also brings the C library's math, stdlib (with glibc's uint/ushort/ulong), string and stdio declarations and the
// half and bfloat16 types, which device code then uses without including them. The toolkit's own header declares only
// host API under NVRTC, so this one gives what device code relied on.
#ifndef KERNELBAY_SHIM_CUDA_RUNTIME_H
#define KERNELBAY_SHIM_CUDA_RUNTIME_H
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#if __has_include(<cuda_fp16.h>)
#include <cuda_fp16.h>
#endif
#if __has_include(<cuda_bf16.h>)
#include <cuda_bf16.h>
#endif
#endif
