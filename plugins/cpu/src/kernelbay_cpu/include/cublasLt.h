// kernelbay CPU backend: the plain types of cuBLASLt, for device files of projects that also
// call it (see cublas_v2.h); its calls have no cpu implementation and are not declared.
#pragma once
#include "cublas_v2.h"

typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
