// kernelbay CPU backend: device files of projects that also call cuBLAS include its header; this
// one gives its plain types so such a file compiles. cuBLAS calls have no cpu implementation and
// are not declared: a kernel that calls one fails to compile, naming the call.
#pragma once
#include "cuda_runtime.h"

typedef struct cublasContext* cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
