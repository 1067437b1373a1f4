// kernelbay CPU backend: device files often include the CUDA runtime's header for its types. On
// the cpu backend it brings the prelude and the runtime's plain types, so such an include never
// stops a compile; host API calls (cudaMalloc, ...) have no cpu meaning and are not declared.
#pragma once
#include "kb_cpu_cuda.h"

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
