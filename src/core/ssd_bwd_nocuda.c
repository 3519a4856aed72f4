/* ssd_bwd_nocuda.c - sf_ssd_bwd's CUDA entry point in a build without CUDA. */
#include "ssd_bwd.h"

sf_status sf_cuda_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_bwd: seqfuse was built without CUDA (no nvcc found at configure time)");
}
