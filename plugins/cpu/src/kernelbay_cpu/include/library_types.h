// kernelbay CPU backend: CUDA's library_types.h enums, which device files of projects that call
// cuBLAS name (CUDA_R_32F, ...).
#pragma once
typedef enum cudaDataType_t {
    CUDA_R_16F = 2,
    CUDA_C_16F = 6,
    CUDA_R_16BF = 14,
    CUDA_C_16BF = 15,
    CUDA_R_32F = 0,
    CUDA_C_32F = 4,
    CUDA_R_64F = 1,
    CUDA_C_64F = 5,
    CUDA_R_8I = 3,
    CUDA_R_8U = 8,
    CUDA_R_32I = 10,
    CUDA_R_8F_E4M3 = 28,
    CUDA_R_8F_E5M2 = 29
} cudaDataType;
