/* A program outside the project: it finds an installed seqfuse through its
 * CMake package or its pkg-config file, and runs one op. */
#include <seqfuse.h>
#include <stdio.h>

int main(void) {
    sf_ctx *ctx;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) return 1;
    float q[2 * 8] = {0}, out[2 * 8];
    for (int i = 0; i < 16; i++) q[i] = 0.1f * (float)i;
    sf_attn_fwd_params p;
    sf_attn_fwd_params_init(&p);
    const int64_t shape[4] = {1, 2, 1, 8};
    p.q = p.k = p.v = sf_tensor_contiguous(q, SF_F32, SF_DEVICE_CPU, 4, shape);
    p.out = sf_tensor_contiguous(out, SF_F32, SF_DEVICE_CPU, 4, shape);
    p.causal = 1;
    sf_status s = sf_attn_fwd(ctx, &p);
    /* causal: row 0 sees only key 0, so its output is v[0] */
    int ok = s == SF_OK && out[3] == q[3];
    printf("seqfuse %s: %s\n", sf_version_string(), ok ? "ok" : sf_ctx_last_error(ctx));
    sf_ctx_destroy(ctx);
    return ok ? 0 : 1;
}
