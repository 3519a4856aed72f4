/* test_paged.c - the paged KV cache through the public API:
 *  1. every error path of sf_kv_append and sf_attn_paged (each check starts
 *     from a valid call, which must succeed, and breaks one thing);
 *  2. empty sequences: out 0, lse -inf, on the reference and CPU backends;
 *  3. append-then-attend over a shuffled paged cache equals sf_attn_fwd
 *     (varlen) over the same keys stored contiguously, in f32 and f16,
 *     ALiBi included;
 *  4. a K row rotated on the way in (sf_kv_append's rope), checked by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "split_test.h"
#include "worst.h"

static int failures = 0, checks = 0;

/* ------------------------------------------------------------------ */
/* 1. validation: b 2, Lq 2, H 4, Hkv 2, d 16; 6 pages of 4 rows, 3 per table */
/* ------------------------------------------------------------------ */

enum { NP = 6, PS = 4, MP = 3, HKV = 2, HQ = 4, D = 16, LQ = 2, NB = 2 };
static float kc[NP * PS * HKV * D], vc[NP * PS * HKV * D];
static float qb[NB * LQ * HQ * D], ob[NB * LQ * HQ * D], lseb[NB * HQ * LQ];
static float kn[NB * LQ * HKV * D], vn[NB * LQ * HKV * D];
static int32_t bt[NB * MP], sl[NB];

static sf_tensor F(float *p, int rank, const int64_t *shape) {
    return sf_tensor_contiguous(p, SF_F32, SF_DEVICE_CPU, rank, shape);
}
static sf_tensor I(int32_t *p, int rank, const int64_t *shape) {
    return sf_tensor_contiguous(p, SF_I32, SF_DEVICE_CPU, rank, shape);
}

static void tables_valid(void) {
    /* sequence 0: 7 keys on pages 3, 0 (entry 2 unused: -1, never read);
     * sequence 1: 12 keys on pages 1, 4, 2 */
    const int32_t t[NB * MP] = {3, 0, -1, 1, 4, 2};
    memcpy(bt, t, sizeof t);
    sl[0] = 7;
    sl[1] = 12;
}

static void attn_valid(sf_attn_paged_params *p) {
    sf_attn_paged_params_init(p);
    for (size_t i = 0; i < sizeof kc / sizeof kc[0]; i++) {
        kc[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
        vc[i] = 0.1f * (float)((i * 5) % 13) - 0.6f;
    }
    for (size_t i = 0; i < sizeof qb / sizeof qb[0]; i++) qb[i] = 0.1f * (float)((i * 3) % 7) - 0.3f;
    tables_valid();
    p->q = F(qb, 4, (int64_t[]){NB, LQ, HQ, D});
    p->k_cache = F(kc, 4, (int64_t[]){NP, PS, HKV, D});
    p->v_cache = F(vc, 4, (int64_t[]){NP, PS, HKV, D});
    p->block_table = I(bt, 2, (int64_t[]){NB, MP});
    p->seqlens = I(sl, 1, (int64_t[]){NB});
    p->out = F(ob, 4, (int64_t[]){NB, LQ, HQ, D});
    p->lse = F(lseb, 3, (int64_t[]){NB, HQ, LQ});
    p->causal = 1;
}

/* append LQ tokens to sequences holding 5 and 8 tokens */
static void append_valid(sf_kv_append_params *p) {
    sf_kv_append_params_init(p);
    for (size_t i = 0; i < sizeof kn / sizeof kn[0]; i++) kn[i] = vn[i] = (float)i;
    tables_valid();
    sl[0] = 5;
    sl[1] = 8;
    p->k_cache = F(kc, 4, (int64_t[]){NP, PS, HKV, D});
    p->v_cache = F(vc, 4, (int64_t[]){NP, PS, HKV, D});
    p->k = F(kn, 4, (int64_t[]){NB, LQ, HKV, D});
    p->v = F(vn, 4, (int64_t[]){NB, LQ, HKV, D});
    p->block_table = I(bt, 2, (int64_t[]){NB, MP});
    p->cache_seqlens = I(sl, 1, (int64_t[]){NB});
}

static void test_attn_errors(sf_ctx *ctx) {
    sf_attn_paged_params p;
    attn_valid(&p);
    EXPECT_STATUS(sf_attn_paged(ctx, &p), SF_OK, NULL);
    p.backend = SF_BACKEND_REF;
    EXPECT_STATUS(sf_attn_paged(ctx, &p), SF_OK, NULL);
    EXPECT_STATUS(sf_attn_paged(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    EXPECT_STATUS(sf_attn_paged(NULL, &p), SF_ERR_NULL_POINTER, NULL);

#define BREAK(stmt, want, needle) \
    do {                          \
        attn_valid(&p);           \
        stmt;                     \
        EXPECT_STATUS(sf_attn_paged(ctx, &p), want, needle); \
    } while (0)
    BREAK(p.q.data = NULL, SF_ERR_NULL_POINTER, "q");
    BREAK(p.k_cache.data = NULL, SF_ERR_NULL_POINTER, "k_cache");
    BREAK(p.q.rank = 3, SF_ERR_SHAPE, "q");
    BREAK(p.q.dtype = SF_I32, SF_ERR_DTYPE, "q");
    BREAK(p.k_cache.dtype = SF_F16, SF_ERR_DTYPE, "k_cache");
    BREAK(p.v_cache.dtype = SF_BF16, SF_ERR_DTYPE, "v_cache");
    BREAK(p.k_cache = F(kc, 4, (int64_t[]){NP, PS, HKV, 8}), SF_ERR_SHAPE, "k_cache");
    BREAK(p.v_cache = F(vc, 4, (int64_t[]){NP - 1, PS, HKV, D}), SF_ERR_SHAPE, "v_cache");
    BREAK(p.k_cache.stride[3] = 2, SF_ERR_STRIDE, "k_cache");
    /* page size 3, 0, 512: not a power of two from 1 to 256 */
    BREAK((p.k_cache = F(kc, 4, (int64_t[]){8, 3, HKV, D}),
           p.v_cache = F(vc, 4, (int64_t[]){8, 3, HKV, D})),
          SF_ERR_SHAPE, "page_size (k_cache.shape[1]) is 3");
    BREAK((p.k_cache = F(kc, 4, (int64_t[]){1, 512, 1, 1}),
           p.v_cache = F(vc, 4, (int64_t[]){1, 512, 1, 1}),
           p.q = F(qb, 4, (int64_t[]){NB, LQ, 1, 1}), p.out = F(ob, 4, (int64_t[]){NB, LQ, 1, 1}),
           p.lse.data = NULL),
          SF_ERR_SHAPE, "power of two");
    /* 3 query heads over 2 kv heads */
    BREAK((p.q = F(qb, 4, (int64_t[]){NB, LQ, 3, D}), p.out = F(ob, 4, (int64_t[]){NB, LQ, 3, D}),
           p.lse = F(lseb, 3, (int64_t[]){NB, 3, LQ})),
          SF_ERR_SHAPE, "does not divide");
    /* head dim past 256 (shapes only: refused before any access) */
    BREAK((p.q = F(qb, 4, (int64_t[]){1, 1, 2, 300}), p.out = F(ob, 4, (int64_t[]){1, 1, 2, 300}),
           p.k_cache = F(kc, 4, (int64_t[]){1, 1, 2, 300}),
           p.v_cache = F(vc, 4, (int64_t[]){1, 1, 2, 300}), p.lse.data = NULL,
           p.block_table = I(bt, 2, (int64_t[]){1, MP}), p.seqlens = I(sl, 1, (int64_t[]){1})),
          SF_ERR_UNSUPPORTED, "head dim 300");
    BREAK(p.block_table.dtype = SF_F32, SF_ERR_DTYPE, "block_table");
    BREAK(p.block_table = I(bt, 2, (int64_t[]){NB + 1, 2}), SF_ERR_SHAPE, "block_table");
    BREAK(p.block_table.data = NULL, SF_ERR_NULL_POINTER, "block_table");
    BREAK(p.seqlens.dtype = SF_I64, SF_ERR_DTYPE, "seqlens");
    BREAK(p.seqlens = I(sl, 1, (int64_t[]){NB + 1}), SF_ERR_SHAPE, "seqlens");
    BREAK(p.seqlens.data = NULL, SF_ERR_NULL_POINTER, "seqlens");
    BREAK(p.out = F(ob, 4, (int64_t[]){NB, LQ + 1, HQ, D}), SF_ERR_SHAPE, "out");
    BREAK(p.out.dtype = SF_F16, SF_ERR_DTYPE, "out");
    BREAK(p.lse = F(lseb, 3, (int64_t[]){NB, LQ, HQ}), SF_ERR_SHAPE, "lse");
    BREAK(p.softcap = -1.0f, SF_ERR_INVALID_ARG, "softcap");
    BREAK(p.softcap = NAN, SF_ERR_INVALID_ARG, "softcap");
    BREAK(p.softmax_scale = INFINITY, SF_ERR_INVALID_ARG, "softmax_scale");
    BREAK(p.causal = 2, SF_ERR_INVALID_ARG, "causal");
    BREAK(p.backend = (sf_backend)42, SF_ERR_INVALID_ARG, "backend");
    BREAK(p.backend = SF_BACKEND_CUDA, SF_ERR_UNSUPPORTED, "cuda");
    /* outputs over inputs */
    BREAK(p.out.data = qb, SF_ERR_INVALID_ARG, "overlaps input q");
    BREAK(p.lse.data = kc + 8, SF_ERR_INVALID_ARG, "overlaps input k_cache");
    BREAK(p.out.data = kc, SF_ERR_INVALID_ARG, "overlaps input k_cache");
    /* index entries: a page outside the pool, negative, a length past the table */
    BREAK(bt[5] = NP, SF_ERR_INDEX, "block_table[1, 2] = 6");
    BREAK(bt[1] = -1, SF_ERR_INDEX, "block_table[0, 1] = -1");
    BREAK(sl[1] = 13, SF_ERR_INDEX, "seqlens[1] = 13");
    BREAK(sl[0] = -2, SF_ERR_INDEX, "seqlens[0] = -2 is negative");
    /* an entry past the pages a length needs is never read: any value passes */
    BREAK((sl[0] = 4, bt[1] = 12345), SF_OK, NULL);
#undef BREAK
}

static void test_append_errors(sf_ctx *ctx) {
    sf_kv_append_params p;
    append_valid(&p);
    EXPECT_STATUS(sf_kv_append(ctx, &p), SF_OK, NULL);
    append_valid(&p);
    p.backend = SF_BACKEND_REF;
    EXPECT_STATUS(sf_kv_append(ctx, &p), SF_OK, NULL);
    EXPECT_STATUS(sf_kv_append(ctx, NULL), SF_ERR_NULL_POINTER, "params");

#define BREAK(stmt, want, needle) \
    do {                          \
        append_valid(&p);         \
        stmt;                     \
        EXPECT_STATUS(sf_kv_append(ctx, &p), want, needle); \
    } while (0)
    BREAK(p.k.data = NULL, SF_ERR_NULL_POINTER, "k");
    BREAK(p.v = F(vn, 4, (int64_t[]){NB, LQ - 1, HKV, D}), SF_ERR_SHAPE, "v");
    BREAK(p.v.dtype = SF_F16, SF_ERR_DTYPE, "v");
    BREAK(p.k.dtype = SF_I64, SF_ERR_DTYPE, "k");
    BREAK((p.k.dtype = SF_F16, p.v.dtype = SF_F16), SF_ERR_DTYPE, "k_cache");
    BREAK(p.k_cache = F(kc, 4, (int64_t[]){NP, PS, 1, D}), SF_ERR_SHAPE, "k_cache");
    BREAK(p.v_cache = F(vc, 4, (int64_t[]){NP, PS * 2, HKV, D}), SF_ERR_SHAPE, "v_cache");
    BREAK((p.k_cache = F(kc, 4, (int64_t[]){8, 3, HKV, D}),
           p.v_cache = F(vc, 4, (int64_t[]){8, 3, HKV, D})),
          SF_ERR_SHAPE, "page_size (k_cache.shape[1]) is 3");
    BREAK(p.block_table.dtype = SF_I64, SF_ERR_DTYPE, "block_table");
    BREAK(p.cache_seqlens.dtype = SF_F32, SF_ERR_DTYPE, "cache_seqlens");
    BREAK(p.cache_seqlens = I(sl, 1, (int64_t[]){1}), SF_ERR_SHAPE, "cache_seqlens");
    BREAK(p.k_cache.stride[0] = 0, SF_ERR_STRIDE, "k_cache");
    /* the pools must not overlap the new tokens, the tables or each other */
    BREAK(p.k.data = kc + 4, SF_ERR_INVALID_ARG, "overlaps input k");
    BREAK(p.v_cache.data = kc, SF_ERR_INVALID_ARG, "k_cache");
    BREAK(p.block_table.data = (int32_t *)(void *)vc, SF_ERR_INVALID_ARG, "block_table");
    /* the written pages only: sequence 1 writes positions 8, 9 (page 2 of
     * its table); sequence 0 positions 5, 6 (its page 1) */
    BREAK(bt[5] = NP + 3, SF_ERR_INDEX, "block_table[1, 2] = 9");
    BREAK(bt[1] = -5, SF_ERR_INDEX, "block_table[0, 1] = -5");
    BREAK(bt[0] = 99, SF_OK, NULL); /* page 0 of sequence 0 is not written */
    BREAK(sl[1] = 11, SF_ERR_INDEX, "cache_seqlens[1] = 11 plus the new tokens");
    BREAK(sl[0] = -1, SF_ERR_INDEX, "negative");
    /* two sequences writing one slot: a race on a GPU, refused on the host */
    BREAK((bt[5] = 0, sl[0] = 5, sl[1] = 9), SF_ERR_INDEX, "both write row 1 of page 0");
    /* the same page, different rows: fine */
    BREAK((bt[5] = 0, sl[0] = 4, sl[1] = 10), SF_OK, NULL);
    /* partly overlapping runs: rows 1, 2 and rows 2, 3 of page 0 */
    BREAK((bt[5] = 0, sl[0] = 5, sl[1] = 10), SF_ERR_INDEX, "both write row 2 of page 0");
#undef BREAK

    /* rope: sf_rope's checks of the definition (messages naming rope.<field>),
     * none of the tensors the append supplies itself, tables covering every
     * position written (sequence 0 writes 5, 6; sequence 1 writes 8, 9) */
    static sf_rope_params rp;
    static float tc[10 * D / 2], ts[10 * D / 2];
#define RBREAK(stmt, want, needle)                           \
    do {                                                     \
        append_valid(&p);                                    \
        sf_rope_params_init(&rp);                            \
        p.rope = &rp;                                        \
        stmt;                                                \
        EXPECT_STATUS(sf_kv_append(ctx, &p), want, needle); \
    } while (0)
    RBREAK((void)0, SF_OK, NULL);
    RBREAK(p.backend = SF_BACKEND_REF, SF_OK, NULL);
    RBREAK((rp.style = SF_ROPE_GPTJ, rp.rotary_dim = 8, rp.scaling = SF_ROPE_LLAMA3), SF_OK, NULL);
    RBREAK(rp.q = F(qb, 3, (int64_t[]){NB * LQ, HQ, D}), SF_ERR_INVALID_ARG, "rope.q must be absent");
    RBREAK(rp.k = F(kn, 3, (int64_t[]){NB * LQ, HKV, D}), SF_ERR_INVALID_ARG, "rope.k must be absent");
    RBREAK(rp.q_out = F(ob, 3, (int64_t[]){NB * LQ, HQ, D}), SF_ERR_INVALID_ARG, "rope.q_out");
    RBREAK(rp.k_out = F(ob, 3, (int64_t[]){NB * LQ, HKV, D}), SF_ERR_INVALID_ARG, "rope.k_out");
    RBREAK(rp.positions = I(sl, 1, (int64_t[]){NB}), SF_ERR_INVALID_ARG, "rope.positions must be absent");
    RBREAK(rp.rotary_dim = 3, SF_ERR_INVALID_ARG, "rope.rotary_dim 3");
    RBREAK(rp.rotary_dim = D + 2, SF_ERR_INVALID_ARG, "rope.rotary_dim 18");
    RBREAK(rp.rotary_dim = -2, SF_ERR_INVALID_ARG, "rope.rotary_dim -2");
    RBREAK(rp.style = (sf_rope_style)5, SF_ERR_INVALID_ARG, "rope.style 5");
    RBREAK(rp.theta = 0.0f, SF_ERR_INVALID_ARG, "rope.theta");
    RBREAK(rp.scaling = (sf_rope_scaling)3, SF_ERR_INVALID_ARG, "rope.scaling 3");
    RBREAK((rp.scaling = SF_ROPE_LLAMA3, rp.low_freq_factor = 5.0f), SF_ERR_INVALID_ARG, "rope.low_freq_factor");
    RBREAK((rp.scaling = SF_ROPE_LLAMA3, rp.factor = NAN), SF_ERR_INVALID_ARG, "rope.factor");
    RBREAK(rp.cos = F(tc, 2, (int64_t[]){10, D / 2}), SF_ERR_INVALID_ARG, "rope.cos and rope.sin");
    RBREAK((rp.cos = F(tc, 2, (int64_t[]){10, D / 2}), rp.sin = F(ts, 2, (int64_t[]){10, D / 2})), SF_OK, NULL);
    RBREAK((rp.cos = F(tc, 2, (int64_t[]){10, D / 4}), rp.sin = F(ts, 2, (int64_t[]){10, D / 4})),
           SF_ERR_SHAPE, "rope.cos");
    RBREAK((rp.rotary_dim = D / 2, rp.cos = F(tc, 2, (int64_t[]){10, D / 4}),
            rp.sin = F(ts, 2, (int64_t[]){9, D / 4})),
           SF_ERR_SHAPE, "rope.sin");
    RBREAK((rp.cos = F(tc, 2, (int64_t[]){10, D / 2}), rp.sin = F(ts, 2, (int64_t[]){10, D / 2}),
            rp.cos.dtype = SF_F16),
           SF_ERR_DTYPE, "rope.cos");
    /* one row short: position 9 of sequence 1 has none */
    RBREAK((rp.cos = F(tc, 2, (int64_t[]){9, D / 2}), rp.sin = F(ts, 2, (int64_t[]){9, D / 2})),
           SF_ERR_INDEX, "sequence 1 writes position 9");
    RBREAK((p.backend = SF_BACKEND_REF, rp.cos = F(tc, 2, (int64_t[]){9, D / 2}),
            rp.sin = F(ts, 2, (int64_t[]){9, D / 2})),
           SF_ERR_INDEX, "rope.cos and rope.sin have 9 rows");
    /* the tables are inputs: a pool over them is refused */
    RBREAK((rp.cos = F(kc, 2, (int64_t[]){10, D / 2}), rp.sin = F(ts, 2, (int64_t[]){10, D / 2})),
           SF_ERR_INVALID_ARG, "rope.cos");
#undef RBREAK
}

/* One K row rotated by hand: d 4, sequence of 2 cached tokens, the new one
 * at position 2, theta 10000 (f = 1 and 0.01).  NeoX pairs (0, 2), (1, 3);
 * GPT-J (0, 1), (2, 3); GPT-J with rotary_dim 2 leaves channels 2, 3 as
 * they are.  V and k themselves are never touched. */
static void test_rope_by_hand(sf_ctx *ctx) {
    for (int be = 0; be < 2; be++)
        for (int style = 0; style < 3; style++) {
            float kpool[2 * 4 * 4], vpool[2 * 4 * 4], knew[4] = {1, 2, 3, 4}, vnew[4] = {5, 6, 7, 8};
            int32_t tab[2] = {1, 0}, len[1] = {2};
            for (int i = 0; i < 32; i++) kpool[i] = vpool[i] = -9.0f;
            sf_rope_params r;
            sf_rope_params_init(&r);
            r.style = style == 0 ? SF_ROPE_NEOX : SF_ROPE_GPTJ;
            r.rotary_dim = style == 2 ? 2 : 0;
            sf_kv_append_params p;
            sf_kv_append_params_init(&p);
            p.k_cache = F(kpool, 4, (int64_t[]){2, 4, 1, 4});
            p.v_cache = F(vpool, 4, (int64_t[]){2, 4, 1, 4});
            p.k = F(knew, 4, (int64_t[]){1, 1, 1, 4});
            p.v = F(vnew, 4, (int64_t[]){1, 1, 1, 4});
            p.block_table = I(tab, 2, (int64_t[]){1, 2});
            p.cache_seqlens = I(len, 1, (int64_t[]){1});
            p.rope = &r;
            p.backend = be ? SF_BACKEND_CPU : SF_BACKEND_REF;
            EXPECT_STATUS(sf_kv_append(ctx, &p), SF_OK, NULL);
            const double c0 = cos(2.0), s0 = sin(2.0), c1 = cos(0.02), s1 = sin(0.02);
            double want[4];
            if (style == 0) {
                want[0] = 1 * c0 - 3 * s0, want[2] = 3 * c0 + 1 * s0;
                want[1] = 2 * c1 - 4 * s1, want[3] = 4 * c1 + 2 * s1;
            } else if (style == 1) {
                want[0] = 1 * c0 - 2 * s0, want[1] = 2 * c0 + 1 * s0;
                want[2] = 3 * c1 - 4 * s1, want[3] = 4 * c1 + 3 * s1;
            } else { /* R = 2: the one frequency is 1 */
                want[0] = 1 * c0 - 2 * s0, want[1] = 2 * c0 + 1 * s0, want[2] = 3, want[3] = 4;
            }
            /* position 2: page tab[0] = 1, row 2 */
            const float *got = kpool + (1 * 4 + 2) * 4, *gv = vpool + (1 * 4 + 2) * 4;
            double err = 0;
            for (int c = 0; c < 4; c++) err = worst_of(err, abs_diff(got[c], want[c]));
            EXPECT(err < 1e-6, "rope by hand, %s style %d: k_cache row (%g %g %g %g), want (%g %g %g %g)",
                   be ? "cpu" : "ref", style, got[0], got[1], got[2], got[3], want[0], want[1],
                   want[2], want[3]);
            EXPECT(gv[0] == 5 && gv[1] == 6 && gv[2] == 7 && gv[3] == 8 && knew[0] == 1 && knew[3] == 4,
                   "rope by hand, %s style %d: v copied as it is and k left alone", be ? "cpu" : "ref", style);
            int untouched = 1;
            for (int i = 0; i < 32; i++)
                if (i / 4 != 6 && (kpool[i] != -9.0f || vpool[i] != -9.0f)) untouched = 0;
            EXPECT(untouched, "rope by hand, %s style %d: only the one slot written", be ? "cpu" : "ref", style);
        }
}

/* On a GPU the lengths live on the device: a position past the cos/sin
 * tables is found by the kernel, its row (K and V) left unwritten and the
 * sequence recorded (SF_ERR_INDEX at the next synchronize).  Tables of 3
 * rows, cos 1 and sin 0 (K copied exactly), a sequence of 2 cached tokens
 * appending 2: position 2 is written, position 3 is not.  On the CUDA
 * context ctx. */
static void test_rope_cuda_bad_row(sf_ctx *ctx) {
    enum { PD = 8, NPOS = 3 };
    uint16_t hk[2 * PD], hv[2 * PD], pool[2 * 4 * PD];
    float hc[NPOS * PD / 2], hs[NPOS * PD / 2];
    int32_t htab[2] = {1, 0}, hlen[1] = {2};
    for (int i = 0; i < 2 * PD; i++) hk[i] = (uint16_t)(0x3c00 + i), hv[i] = (uint16_t)(0x4000 + i);
    for (int i = 0; i < NPOS * PD / 2; i++) hc[i] = 1.0f, hs[i] = 0.0f;
    for (int i = 0; i < 2 * 4 * PD; i++) pool[i] = 0xffff;
    void *dk = NULL, *dv = NULL, *dkc = NULL, *dvc = NULL, *dc = NULL, *ds = NULL, *dt = NULL, *dl = NULL;
    int ok = sf_malloc(ctx, &dk, sizeof hk) == SF_OK && sf_malloc(ctx, &dv, sizeof hv) == SF_OK &&
             sf_malloc(ctx, &dkc, sizeof pool) == SF_OK && sf_malloc(ctx, &dvc, sizeof pool) == SF_OK &&
             sf_malloc(ctx, &dc, sizeof hc) == SF_OK && sf_malloc(ctx, &ds, sizeof hs) == SF_OK &&
             sf_malloc(ctx, &dt, sizeof htab) == SF_OK && sf_malloc(ctx, &dl, sizeof hlen) == SF_OK;
    EXPECT(ok, "rope on the GPU: device buffers");
    if (ok) {
        sf_memcpy(ctx, dk, hk, sizeof hk), sf_memcpy(ctx, dv, hv, sizeof hv);
        sf_memcpy(ctx, dkc, pool, sizeof pool), sf_memcpy(ctx, dvc, pool, sizeof pool);
        sf_memcpy(ctx, dc, hc, sizeof hc), sf_memcpy(ctx, ds, hs, sizeof hs);
        sf_memcpy(ctx, dt, htab, sizeof htab), sf_memcpy(ctx, dl, hlen, sizeof hlen);
        sf_rope_params r;
        sf_rope_params_init(&r);
        r.cos = sf_tensor_contiguous(dc, SF_F32, 0, 2, (int64_t[]){NPOS, PD / 2});
        r.sin = sf_tensor_contiguous(ds, SF_F32, 0, 2, (int64_t[]){NPOS, PD / 2});
        sf_kv_append_params p;
        sf_kv_append_params_init(&p);
        p.k_cache = sf_tensor_contiguous(dkc, SF_F16, 0, 4, (int64_t[]){2, 4, 1, PD});
        p.v_cache = sf_tensor_contiguous(dvc, SF_F16, 0, 4, (int64_t[]){2, 4, 1, PD});
        p.k = sf_tensor_contiguous(dk, SF_F16, 0, 4, (int64_t[]){1, 2, 1, PD});
        p.v = sf_tensor_contiguous(dv, SF_F16, 0, 4, (int64_t[]){1, 2, 1, PD});
        p.block_table = sf_tensor_contiguous(dt, SF_I32, 0, 2, (int64_t[]){1, 2});
        p.cache_seqlens = sf_tensor_contiguous(dl, SF_I32, 0, 1, (int64_t[]){1});
        p.rope = &r;
        EXPECT_STATUS(sf_kv_append(ctx, &p), SF_OK, NULL);
        const sf_status st = sf_ctx_synchronize(ctx);
        EXPECT(st == SF_ERR_INDEX, "rope on the GPU: a position past the tables gives SF_ERR_INDEX "
               "at the synchronize, got %d (%s)", (int)st, sf_ctx_last_error(ctx));
        uint16_t kk[2 * 4 * PD], vv[2 * 4 * PD];
        sf_memcpy(ctx, kk, dkc, sizeof kk), sf_memcpy(ctx, vv, dvc, sizeof vv);
        /* position 2: page 1, row 2 (element 48); position 3: row 3 (56) */
        int good = 1;
        for (int c = 0; c < PD; c++) {
            good &= kk[48 + c] == hk[c] && vv[48 + c] == hv[c];
            good &= kk[56 + c] == 0xffff && vv[56 + c] == 0xffff;
        }
        EXPECT(good, "rope on the GPU: position 2 written (cos 1, sin 0: K as it is), position 3 "
               "past the tables left unwritten");
        EXPECT(sf_ctx_synchronize(ctx) == SF_OK, "rope on the GPU: the record is cleared");
    }
    void *bufs[] = {dk, dv, dkc, dvc, dc, ds, dt, dl};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) sf_free(ctx, bufs[i]);
}

/* ------------------------------------------------------------------ */
/* 2. empty sequences                                                   */
/* ------------------------------------------------------------------ */

static void test_empty(sf_ctx *ctx) {
    const sf_backend bes[] = {SF_BACKEND_REF, SF_BACKEND_CPU};
    for (int bi = 0; bi < 2; bi++) {
        sf_attn_paged_params p;
        attn_valid(&p);
        p.causal = 0;
        p.backend = bes[bi];
        sl[0] = 0;
        for (size_t i = 0; i < sizeof ob / sizeof ob[0]; i++) ob[i] = NAN;
        for (size_t i = 0; i < sizeof lseb / sizeof lseb[0]; i++) lseb[i] = NAN;
        EXPECT_STATUS(sf_attn_paged(ctx, &p), SF_OK, NULL);
        int ok = 1;
        for (int i = 0; i < LQ * HQ * D; i++) ok &= ob[i] == 0.0f;             /* sequence 0 */
        for (int i = 0; i < HQ * LQ; i++) ok &= lseb[i] == -INFINITY;
        for (int i = LQ * HQ * D; i < NB * LQ * HQ * D; i++) ok &= isfinite(ob[i]) != 0;
        for (int i = HQ * LQ; i < NB * HQ * LQ; i++) ok &= isfinite(lseb[i]) != 0;
        EXPECT(ok, "%s: a sequence of length 0 must give out 0 and lse -inf (the other finite)",
               sf_backend_name(bes[bi]));
    }
    /* no batch rows, no query tokens: nothing to do */
    sf_attn_paged_params p;
    attn_valid(&p);
    p.q = F(qb, 4, (int64_t[]){NB, 0, HQ, D});
    p.out = F(ob, 4, (int64_t[]){NB, 0, HQ, D});
    p.lse = F(lseb, 3, (int64_t[]){NB, HQ, 0});
    EXPECT_STATUS(sf_attn_paged(ctx, &p), SF_OK, NULL);
}

/* ------------------------------------------------------------------ */
/* 3. append then attend == sf_attn_fwd over the contiguous keys         */
/* ------------------------------------------------------------------ */

static uint64_t rng = 12345;
static double unif(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static uint16_t to_f16(float f) { /* values here are normal or zero */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a < 0x38800000u) return (uint16_t)sign;
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
static float from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) return sign ? -ldexpf((float)m, -24) : ldexpf((float)m, -24);
    uint32_t bits = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void put(void *buf, sf_dtype dt, int64_t i, float v) {
    if (dt == SF_F32) ((float *)buf)[i] = v;
    else ((uint16_t *)buf)[i] = to_f16(v);
}
static float get(const void *buf, sf_dtype dt, int64_t i) {
    return dt == SF_F32 ? ((const float *)buf)[i] : from_f16(((const uint16_t *)buf)[i]);
}

static sf_tensor T(void *p, sf_dtype dt, int rank, const int64_t *shape) {
    return sf_tensor_contiguous(p, dt, SF_DEVICE_CPU, rank, shape);
}

static void test_equivalence(sf_ctx *ctx, sf_dtype dt) {
    enum { B = 3, H = 8, G = 2, DD = 64, P = 16, LN = 4, MPG = 5, NPG = 16 };
    const int cached[B] = {20, 0, 33};
    int64_t tot = 0, cu[B + 1] = {0};
    for (int b = 0; b < B; b++) cu[b + 1] = cu[b] + cached[b] + LN, tot = cu[b + 1];
    const size_t es = sf_dtype_size(dt), row = (size_t)G * DD;
    /* contiguous K/V of every sequence (cached then new), q, outputs */
    char *K = calloc((size_t)tot * row, es), *V = calloc((size_t)tot * row, es);
    char *Kn = calloc((size_t)B * LN * row, es), *Vn = calloc((size_t)B * LN * row, es);
    char *Q = calloc((size_t)B * LN * H * DD, es), *O1 = calloc((size_t)B * LN * H * DD, es);
    char *O2 = calloc((size_t)B * LN * H * DD, es);
    char *kp = calloc((size_t)NPG * P * row, es), *vp = calloc((size_t)NPG * P * row, es);
    float *l1 = calloc((size_t)B * H * LN, 4), *l2 = calloc((size_t)H * B * LN, 4);
    int32_t btab[B * MPG], cs[B], lens[B], zero = 0, cuq[B + 1], cuk[B + 1];
    if (!K || !V || !Kn || !Vn || !Q || !O1 || !O2 || !kp || !vp || !l1 || !l2) {
        printf("FAIL cannot allocate\n");
        failures++;
        goto out;
    }
    for (int64_t i = 0; i < tot * (int64_t)row; i++) {
        put(K, dt, i, (float)(2.0 * unif() - 1.0));
        put(V, dt, i, (float)(2.0 * unif() - 1.0));
    }
    for (int64_t i = 0; i < (int64_t)B * LN * H * DD; i++) put(Q, dt, i, (float)(2.0 * unif() - 1.0));
    /* a shuffled table: pages 15, 3, 8, ... handed out in a fixed odd order */
    for (int i = 0; i < B * MPG; i++) btab[i] = (int32_t)((i * 7 + 15) % NPG);
    for (int b = 0; b < B; b++) {
        cs[b] = cached[b];
        lens[b] = cached[b] + LN;
        cuq[b] = b * LN;
        cuk[b] = (int32_t)cu[b];
        /* the new tokens are the last LN of each sequence */
        memcpy(Kn + (size_t)b * LN * row * es, K + (size_t)(cu[b] + cached[b]) * row * es, LN * row * es);
        memcpy(Vn + (size_t)b * LN * row * es, V + (size_t)(cu[b] + cached[b]) * row * es, LN * row * es);
    }
    cuq[B] = B * LN;
    cuk[B] = (int32_t)tot;

    /* the cached prefix, one sequence at a time (a prefill), then the new
     * tokens of all sequences in one call */
    sf_kv_append_params a;
    for (int b = 0; b < B; b++) {
        if (cached[b] == 0) continue;
        sf_kv_append_params_init(&a);
        a.k_cache = T(kp, dt, 4, (int64_t[]){NPG, P, G, DD});
        a.v_cache = T(vp, dt, 4, (int64_t[]){NPG, P, G, DD});
        a.k = T(K + (size_t)cu[b] * row * es, dt, 4, (int64_t[]){1, cached[b], G, DD});
        a.v = T(V + (size_t)cu[b] * row * es, dt, 4, (int64_t[]){1, cached[b], G, DD});
        a.block_table = T(btab + b * MPG, SF_I32, 2, (int64_t[]){1, MPG});
        a.cache_seqlens = T(&zero, SF_I32, 1, (int64_t[]){1});
        EXPECT_STATUS(sf_kv_append(ctx, &a), SF_OK, NULL);
    }
    sf_kv_append_params_init(&a);
    a.k_cache = T(kp, dt, 4, (int64_t[]){NPG, P, G, DD});
    a.v_cache = T(vp, dt, 4, (int64_t[]){NPG, P, G, DD});
    a.k = T(Kn, dt, 4, (int64_t[]){B, LN, G, DD});
    a.v = T(Vn, dt, 4, (int64_t[]){B, LN, G, DD});
    a.block_table = T(btab, SF_I32, 2, (int64_t[]){B, MPG});
    a.cache_seqlens = T(cs, SF_I32, 1, (int64_t[]){B});
    EXPECT_STATUS(sf_kv_append(ctx, &a), SF_OK, NULL);

    for (int causal = 0; causal < 2; causal++) {
        sf_attn_paged_params p;
        sf_attn_paged_params_init(&p);
        p.q = T(Q, dt, 4, (int64_t[]){B, LN, H, DD});
        p.k_cache = a.k_cache;
        p.v_cache = a.v_cache;
        p.block_table = a.block_table;
        p.seqlens = T(lens, SF_I32, 1, (int64_t[]){B});
        p.out = T(O1, dt, 4, (int64_t[]){B, LN, H, DD});
        p.lse = T(l1, SF_F32, 3, (int64_t[]){B, H, LN});
        p.causal = causal;
        p.softcap = causal ? 0.0f : 1.5f;
        p.window_left = causal ? 9 : -1;
        /* ALiBi (per head) on the windowed causal pass: the forward's bias */
        static float slopes[H];
        for (int h = 0; h < H; h++) slopes[h] = 0.03f * (float)(h + 1);
        if (causal) p.alibi_slopes = T(slopes, SF_F32, 1, (int64_t[]){H});
        EXPECT_STATUS(sf_attn_paged(ctx, &p), SF_OK, NULL);

        sf_attn_fwd_params f;
        sf_attn_fwd_params_init(&f);
        f.q = T(Q, dt, 3, (int64_t[]){B * LN, H, DD});
        f.k = T(K, dt, 3, (int64_t[]){tot, G, DD});
        f.v = T(V, dt, 3, (int64_t[]){tot, G, DD});
        f.out = T(O2, dt, 3, (int64_t[]){B * LN, H, DD});
        f.lse = T(l2, SF_F32, 2, (int64_t[]){H, B * LN});
        f.cu_seqlens_q = T(cuq, SF_I32, 1, (int64_t[]){B + 1});
        f.cu_seqlens_k = T(cuk, SF_I32, 1, (int64_t[]){B + 1});
        f.causal = causal;
        f.softcap = p.softcap;
        f.window_left = p.window_left;
        f.alibi_slopes = p.alibi_slopes;
        EXPECT_STATUS(sf_attn_fwd(ctx, &f), SF_OK, NULL);

        double num = 0, den = 0, lerr = 0;
        for (int64_t i = 0; i < (int64_t)B * LN * H * DD; i++) {
            const double x = get(O1, dt, i), y = get(O2, dt, i);
            num += (x - y) * (x - y);
            den += y * y;
        }
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < LN; i++) {
                    const double x = l1[(b * H + h) * LN + i], y = l2[h * B * LN + b * LN + i];
                    lerr = worst_of(lerr, abs_diff(x, y));
                }
        const double err = den > 0 ? sqrt(num / den) : sqrt(num);
        const double tol = dt == SF_F32 ? 1e-5 : 2e-3;
        EXPECT(err <= tol && lerr <= 1e-4, "%s causal %d: paged vs contiguous attention: out rel err %.3g "
               "(tol %.1g), lse max err %.3g", sf_dtype_name(dt), causal, err, tol, lerr);
    }
out:
    free(K), free(V), free(Kn), free(Vn), free(Q), free(O1), free(O2), free(kp), free(vp);
    free(l1), free(l2);
}

int main(int argc, char **argv) {
    const int cuda = split_cuda_part(argc, argv);
    if (cuda < 0) return 2;
    sf_ctx *ctx = NULL;
    if (cuda) {
        const int rc = split_gpu_ctx(&ctx, "test_paged");
        if (rc) return rc;
        test_rope_cuda_bad_row(ctx);
        sf_ctx_destroy(ctx);
        printf("%d checks, %d failures\n", checks, failures);
        return failures ? 1 : 0;
    }
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL cannot create a CPU context\n");
        return 1;
    }
    test_attn_errors(ctx);
    test_append_errors(ctx);
    test_rope_by_hand(ctx);
    test_empty(ctx);
    test_equivalence(ctx, SF_F32);
    test_equivalence(ctx, SF_F16);
    sf_ctx_destroy(ctx);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
