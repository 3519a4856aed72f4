/* test_api.c - every error path of the public API: each bad input gives
 * its own status and a detail naming what was wrong, never a crash.  Each
 * check starts from a valid call (which must succeed) and breaks one thing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

static int failures = 0, checks = 0;

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

/* A valid conv1d prefill: b 1, L 8, dim 4, W 4. */
static void conv_valid(sf_conv1d_params *p) {
    sf_conv1d_params_init(p);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4096; i++) fbuf[s][i] = 0.05f * (float)((i * 3 + s) % 9) - 0.2f;
    p->x = T(0, 3, (int64_t[]){1, 8, 4});
    p->weight = T(1, 2, (int64_t[]){4, 4});
    p->out = T(2, 3, (int64_t[]){1, 8, 4});
    p->bias = T(3, 1, (int64_t[]){4});
    p->silu = 1;
}

/* A valid conv1d update: 2 sequences into 3 slots, dim 4, W 4. */
static void convupd_valid(sf_conv1d_update_params *p) {
    sf_conv1d_update_params_init(p);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4096; i++) fbuf[s][i] = 0.1f * (float)((i + s) % 5);
    p->conv_state = T(0, 3, (int64_t[]){3, 4, 3});
    p->x = T(1, 2, (int64_t[]){2, 4});
    p->weight = T(2, 2, (int64_t[]){4, 4});
    p->out = T(3, 2, (int64_t[]){2, 4});
    ibuf[0][0] = 2;
    ibuf[0][1] = 0;
    p->state_idx = sf_tensor_contiguous(ibuf[0], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){2});
}

/* A valid gated RMSNorm: 4 rows of 8. */
static void rms_valid(sf_rmsnorm_gated_params *p) {
    sf_rmsnorm_gated_params_init(p);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4096; i++) fbuf[s][i] = 0.1f * (float)((i * 5 + s) % 7) - 0.3f;
    p->x = T(0, 2, (int64_t[]){4, 8});
    p->z = T(1, 2, (int64_t[]){4, 8});
    p->weight = T(2, 1, (int64_t[]){8});
    p->out = T(3, 2, (int64_t[]){4, 8});
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
    /* a thread count the OpenMP runtime cannot create exits the process:
     * refused above SF_MAX_THREADS, and the context keeps its count */
    {
        const int before = sf_ctx_threads(ctx);
        EXPECT_STATUS(sf_ctx_set_threads(ctx, 50000), SF_ERR_INVALID_ARG, "at most");
        EXPECT_STATUS(sf_ctx_set_threads(ctx, SF_MAX_THREADS + 1), SF_ERR_INVALID_ARG, "at most");
        checks++;
        if (sf_ctx_threads(ctx) != before) printf("FAIL a refused thread count changed the context\n"), failures++;
    }
    /* sizes whose round-up to 256 bytes would wrap */
    {
        void *m = (void *)1;
        EXPECT_STATUS(sf_malloc(ctx, &m, (size_t)-1), SF_ERR_OUT_OF_MEMORY, "cannot allocate");
        EXPECT_STATUS(sf_malloc(ctx, &m, (size_t)-1 - 200), SF_ERR_OUT_OF_MEMORY, "cannot allocate");
        checks++;
        if (m) printf("FAIL sf_malloc left a pointer after failing\n"), failures++;
    }
    /* descriptor arithmetic past int64: no signed overflow, a clear answer */
    {
        const int64_t big = INT32_MAX, huge = (int64_t)1 << 62;
        sf_tensor t = sf_tensor_contiguous(fbuf[0], SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){big, big, big, big});
        checks += 4;
        if (t.rank != -1) printf("FAIL contiguous (2^31-1)^4 gave rank %d, want -1\n", t.rank), failures++;
        t = sf_tensor_contiguous(fbuf[0], SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){huge, 8});
        if (sf_tensor_numel(&t) != -1) printf("FAIL numel (2^62, 8) = %lld, want -1\n", (long long)sf_tensor_numel(&t)), failures++;
        t = sf_tensor_contiguous(fbuf[0], SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){-3, 8});
        if (sf_tensor_numel(&t) != -1) printf("FAIL numel (-3, 8) = %lld, want -1\n", (long long)sf_tensor_numel(&t)), failures++;
        t = sf_tensor_contiguous(fbuf[0], SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){3, 8});
        if (sf_tensor_numel(&t) != 24) printf("FAIL numel (3, 8) = %lld, want 24\n", (long long)sf_tensor_numel(&t)), failures++;
        /* an op given such descriptors: built by sf_tensor_contiguous (rank
         * -1: a shape error), or by hand with zero strides (the checks'
         * products stay defined under UBSan: too large) */
        sf_rmsnorm_gated_params rp;
        rms_valid(&rp);
        rp.x = sf_tensor_contiguous(fbuf[0], SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){huge, huge});
        EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_SHAPE, "rank");
        rms_valid(&rp);
        sf_tensor w = rp.weight;
        w.rank = 4;
        for (int i = 0; i < 4; i++) w.shape[i] = big, w.stride[i] = 0;
        rp.weight = w;
        EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_SHAPE, "weight");
    }

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
    /* dt, B, C: each x's dtype or f32 (mamba_ssm's mixed inputs), nothing else */
    ssd_valid(&p), p.x.dtype = p.out.dtype = p.C.dtype = SF_BF16; /* dt, B f32 */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_OK, NULL);
    p.backend = SF_BACKEND_REF;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_OK, NULL);
    p.backend = SF_BACKEND_AUTO, p.B.dtype = SF_F16;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "B has dtype f16, expected bf16 (the dtype of x) or f32");
    p.B.dtype = SF_F32, p.C.dtype = SF_F16;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "C has dtype f16, expected bf16");
    p.C.dtype = SF_BF16, p.dt.dtype = SF_I32;
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "dt has dtype i32, expected bf16 (the dtype of x) or f32");
    p.dt.dtype = (sf_dtype)17; /* no such dtype (no f64) */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "dt has unknown dtype 17");
    ssd_valid(&p), p.x.dtype = p.out.dtype = SF_F16, p.z = T(6, 4, (int64_t[]){1, 8, 4, 4});
    p.dt.dtype = p.B.dtype = p.C.dtype = SF_F16; /* z f32: z stays x's dtype */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "z has dtype f32, expected f16");
    ssd_valid(&p), p.B.dtype = SF_BF16; /* f32 x: everything f32 */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_DTYPE, "B has dtype bf16, expected f32 (the dtype of x)");
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
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    ssd_valid(&p), p.out.data = fbuf[0] + 4; /* a partial overlap with x */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INVALID_ARG, "out overlaps input x");
    ssd_valid(&p), p.out.data = fbuf[2]; /* overlaps A (slot 2) */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INVALID_ARG, "overlaps input A");
    ssd_valid(&p), p.out.stride[1] = 0; /* every token writes the same row */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_STRIDE, "overlapping elements");
    ssd_valid(&p), p.out.stride[2] = 2, p.out.stride[3] = 1; /* heads step 2, rows of 4 */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_STRIDE, "overlapping elements");
    ssd_valid(&p);
    for (int i = 0; i < 8; i++) ibuf[1][i] = i < 5 ? 1 : 0; /* decreasing seq_idx */
    p.seq_idx = sf_tensor_contiguous(ibuf[1], SF_I32, SF_DEVICE_CPU, 2, (int64_t[]){1, 8});
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_ERR_INDEX, "must not decrease");
    for (int i = 0; i < 8; i++) ibuf[1][i] = i < 5 ? 3 : 7; /* increasing: fine */
    EXPECT_STATUS(sf_ssd_fwd(ctx, &p), SF_OK, NULL);
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
    step_valid(&sp), sp.state.stride[0] = 0; /* all slots on one: a race */
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_STRIDE, "overlapping elements");
    step_valid(&sp), sp.state_idx.dtype = SF_I64;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_DTYPE, "state_idx");
    step_valid(&sp), sp.out.data = sp.state.data;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_INVALID_ARG, "overlaps");
    /* the state in f32, f16 or bf16 whatever x's dtype; dt, B, C each x's
     * dtype or f32 */
    step_valid(&sp), sp.state.dtype = SF_BF16;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_OK, NULL);
    sp.state.dtype = SF_F16, sp.backend = SF_BACKEND_REF;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_OK, NULL);
    sp.state.dtype = SF_I32, sp.backend = SF_BACKEND_AUTO;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_DTYPE, "state has dtype i32, expected f32, f16 or bf16");
    step_valid(&sp), sp.x.dtype = sp.out.dtype = sp.dt.dtype = SF_BF16, sp.state.dtype = SF_BF16;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_OK, NULL); /* B, C f32 */
    sp.B.dtype = SF_F16;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_DTYPE, "B has dtype f16, expected bf16 (the dtype of x) or f32");
    sp.B.dtype = SF_BF16, sp.C.dtype = SF_I64;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_DTYPE, "C has dtype i64, expected bf16");
    sp.C.dtype = SF_F32, sp.dt.dtype = (sf_dtype)17;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_DTYPE, "dt has unknown dtype 17");
    sp.dt.dtype = SF_F16;
    EXPECT_STATUS(sf_ssd_step(ctx, &sp), SF_ERR_DTYPE, "dt has dtype f16, expected bf16 (the dtype of x) or f32");

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
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "overlaps");
    attn_valid(&ap), ap.backend = SF_BACKEND_CUDA;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_UNSUPPORTED, "cuda");
    /* score modifiers: softcap >= 0 and finite; slopes (H) or (b, H) f32,
     * finite, not overlapping an output */
    attn_valid(&ap), ap.softcap = 30.0f, ap.alibi_slopes = T(5, 1, (int64_t[]){4});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_OK, NULL);
    ap.alibi_slopes = T(5, 2, (int64_t[]){1, 4});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_OK, NULL);
    attn_valid(&ap), ap.softcap = -1.0f;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "softcap");
    attn_valid(&ap), ap.softcap = INFINITY;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "softcap");
    attn_valid(&ap), ap.alibi_slopes = T(5, 1, (int64_t[]){2});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_SHAPE, "alibi_slopes has shape");
    attn_valid(&ap), ap.alibi_slopes = T(5, 2, (int64_t[]){2, 4});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_SHAPE, "alibi_slopes has shape");
    attn_valid(&ap), ap.alibi_slopes = T(5, 1, (int64_t[]){4}), ap.alibi_slopes.dtype = SF_BF16;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_DTYPE, "alibi_slopes");
    attn_valid(&ap), ap.alibi_slopes = T(3, 1, (int64_t[]){4});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "overlaps");
    attn_valid(&ap), ap.alibi_slopes = T(5, 1, (int64_t[]){4}), fbuf[5][2] = NAN;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "alibi_slopes[0, 2]");
    /* any head dim from 1: d 1 and d 59 run */
    attn_valid(&ap);
    ap.q.shape[3] = ap.k.shape[3] = ap.v.shape[3] = ap.out.shape[3] = 1;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_OK, NULL);
    attn_valid(&ap);
    ap.q = T(0, 4, (int64_t[]){1, 8, 4, 59}), ap.out = T(3, 4, (int64_t[]){1, 8, 4, 59});
    ap.k = T(1, 4, (int64_t[]){1, 8, 2, 59}), ap.v = T(2, 4, (int64_t[]){1, 8, 2, 59});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_OK, NULL);

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

    /* ---- sf_conv1d_fwd ---- */
    EXPECT_STATUS(sf_conv1d_fwd(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    sf_conv1d_params cp;
    conv_valid(&cp);
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_OK, NULL);
    cp.backend = SF_BACKEND_REF;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_OK, NULL);
    conv_valid(&cp), cp.weight = T(1, 2, (int64_t[]){4, 5});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_UNSUPPORTED, "kernel width 5");
    conv_valid(&cp), cp.weight = T(1, 2, (int64_t[]){4, 1});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_UNSUPPORTED, "kernel width 1");
    conv_valid(&cp), cp.weight = T(1, 2, (int64_t[]){5, 4});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_SHAPE, "weight has shape");
    conv_valid(&cp), cp.weight.dtype = SF_BF16;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_DTYPE, "weight has dtype bf16");
    conv_valid(&cp), cp.weight.data = NULL;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_NULL_POINTER, "weight is required");
    conv_valid(&cp), cp.x.rank = 2;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_SHAPE, "x has rank 2");
    conv_valid(&cp), cp.out.dtype = SF_F16;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_DTYPE, "out has dtype f16");
    conv_valid(&cp), cp.x.stride[2] = 2;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_STRIDE, "unit innermost stride");
    conv_valid(&cp), cp.bias = T(3, 1, (int64_t[]){5});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_SHAPE, "bias has shape");
    conv_valid(&cp), cp.initial_state = T(4, 3, (int64_t[]){1, 4, 2});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_SHAPE, "initial_state has shape");
    conv_valid(&cp), cp.initial_state = T(4, 3, (int64_t[]){1, 4, 3});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_OK, NULL);
    cp.final_state = cp.initial_state;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_INVALID_ARG, "overlaps");
    conv_valid(&cp), cp.out.data = cp.x.data;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_INVALID_ARG, "overlaps");
    conv_valid(&cp), cp.silu = 2;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_INVALID_ARG, "silu");
    conv_valid(&cp), cp.backend = SF_BACKEND_CUDA;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_UNSUPPORTED, "cuda backend");
    /* varlen: two sequences, one state row each */
    conv_valid(&cp);
    ibuf[0][0] = 0, ibuf[0][1] = 1, ibuf[0][2] = 8;
    cp.cu_seqlens = sf_tensor_contiguous(ibuf[0], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){3});
    cp.initial_state = T(4, 3, (int64_t[]){2, 4, 3});
    cp.final_state = T(5, 3, (int64_t[]){2, 4, 3});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_OK, NULL);
    cp.final_state = T(5, 3, (int64_t[]){1, 4, 3});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_SHAPE, "final_state has shape");
    cp.final_state.data = NULL, ibuf[0][2] = 7;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_INDEX, "packed length");
    ibuf[0][1] = 9, ibuf[0][2] = 8;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_INDEX, "less than");
    ibuf[0][1] = 1;
    cp.cu_seqlens.shape[0] = 1;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_SHAPE, "at least 2");
    conv_valid(&cp);
    cp.x = T(0, 3, (int64_t[]){2, 4, 4}), cp.out = T(2, 3, (int64_t[]){2, 4, 4});
    cp.cu_seqlens = sf_tensor_contiguous(ibuf[0], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){3});
    EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_ERR_SHAPE, "batch must be 1");
    /* a sequence shorter than W-1: the final state keeps the initial state's tail */
    conv_valid(&cp);
    cp.x = T(0, 3, (int64_t[]){1, 1, 4}), cp.out = T(2, 3, (int64_t[]){1, 1, 4});
    cp.initial_state = T(4, 3, (int64_t[]){1, 4, 3}), cp.final_state = T(5, 3, (int64_t[]){1, 4, 3});
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        cp.backend = (sf_backend)be;
        for (int i = 0; i < 12; i++) fbuf[4][i] = (float)i, fbuf[5][i] = NAN;
        EXPECT_STATUS(sf_conv1d_fwd(ctx, &cp), SF_OK, NULL);
        int ok = 1;
        for (int c = 0; c < 4; c++)
            ok &= fbuf[5][c * 3] == fbuf[4][c * 3 + 1] && fbuf[5][c * 3 + 1] == fbuf[4][c * 3 + 2] &&
                  fbuf[5][c * 3 + 2] == fbuf[0][c];
        checks++;
        if (!ok) printf("FAIL conv1d final state of a 1-token sequence on %s\n", sf_backend_name((sf_backend)be)), failures++;
    }

    /* ---- sf_conv1d_update ---- */
    EXPECT_STATUS(sf_conv1d_update(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    sf_conv1d_update_params up;
    convupd_valid(&up);
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_OK, NULL);
    ibuf[0][1] = 3;
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_INDEX, "outside");
    ibuf[0][1] = 2;
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_INDEX, "used twice");
    convupd_valid(&up), up.state_idx.data = NULL;
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_SHAPE, "state_idx");
    convupd_valid(&up), up.state_idx.dtype = SF_I64;
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_DTYPE, "state_idx");
    convupd_valid(&up), up.conv_state = T(0, 3, (int64_t[]){3, 4, 2});
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_SHAPE, "conv_state has shape");
    convupd_valid(&up), up.conv_state.dtype = SF_F16;
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_DTYPE, "conv_state has dtype f16");
    convupd_valid(&up), up.weight = T(2, 2, (int64_t[]){4, 6});
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_UNSUPPORTED, "kernel width 6");
    convupd_valid(&up), up.out = T(3, 2, (int64_t[]){2, 5});
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_SHAPE, "out has shape");
    convupd_valid(&up), up.out.data = up.conv_state.data;
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_INVALID_ARG, "overlaps");
    convupd_valid(&up), up.silu = -1;
    EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_ERR_INVALID_ARG, "silu");
    /* padding: output zero, its slot untouched; the used slot shifts left */
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        convupd_valid(&up);
        up.backend = (sf_backend)be;
        ibuf[0][0] = -1, ibuf[0][1] = 1;
        for (int i = 0; i < 36; i++) fbuf[0][i] = (float)i;
        for (int i = 0; i < 8; i++) fbuf[3][i] = NAN;
        EXPECT_STATUS(sf_conv1d_update(ctx, &up), SF_OK, NULL);
        int ok = 1;
        for (int c = 0; c < 4; c++) ok &= fbuf[3][c] == 0.0f && isfinite(fbuf[3][4 + c]);
        for (int i = 0; i < 12; i++) ok &= fbuf[0][i] == (float)i && fbuf[0][24 + i] == (float)(24 + i);
        for (int c = 0; c < 4; c++)
            ok &= fbuf[0][12 + 3 * c] == (float)(12 + 3 * c + 1) &&
                  fbuf[0][12 + 3 * c + 1] == (float)(12 + 3 * c + 2) && fbuf[0][12 + 3 * c + 2] == fbuf[1][4 + c];
        checks++;
        if (!ok) printf("FAIL conv1d_update padding/shift on %s\n", sf_backend_name((sf_backend)be)), failures++;
    }

    /* ---- sf_rmsnorm_gated ---- */
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    sf_rmsnorm_gated_params rp;
    rms_valid(&rp);
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_OK, NULL);
    rp.backend = SF_BACKEND_REF, rp.norm_before_gate = 1, rp.group_size = 4;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_OK, NULL);
    rms_valid(&rp), rp.group_size = 3;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_SHAPE, "does not divide");
    rms_valid(&rp), rp.group_size = -2;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_INVALID_ARG, "negative");
    rms_valid(&rp), rp.eps = 0.0f;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_INVALID_ARG, "eps");
    rms_valid(&rp), rp.eps = -1e-5f;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_INVALID_ARG, "eps");
    rms_valid(&rp), rp.eps = NAN;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_INVALID_ARG, "eps");
    rms_valid(&rp), rp.eps = INFINITY;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_INVALID_ARG, "eps");
    rms_valid(&rp), rp.norm_before_gate = 2;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_INVALID_ARG, "norm_before_gate");
    rms_valid(&rp), rp.weight = T(2, 1, (int64_t[]){7});
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_SHAPE, "weight has shape");
    rms_valid(&rp), rp.weight.data = NULL;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_NULL_POINTER, "weight is required");
    rms_valid(&rp), rp.z.dtype = SF_F16;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_DTYPE, "z has dtype f16");
    rms_valid(&rp), rp.z.stride[1] = 3;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_STRIDE, "z needs a unit innermost stride");
    rms_valid(&rp), rp.x = T(0, 2, (int64_t[]){4, 0});
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_SHAPE, "empty");
    rms_valid(&rp), rp.out.data = rp.x.data;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_INVALID_ARG, "overlaps");
    rms_valid(&rp), rp.out.data = rp.z.data;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_INVALID_ARG, "overlaps");
    rms_valid(&rp), rp.backend = SF_BACKEND_CUDA;
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_ERR_UNSUPPORTED, "cuda backend");
    /* a constant row without a gate: out = w / sqrt(1 + eps) */
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        rms_valid(&rp);
        rp.backend = (sf_backend)be, rp.z.data = NULL, rp.eps = 0.25f;
        for (int i = 0; i < 32; i++) fbuf[0][i] = 1.0f;
        for (int i = 0; i < 8; i++) fbuf[2][i] = (float)i;
        EXPECT_STATUS(sf_rmsnorm_gated(ctx, &rp), SF_OK, NULL);
        int ok = 1;
        for (int i = 0; i < 32; i++) ok &= fabsf(fbuf[3][i] - (float)(i % 8) / sqrtf(1.25f)) < 1e-6f;
        checks++;
        if (!ok) printf("FAIL rmsnorm of a constant row on %s\n", sf_backend_name((sf_backend)be)), failures++;
    }

    /* rank past SF_MAX_RANK: -1, no read past shape[] */
    sf_tensor big = sf_tensor_contiguous(fbuf[0], SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){4});
    big.rank = SF_MAX_RANK + 3;
    checks++;
    if (sf_tensor_numel(&big) != -1) printf("FAIL numel of rank %d\n", big.rank), failures++;
    big = sf_tensor_contiguous(fbuf[0], SF_F32, SF_DEVICE_CPU, 7, (int64_t[]){1, 1, 1, 1, 1, 1, 1});
    checks++;
    if (big.rank != -1) printf("FAIL sf_tensor_contiguous of rank 7\n"), failures++;

    /* attention varlen: cu_seqlens checked on the host */
    attn_valid(&ap);
    ap.q = T(0, 3, (int64_t[]){8, 4, 16}), ap.k = T(1, 3, (int64_t[]){8, 2, 16});
    ap.v = T(2, 3, (int64_t[]){8, 2, 16}), ap.out = T(3, 3, (int64_t[]){8, 4, 16});
    ibuf[0][0] = 0, ibuf[0][1] = 3, ibuf[0][2] = 8;
    ibuf[1][0] = 0, ibuf[1][1] = 5, ibuf[1][2] = 8;
    ap.cu_seqlens_q = sf_tensor_contiguous(ibuf[0], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){3});
    ap.cu_seqlens_k = sf_tensor_contiguous(ibuf[1], SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){3});
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_OK, NULL);
    ibuf[1][1] = 9;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INDEX, "cu_seqlens_k[2] = 8 is less than");
    ibuf[1][1] = 5, ibuf[0][2] = 7;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INDEX, "packed length");
    ibuf[0][2] = 8;
    ap.cu_seqlens_k.shape[0] = 2;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_SHAPE, "cu_seqlens_k has shape");
    ap.cu_seqlens_k.shape[0] = 3, ap.cu_seqlens_q.dtype = SF_F32;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_DTYPE, "cu_seqlens_q has dtype f32");

    /* every output against every input, index and weight tensors included */
    {
        int32_t *in_out = (int32_t *)fbuf[3]; /* cu_seqlens_k inside attention's out */
        in_out[0] = 0, in_out[1] = 5, in_out[2] = 8;
        ap.cu_seqlens_q.dtype = SF_I32;
        ap.cu_seqlens_k = sf_tensor_contiguous(in_out, SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){3});
        EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "cu_seqlens_k");
        sf_conv1d_params c1;
        conv_valid(&c1), c1.weight.data = c1.out.data;
        EXPECT_STATUS(sf_conv1d_fwd(ctx, &c1), SF_ERR_INVALID_ARG, "weight");
        conv_valid(&c1), c1.bias.data = c1.out.data;
        EXPECT_STATUS(sf_conv1d_fwd(ctx, &c1), SF_ERR_INVALID_ARG, "bias");
        conv_valid(&c1);
        c1.final_state = T(5, 3, (int64_t[]){1, 4, 3});
        c1.weight.data = fbuf[5];
        EXPECT_STATUS(sf_conv1d_fwd(ctx, &c1), SF_ERR_INVALID_ARG, "weight");
        conv_valid(&c1);
        int32_t *cu_in_out = (int32_t *)fbuf[2];
        cu_in_out[0] = 0, cu_in_out[1] = 8;
        c1.cu_seqlens = sf_tensor_contiguous(cu_in_out, SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){2});
        EXPECT_STATUS(sf_conv1d_fwd(ctx, &c1), SF_ERR_INVALID_ARG, "cu_seqlens");
        sf_conv1d_update_params u1;
        convupd_valid(&u1);
        int32_t *idx_in_state = (int32_t *)fbuf[0];
        idx_in_state[0] = 2, idx_in_state[1] = 0;
        u1.state_idx = sf_tensor_contiguous(idx_in_state, SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){2});
        EXPECT_STATUS(sf_conv1d_update(ctx, &u1), SF_ERR_INVALID_ARG, "state_idx");
        convupd_valid(&u1), u1.weight.data = u1.out.data;
        EXPECT_STATUS(sf_conv1d_update(ctx, &u1), SF_ERR_INVALID_ARG, "weight");
        sf_rmsnorm_gated_params r1;
        rms_valid(&r1), r1.weight.data = r1.out.data;
        EXPECT_STATUS(sf_rmsnorm_gated(ctx, &r1), SF_ERR_INVALID_ARG, "weight");
        /* context-parallel building blocks: stride-0 outputs */
        sf_tensor oa = T(0, 4, (int64_t[]){1, 4, 2, 8}), la = T(1, 3, (int64_t[]){1, 2, 4});
        sf_tensor ob = T(2, 4, (int64_t[]){1, 4, 2, 8}), lb = T(3, 3, (int64_t[]){1, 2, 4});
        EXPECT_STATUS(sf_attn_merge(ctx, oa, la, ob, lb), SF_OK, NULL);
        oa.stride[1] = 0;
        EXPECT_STATUS(sf_attn_merge(ctx, oa, la, ob, lb), SF_ERR_STRIDE, "out_acc");
        oa = T(0, 4, (int64_t[]){1, 4, 2, 8}), la.stride[2] = 0;
        EXPECT_STATUS(sf_attn_merge(ctx, oa, la, ob, lb), SF_ERR_STRIDE, "lse_acc");
        sf_tensor sall = T(0, 5, (int64_t[]){2, 1, 2, 4, 4}), lall = T(1, 3, (int64_t[]){2, 1, 2});
        sf_tensor hin = T(2, 4, (int64_t[]){1, 2, 4, 4});
        EXPECT_STATUS(sf_ssd_cp_combine(ctx, sall, lall, 1, hin), SF_OK, NULL);
        hin.stride[0] = hin.stride[1] = 0;
        EXPECT_STATUS(sf_ssd_cp_combine(ctx, sall, lall, 1, hin), SF_ERR_STRIDE, "h_in");
        sf_ssd_fwd_params s1;
        ssd_valid(&s1);
        sf_tensor so = T(6, 4, (int64_t[]){1, 4, 4, 4}), lo = T(7, 2, (int64_t[]){1, 4});
        EXPECT_STATUS(sf_ssd_cp_local(ctx, &s1, so, lo), SF_OK, NULL);
        so.stride[2] = 0;
        EXPECT_STATUS(sf_ssd_cp_local(ctx, &s1, so, lo), SF_ERR_STRIDE, "state_out");
        so = T(6, 4, (int64_t[]){1, 4, 4, 4}), lo.stride[1] = 0;
        EXPECT_STATUS(sf_ssd_cp_local(ctx, &s1, so, lo), SF_ERR_STRIDE, "logdecay_out");
        lo = T(7, 2, (int64_t[]){1, 4});
        sf_tensor hin2 = T(1, 4, (int64_t[]){1, 4, 4, 4});
        EXPECT_STATUS(sf_ssd_cp_correct(ctx, &s1, hin2, so, lo), SF_OK, NULL);
        s1.out.stride[1] = 0;
        EXPECT_STATUS(sf_ssd_cp_correct(ctx, &s1, hin2, so, lo), SF_ERR_STRIDE, "output out");
    }

    /* causality holds for NaN: a NaN in x at token t leaves every earlier
     * token's output finite (the CPU backend's 4-token blocks once leaked it
     * backwards through 0 * NaN) */
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        const int tb[] = {5, 31};
        for (int ti = 0; ti < 2; ti++) {
            enum { L = 40, H = 2, P = 4, N = 4 };
            static float x[L * H * P], dtv[L * H], Av[H], Bv[L * N], Cv[L * N], out[L * H * P];
            for (int i = 0; i < L * H * P; i++) x[i] = 0.1f * (float)(i % 7) - 0.3f;
            for (int i = 0; i < L * H; i++) dtv[i] = 0.05f + 0.01f * (float)(i % 3);
            for (int i = 0; i < H; i++) Av[i] = -1.0f - (float)i;
            for (int i = 0; i < L * N; i++) Bv[i] = 0.2f * (float)(i % 5) - 0.4f, Cv[i] = 0.1f * (float)(i % 3);
            const int t = tb[ti];
            x[(t * H + 1) * P + 2] = NAN;
            sf_ssd_fwd_params sp2;
            sf_ssd_fwd_params_init(&sp2);
            sp2.x = sf_tensor_contiguous(x, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){1, L, H, P});
            sp2.dt = sf_tensor_contiguous(dtv, SF_F32, SF_DEVICE_CPU, 3, (int64_t[]){1, L, H});
            sp2.A = sf_tensor_contiguous(Av, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){H});
            sp2.B = sf_tensor_contiguous(Bv, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){1, L, 1, N});
            sp2.C = sf_tensor_contiguous(Cv, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){1, L, 1, N});
            sp2.out = sf_tensor_contiguous(out, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){1, L, H, P});
            sp2.chunk_size = 64;
            sp2.backend = (sf_backend)be;
            EXPECT_STATUS(sf_ssd_fwd(ctx, &sp2), SF_OK, NULL);
            int bad = -1;
            for (int i = 0; i < t * H * P && bad < 0; i++)
                if (!isfinite(out[i])) bad = i / (H * P);
            checks++;
            if (bad >= 0)
                printf("FAIL %s SSD: NaN in x at token %d reached the output at token %d\n",
                       sf_backend_name((sf_backend)be), t, bad), failures++;
        }
    }

    /* flags are 0 or 1 in every op; a tensor's device is -1 or a CUDA ordinal */
    attn_valid(&ap), ap.causal = 7;
    EXPECT_STATUS(sf_attn_fwd(ctx, &ap), SF_ERR_INVALID_ARG, "causal is 7");
    {
        sf_ssd_fwd_params f7;
        ssd_valid(&f7), f7.dt_softplus = 7;
        EXPECT_STATUS(sf_ssd_fwd(ctx, &f7), SF_ERR_INVALID_ARG, "dt_softplus is 7");
        sf_ssd_step_params s7;
        step_valid(&s7), s7.dt_softplus = 2;
        EXPECT_STATUS(sf_ssd_step(ctx, &s7), SF_ERR_INVALID_ARG, "dt_softplus is 2");
        ssd_valid(&f7), f7.x.device = -7;
        EXPECT_STATUS(sf_ssd_fwd(ctx, &f7), SF_ERR_DEVICE, "x has device -7");
    }

    /* non-finite A, D, dt_bias: refused on the host, naming the entry */
    {
        sf_ssd_fwd_params f8;
        ssd_valid(&f8);
        fbuf[2][1] = NAN;
        EXPECT_STATUS(sf_ssd_fwd(ctx, &f8), SF_ERR_INVALID_ARG, "A[1] is nan");
        ssd_valid(&f8);
        f8.D = T(6, 1, (int64_t[]){4});
        fbuf[6][3] = INFINITY;
        EXPECT_STATUS(sf_ssd_fwd(ctx, &f8), SF_ERR_INVALID_ARG, "D[3] is inf");
        sf_ssd_step_params s8;
        step_valid(&s8);
        s8.dt_bias = T(7, 1, (int64_t[]){2});
        fbuf[7][0] = -INFINITY;
        EXPECT_STATUS(sf_ssd_step(ctx, &s8), SF_ERR_INVALID_ARG, "dt_bias[0] is -inf");
    }

    /* empty is valid (as in attention): L 0 gives final states = initial
     * states on every host backend; b 0 leaves everything as it is */
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        sf_ssd_fwd_params e0;
        ssd_valid(&e0);
        e0.backend = (sf_backend)be;
        e0.x = T(0, 4, (int64_t[]){1, 0, 4, 4}), e0.dt = T(1, 3, (int64_t[]){1, 0, 4});
        e0.B = T(3, 4, (int64_t[]){1, 0, 2, 4}), e0.C = T(4, 4, (int64_t[]){1, 0, 2, 4});
        e0.out = T(5, 4, (int64_t[]){1, 0, 4, 4});
        e0.initial_states = T(6, 4, (int64_t[]){1, 4, 4, 4});
        e0.final_states = T(7, 4, (int64_t[]){1, 4, 4, 4});
        for (int i = 0; i < 64; i++) fbuf[6][i] = 0.25f * (float)i - 3.0f, fbuf[7][i] = NAN;
        EXPECT_STATUS(sf_ssd_fwd(ctx, &e0), SF_OK, NULL);
        int same = 1;
        for (int i = 0; i < 64; i++) same &= fbuf[7][i] == fbuf[6][i];
        checks++;
        if (!same) printf("FAIL %s SSD with L 0: final states are not the initial ones\n",
                          sf_backend_name((sf_backend)be)), failures++;
        e0.initial_states.data = NULL;
        EXPECT_STATUS(sf_ssd_fwd(ctx, &e0), SF_OK, NULL);
        same = 1;
        for (int i = 0; i < 64; i++) same &= fbuf[7][i] == 0.0f;
        checks++;
        if (!same) printf("FAIL %s SSD with L 0: final states without initial ones are not 0\n",
                          sf_backend_name((sf_backend)be)), failures++;
        e0.x = T(0, 4, (int64_t[]){0, 8, 4, 4}), e0.dt = T(1, 3, (int64_t[]){0, 8, 4});
        e0.B = T(3, 4, (int64_t[]){0, 8, 2, 4}), e0.C = T(4, 4, (int64_t[]){0, 8, 2, 4});
        e0.out = T(5, 4, (int64_t[]){0, 8, 4, 4}), e0.final_states = T(7, 4, (int64_t[]){0, 4, 4, 4});
        EXPECT_STATUS(sf_ssd_fwd(ctx, &e0), SF_OK, NULL);
    }

    /* every op with a NULL context or NULL params */
    checks += 6;
    if (sf_attn_fwd(NULL, &ap) != SF_ERR_NULL_POINTER || sf_ssd_step(NULL, &sp) != SF_ERR_NULL_POINTER ||
        sf_conv1d_fwd(NULL, NULL) != SF_ERR_NULL_POINTER || sf_conv1d_update(NULL, NULL) != SF_ERR_NULL_POINTER ||
        sf_rmsnorm_gated(NULL, NULL) != SF_ERR_NULL_POINTER)
        printf("FAIL an op with a NULL context\n"), failures++;
    EXPECT_STATUS(sf_conv1d_fwd(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    EXPECT_STATUS(sf_conv1d_update(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    EXPECT_STATUS(sf_rmsnorm_gated(ctx, NULL), SF_ERR_NULL_POINTER, "params");

    /* memory helpers and device queries */
    void *mem = NULL;
    EXPECT_STATUS(sf_malloc(ctx, NULL, 16), SF_ERR_NULL_POINTER, "p is NULL");
    EXPECT_STATUS(sf_malloc(ctx, &mem, 0), SF_OK, NULL);
    EXPECT_STATUS(sf_memcpy(ctx, mem, NULL, 4), SF_ERR_NULL_POINTER, "NULL");
    EXPECT_STATUS(sf_memcpy(ctx, mem, fbuf[0], 0), SF_OK, NULL);
    EXPECT_STATUS(sf_free(ctx, mem), SF_OK, NULL);
    EXPECT_STATUS(sf_ctx_reserve_workspace(ctx, SIZE_MAX / 2), SF_ERR_OUT_OF_MEMORY, "workspace");
    char name[64];
    checks += 2;
    if (sf_cuda_device_name(sf_cuda_device_count(), name, sizeof name) != SF_ERR_NO_DEVICE)
        printf("FAIL sf_cuda_device_name past the last device\n"), failures++;
    if (sf_cuda_device_name(0, NULL, 0) != SF_ERR_NULL_POINTER)
        printf("FAIL sf_cuda_device_name(NULL buffer)\n"), failures++;

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
