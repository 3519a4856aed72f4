/* sample_nocuda.c - the CUDA entry points of sf_embed and sf_sample in a
 * build without CUDA (the kernels are in src/cuda/sample/): they fail
 * cleanly with SF_ERR_UNSUPPORTED after the front end's validation. */
#include "sample_ops.h"

#define SF_SAMPLE_NO_CUDA ": this build of seqfuse has no CUDA backend; run it on a CPU context"

sf_status sf_cuda_embed(sf_ctx *ctx, const sf_embed_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_embed" SF_SAMPLE_NO_CUDA);
}
sf_status sf_cuda_sample(sf_ctx *ctx, const sf_sample_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_sample" SF_SAMPLE_NO_CUDA);
}
