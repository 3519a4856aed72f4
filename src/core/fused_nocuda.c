/* fused_nocuda.c - the CUDA entry points of the fused layer ops (norms,
 * SwiGLU, RoPE).  They have no kernels yet: every build, with CUDA or
 * without, compiles this file, and a call on the CUDA backend fails
 * cleanly with SF_ERR_UNSUPPORTED after the front end's validation. */
#include "fused_ops.h"

#define SF_FUSED_NO_KERNEL ": no CUDA kernel yet; run it on a CPU context"

sf_status sf_cuda_add_norm(sf_ctx *ctx, const sf_norm_problem *pr) {
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s" SF_FUSED_NO_KERNEL, pr->op);
}
sf_status sf_cuda_swiglu(sf_ctx *ctx, const sf_swiglu_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_swiglu" SF_FUSED_NO_KERNEL);
}
sf_status sf_cuda_rope(sf_ctx *ctx, const sf_rope_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_rope" SF_FUSED_NO_KERNEL);
}
