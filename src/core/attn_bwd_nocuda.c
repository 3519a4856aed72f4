/* attn_bwd_nocuda.c - the CUDA entry point of sf_attn_bwd in a build
 * without CUDA: it answers that this build has none (empty with CUDA). */
#include "attn_bwd.h"

#ifndef SF_WITH_CUDA

sf_status sf_cuda_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                   "sf_attn_bwd: seqfuse was built without CUDA (no nvcc found at configure time)");
}
#endif
