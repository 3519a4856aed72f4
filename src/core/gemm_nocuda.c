/* gemm_nocuda.c - the CUDA entry points of sf_gemm in a build without CUDA:
 * they answer that this build has none. */
#include "gemm.h"

sf_status sf_cuda_gemm(sf_ctx *ctx, const sf_gemm_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                   "sf_gemm: seqfuse was built without CUDA (no nvcc found at configure time)");
}

void sf_cuda_gemm_free(sf_ctx *ctx) { (void)ctx; }
