/* gemm_swiglu_nocuda.c - the CUDA entry point of sf_gemm_swiglu in a build
 * without CUDA: it answers that this build has none. */
#include "gemm_swiglu.h"

sf_status sf_cuda_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                   "sf_gemm_swiglu: seqfuse was built without CUDA (no nvcc found at configure time)");
}
