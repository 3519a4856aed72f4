/* ssd_fwd.cu - Mamba-2 SSD on the GPU (placeholder until the kernels land). */
#include "cuda_common.h"

extern "C" sf_status sf_cuda_ssd_fwd(sf_ctx *ctx, const sf_ssd_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: no CUDA kernel for this op yet");
}

extern "C" sf_status sf_cuda_ssd_step(sf_ctx *ctx, const sf_ssd_step_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_step: no CUDA kernel for this op yet");
}
