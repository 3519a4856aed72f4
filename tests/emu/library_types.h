// library_types.h (emulation) - the data type tags of CUDA's libraries that
// the emulated launchers name (sf_gemm_wq's slab row), with CUDA's values.
#pragma once
typedef enum cudaDataType_t { CUDA_R_16F = 2, CUDA_R_16BF = 14, CUDA_R_32F = 0 } cudaDataType_t;
