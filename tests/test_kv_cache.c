/* test_kv_cache.c - sf_kv_cache, the library-owned paged cache, on a CPU
 * context:
 *  1. creation errors, and pools and tables of the described shapes;
 *  2. page bookkeeping: resizes take and return pages, no page is held by
 *     two slots, a refused resize (too few free pages, past the slot's
 *     capacity) changes nothing, freed pages are handed out again;
 *  3. a decode loop through the cache (sf_kv_append at the old lengths,
 *     then sf_attn_paged with the cache's tables) equals sf_attn_fwd over
 *     the same keys stored contiguously; for an FP8 cache (its own scale
 *     pools) over the keys as the pools hold them, dequantised here, and
 *     those within e4m3's rounding of the keys given. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "worst.h"

static int failures = 0, checks = 0;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static sf_kv_cache_desc small_desc(void) {
    sf_kv_cache_desc d;
    memset(&d, 0, sizeof d);
    d.num_pages = 10, d.page_size = 4, d.nheads_kv = 2, d.head_dim = 8, d.dtype = SF_F32;
    d.num_layers = 2, d.max_seqs = 3, d.max_pages_per_seq = 4;
    return d;
}

/* Every page is either free or held by exactly one slot, in the host view
 * the tables give. */
static void check_pages(sf_kv_cache *c, const sf_kv_cache_desc *d) {
    sf_tensor bt, lens;
    EXPECT(sf_kv_cache_tables(c, &bt, &lens) == SF_OK, "tables");
    const int32_t *t = (const int32_t *)bt.data, *l = (const int32_t *)lens.data;
    int held[64] = {0};
    int64_t nheld = 0;
    for (int s = 0; s < d->max_seqs; s++) {
        const int64_t need = (l[s] + d->page_size - 1) / d->page_size;
        EXPECT(l[s] == sf_kv_cache_length(c, s), "slot %d: table length %d, cache says %lld", s, l[s],
               (long long)sf_kv_cache_length(c, s));
        for (int p = 0; p < d->max_pages_per_seq; p++) {
            const int32_t pg = t[s * d->max_pages_per_seq + p];
            if (p < need) {
                EXPECT(pg >= 0 && pg < d->num_pages && !held[pg], "slot %d page %d = %d (held twice or out of range)",
                       s, p, pg);
                if (pg >= 0 && pg < d->num_pages) held[pg] = 1;
                nheld++;
            } else {
                EXPECT(pg == -1, "slot %d entry %d past its pages is %d, want -1", s, p, pg);
            }
        }
    }
    EXPECT(nheld + sf_kv_cache_free_pages(c) == d->num_pages, "%lld held + %lld free != %lld pages",
           (long long)nheld, (long long)sf_kv_cache_free_pages(c), (long long)d->num_pages);
}

static void test_create_and_bookkeeping(sf_ctx *ctx) {
    sf_kv_cache *c = NULL;
    sf_kv_cache_desc d = small_desc();
    d.page_size = 3;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_ERR_INVALID_ARG && !c, "page size 3");
    d = small_desc(), d.dtype = SF_I32;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_ERR_DTYPE && !c, "dtype i32");
    d = small_desc(), d.num_pages = 0;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_ERR_INVALID_ARG, "0 pages");
    d = small_desc(), d.head_dim = 300;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_ERR_INVALID_ARG, "head dim 300");
    d = small_desc(), d.num_pages = INT32_MAX, d.nheads_kv = 1 << 30, d.head_dim = 256, d.page_size = 256;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_ERR_TOO_LARGE, "pools past SIZE_MAX: %s", sf_ctx_last_error(ctx));
    d = small_desc(), d.num_pages = (int64_t)1 << 30, d.nheads_kv = 1 << 20;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_ERR_OUT_OF_MEMORY && !c, "2^57-byte pools: %s",
           sf_ctx_last_error(ctx));
    EXPECT(sf_kv_cache_create(ctx, NULL, &c) == SF_ERR_NULL_POINTER, "NULL desc");
    d = small_desc();
    d.page_size = 0; /* the default, 16 */
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_OK, "page size 0: %s", sf_ctx_last_error(ctx));
    sf_tensor k, v;
    EXPECT(sf_kv_cache_pools(c, 0, &k, &v) == SF_OK && k.shape[1] == 16, "default page size");
    sf_kv_cache_destroy(c);
    sf_kv_cache_destroy(NULL);

    d = small_desc();
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_OK, "create: %s", sf_ctx_last_error(ctx));
    EXPECT(sf_kv_cache_pools(c, 1, &k, &v) == SF_OK && k.rank == 4 && k.shape[0] == 10 && k.shape[1] == 4 &&
               k.shape[2] == 2 && k.shape[3] == 8 && k.dtype == SF_F32 && v.data != k.data,
           "pools of layer 1");
    sf_tensor k0, v0;
    sf_kv_cache_pools(c, 0, &k0, &v0);
    EXPECT(k0.data != k.data, "layers have their own pools");
    EXPECT(sf_kv_cache_pools(c, 2, &k, &v) == SF_ERR_INDEX, "layer 2 of 2");
    EXPECT(sf_kv_cache_free_pages(c) == 10, "all free");
    EXPECT(sf_kv_cache_resize(c, 0, 9) == SF_OK && sf_kv_cache_free_pages(c) == 7, "slot 0: 9 tokens, 3 pages");
    EXPECT(sf_kv_cache_resize(c, 1, 16) == SF_OK && sf_kv_cache_free_pages(c) == 3, "slot 1: 16 tokens, 4 pages");
    check_pages(c, &d);
    EXPECT(sf_kv_cache_resize(c, 2, 17) == SF_ERR_INVALID_ARG && sf_kv_cache_length(c, 2) == 0,
           "17 tokens > 4 pages of 4");
    EXPECT(sf_kv_cache_resize(c, 2, 13) == SF_ERR_OUT_OF_MEMORY && sf_kv_cache_free_pages(c) == 3 &&
               sf_kv_cache_length(c, 2) == 0,
           "4 pages wanted, 3 free: nothing changes");
    EXPECT(sf_kv_cache_resize(c, 3, 1) == SF_ERR_INDEX && sf_kv_cache_resize(c, -1, 1) == SF_ERR_INDEX, "bad slots");
    EXPECT(sf_kv_cache_resize(c, 0, -1) == SF_ERR_INVALID_ARG, "negative length");
    EXPECT(sf_kv_cache_resize(c, 1, 5) == SF_OK && sf_kv_cache_free_pages(c) == 5, "slot 1 shrinks to 2 pages");
    EXPECT(sf_kv_cache_resize(c, 0, 0) == SF_OK && sf_kv_cache_free_pages(c) == 8, "slot 0 released");
    EXPECT(sf_kv_cache_resize(c, 2, 13) == SF_OK && sf_kv_cache_free_pages(c) == 4, "slot 2 now fits");
    check_pages(c, &d);
    EXPECT(sf_kv_cache_resize(c, 2, 13) == SF_OK && sf_kv_cache_free_pages(c) == 4, "same length: no change");
    EXPECT(sf_kv_cache_length(c, 2) == 13 && sf_kv_cache_length(c, 7) == -1, "lengths");
    sf_kv_cache_destroy(c);
}

/* Two sequences grow token by token (prompts of 5 and 11, then 6 decode
 * steps); after each step, attention through the cache equals attention
 * over the contiguous keys. */
/* An e4m3 code's value (OCP e4m3fn; NaN for 0x7f / 0xff). */
static double e4m3_value(uint8_t c) {
    const int e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    const double v = e == 0 ? ldexp((double)m, -9) : ldexp(8.0 + m, e - 10);
    return (c & 0x80) ? -v : v;
}

static void test_fp8_cache(sf_ctx *ctx) {
    sf_kv_cache *c = NULL;
    sf_kv_cache_desc d = small_desc();
    sf_tensor ks, vs;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_OK, "create f32");
    EXPECT_STATUS(sf_kv_cache_scales(c, 0, &ks, &vs), SF_ERR_INVALID_ARG, "f8e4m3 caches");
    sf_kv_cache_destroy(c);
    c = NULL;
    d.dtype = SF_F8E4M3;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_OK, "create fp8: %s", sf_ctx_last_error(ctx));
    if (!c) return;
    sf_tensor kc, vc;
    EXPECT(sf_kv_cache_pools(c, 1, &kc, &vc) == SF_OK && kc.dtype == SF_F8E4M3, "fp8 pools");
    EXPECT_STATUS(sf_kv_cache_scales(c, 2, &ks, &vs), SF_ERR_INDEX, "layer 2");
    EXPECT_STATUS(sf_kv_cache_scales(c, 1, NULL, &vs), SF_ERR_NULL_POINTER, NULL);
    EXPECT(sf_kv_cache_scales(c, 1, &ks, &vs) == SF_OK && ks.rank == 3 && ks.shape[0] == d.num_pages &&
               ks.shape[1] == d.page_size && ks.shape[2] == d.nheads_kv && ks.dtype == SF_F32 && vs.data != ks.data,
           "scale pools (num_pages, page_size, Hkv) f32");
    int zero = 1;
    for (int64_t i = 0; i < d.num_pages * d.page_size * d.nheads_kv; i++)
        zero &= ((const float *)ks.data)[i] == 0.0f && ((const float *)vs.data)[i] == 0.0f;
    EXPECT(zero, "scale pools are zero at creation");
    sf_kv_cache_destroy(c);
}

static void test_decode_loop(sf_ctx *ctx, int fp8) {
    enum { B = 2, H = 4, HKV = 2, D = 16, MAXL = 32 };
    sf_kv_cache_desc d;
    memset(&d, 0, sizeof d);
    d.num_pages = 20, d.page_size = 4, d.nheads_kv = HKV, d.head_dim = D, d.dtype = fp8 ? SF_F8E4M3 : SF_F32;
    d.num_layers = 1, d.max_seqs = B, d.max_pages_per_seq = MAXL / 4;
    sf_kv_cache *c = NULL;
    EXPECT(sf_kv_cache_create(ctx, &d, &c) == SF_OK, "create: %s", sf_ctx_last_error(ctx));
    if (!c) return;
    /* the slots grow in turn, so their pages interleave in the pools, and
     * the page sequence 0 gives back after its padded prompt step comes
     * back to it later */
    static float K[B][MAXL][HKV][D], V[B][MAXL][HKV][D];
    int len[B] = {0, 0};
    const int prompt[B] = {5, 11};
    sf_tensor kc, vc, ksc, vsc;
    memset(&ksc, 0, sizeof ksc), memset(&vsc, 0, sizeof vsc);
    sf_kv_cache_pools(c, 0, &kc, &vc);
    if (fp8) sf_kv_cache_scales(c, 0, &ksc, &vsc);
    double worst = 0.0, qerr = 0.0;
    for (int step = 0; step < 7; step++) {
        const int lnew = step == 0 ? 11 : 1; /* the prompt step pads sequence 0 */
        int cached[B];
        static float kn[B][11][HKV][D], vn[B][11][HKV][D], q[B][11][H][D], out[B][11][H][D];
        for (int b = 0; b < B; b++) {
            cached[b] = len[b];
            const int add = step == 0 ? prompt[b] : 1;
            for (int j = 0; j < lnew; j++)
                for (int h = 0; h < HKV; h++)
                    for (int e = 0; e < D; e++) kn[b][j][h][e] = urand(), vn[b][j][h][e] = urand();
            for (int j = 0; j < add; j++) memcpy(K[b][len[b] + j], kn[b][j], sizeof kn[b][j]),
                                          memcpy(V[b][len[b] + j], vn[b][j], sizeof vn[b][j]);
            EXPECT(sf_kv_cache_resize(c, b, len[b] + lnew) == SF_OK, "resize: %s", sf_ctx_last_error(ctx));
            len[b] += add;
        }
        sf_tensor bt, lens;
        EXPECT(sf_kv_cache_tables(c, &bt, &lens) == SF_OK, "tables");
        /* append at the old lengths (sequence 0 writes 11 rows in the first
         * step, 6 of them padding past its prompt, inside its own pages) */
        sf_kv_append_params ap;
        sf_kv_append_params_init(&ap);
        ap.k_cache = kc, ap.v_cache = vc, ap.block_table = bt, ap.k_scale = ksc, ap.v_scale = vsc;
        ap.k = sf_tensor_contiguous(kn, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){B, lnew, HKV, D});
        ap.v = sf_tensor_contiguous(vn, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){B, lnew, HKV, D});
        ap.k.stride[0] = ap.v.stride[0] = 11 * HKV * D;
        ap.cache_seqlens = sf_tensor_contiguous(cached, SF_I32, SF_DEVICE_CPU, 1, (int64_t[]){B});
        EXPECT(sf_kv_append(ctx, &ap) == SF_OK, "append: %s", sf_ctx_last_error(ctx));
        /* the true lengths (sequence 0's padding dropped), then one query a sequence */
        for (int b = 0; b < B; b++) sf_kv_cache_resize(c, b, len[b]);
        sf_kv_cache_tables(c, &bt, &lens);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int e = 0; e < D; e++) q[b][0][h][e] = urand();
        sf_attn_paged_params pp;
        sf_attn_paged_params_init(&pp);
        pp.q = sf_tensor_contiguous(q, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){B, 1, H, D});
        pp.q.stride[0] = 11 * H * D;
        pp.out = sf_tensor_contiguous(out, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){B, 1, H, D});
        pp.out.stride[0] = 11 * H * D;
        pp.k_cache = kc, pp.v_cache = vc, pp.block_table = bt, pp.seqlens = lens;
        pp.k_scale = ksc, pp.v_scale = vsc;
        pp.causal = 1;
        pp.backend = SF_BACKEND_CPU;
        EXPECT(sf_attn_paged(ctx, &pp) == SF_OK, "paged: %s", sf_ctx_last_error(ctx));
        /* the same through sf_attn_fwd on contiguous keys, sequence by
         * sequence; FP8: the keys the pools hold, dequantised */
        static float Kq[B][MAXL][HKV][D], Vq[B][MAXL][HKV][D];
        memcpy(Kq, K, sizeof K), memcpy(Vq, V, sizeof V);
        if (fp8) {
            const int32_t *tb = (const int32_t *)bt.data;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < len[b]; t++)
                    for (int h = 0; h < HKV; h++) {
                        const int64_t pg = tb[b * d.max_pages_per_seq + t / 4], r = (pg * 4 + t % 4) * HKV + h;
                        const double sk = ((const float *)ksc.data)[r], sv = ((const float *)vsc.data)[r];
                        double ak = 0, av = 0;
                        for (int e = 0; e < D; e++) ak = fmax(ak, fabs(K[b][t][h][e])), av = fmax(av, fabs(V[b][t][h][e]));
                        for (int e = 0; e < D; e++) {
                            Kq[b][t][h][e] = (float)(e4m3_value(((const uint8_t *)kc.data)[r * D + e]) * sk);
                            Vq[b][t][h][e] = (float)(e4m3_value(((const uint8_t *)vc.data)[r * D + e]) * sv);
                            /* e4m3 keeps 3 mantissa bits: within amax / 16 of the value */
                            qerr = worst_of(qerr, abs_diff(Kq[b][t][h][e], K[b][t][h][e]) / (ak > 0 ? ak : 1));
                            qerr = worst_of(qerr, abs_diff(Vq[b][t][h][e], V[b][t][h][e]) / (av > 0 ? av : 1));
                        }
                    }
        }
        for (int b = 0; b < B; b++) {
            static float want[H][D];
            sf_attn_fwd_params fp;
            sf_attn_fwd_params_init(&fp);
            fp.q = sf_tensor_contiguous(q[b][0], SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){1, 1, H, D});
            fp.k = sf_tensor_contiguous(Kq[b], SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){1, len[b], HKV, D});
            fp.v = sf_tensor_contiguous(Vq[b], SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){1, len[b], HKV, D});
            fp.out = sf_tensor_contiguous(want, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){1, 1, H, D});
            fp.causal = 1;
            fp.backend = SF_BACKEND_REF;
            EXPECT(sf_attn_fwd(ctx, &fp) == SF_OK, "fwd: %s", sf_ctx_last_error(ctx));
            for (int h = 0; h < H; h++)
                for (int e = 0; e < D; e++) {
                    const double err = fabs((double)out[b][0][h][e] - want[h][e]);
                    if (!(err <= worst)) worst = err;
                }
        }
    }
    EXPECT(worst < 1e-5, "paged decode through the %s cache vs contiguous attention: max error %.3e",
           fp8 ? "fp8" : "f32", worst);
    EXPECT(qerr <= 1.0 / 16, "fp8 cache: a key or value off its own by %.3g of its row's amax", qerr);
    printf("  decode loop through sf_kv_cache (%s): max |diff| %.2e over 7 steps (quantisation %.3g of amax)\n",
           fp8 ? "fp8" : "f32", worst, qerr);
    sf_kv_cache_destroy(c);
}

int main(void) {
    sf_ctx *ctx = NULL;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL: no CPU context\n");
        return 1;
    }
    test_create_and_bookkeeping(ctx);
    test_decode_loop(ctx, 0);
    test_fp8_cache(ctx);
    test_decode_loop(ctx, 1);
    sf_ctx_destroy(ctx);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
