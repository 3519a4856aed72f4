/* test_paged_fp8.c - FP8 e4m3 pages of the paged KV cache through the public
 * API:
 *  1. the checks of k_scale / v_scale (required with FP8 pools, refused
 *     without, shapes, dtypes, overlaps) and of alibi_slopes;
 *  2. a case table, on the reference and CPU backends and, with a GPU, the
 *     CUDA one: sequences prefilled then extended through sf_kv_append into
 *     shuffled pages, the pools' codes and scales equal bit for bit to this
 *     file's own scalar encoder (a nearest-value search over the 254 finite
 *     codes, ties to the even mantissa, saturating), then sf_attn_paged
 *     against a double-precision attention over the dequantised cache
 *     (code * scale): both scale modes, page sizes 1 to 256, GQA 1/4/8, k
 *     1/4/16 query tokens, ragged lengths with 0, causal, softcap, ALiBi;
 *  3. the encoder on hand-picked values: ties, subnormals, saturation, NaN;
 *  4. K rotated on its way into FP8 pools: reference and CPU agree.
 * The CUDA part is skipped, visibly, without a device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "split_test.h"
#include "worst.h"

static int failures = 0, checks = 0;

/* ------------------------------------------------------------------ */
/* the test's own e4m3: value of a code, and the encoder by search      */
/* ------------------------------------------------------------------ */

static double e4m3_value(int c) {
    const int e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    const double v = e == 0 ? ldexp((double)m, -9) : ldexp(8.0 + m, e - 10);
    return (c & 0x80) ? -v : v;
}

/* nearest finite code, ties to the even mantissa (code bit 0), |x| past
 * 448 saturated, NaN to 0x7f */
static uint8_t e4m3_encode(float x) {
    if (isnan(x)) return 0x7f;
    const int neg = signbit(x) != 0;
    const double a = fabs((double)x);
    if (a >= 448.0) return (uint8_t)(neg ? 0xfe : 0x7e);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c <= 0x7e; c++) {
        const double dd = fabs(e4m3_value(c) - a);
        if (dd < bd || (dd == bd && (c & 1) == 0)) bd = dd, best = c;
    }
    return (uint8_t)(neg ? best | 0x80 : best);
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static double unif(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ------------------------------------------------------------------ */
/* 1. validation                                                        */
/* ------------------------------------------------------------------ */

enum { NP = 4, PS = 4, HKV = 2, HQ = 4, D = 16 };
static uint8_t kc8[NP * PS * HKV * D], vc8[NP * PS * HKV * D];
static float ksc[NP * PS * HKV], vsc[NP * PS * HKV], khd[HKV], vhd[HKV], slopes[2 * HQ];
static float qb[HQ * D], ob[HQ * D], kn[HKV * D], vn[HKV * D];
static int32_t bt[2] = {2, 0}, sl[1] = {5};

static sf_tensor host(void *p, sf_dtype dt, int rank, const int64_t *shape) {
    return sf_tensor_contiguous(p, dt, SF_DEVICE_CPU, rank, shape);
}

static void attn_valid(sf_attn_paged_params *p) {
    sf_attn_paged_params_init(p);
    memset(kc8, 0x38, sizeof kc8); /* 1.0 */
    memset(vc8, 0x38, sizeof vc8);
    for (int i = 0; i < NP * PS * HKV; i++) ksc[i] = vsc[i] = 0.5f;
    for (int i = 0; i < HQ * D; i++) qb[i] = 0.1f * (float)(i % 5);
    sl[0] = 5;
    p->q = host(qb, SF_F32, 4, (int64_t[]){1, 1, HQ, D});
    p->k_cache = host(kc8, SF_F8E4M3, 4, (int64_t[]){NP, PS, HKV, D});
    p->v_cache = host(vc8, SF_F8E4M3, 4, (int64_t[]){NP, PS, HKV, D});
    p->k_scale = host(ksc, SF_F32, 3, (int64_t[]){NP, PS, HKV});
    p->v_scale = host(vsc, SF_F32, 3, (int64_t[]){NP, PS, HKV});
    p->block_table = host(bt, SF_I32, 2, (int64_t[]){1, 2});
    p->seqlens = host(sl, SF_I32, 1, (int64_t[]){1});
    p->out = host(ob, SF_F32, 4, (int64_t[]){1, 1, HQ, D});
}

static void append_valid(sf_kv_append_params *p) {
    sf_kv_append_params_init(p);
    sl[0] = 5;
    p->k_cache = host(kc8, SF_F8E4M3, 4, (int64_t[]){NP, PS, HKV, D});
    p->v_cache = host(vc8, SF_F8E4M3, 4, (int64_t[]){NP, PS, HKV, D});
    p->k_scale = host(ksc, SF_F32, 3, (int64_t[]){NP, PS, HKV});
    p->v_scale = host(vsc, SF_F32, 3, (int64_t[]){NP, PS, HKV});
    p->k = host(kn, SF_F32, 4, (int64_t[]){1, 1, HKV, D});
    p->v = host(vn, SF_F32, 4, (int64_t[]){1, 1, HKV, D});
    p->block_table = host(bt, SF_I32, 2, (int64_t[]){1, 2});
    p->cache_seqlens = host(sl, SF_I32, 1, (int64_t[]){1});
}

static void test_errors(sf_ctx *ctx) {
    static float kc32[NP * PS * HKV * D], vc32[NP * PS * HKV * D];
    sf_attn_paged_params p;
    attn_valid(&p);
    EXPECT_STATUS(sf_attn_paged(ctx, &p), SF_OK, NULL);
#define BREAK(stmt, want, needle)                            \
    do {                                                     \
        attn_valid(&p);                                      \
        stmt;                                                \
        EXPECT_STATUS(sf_attn_paged(ctx, &p), want, needle); \
    } while (0)
    BREAK((p.k_scale = host(khd, SF_F32, 1, (int64_t[]){HKV}), p.v_scale = host(vhd, SF_F32, 1, (int64_t[]){HKV})),
          SF_OK, NULL);
    BREAK(p.k_scale.data = NULL, SF_ERR_INVALID_ARG, "k_scale is required");
    BREAK(p.v_scale.data = NULL, SF_ERR_INVALID_ARG, "v_scale is required");
    BREAK(p.k_scale = host(ksc, SF_F32, 3, (int64_t[]){NP, PS, 1}), SF_ERR_SHAPE, "k_scale");
    BREAK(p.v_scale = host(vhd, SF_F32, 1, (int64_t[]){HKV}), SF_ERR_SHAPE, "v_scale");
    BREAK(p.k_scale = host(khd, SF_F32, 1, (int64_t[]){HKV + 1}), SF_ERR_SHAPE, "k_scale");
    BREAK(p.k_scale.dtype = SF_F16, SF_ERR_DTYPE, "k_scale");
    BREAK(p.v_cache.dtype = SF_BF16, SF_ERR_DTYPE, "v_cache");
    BREAK(p.q.dtype = SF_F8E4M3, SF_ERR_DTYPE, "q");
    BREAK(p.k_scale.data = ob, SF_ERR_INVALID_ARG, "out overlaps input k_scale");
    /* 16-bit (here f32) pools take no scales */
    BREAK((p.k_cache = host(kc32, SF_F32, 4, (int64_t[]){NP, PS, HKV, D}),
           p.v_cache = host(vc32, SF_F32, 4, (int64_t[]){NP, PS, HKV, D})),
          SF_ERR_INVALID_ARG, "k_scale is given but the pools are f32");
    BREAK((p.k_cache = host(kc32, SF_F32, 4, (int64_t[]){NP, PS, HKV, D}),
           p.v_cache = host(vc32, SF_F32, 4, (int64_t[]){NP, PS, HKV, D}), p.k_scale.data = NULL,
           p.v_scale.data = NULL),
          SF_OK, NULL);
    /* ALiBi: (H) or (b, H) f32, finite on the host */
    for (int i = 0; i < 2 * HQ; i++) slopes[i] = 0.25f;
    BREAK(p.alibi_slopes = host(slopes, SF_F32, 1, (int64_t[]){HQ}), SF_OK, NULL);
    BREAK(p.alibi_slopes = host(slopes, SF_F32, 2, (int64_t[]){1, HQ}), SF_OK, NULL);
    BREAK(p.alibi_slopes = host(slopes, SF_F32, 1, (int64_t[]){HKV}), SF_ERR_SHAPE, "alibi_slopes");
    BREAK(p.alibi_slopes = host(slopes, SF_F32, 2, (int64_t[]){2, HQ}), SF_ERR_SHAPE, "alibi_slopes");
    BREAK(p.alibi_slopes = host(slopes, SF_F16, 1, (int64_t[]){HQ}), SF_ERR_DTYPE, "alibi_slopes");
    BREAK((p.alibi_slopes = host(slopes, SF_F32, 1, (int64_t[]){HQ}), slopes[2] = NAN), SF_ERR_INVALID_ARG,
          "alibi_slopes[0, 2]");
    BREAK((p.alibi_slopes = host(ob, SF_F32, 1, (int64_t[]){HQ})), SF_ERR_INVALID_ARG,
          "alibi_slopes");
#undef BREAK

    sf_kv_append_params a;
    append_valid(&a);
    EXPECT_STATUS(sf_kv_append(ctx, &a), SF_OK, NULL);
#define BREAK(stmt, want, needle)                           \
    do {                                                    \
        append_valid(&a);                                   \
        stmt;                                               \
        EXPECT_STATUS(sf_kv_append(ctx, &a), want, needle); \
    } while (0)
    BREAK((a.k_scale = host(khd, SF_F32, 1, (int64_t[]){HKV}), a.v_scale = host(vhd, SF_F32, 1, (int64_t[]){HKV})),
          SF_OK, NULL);
    BREAK(a.k_scale.data = NULL, SF_ERR_INVALID_ARG, "k_scale is required");
    BREAK(a.v_scale = host(vsc, SF_F32, 3, (int64_t[]){NP + 1, PS, HKV}), SF_ERR_SHAPE, "v_scale");
    BREAK(a.k_scale.dtype = SF_I32, SF_ERR_DTYPE, "k_scale");
    /* per-token scales are written: not over the new tokens, not over each other */
    BREAK(a.k_scale.data = kn, SF_ERR_INVALID_ARG, "k_scale");
    BREAK(a.v_scale.data = ksc, SF_ERR_INVALID_ARG, "v_scale");
    BREAK(a.k_scale.stride[0] = 0, SF_ERR_STRIDE, "k_scale");
    /* per-head scales are read: they may be shared */
    BREAK((a.k_scale = host(khd, SF_F32, 1, (int64_t[]){HKV}), a.v_scale = host(khd, SF_F32, 1, (int64_t[]){HKV})),
          SF_OK, NULL);
    BREAK(a.k.dtype = SF_F8E4M3, SF_ERR_DTYPE, "k");
#undef BREAK
}

/* ------------------------------------------------------------------ */
/* 2. append then attend, against the test's own quantisation           */
/* ------------------------------------------------------------------ */

typedef struct fcase {
    const char *name;
    int b, H, Hkv, d, lq, ps;
    int klens[4]; /* keys per sequence after the appends; one shorter than lq
                     gets them all in the prefill (0: an empty sequence) */
    int per_head, causal, alibi;
    float softcap;
} fcase;

static const fcase fcases[] = {
    {"decode_ps16_gqa4", 4, 8, 2, 128, 1, 16, {1, 0, 37, 300}, 0, 1, 0, 0.f},
    {"decode_ps1_mha_head", 3, 4, 4, 64, 1, 1, {5, 17, 0}, 1, 1, 0, 0.f},
    {"lq16_ps64_gqa8", 3, 8, 1, 64, 16, 64, {16, 200, 130}, 0, 1, 0, 0.f},
    {"lq4_ps256_gqa4_head", 2, 4, 1, 128, 4, 256, {700, 4}, 1, 1, 0, 0.f},
    {"lq4_full_softcap", 3, 4, 2, 64, 4, 8, {50, 4, 0}, 0, 0, 0, 2.f},
    {"decode_alibi_gqa8", 2, 16, 2, 128, 1, 16, {90, 513}, 0, 1, 1, 0.f},
    {"lq4_alibi_b_head", 3, 8, 2, 64, 4, 32, {40, 0, 77}, 1, 1, 2, 0.f},
    {"lq16_ps4_d256", 2, 4, 4, 256, 16, 4, {16, 45}, 0, 1, 0, 0.f},
    /* head dims that are not whole 16-code chunks: element loads on the GPU */
    {"decode_d72_gqa4", 2, 8, 2, 72, 1, 16, {300, 41}, 0, 1, 0, 0.f},
    {"lq4_d33_head_ps2", 2, 4, 1, 33, 4, 2, {60, 7}, 1, 1, 0, 0.f},
};

/* Device (or host) copies of a host buffer on ctx. */
static void *put_buf(sf_ctx *ctx, const void *h, size_t bytes) {
    void *p = NULL;
    if (sf_malloc(ctx, &p, bytes ? bytes : 1) != SF_OK) return NULL;
    if (bytes && sf_memcpy(ctx, p, h, bytes) != SF_OK) {
        sf_free(ctx, p);
        return NULL;
    }
    return p;
}

/* One case on backend be of ctx with q, k and v in dtype qdt (f32 or
 * bf16): the first klens - lq tokens of each sequence appended one
 * sequence a call (a prefill), the last lq of all of them in one call, the
 * pools compared bit for bit, then attention over them (causal and not,
 * where the case is causal). */
static void run_fcase(sf_ctx *ctx, sf_backend be, const fcase *c, sf_dtype qdt) {
    const int dev = sf_ctx_device(ctx);
    const int64_t B = c->b, H = c->H, Hkv = c->Hkv, d = c->d, lq = c->lq, ps = c->ps, grp = H / Hkv;
    int64_t mp = 1, npages = 3; /* spare pages */
    for (int b = 0; b < B; b++) {
        const int64_t n = (c->klens[b] + ps - 1) / ps;
        mp = n > mp ? n : mp;
        npages += n;
    }
    const size_t es = sf_dtype_size(qdt), rows = (size_t)npages * ps * Hkv;
    int64_t maxk = 0;
    for (int b = 0; b < B; b++) maxk = c->klens[b] > maxk ? c->klens[b] : maxk;
    /* every sequence's K and V values (as the dtype holds them), q */
    const size_t nkv = (size_t)B * maxk * Hkv * d;
    float *Kf = calloc(nkv + 1, 4), *Vf = calloc(nkv + 1, 4), *Qf = calloc((size_t)B * lq * H * d, 4);
    unsigned char *Kh = calloc(nkv + 1, es), *Vh = calloc(nkv + 1, es), *Qh = calloc((size_t)B * lq * H * d, es);
    uint8_t *kp = malloc(rows * d), *vp = malloc(rows * d), *wk = malloc(rows * d), *wv = malloc(rows * d);
    float *ks = malloc(rows * 4), *vs = malloc(rows * 4), *wks = malloc(rows * 4), *wvs = malloc(rows * 4);
    float hk[64], hv[64], slope[64];
    int32_t *tab = malloc(sizeof(int32_t) * (size_t)(B * mp)), pre[4], cached[4], lens[4];
    unsigned char *Oh = malloc((size_t)B * lq * H * d * es);
    if (!Kf || !Vf || !Qf || !Kh || !Vh || !Qh || !kp || !vp || !wk || !wv || !ks || !vs || !wks || !wvs ||
        !tab || !Oh) {
        EXPECT(0, "%s: host memory", c->name);
        goto out;
    }
    /* values of magnitudes that vary by row (the per-token scales differ) */
    for (size_t i = 0; i < nkv; i++) {
        const double mag = 0.05 + 3.0 * ((i / (size_t)d) % 7) / 7.0;
        const float k = (float)((2.0 * unif() - 1.0) * mag), v = (float)((2.0 * unif() - 1.0) * mag);
        Kf[i] = qdt == SF_F32 ? k : from_bf16(to_bf16(k));
        Vf[i] = qdt == SF_F32 ? v : from_bf16(to_bf16(v));
        if (qdt == SF_F32) ((float *)Kh)[i] = k, ((float *)Vh)[i] = v;
        else ((uint16_t *)Kh)[i] = to_bf16(k), ((uint16_t *)Vh)[i] = to_bf16(v);
    }
    for (size_t i = 0; i < (size_t)B * lq * H * d; i++) {
        const float q = (float)(2.0 * unif() - 1.0);
        Qf[i] = qdt == SF_F32 ? q : from_bf16(to_bf16(q));
        if (qdt == SF_F32) ((float *)Qh)[i] = q;
        else ((uint16_t *)Qh)[i] = to_bf16(q);
    }
    for (int h = 0; h < Hkv; h++) hk[h] = (float)(0.004 + 0.004 * unif()), hv[h] = (float)(0.004 + 0.004 * unif());
    for (int i = 0; i < B * H; i++) slope[i] = (float)(0.02 + 0.3 * unif());
    /* the pages in a shuffled order */
    {
        int32_t perm[4096];
        for (int i = 0; i < npages; i++) perm[i] = i;
        for (int i = (int)npages - 1; i > 0; i--) {
            const int j = (int)(unif() * (i + 1));
            const int32_t t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        int k = 0;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < mp; j++) tab[b * mp + j] = j < (c->klens[b] + ps - 1) / ps ? perm[k++] : -1;
    }
    memset(kp, 0xff, rows * d), memset(vp, 0xff, rows * d);
    for (size_t i = 0; i < rows; i++) ks[i] = vs[i] = NAN;

    /* the pools and tables where the context keeps them */
    void *dkp = put_buf(ctx, kp, rows * d), *dvp = put_buf(ctx, vp, rows * d);
    void *dks = put_buf(ctx, ks, rows * 4), *dvs = put_buf(ctx, vs, rows * 4);
    void *dhk = put_buf(ctx, hk, 64 * 4), *dhv = put_buf(ctx, hv, 64 * 4), *dsl = put_buf(ctx, slope, 64 * 4);
    void *dtab = put_buf(ctx, tab, sizeof(int32_t) * (size_t)(B * mp));
    void *dK = put_buf(ctx, Kh, nkv * es), *dV = put_buf(ctx, Vh, nkv * es);
    void *dQ = put_buf(ctx, Qh, (size_t)B * lq * H * d * es), *dO = put_buf(ctx, Oh, (size_t)B * lq * H * d * es);
    void *dlen = NULL, *dpre = NULL, *dcached = NULL;
    for (int b = 0; b < B; b++) {
        lens[b] = c->klens[b];
        pre[b] = 0;
        cached[b] = c->klens[b] >= lq ? c->klens[b] - (int32_t)lq : c->klens[b];
    }
    dlen = put_buf(ctx, lens, 16), dpre = put_buf(ctx, pre, 16), dcached = put_buf(ctx, cached, 16);
    if (!dkp || !dvp || !dks || !dvs || !dhk || !dhv || !dsl || !dtab || !dK || !dV || !dQ || !dO || !dlen ||
        !dpre || !dcached) {
        EXPECT(0, "%s: buffers on the context", c->name);
        goto free_dev;
    }
    sf_tensor Ksc, Vsc;
    if (c->per_head) {
        Ksc = sf_tensor_contiguous(dhk, SF_F32, dev, 1, (int64_t[]){Hkv});
        Vsc = sf_tensor_contiguous(dhv, SF_F32, dev, 1, (int64_t[]){Hkv});
    } else {
        Ksc = sf_tensor_contiguous(dks, SF_F32, dev, 3, (int64_t[]){npages, ps, Hkv});
        Vsc = sf_tensor_contiguous(dvs, SF_F32, dev, 3, (int64_t[]){npages, ps, Hkv});
    }
    const sf_tensor kpool = sf_tensor_contiguous(dkp, SF_F8E4M3, dev, 4, (int64_t[]){npages, ps, Hkv, d});
    const sf_tensor vpool = sf_tensor_contiguous(dvp, SF_F8E4M3, dev, 4, (int64_t[]){npages, ps, Hkv, d});
    /* prefill: each sequence's first klens - lq tokens in one call per
     * sequence (a view of its rows), then the last lq of every sequence */
    for (int b = 0; b < B; b++) {
        if (cached[b] == 0) continue;
        sf_kv_append_params a;
        sf_kv_append_params_init(&a);
        a.k_cache = kpool, a.v_cache = vpool, a.k_scale = Ksc, a.v_scale = Vsc;
        a.k = sf_tensor_contiguous((char *)dK + (size_t)b * maxk * Hkv * d * es, qdt, dev, 4,
                                   (int64_t[]){1, cached[b], Hkv, d});
        a.v = sf_tensor_contiguous((char *)dV + (size_t)b * maxk * Hkv * d * es, qdt, dev, 4,
                                   (int64_t[]){1, cached[b], Hkv, d});
        a.block_table = sf_tensor_contiguous((int32_t *)dtab + b * mp, SF_I32, dev, 2, (int64_t[]){1, mp});
        a.cache_seqlens = sf_tensor_contiguous(dpre, SF_I32, dev, 1, (int64_t[]){1});
        a.backend = be;
        EXPECT_STATUS(sf_kv_append(ctx, &a), SF_OK, NULL);
    }
    {
        /* the last lq tokens of every sequence that has them, in one call:
         * a sub-batch with its own table rows, lengths and new tokens */
        int32_t subtab[4 * 4096], subcs[4];
        int nb = 0;
        unsigned char *nk = malloc((size_t)B * lq * Hkv * d * es), *nv = malloc((size_t)B * lq * Hkv * d * es);
        for (int b = 0; b < B && nk && nv; b++) {
            if (c->klens[b] < lq || mp > 4096) continue;
            memcpy(subtab + nb * mp, tab + b * mp, sizeof(int32_t) * (size_t)mp);
            subcs[nb] = cached[b];
            const size_t row = (size_t)Hkv * d * es;
            memcpy(nk + (size_t)nb * lq * row, Kh + ((size_t)b * maxk + cached[b]) * row, (size_t)lq * row);
            memcpy(nv + (size_t)nb * lq * row, Vh + ((size_t)b * maxk + cached[b]) * row, (size_t)lq * row);
            nb++;
        }
        void *dnk = nk ? put_buf(ctx, nk, (size_t)nb * lq * Hkv * d * es) : NULL;
        void *dnv = nv ? put_buf(ctx, nv, (size_t)nb * lq * Hkv * d * es) : NULL;
        void *dst = put_buf(ctx, subtab, sizeof(int32_t) * (size_t)(nb * mp)), *dsc = put_buf(ctx, subcs, 16);
        EXPECT(dnk && dnv && dst && dsc, "%s: the new tokens' buffers", c->name);
        if (dnk && dnv && dst && dsc) {
            sf_kv_append_params a;
            sf_kv_append_params_init(&a);
            a.k_cache = kpool, a.v_cache = vpool, a.k_scale = Ksc, a.v_scale = Vsc;
            a.k = sf_tensor_contiguous(dnk, qdt, dev, 4, (int64_t[]){nb, lq, Hkv, d});
            a.v = sf_tensor_contiguous(dnv, qdt, dev, 4, (int64_t[]){nb, lq, Hkv, d});
            a.block_table = sf_tensor_contiguous(dst, SF_I32, dev, 2, (int64_t[]){nb, mp});
            a.cache_seqlens = sf_tensor_contiguous(dsc, SF_I32, dev, 1, (int64_t[]){nb});
            a.backend = be;
            EXPECT_STATUS(sf_kv_append(ctx, &a), SF_OK, NULL);
            EXPECT_STATUS(sf_ctx_synchronize(ctx), SF_OK, NULL);
        }
        void *tmp[] = {dnk, dnv, dst, dsc};
        for (int i = 0; i < 4; i++)
            if (tmp[i]) sf_free(ctx, tmp[i]);
        free(nk), free(nv);
    }
    EXPECT_STATUS(sf_ctx_synchronize(ctx), SF_OK, NULL);

    /* the expected pools: the test's encoder, x / scale in f32 */
    memset(wk, 0xff, rows * d), memset(wv, 0xff, rows * d);
    for (size_t i = 0; i < rows; i++) wks[i] = wvs[i] = NAN;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < c->klens[b]; t++)
            for (int h = 0; h < Hkv; h++) {
                const int64_t page = tab[b * mp + t / ps], r = (page * ps + t % ps) * Hkv + h;
                const float *kx = Kf + (((size_t)b * maxk + t) * Hkv + h) * d;
                const float *vx = Vf + (((size_t)b * maxk + t) * Hkv + h) * d;
                float sk = hk[h], sv = hv[h];
                if (!c->per_head) {
                    float ak = 0, av = 0;
                    for (int e = 0; e < d; e++) ak = fmaxf(ak, fabsf(kx[e])), av = fmaxf(av, fabsf(vx[e]));
                    sk = wks[r] = ak / 448.0f;
                    sv = wvs[r] = av / 448.0f;
                }
                for (int e = 0; e < d; e++) {
                    wk[r * d + e] = sk == 0.0f ? 0 : e4m3_encode(kx[e] / sk);
                    wv[r * d + e] = sv == 0.0f ? 0 : e4m3_encode(vx[e] / sv);
                }
            }
    sf_memcpy(ctx, kp, dkp, rows * d), sf_memcpy(ctx, vp, dvp, rows * d);
    sf_memcpy(ctx, ks, dks, rows * 4), sf_memcpy(ctx, vs, dvs, rows * 4);
    size_t bad = 0, badsc = 0;
    for (size_t i = 0; i < rows * d; i++) bad += kp[i] != wk[i] || vp[i] != wv[i];
    if (!c->per_head)
        for (size_t i = 0; i < rows; i++)
            badsc += memcmp(&ks[i], &wks[i], 4) != 0 || memcmp(&vs[i], &wvs[i], 4) != 0;
    EXPECT(bad == 0 && badsc == 0, "%s %s %s: append: %zu codes and %zu scales differ from the test's encoder "
           "(unwritten slots must keep the 0xff poison)", c->name, sf_backend_name(be), sf_dtype_name(qdt), bad, badsc);

    /* attention over the pools against double attention over the
     * dequantised cache */
    for (int causal = 0; causal < 2; causal++) {
        if (causal && !c->causal) continue;
        sf_attn_paged_params p;
        sf_attn_paged_params_init(&p);
        p.q = sf_tensor_contiguous(dQ, qdt, dev, 4, (int64_t[]){B, lq, H, d});
        p.out = sf_tensor_contiguous(dO, qdt, dev, 4, (int64_t[]){B, lq, H, d});
        p.k_cache = kpool, p.v_cache = vpool, p.k_scale = Ksc, p.v_scale = Vsc;
        p.block_table = sf_tensor_contiguous(dtab, SF_I32, dev, 2, (int64_t[]){B, mp});
        p.seqlens = sf_tensor_contiguous(dlen, SF_I32, dev, 1, (int64_t[]){B});
        p.causal = causal;
        p.softcap = c->softcap;
        if (c->alibi == 1) p.alibi_slopes = sf_tensor_contiguous(dsl, SF_F32, dev, 1, (int64_t[]){H});
        if (c->alibi == 2) p.alibi_slopes = sf_tensor_contiguous(dsl, SF_F32, dev, 2, (int64_t[]){B, H});
        p.backend = be;
        memset(Oh, 0xff, (size_t)B * lq * H * d * es); /* NaN poison */
        sf_memcpy(ctx, dO, Oh, (size_t)B * lq * H * d * es);
        EXPECT_STATUS(sf_attn_paged(ctx, &p), SF_OK, NULL);
        EXPECT_STATUS(sf_ctx_synchronize(ctx), SF_OK, NULL);
        sf_memcpy(ctx, Oh, dO, (size_t)B * lq * H * d * es);
        double num = 0, den = 0;
        long long nan_out = 0;
        const double scale = 1.0 / sqrt((double)d);
        double *sc = malloc(sizeof(double) * (size_t)(maxk + 1)), acc[256];
        for (int b = 0; b < B && sc; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < lq; i++) {
                    const int64_t lk = c->klens[b], pos = i + lk - lq, g = h / grp;
                    const int64_t hi = causal ? (pos + 1 < lk ? pos + 1 : lk) : lk;
                    const double sl_ = c->alibi == 0 ? 0.0 : slope[c->alibi == 2 ? b * H + h : h];
                    double m = -INFINITY, l = 0;
                    for (int64_t j = 0; j < hi; j++) {
                        const int64_t page = tab[b * mp + j / ps], r = (page * ps + j % ps) * Hkv + g;
                        const double s_k = c->per_head ? hk[g] : wks[r];
                        double dot = 0;
                        for (int e = 0; e < d; e++)
                            dot += Qf[(((size_t)b * lq + i) * H + h) * d + e] * e4m3_value(wk[r * d + e]) * s_k;
                        dot *= scale;
                        if (c->softcap > 0) dot = c->softcap * tanh(dot / c->softcap);
                        dot -= sl_ * fabs((double)(pos - j));
                        sc[j] = dot;
                        m = dot > m ? dot : m;
                    }
                    for (int e = 0; e < d; e++) acc[e] = 0;
                    for (int64_t j = 0; j < hi; j++) {
                        const int64_t page = tab[b * mp + j / ps], r = (page * ps + j % ps) * Hkv + g;
                        const double s_v = c->per_head ? hv[g] : wvs[r], pj = exp(sc[j] - m);
                        l += pj;
                        for (int e = 0; e < d; e++) acc[e] += pj * e4m3_value(wv[r * d + e]) * s_v;
                    }
                    for (int e = 0; e < d; e++) {
                        const size_t o = (((size_t)b * lq + i) * H + h) * d + e;
                        const double want = hi > 0 ? acc[e] / l : 0.0;
                        const double got = qdt == SF_F32 ? ((float *)Oh)[o] : from_bf16(((uint16_t *)Oh)[o]);
                        if (isnan(got)) nan_out++;
                        num += (got - want) * (got - want);
                        den += want * want;
                    }
                }
        free(sc);
        const double err = den > 0 ? sqrt(num / den) : sqrt(num);
        /* bf16 output (and on the GPU P and P * v_scale in bf16) */
        const double tol = qdt == SF_F32 ? 2e-5 : 1.5e-2;
        EXPECT(err <= tol && nan_out == 0, "%s %s %s causal %d: attention over the FP8 cache: rel err %.3g "
               "(tol %.1g), %lld NaN outputs", c->name, sf_backend_name(be), sf_dtype_name(qdt), causal, err, tol,
               nan_out);
        if (err <= tol && nan_out == 0)
            printf("  ok   %-22s %-4s %-4s causal %d err %.2e\n", c->name, sf_backend_name(be), sf_dtype_name(qdt),
                   causal, err);
    }
free_dev:;
    void *bufs[] = {dkp, dvp, dks, dvs, dhk, dhv, dsl, dtab, dK, dV, dQ, dO, dlen, dpre, dcached};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) sf_free(ctx, bufs[i]);
out:
    free(Kf), free(Vf), free(Qf), free(Kh), free(Vh), free(Qh), free(kp), free(vp), free(wk), free(wv);
    free(ks), free(vs), free(wks), free(wvs), free(tab), free(Oh);
}

/* ------------------------------------------------------------------ */
/* 3. the encoder on hand-picked values                                 */
/* ------------------------------------------------------------------ */

/* Per-head scale 1 on the reference: the codes are the encoder's of x. */
static void test_encoder_values(sf_ctx *ctx) {
    static const float xs[] = {
        0.0f, -0.0f, 1.0f, -1.0f, 448.0f, 449.0f, 464.0f, 480.0f, 1e9f, -1e9f, INFINITY, -INFINITY,
        432.0f,                 /* tie between 416 and 448: to 448 (even) */
        424.0f, 440.0f, 1.0625f, /* tie between 1 and 1.125: to 1 */
        1.1875f,                 /* tie between 1.125 and 1.25: to 1.25 */
        0.015625f,               /* 2^-6, the smallest normal */
        0.013671875f,            /* 7 * 2^-9, the largest subnormal */
        0.0146484375f,           /* 7.5 * 2^-9: tie, to 2^-6 (even) */
        0.0009765625f,           /* 2^-10: tie between 0 and 2^-9, to 0 */
        0.0029296875f,           /* 1.5 * 2^-9: tie, to 2 * 2^-9 */
        0.0009766f, 1e-30f, -3.3f, 17.5f, 100.0f, 0.3f, -0.0001f, 240.0f, 248.0f, NAN};
    enum { N = sizeof xs / sizeof xs[0] };
    static float k[N * 1], v[N];
    static uint8_t kp[N * 1], vp[N];
    for (int i = 0; i < N; i++) k[i] = v[i] = xs[i];
    float one[1] = {1.0f};
    int32_t tab[1] = {0}, len[1] = {0};
    sf_kv_append_params a;
    sf_kv_append_params_init(&a);
    a.k_cache = host(kp, SF_F8E4M3, 4, (int64_t[]){1, 1, 1, N});
    a.v_cache = host(vp, SF_F8E4M3, 4, (int64_t[]){1, 1, 1, N});
    a.k_scale = host(one, SF_F32, 1, (int64_t[]){1});
    a.v_scale = host(one, SF_F32, 1, (int64_t[]){1});
    a.k = host(k, SF_F32, 4, (int64_t[]){1, 1, 1, N});
    a.v = host(v, SF_F32, 4, (int64_t[]){1, 1, 1, N});
    a.block_table = host(tab, SF_I32, 2, (int64_t[]){1, 1});
    a.cache_seqlens = host(len, SF_I32, 1, (int64_t[]){1});
    for (int be = 0; be < 2; be++) {
        a.backend = be ? SF_BACKEND_CPU : SF_BACKEND_REF;
        EXPECT_STATUS(sf_kv_append(ctx, &a), SF_OK, NULL);
        for (int i = 0; i < N; i++)
            EXPECT(kp[i] == e4m3_encode(xs[i]) && vp[i] == kp[i], "%s: %g encodes to 0x%02x, want 0x%02x",
                   be ? "cpu" : "ref", (double)xs[i], kp[i], e4m3_encode(xs[i]));
    }
    /* the hand-known answers of a few, against the test's own encoder too */
    EXPECT(e4m3_encode(432.0f) == 0x7e && e4m3_encode(1.0625f) == 0x38 && e4m3_encode(1.1875f) == 0x3a &&
           e4m3_encode(0.0146484375f) == 0x08 && e4m3_encode(0.0009765625f) == 0x00 &&
           e4m3_encode(0.0029296875f) == 0x02 && e4m3_encode(-INFINITY) == 0xfe && e4m3_encode(NAN) == 0x7f,
           "the test's encoder on hand-known values");
    /* every finite code round-trips */
    int rt = 1;
    for (int c = 0; c < 256; c++)
        if ((c & 0x7f) != 0x7f && e4m3_encode((float)e4m3_value(c)) != c) rt = 0;
    EXPECT(rt, "every finite code encodes back to itself");
}

/* K rotated on its way into FP8 pools (per-token scales): the reference
 * rotates in double, the CPU in f32, so a code may sit one step apart at
 * a rounding boundary; both are the quantised rotation within e4m3's
 * rounding (amax / 16 of the row), and V, not rotated, is equal bit for bit. */
static void test_rope_fp8(sf_ctx *ctx) {
    enum { RB = 2, RL = 3, RH = 2, RD = 64, RP = 8, RPS = 4 };
    static float k[RB * RL * RH * RD], v[RB * RL * RH * RD];
    static uint8_t kp[2][RP * RPS * RH * RD], vp[2][RP * RPS * RH * RD];
    static float ks[2][RP * RPS * RH], vs[2][RP * RPS * RH];
    int32_t tab[RB * 2] = {5, 1, 2, 7}, len[RB] = {1, 4};
    for (int i = 0; i < RB * RL * RH * RD; i++) k[i] = (float)(4.0 * unif() - 2.0), v[i] = (float)(2.0 * unif() - 1.0);
    for (int be = 0; be < 2; be++) {
        memset(kp[be], 0xff, sizeof kp[be]), memset(vp[be], 0xff, sizeof vp[be]);
        memset(ks[be], 0xff, sizeof ks[be]), memset(vs[be], 0xff, sizeof vs[be]); /* NaN scales */
        sf_rope_params r;
        sf_rope_params_init(&r);
        r.rotary_dim = 32;
        sf_kv_append_params a;
        sf_kv_append_params_init(&a);
        a.k_cache = host(kp[be], SF_F8E4M3, 4, (int64_t[]){RP, RPS, RH, RD});
        a.v_cache = host(vp[be], SF_F8E4M3, 4, (int64_t[]){RP, RPS, RH, RD});
        a.k_scale = host(ks[be], SF_F32, 3, (int64_t[]){RP, RPS, RH});
        a.v_scale = host(vs[be], SF_F32, 3, (int64_t[]){RP, RPS, RH});
        a.k = host(k, SF_F32, 4, (int64_t[]){RB, RL, RH, RD});
        a.v = host(v, SF_F32, 4, (int64_t[]){RB, RL, RH, RD});
        a.block_table = host(tab, SF_I32, 2, (int64_t[]){RB, 2});
        a.cache_seqlens = host(len, SF_I32, 1, (int64_t[]){RB});
        a.rope = &r;
        a.backend = be ? SF_BACKEND_CPU : SF_BACKEND_REF;
        EXPECT_STATUS(sf_kv_append(ctx, &a), SF_OK, NULL);
    }
    double worst = 0;
    int vsame = memcmp(vp[0], vp[1], sizeof vp[0]) == 0 && memcmp(vs[0], vs[1], sizeof vs[0]) == 0;
    int kpoison = 1, nwritten = 0, vscaled = 1;
    for (int row = 0; row < RP * RPS * RH; row++) {
        const int written = kp[0][row * RD] != 0xff || kp[0][row * RD + 1] != 0xff;
        nwritten += written;
        if (written) vscaled &= isfinite(vs[0][row]) && isfinite(vs[1][row]);
        for (int e = 0; e < RD; e++) {
            if (!written) {
                kpoison &= kp[0][row * RD + e] == 0xff && kp[1][row * RD + e] == 0xff;
                continue;
            }
            const double a = e4m3_value(kp[0][row * RD + e]) * ks[0][row];
            const double b = e4m3_value(kp[1][row * RD + e]) * ks[1][row];
            const double amax = ks[0][row] * 448.0;
            /* a NaN code (0xff, never a quantised value) or scale is an infinite error */
            worst = worst_of(worst, abs_diff(a, b) / amax);
        }
    }
    EXPECT(vsame && kpoison && vscaled && nwritten == RB * RL * RH && worst <= 1.0 / 16,
           "rope into FP8 pools: ref and cpu K within %.3g of the row's amax (want <= 1/16), V equal %d, "
           "unwritten rows untouched %d, V scales written %d, %d rows written (want %d)", worst, vsame, kpoison,
           vscaled, nwritten, RB * RL * RH);
}

int main(int argc, char **argv) {
    const int cuda = split_cuda_part(argc, argv);
    if (cuda < 0) return 2;
    sf_ctx *ctx = NULL;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL cannot create a CPU context\n");
        return 1;
    }
    const int nc = (int)(sizeof fcases / sizeof fcases[0]);
    if (cuda) {
        sf_ctx *gpu = NULL;
        const int rc = split_gpu_ctx(&gpu, "test_paged_fp8");
        if (rc) {
            sf_ctx_destroy(ctx);
            return rc;
        }
        for (int i = 0; i < nc; i++) run_fcase(gpu, SF_BACKEND_CUDA, &fcases[i], SF_BF16);
        sf_ctx_destroy(gpu);
    } else {
        test_errors(ctx);
        test_encoder_values(ctx);
        test_rope_fp8(ctx);
        for (int i = 0; i < nc; i++) {
            run_fcase(ctx, SF_BACKEND_REF, &fcases[i], SF_F32);
            run_fcase(ctx, SF_BACKEND_CPU, &fcases[i], SF_F32);
            run_fcase(ctx, SF_BACKEND_CPU, &fcases[i], SF_BF16);
        }
    }
    sf_ctx_destroy(ctx);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
