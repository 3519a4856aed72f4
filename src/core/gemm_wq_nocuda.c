/* gemm_wq_nocuda.c - the CUDA entry point of sf_gemm_wq in a build without
 * CUDA: it answers that this build has none. */
#include "gemm_wq.h"

sf_status sf_cuda_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                   "sf_gemm_wq: seqfuse was built without CUDA (no nvcc found at configure time)");
}
