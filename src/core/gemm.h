/* gemm.h - the validated problem of the dense matrix product (sf_gemm) and
 * its backend entry points.  Built by src/core/gemm.c, read by
 * src/ref/gemm_ref.c, src/cpu/gemm_cpu.c and src/cuda/gemm/gemm.cu.  Not
 * installed; include only from src/. */
#ifndef SF_GEMM_H
#define SF_GEMM_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuBLAS's workspace on Hopper (it wants MiBs), from the context's arena. */
#define SF_CUBLAS_WS_BYTES ((size_t)8 << 20)

typedef struct sf_gemm_problem {
    const sf_gemm_params *p;
    int64_t M, N, K;
    int has_bias;
} sf_gemm_problem;

sf_status sf_ref_gemm(sf_ctx *ctx, const sf_gemm_problem *pr);
sf_status sf_cpu_gemm(sf_ctx *ctx, const sf_gemm_problem *pr);
/* src/cuda/gemm/gemm.cu; src/core/gemm_nocuda.c in a build without CUDA. */
sf_status sf_cuda_gemm(sf_ctx *ctx, const sf_gemm_problem *pr);
/* Frees the context's cuBLAS handle (device.cu at context teardown). */
void sf_cuda_gemm_free(sf_ctx *ctx);
/* The context's cuBLAS handle (a cublasHandle_t) set to its stream, default
 * math and `ws_bytes` of workspace at ws: made on the context's first call,
 * which therefore cannot be captured into a graph (SF_ERR_UNSUPPORTED with
 * `op` in the message).  Shared by sf_gemm and sf_gemm_wq's slab path. */
sf_status sf_cuda_blas(sf_ctx *ctx, const char *op, void *ws, size_t ws_bytes, void **handle);

#ifdef __cplusplus
}
#endif
#endif
