// kernelbay CPU backend: the driver API header's plain types, so that a device file including it
// compiles; driver calls have no cpu meaning and are not declared.
#pragma once
#include "kb_cpu_cuda.h"

typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
#define CUDA_VERSION 12000
