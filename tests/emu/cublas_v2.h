// cublas_v2.h (emulation) - what sf_gemm_wq's slab row takes from cuBLAS,
// on the host: cublasGemmEx as a plain column-major product in double
// (16-bit and f32 operands), so the launcher's slab path runs emulated.
#pragma once
#include "emu_rt.h"
#include <cstdint>
#include <library_types.h> // cudaDataType_t (tests/emu/library_types.h)
typedef void *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
inline const char *cublasGetStatusString(cublasStatus_t s) { return s ? "not supported (emulated)" : "success"; }

inline double emu_blas_get(const void *p, cudaDataType_t t, int64_t i) {
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == CUDA_R_16F) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}
inline void emu_blas_put(void *p, cudaDataType_t t, int64_t i, double v) {
    if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v);
    else if (t == CUDA_R_16F) ((__half *)p)[i] = __float2half_rn((float)v);
    else ((float *)p)[i] = (float)v;
}
// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C; f32 alpha/beta
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                                   cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t, cublasGemmAlgo_t) {
    const double al = *(const float *)alpha, be = *(const float *)beta;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                const int64_t ai = ta == CUBLAS_OP_N ? i + (int64_t)l * lda : l + (int64_t)i * lda;
                const int64_t bi = tb == CUBLAS_OP_N ? l + (int64_t)j * ldb : j + (int64_t)l * ldb;
                s += emu_blas_get(A, at, ai) * emu_blas_get(B, bt, bi);
            }
            const int64_t ci = i + (int64_t)j * ldc;
            emu_blas_put(C, ct, ci, al * s + (be != 0 ? be * emu_blas_get(C, ct, ci) : 0.0));
        }
    return CUBLAS_STATUS_SUCCESS;
}
