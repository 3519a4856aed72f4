/* sample.cu - CUDA sf_sample (placeholder until the kernels land). */
#include "common/cuda_common.h"
#include "sample_ops.h"

extern "C" sf_status sf_cuda_sample(sf_ctx *ctx, const sf_sample_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_sample: no CUDA kernel yet");
}
