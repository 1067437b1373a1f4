// kernelbay CPU backend: device files often include the CUDA runtime's header for its types. On
// the cpu backend it brings the prelude and the runtime's plain types, so such an include never
// stops a compile. Of the host API, only the error queries that error-checking helpers in device
// headers call are here (kernelbay never runs host code of a kernel file); the rest (cudaMalloc,
// ...) has no cpu meaning and is not declared.
#pragma once
#include "kb_cpu_cuda.h"
// As with nvcc, the runtime header brings the half types (llm.c's kernels use __nv_bfloat16
// after including only cuda_runtime.h).
#include "cuda_bf16.h"
#include "library_types.h"

enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
typedef enum cudaError cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "cuda error"; }
inline const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaError"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
