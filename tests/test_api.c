/* test_api.c - every error path of the public API: each bad input gives
 * its own status and a detail naming what was wrong, never a crash.  Each
 * check starts from a valid call (which must succeed) and breaks one thing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqfuse.h"

static int failures = 0, checks = 0;

#define EXPECT_STATUS(call, want, needle)                                                    \
    do {                                                                                      \
        sf_status got_ = (call);                                                              \
        checks++;                                                                             \
        const char *m_ = sf_ctx_last_error(ctx);                                              \
        const char *n_ = (needle);                                                            \
        if (got_ != (want) || (n_ && !strstr(m_, n_))) {                                      \
            printf("FAIL %s:%d: %s -> %s (want %s), detail \"%s\" (want it to mention \"%s\")\n", \
                   __FILE__, __LINE__, #call, sf_status_string(got_), sf_status_string(want),  \
                   m_, n_ ? n_ : "");                                                 \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

/* Buffers big enough for every small shape used below. */
static float fbuf[8][4096];
static int32_t ibuf[2][64];

static sf_tensor T(int slot, int rank, const int64_t *shape) {
    return sf_tensor_contiguous(fbuf[slot], SF_F32, SF_DEVICE_CPU, rank, shape);
}

/* A valid SSD problem: b 1, L 8, H 4, P 4, G 2, N 4. */
static void ssd_valid(sf_ssd_fwd_params *p) {
    sf_ssd_fwd_params_init(p);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4096; i++) fbuf[s][i] = s == 2 ? -1.0f : 0.01f * (float)(i % 7);
    p->x = T(0, 4, (int64_t[]){1, 8, 4, 4});
    p->dt = T(1, 3, (int64_t[]){1, 8, 4});
    p->A = T(2, 1, (int64_t[]){4});
    p->B = T(3, 4, (int64_t[]){1, 8, 2, 4});
    p->C = T(4, 4, (int64_t[]){1, 8, 2, 4});
    p->out = T(5, 4, (int64_t[]){1, 8, 4, 4});
    p->chunk_size = 64;
}

static void attn_valid(sf_attn_fwd_params *p) {
    sf_attn_fwd_params_init(p);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4096; i++) fbuf[s][i] = 0.1f * (float)((i * 7 + s) % 11) - 0.5f;
    p->q = T(0, 4, (int64_t[]){1, 8, 4, 16});
    p->k = T(1, 4, (int64_t[]){1, 8, 2, 16});
    p->v = T(2, 4, (int64_t[]){1, 8, 2, 16});
    p->out = T(3, 4, (int64_t[]){1, 8, 4, 16});
}

static void step_valid(sf_ssd_step_params *p) {
    sf_ssd_step_params_init(p);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4096; i++) fbuf[s][i] = s == 2 ? -1.0f : 0.01f * (float)(i % 5);
    p->state = T(0, 4, (int64_t[]){4, 2, 4, 4});
    p->x = T(1, 3, (int64_t[]){2, 2, 4});
    p->dt = T(6, 2, (int64_t[]){2, 2});
    p->A = T(2, 1, (int64_t[]){2});
    p->B = T(3, 3, (int64_t[]){2, 1, 4});
    p->C = T(4, 3, (int64_t[]){2, 1, 4});
    p->out = T(5, 3, (int64_t[]){2, 2, 4});
    ibuf[0][0] = 3;
    ibuf[0][1] = 1;
    p->state_idx = sf_tensor_contiguous(ibuf[0], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){2});
}

int main(void) {
    sf_ctx *ctx = NULL;
    /* context */
    if (sf_ctx_create(NULL, SF_DEVICE_CPU) != SF_ERR_NULL_POINTER) printf("FAIL create(NULL)\n"), failures++;
    if (sf_ctx_create(&ctx, -7) != SF_ERR_INVALID_ARG || ctx) printf("FAIL create(-7)\n"), failures++;
    if (sf_cuda_device_count() == 0 && sf_ctx_create(&ctx, 0) != SF_ERR_NO_DEVICE)
        printf("FAIL create(cuda 0) without a device\n"), failures++;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL cannot create a CPU context\n");
        return 1;
    }
    checks += 3;
    EXPECT_STATUS(sf_ctx_set_threads(ctx, 0), SF_ERR_INVALID_ARG, "thread");
    EXPECT_STATUS(sf_ctx_set_backend(ctx, (sf_backend)42), SF_ERR_INVALID_ARG, "backend");
    EXPECT_STATUS(sf_ctx_set_stream(ctx, NULL), SF_ERR_DEVICE, "CPU context");
    EXPECT_STATUS(sf_ssd_fwd(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    EXPECT_STATUS(sf_attn_fwd(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    EXPECT_STATUS(sf_ssd_step(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    if (sf_ssd_fwd(NULL, NULL) != SF_ERR_NULL_POINTER) printf("FAIL ssd_fwd(NULL ctx)\n"), failures++;

    /* status strings: one for every code, all distinct */
    for (int s = SF_OK; s <= SF_ERR_INTERNAL; s++)
        for (int u = SF_OK; u < s; u++)
            if (!strcmp(sf_status_string((sf_status)s), sf_status_string((sf_status)u)))
                printf("FAIL status strings %d and %d equal\n", s, u), failures++;

    /* ---- sf_ssd_fwd ---- */
    sf_ssd_fwd_params p;
    ssd_valid(&p);
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_OK, NULL);
    p.backend = SF_BACKEND_REF;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_OK, NULL);
    p.x.data = NULL;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_NULL_POINTER, "x is required");
    ssd_valid(&p), p.C.data = NULL;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_NULL_POINTER, "C is required");
    ssd_valid(&p), p.x.rank = 3;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_SHAPE, "x has rank 3");
    ssd_valid(&p), p.B.shape[1] = 7;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_SHAPE, "B has shape");
    ssd_valid(&p), p.B = T(3, 4, (int64_t[]){1, 8, 3, 4}), p.C = T(4, 4, (int64_t[]){1, 8, 3, 4});
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_SHAPE, "does not divide");
    ssd_valid(&p), p.dt.dtype = SF_F16;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "dt has dtype f16");
    ssd_valid(&p), p.A.dtype = SF_BF16;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "A has dtype");
    ssd_valid(&p), p.x.dtype = SF_I32;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "x has dtype i32");
    ssd_valid(&p), p.x.dtype = (sf_dtype)9;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "unknown dtype");
    ssd_valid(&p), p.z = T(6, 4, (int64_t[]){1, 8, 4, 4}), p.z.device = 0;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DEVICE, "z is on CUDA device 0");
    ssd_valid(&p), p.x.stride[3] = 2;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_STRIDE, "unit innermost stride");
    ssd_valid(&p), p.dt.stride[0] = -1;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_STRIDE, "negative stride");
    ssd_valid(&p), p.x.data = (char *)fbuf[0] + 2;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_ALIGNMENT, "not aligned");
    ssd_valid(&p), p.x.shape[1] = 3000000000LL;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_TOO_LARGE, "int32");
    ssd_valid(&p), p.x.shape[1] = -1;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_SHAPE, "negative extent");
    ssd_valid(&p), p.chunk_size = 100;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INVALID_ARG, "chunk_size 100");
    ssd_valid(&p), p.dt_min = 1.0f, p.dt_max = 0.5f;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INVALID_ARG, "dt limits");
    ssd_valid(&p), p.D = T(6, 2, (int64_t[]){4, 5});
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_SHAPE, "D has shape");
    ssd_valid(&p), p.initial_states = T(6, 4, (int64_t[]){2, 4, 4, 4});
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_SHAPE, "initial_states");
    ssd_valid(&p), p.out.data = p.x.data;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INVALID_ARG, "aliases");
    ssd_valid(&p), p.backend = SF_BACKEND_CUDA;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_UNSUPPORTED, "cuda backend");
    ssd_valid(&p), p.backend = (sf_backend)17;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INVALID_ARG, "unknown backend");
    /* varlen */
    ssd_valid(&p);
    ibuf[0][0] = 0, ibuf[0][1] = 3, ibuf[0][2] = 8;
    ibuf[1][0] = 0;
    p.cu_seqlens = sf_tensor_contiguous(ibuf[0], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){3});
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_OK, NULL);
    p.seq_idx = sf_tensor_contiguous(ibuf[1], SF_I32, SF_DEVICE_CPU, 2, (int64_t[]){1, 8});
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INVALID_ARG, "not both");
    p.seq_idx.data = NULL, ibuf[0][2] = 7;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INDEX, "packed length");
    ibuf[0][1] = 9, ibuf[0][2] = 8;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INDEX, "less than");
    ibuf[0][0] = 1;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INDEX, "must be 0");
    ibuf[0][0] = 0, ibuf[0][1] = 3;
    p.final_states = T(6, 4, (int64_t[]){1, 4, 4, 4}); /* must be (nseq = 2, ...) */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_SHAPE, "final_states");
    ssd_valid(&p);
    p.x = T(0, 4, (int64_t[]){2, 4, 4, 4}), p.dt = T(1, 3, (int64_t[]){2, 4, 4});
    p.B = T(3, 4, (int64_t[]){2, 4, 2, 4}), p.C = T(4, 4, (int64_t[]){2, 4, 2, 4});
    p.out = T(5, 4, (int64_t[]){2, 4, 4, 4});
    p.cu_seqlens = sf_tensor_contiguous(ibuf[0], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){3});
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_SHAPE, "batch must be 1");

    /* ---- sf_ssd_step ---- */
    sf_ssd_step_params sp;
    step_valid(&sp);
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_OK, NULL);
    ibuf[0][1] = 4;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_INDEX, "outside");
    ibuf[0][1] = 3;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_INDEX, "used twice");
    ibuf[0][1] = -1; /* padding is fine */
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_OK, NULL);
    step_valid(&sp), sp.state_idx.data = NULL;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_SHAPE, "state_idx");
    step_valid(&sp), sp.state.stride[3] = 5;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_STRIDE, "state");
    step_valid(&sp), sp.state_idx.dtype = SF_I64;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_DTYPE, "state_idx");
    step_valid(&sp), sp.out.data = sp.state.data;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_INVALID_ARG, "aliases");

    /* ---- sf_attn_fwd ---- */
    sf_attn_fwd_params ap;
    attn_valid(&ap);
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_OK, NULL);
    ap.q = T(0, 4, (int64_t[]){1, 8, 4, 300}), ap.out = T(3, 4, (int64_t[]){1, 8, 4, 300});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_UNSUPPORTED, "head dim 300");
    attn_valid(&ap), ap.k = T(1, 4, (int64_t[]){1, 8, 3, 16}), ap.v = T(2, 4, (int64_t[]){1, 8, 3, 16});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_SHAPE, "does not divide");
    attn_valid(&ap), ap.v.shape[1] = 9;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_SHAPE, "v has shape");
    attn_valid(&ap), ap.k.dtype = SF_BF16;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_DTYPE, "k has dtype bf16");
    attn_valid(&ap), ap.softmax_scale = NAN;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "softmax_scale");
    attn_valid(&ap), ap.lse = T(4, 3, (int64_t[]){1, 8, 4});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_SHAPE, "lse has shape");
    attn_valid(&ap), ap.cu_seqlens_q = sf_tensor_contiguous(ibuf[0], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){2});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_NULL_POINTER, "cu_seqlens_k");
    attn_valid(&ap), ap.out.data = ap.q.data;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "aliases");
    attn_valid(&ap), ap.backend = SF_BACKEND_CUDA;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_UNSUPPORTED, "cuda");

    /* a fully masked row: out 0 and lse -inf, never NaN */
    attn_valid(&ap);
    ap.q = T(0, 4, (int64_t[]){1, 2, 1, 16}), ap.k = T(1, 4, (int64_t[]){1, 4, 1, 16});
    ap.v = T(2, 4, (int64_t[]){1, 4, 1, 16}), ap.out = T(3, 4, (int64_t[]){1, 2, 1, 16});
    ap.lse = T(4, 3, (int64_t[]){1, 1, 2});
    ap.window_left = 0, ap.window_right = -1, ap.causal = 1; /* row i sees key i + 2 only */
    ap.q.shape[1] = 2;
    ap.k.shape[1] = 4; /* Lk > Lq: both rows see one key */
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        ap.backend = (sf_backend)be;
        fbuf[3][0] = NAN;
        EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_OK, NULL);
        /* now a window that leaves no key: Lq 2 > Lk 1 with causal, row 0 sits at key -1 */
        sf_attn_fwd_params mp = ap;
        mp.k.shape[1] = 1, mp.v.shape[1] = 1, mp.window_left = -1;
        for (int i = 0; i < 32; i++) fbuf[3][i] = NAN;
        EXPECT_STATUS(sf_attn_fwd(ctx, &mp), SF_OK, NULL);
        int ok = 1;
        for (int i = 0; i < 16; i++) ok &= fbuf[3][i] == 0.0f;
        ok &= isinf(fbuf[4][0]) && fbuf[4][0] < 0;
        for (int i = 16; i < 32; i++) ok &= isfinite(fbuf[3][i]);
        checks++;
        if (!ok) printf("FAIL fully masked row on backend %s: out[0] %g lse %g\n", sf_backend_name((sf_backend)be), (double)fbuf[3][0], (double)fbuf[4][0]), failures++;
    }

    /* workspace accounting */
    sf_ctx_reset_workspace_peak(ctx);
    EXPECT_STATUS(sf_ctx_reserve_workspace(ctx, 1 << 20), SF_OK, NULL);
    checks++;
    if (sf_ctx_workspace_size(ctx) < (1u << 20)) printf("FAIL reserve_workspace\n"), failures++;

    sf_ctx_destroy(ctx);
    sf_ctx_destroy(NULL);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
