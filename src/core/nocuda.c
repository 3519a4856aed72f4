/* nocuda.c - the CUDA backend's entry points in a build without CUDA:
 * every one answers that this build has no CUDA. */
#include "internal.h"

#define SF_NO_CUDA_MSG "seqfuse was built without CUDA (no nvcc found at configure time)"

sf_status sf_cuda_ssd_fwd(sf_ctx *ctx, const sf_ssd_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: " SF_NO_CUDA_MSG);
}
sf_status sf_cuda_ssd_step(sf_ctx *ctx, const sf_ssd_step_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_step: " SF_NO_CUDA_MSG);
}
sf_status sf_cuda_attn_fwd(sf_ctx *ctx, const sf_attn_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_fwd: " SF_NO_CUDA_MSG);
}
sf_status sf_cuda_kv_append(sf_ctx *ctx, const sf_paged_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_kv_append: " SF_NO_CUDA_MSG);
}
sf_status sf_cuda_attn_paged(sf_ctx *ctx, const sf_paged_problem *pr) {
    (void)pr;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_paged: " SF_NO_CUDA_MSG);
}
int sf_cuda_count(void) { return 0; }
sf_status sf_cuda_ctx_init(sf_ctx *ctx) {
    return sf_fail(ctx, SF_ERR_NO_DEVICE, SF_NO_CUDA_MSG);
}
void sf_cuda_ctx_free(sf_ctx *ctx) { (void)ctx; }
sf_status sf_cuda_alloc(sf_ctx *ctx, void **p, size_t bytes) {
    (void)p;
    (void)bytes;
    return sf_fail(ctx, SF_ERR_NO_DEVICE, SF_NO_CUDA_MSG);
}
void sf_cuda_free(sf_ctx *ctx, void *p) {
    (void)ctx;
    (void)p;
}

int sf_cuda_stream_capturing(sf_ctx *ctx) {
    (void)ctx;
    return 0;
}
sf_status sf_cuda_name(int device, char *buf, size_t len) {
    (void)device;
    (void)buf;
    (void)len;
    return SF_ERR_NO_DEVICE;
}
sf_status sf_cuda_memcpy(sf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)dst;
    (void)src;
    (void)bytes;
    return sf_fail(ctx, SF_ERR_NO_DEVICE, SF_NO_CUDA_MSG);
}
sf_status sf_cuda_sync(sf_ctx *ctx) { return sf_fail(ctx, SF_ERR_NO_DEVICE, SF_NO_CUDA_MSG); }
sf_status sf_cuda_activate(sf_ctx *ctx) { return sf_fail(ctx, SF_ERR_NO_DEVICE, SF_NO_CUDA_MSG); }
