/* layer_nocuda.c - the CUDA entry points of the layer ops (conv1d, gated
 * RMSNorm) in a build without CUDA: each answers that this build has none. */
#include "layer_ops.h"

#define SF_LAYER_NO_CUDA "seqfuse was built without CUDA (no nvcc found at configure time)"

sf_status sf_cuda_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_conv1d_fwd: " SF_LAYER_NO_CUDA);
}
sf_status sf_cuda_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_conv1d_update: " SF_LAYER_NO_CUDA);
}
sf_status sf_cuda_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_rmsnorm_gated: " SF_LAYER_NO_CUDA);
}
