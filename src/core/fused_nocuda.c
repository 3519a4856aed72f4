/* fused_nocuda.c - the CUDA entry points of the fused layer ops (norms,
 * SwiGLU, RoPE) in a build without CUDA: compiled only then (the kernels
 * are in src/cuda/fused/), they fail cleanly with SF_ERR_UNSUPPORTED after
 * the front end's validation. */
#include "fused_ops.h"

#define SF_FUSED_NO_CUDA ": this build of seqfuse has no CUDA backend; run it on a CPU context"

sf_status sf_cuda_add_norm(sf_ctx *ctx, const sf_norm_problem *pr) {
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s" SF_FUSED_NO_CUDA, pr->op);
}
sf_status sf_cuda_swiglu(sf_ctx *ctx, const sf_swiglu_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_swiglu" SF_FUSED_NO_CUDA);
}
sf_status sf_cuda_rope(sf_ctx *ctx, const sf_rope_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_rope" SF_FUSED_NO_CUDA);
}
