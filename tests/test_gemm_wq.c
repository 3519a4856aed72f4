/* test_gemm_wq.c - the weight-only quantised product and its conversions
 * through the public API: hand-computed products, the quantiser's rounding,
 * GGUF repacking against a dequantiser written here from the GGUF block
 * definitions (hand-built and random blocks, bit-exact), the tiled layout
 * against its formula, and every validation error with the tensor it
 * names. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "split_test.h"

static int checks = 0, failures = 0;
static sf_ctx *ctx = NULL;

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}
static double unif(void) { return (double)rnd() / 4294967296.0; }

/* IEEE half (little-endian bits) to double, from the format's definition */
static double half_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}
/* a finite, normal half with exponent in [elo, ehi] (biased), random sign */
static uint16_t rand_half(int elo, int ehi) {
    const int e = elo + (int)(rnd() % (uint32_t)(ehi - elo + 1));
    return (uint16_t)(((rnd() & 1) << 15) | (e << 10) | (rnd() & 1023));
}

static sf_tensor t2(void *data, sf_dtype dt, int64_t r, int64_t c) {
    return sf_tensor_contiguous(data, dt, SF_DEVICE_CPU, 2, (int64_t[]){r, c});
}

/* ------------------------------------------------------------------ */
/* a product worked out by hand                                        */
/* ------------------------------------------------------------------ */

static void test_hand(void) {
    /* W 2 x 32, int4, one group: row 0 codes u = k % 16, scale 0.5 (w =
     * 0.5 (u - 8)); row 1 all codes 15, scale 2, min -3 with mins (w = 27) */
    uint8_t data[2 * 16];
    for (int i = 0; i < 16; i++) {
        data[i] = (uint8_t)(((2 * i) % 16) | (((2 * i + 1) % 16) << 4));
        data[16 + i] = 0xff;
    }
    float x[2 * 32], sc[2] = {0.5f, 2.0f}, mn[2] = {0.0f, -3.0f}, y[4], bias[2] = {1.0f, -1.0f};
    for (int k = 0; k < 32; k++) x[k] = 1.0f, x[32 + k] = (float)k;
    sf_gemm_wq_params p;
    sf_gemm_wq_params_init(&p);
    EXPECT(p.w.format == SF_QW_INT4 && p.w.group_size == 128 && p.backend == SF_BACKEND_AUTO,
           "params_init defaults");
    p.w.n = 2, p.w.k = 32, p.w.group_size = 32;
    p.w.data = t2(data, SF_U8, 2, 16);
    p.w.scales = t2(sc, SF_F32, 1, 2);
    p.w.mins = t2(mn, SF_F32, 1, 2);
    p.x = t2(x, SF_F32, 2, 32);
    p.y = t2(y, SF_F32, 2, 2);
    p.bias = sf_tensor_contiguous(bias, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){2});
    /* with mins row 0 is w = 0.5 u (min 0), row 1 w = 2 * 15 - 3 = 27 */
    double want[4];
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        p.backend = (sf_backend)be;
        EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
        want[0] = 0.5 * 2 * (120) + 1.0;  /* sum over k of k % 16 = 2 * 120 */
        want[1] = 27.0 * 32 - 1.0;
        double s2 = 0;
        for (int k = 0; k < 32; k++) s2 += k * (k % 16);
        want[2] = 0.5 * s2 + 1.0;
        want[3] = 27.0 * (31 * 32 / 2) - 1.0;
        for (int i = 0; i < 4; i++) EXPECT_NEAR(y[i], want[i], 1e-3, sf_backend_name((sf_backend)be));
    }
    /* symmetric: row 0 w = 0.5 (u - 8), row 1 w = 2 (15 - 8) = 14 */
    p.w.mins.data = NULL;
    p.backend = SF_BACKEND_CPU;
    EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
    EXPECT_NEAR(y[0], 0.5 * (240 - 8 * 32) + 1.0, 1e-4, "int4 symmetric y[0, 0]");
    EXPECT_NEAR(y[1], 14.0 * 32 - 1.0, 1e-4, "int4 symmetric y[0, 1]");
    /* int8: the same 32 bytes as signed codes of one row (N = 1, K = 32) */
    int8_t d8[32];
    for (int k = 0; k < 32; k++) d8[k] = (int8_t)(k * 9 - 128);
    p.w.format = SF_QW_INT8, p.w.n = 1;
    p.w.data = t2(d8, SF_I8, 1, 32);
    p.w.scales = t2(sc, SF_F32, 1, 1);
    p.y = t2(y, SF_F32, 2, 1);
    p.bias.data = NULL;
    double s8 = 0, s8k = 0;
    for (int k = 0; k < 32; k++) s8 += d8[k], s8k += (double)k * d8[k];
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        p.backend = (sf_backend)be;
        EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
        EXPECT_NEAR(y[0], 0.5 * s8, 1e-4, "int8 signed y[0]");
        EXPECT_NEAR(y[1], 0.5 * s8k, 1e-2, "int8 signed y[1]");
    }
    /* the same bytes as unsigned codes with a min: w = 0.5 u + 1 */
    p.w.data.dtype = SF_U8, p.w.mins = t2(bias, SF_F32, 1, 1); /* min 1 */
    EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
    double su = 0;
    for (int k = 0; k < 32; k++) su += (uint8_t)d8[k];
    EXPECT_NEAR(y[0], 0.5 * su + 32.0, 1e-3, "int8 unsigned with min y[0]");
    /* M = 0: a no-op */
    p.x.shape[0] = 0, p.y.shape[0] = 0;
    EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
}

/* ------------------------------------------------------------------ */
/* the quantiser                                                       */
/* ------------------------------------------------------------------ */

static void test_quantize(void) {
    enum { N = 5, K = 256 };
    static float w[N * K], back[N * K];
    static uint8_t data[N * K];
    static uint16_t sc16[(K / 32) * N], mn16[(K / 32) * N];
    static float sc32[(K / 32) * N], mn32[(K / 32) * N];
    for (int i = 0; i < N * K; i++) w[i] = (float)(2.0 * unif() - 1.0) * (1.0f + (float)(i / K));
    const sf_tensor wt = t2(w, SF_F32, N, K), bt = t2(back, SF_F32, N, K);
    for (int fmt = 0; fmt < 2; fmt++)
        for (int asym = 0; asym < 2; asym++)
            for (int g = 32; g <= 128; g *= 2)
                for (int sdt = 0; sdt < 2; sdt++) {
                    sf_qweight q;
                    memset(&q, 0, sizeof q);
                    q.format = fmt ? SF_QW_INT8 : SF_QW_INT4;
                    q.n = N, q.k = K, q.group_size = g;
                    const int64_t G = K / g;
                    q.data = t2(data, SF_U8, N, fmt ? K : K / 2);
                    q.scales = sdt ? t2(sc16, SF_F16, G, N) : t2(sc32, SF_F32, G, N);
                    if (asym) q.mins = sdt ? t2(mn16, SF_F16, G, N) : t2(mn32, SF_F32, G, N);
                    EXPECT_STATUS(sf_quantize_weights(ctx, &wt, &q), SF_OK, NULL);
                    EXPECT_STATUS(sf_dequantize_weights(ctx, &q, &bt), SF_OK, NULL);
                    /* every value within half a step of its group: s rounded
                     * up and m down, no code clamped */
                    double worst = 0;
                    for (int n = 0; n < N; n++)
                        for (int j = 0; j < G; j++) {
                            const double s = sdt ? half_value(sc16[j * N + n]) : sc32[j * N + n];
                            for (int i = 0; i < g; i++) {
                                const double e = fabs((double)back[n * K + j * g + i] - w[n * K + j * g + i]) / s;
                                worst = e > worst ? e : worst;
                            }
                        }
                    EXPECT(worst <= 0.5 + 1e-6,
                           "format %d asym %d group %d scales %s: error %.4f steps", fmt, asym, g,
                           sdt ? "f16" : "f32", worst);
                }
    /* exact rounding on one group: int4 symmetric, values -7 s .. 7 s and
     * halves (ties to even), s = 14 / 7 = 2 */
    float v[32];
    for (int i = 0; i < 32; i++) v[i] = (float)(i - 16) * 0.5f; /* -8 .. 7.5 */
    v[0] = -14.0f, v[31] = 14.0f;                               /* max |v| = 14 */
    sf_qweight q;
    memset(&q, 0, sizeof q);
    q.format = SF_QW_INT4, q.n = 1, q.k = 32, q.group_size = 32;
    q.data = t2(data, SF_U8, 1, 16);
    q.scales = t2(sc32, SF_F32, 1, 1);
    const sf_tensor vt = t2(v, SF_F32, 1, 32);
    EXPECT_STATUS(sf_quantize_weights(ctx, &vt, &q), SF_OK, NULL);
    EXPECT(sc32[0] == 2.0f, "symmetric int4 scale %g, want 2", (double)sc32[0]);
    for (int i = 1; i < 31; i++) {
        const int u = (i & 1) ? data[i / 2] >> 4 : data[i / 2] & 15;
        const int want = (int)nearbyint(v[i] / 2.0) + 8; /* -4 .. 4 in steps of 1/4 */
        EXPECT(u == want, "code %d of %g: %d, want %d", i, (double)v[i], u, want);
    }
    EXPECT((data[0] & 15) == 1 && (data[15] >> 4) == 15, "codes of -14 and 14: %d %d", data[0] & 15,
           data[15] >> 4);
    /* faults: a NaN names its row and group; an f16 scale that overflows */
    w[2 * K + 70] = NAN;
    memset(&q, 0, sizeof q);
    q.format = SF_QW_INT8, q.n = N, q.k = K, q.group_size = 64;
    q.data = t2(data, SF_U8, N, K);
    q.scales = t2(sc16, SF_F16, K / 64, N);
    EXPECT_STATUS(sf_quantize_weights(ctx, &wt, &q), SF_ERR_INVALID_ARG, "row 2, group 1 (columns 64..127) has a weight that is not finite");
    w[2 * K + 70] = 1e7f;
    EXPECT_STATUS(sf_quantize_weights(ctx, &wt, &q), SF_ERR_INVALID_ARG, "a scale past the range");
    w[2 * K + 70] = 0.5f;
    q.data = t2(w, SF_U8, N, K); /* the output over the input */
    EXPECT_STATUS(sf_quantize_weights(ctx, &wt, &q), SF_ERR_INVALID_ARG, "q.data overlaps input w");
}

/* ------------------------------------------------------------------ */
/* GGUF repacking                                                      */
/* ------------------------------------------------------------------ */

/* The value of element e of a row from its GGUF blocks (the definitions of
 * seqfuse.h / ggml's block_q4_0, block_q4_1, block_q8_0). */
static double gguf_value(sf_gguf_type type, const uint8_t *row, int64_t e) {
    const int bs = type == SF_GGUF_Q4_0 ? 18 : type == SF_GGUF_Q4_1 ? 20 : 34;
    const uint8_t *b = row + (e / 32) * bs;
    const int j = (int)(e % 32);
    const double d = half_value((uint16_t)(b[0] | (b[1] << 8)));
    if (type == SF_GGUF_Q8_0) return d * (int8_t)b[2 + j];
    const uint8_t *qs = b + (type == SF_GGUF_Q4_1 ? 4 : 2);
    const int u = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    if (type == SF_GGUF_Q4_0) return d * (u - 8);
    return d * u + half_value((uint16_t)(b[2] | (b[3] << 8)));
}

static void test_repack(void) {
    enum { N = 3, K = 96 };
    static uint8_t blocks[N * (K / 32) * 34], data[N * K];
    static uint16_t sc16[(K / 32) * N], mn16[(K / 32) * N];
    static float sc32[(K / 32) * N], mn32[(K / 32) * N], w[N * K], x[2 * K], y[2 * N];
    const sf_gguf_type types[3] = {SF_GGUF_Q4_0, SF_GGUF_Q4_1, SF_GGUF_Q8_0};
    for (int ti = 0; ti < 3; ti++)
        for (int sdt = 0; sdt < 2; sdt++)
            for (int hand = 1; hand >= 0; hand--) {
                const sf_gguf_type type = types[ti];
                const int bs = type == SF_GGUF_Q4_0 ? 18 : type == SF_GGUF_Q4_1 ? 20 : 34;
                const int nb = N * (K / 32);
                for (int b = 0; b < nb; b++) {
                    uint8_t *blk = blocks + b * bs;
                    /* hand-built: d = 0.5 (0x3800), m = -1 (0xbc00), codes
                     * counting up through the block; else random everything */
                    const uint16_t d = hand ? 0x3800 : rand_half(5, 20), m = hand ? 0xbc00 : rand_half(5, 22);
                    blk[0] = (uint8_t)d, blk[1] = (uint8_t)(d >> 8);
                    int o = 2;
                    if (type == SF_GGUF_Q4_1) blk[2] = (uint8_t)m, blk[3] = (uint8_t)(m >> 8), o = 4;
                    for (int i = 0; i < bs - o; i++)
                        blk[o + i] = hand ? (uint8_t)(type == SF_GGUF_Q8_0 ? i * 8 - 128 : (i & 15) | ((15 - (i & 15)) << 4))
                                          : (uint8_t)rnd();
                }
                sf_qweight q;
                memset(&q, 0, sizeof q);
                q.format = type == SF_GGUF_Q8_0 ? SF_QW_INT8 : SF_QW_INT4;
                q.n = N, q.k = K, q.group_size = 32;
                q.data = t2(data, type == SF_GGUF_Q8_0 ? SF_I8 : SF_U8, N, type == SF_GGUF_Q8_0 ? K : K / 2);
                q.scales = sdt ? t2(sc16, SF_F16, K / 32, N) : t2(sc32, SF_F32, K / 32, N);
                if (type == SF_GGUF_Q4_1) q.mins = sdt ? t2(mn16, SF_F16, K / 32, N) : t2(mn32, SF_F32, K / 32, N);
                EXPECT_STATUS(sf_repack_gguf(ctx, type, blocks, (size_t)nb * bs, &q), SF_OK, NULL);
                const sf_tensor wt = t2(w, SF_F32, N, K);
                EXPECT_STATUS(sf_dequantize_weights(ctx, &q, &wt), SF_OK, NULL);
                int bad = 0;
                for (int n = 0; n < N; n++)
                    for (int k = 0; k < K; k++) {
                        const double want = gguf_value(type, blocks + (size_t)n * (K / 32) * bs, k);
                        if (w[n * K + k] != (float)want && bad++ < 3)
                            printf("  %s %s: w[%d, %d] = %.9g, GGUF %.9g\n", hand ? "hand" : "random",
                                   sdt ? "f16" : "f32", n, k, (double)w[n * K + k], want);
                    }
                EXPECT(bad == 0, "repack type %d scales %s %s blocks: %d values differ", (int)type,
                       sdt ? "f16" : "f32", hand ? "hand-built" : "random", bad);
                if (hand && type == SF_GGUF_Q4_0)
                    EXPECT(w[0] == -4.0f && w[1] == -3.5f && w[16] == 3.5f && w[17] == 3.0f,
                           "Q4_0 hand block: %g %g %g %g", (double)w[0], (double)w[1], (double)w[16], (double)w[17]);
                /* the product over the repacked weights against the GGUF values */
                for (int i = 0; i < 2 * K; i++) x[i] = (float)(unif() - 0.5);
                sf_gemm_wq_params p;
                sf_gemm_wq_params_init(&p);
                p.w = q, p.x = t2(x, SF_F32, 2, K), p.y = t2(y, SF_F32, 2, N);
                EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
                for (int i = 0; i < 2; i++)
                    for (int n = 0; n < N; n++) {
                        double ref = 0, mag = 0;
                        for (int k = 0; k < K; k++) {
                            const double v = gguf_value(type, blocks + (size_t)n * (K / 32) * bs, k);
                            ref += x[i * K + k] * v, mag += fabs(x[i * K + k] * v);
                        }
                        EXPECT_NEAR(y[i * N + n], ref, 1e-6 * mag + 1e-30, "product over repacked weights");
                    }
            }
    /* faults */
    sf_qweight q;
    memset(&q, 0, sizeof q);
    q.format = SF_QW_INT4, q.n = N, q.k = K, q.group_size = 32;
    q.data = t2(data, SF_U8, N, K / 2);
    q.scales = t2(sc16, SF_F16, K / 32, N);
    const size_t b40 = (size_t)N * (K / 32) * 18;
    EXPECT_STATUS(sf_repack_gguf(ctx, SF_GGUF_Q4_0, blocks, b40 - 1, &q), SF_ERR_SHAPE, "expected 162");
    EXPECT_STATUS(sf_repack_gguf(ctx, (sf_gguf_type)6, blocks, b40, &q), SF_ERR_INVALID_ARG, "GGUF type 6");
    EXPECT_STATUS(sf_repack_gguf(ctx, SF_GGUF_Q4_0, NULL, b40, &q), SF_ERR_NULL_POINTER, "blocks is NULL");
    EXPECT_STATUS(sf_repack_gguf(ctx, SF_GGUF_Q4_1, blocks, (size_t)N * (K / 32) * 20, &q), SF_ERR_INVALID_ARG, "give q.mins");
    EXPECT_STATUS(sf_repack_gguf(ctx, SF_GGUF_Q8_0, blocks, (size_t)N * (K / 32) * 34, &q), SF_ERR_INVALID_ARG, "SF_QW_INT8");
    q.scales.dtype = SF_BF16;
    EXPECT_STATUS(sf_repack_gguf(ctx, SF_GGUF_Q4_0, blocks, b40, &q), SF_ERR_DTYPE, "bf16");
    q.scales.dtype = SF_F16, q.group_size = 64, q.k = 128, q.data.shape[1] = 64, q.data.stride[0] = 64;
    q.scales.shape[0] = 2;
    EXPECT_STATUS(sf_repack_gguf(ctx, SF_GGUF_Q4_0, blocks, b40, &q), SF_ERR_INVALID_ARG, "group_size 32");
    q.group_size = 32, q.k = K, q.data = t2(data, SF_U8, N, K / 2), q.scales.shape[0] = K / 32;
    q.data.data = blocks + 1; /* the output inside the blocks */
    EXPECT_STATUS(sf_repack_gguf(ctx, SF_GGUF_Q4_0, blocks, b40, &q), SF_ERR_INVALID_ARG, "q.data overlaps input blocks");
}

/* ------------------------------------------------------------------ */
/* validation                                                          */
/* ------------------------------------------------------------------ */

enum { M_ = 3, N_ = 5, K_ = 128 };
static uint16_t vx[N_ * K_ + 64], vy[M_ * N_ + 64], vs[4 * N_], vm[4 * N_], vb[N_];
static uint8_t vd[N_ * K_];

/* a valid f16 call: int4, group 32 */
static void valid(sf_gemm_wq_params *p) {
    sf_gemm_wq_params_init(p);
    p->w.format = SF_QW_INT4, p->w.n = N_, p->w.k = K_, p->w.group_size = 32;
    p->w.data = t2(vd, SF_U8, N_, K_ / 2);
    p->w.scales = t2(vs, SF_F16, K_ / 32, N_);
    p->w.mins = t2(vm, SF_F16, K_ / 32, N_);
    p->x = t2(vx, SF_F16, M_, K_);
    p->y = t2(vy, SF_F16, M_, N_);
    p->bias = sf_tensor_contiguous(vb, SF_F16, SF_DEVICE_CPU, 1, (int64_t[]){N_});
}

#define BREAK(stmt, want, needle)                                   \
    do {                                                            \
        valid(&p);                                                  \
        stmt;                                                       \
        EXPECT_STATUS(sf_gemm_wq(ctx, &p), want, needle);           \
    } while (0)

static void test_errors(void) {
    for (int i = 0; i < 4 * N_; i++) vs[i] = 0x3c00, vm[i] = 0; /* 1.0, 0 */
    sf_gemm_wq_params p;
    valid(&p);
    EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
    EXPECT(sf_gemm_wq(NULL, &p) == SF_ERR_NULL_POINTER, "NULL context");
    EXPECT_STATUS(sf_gemm_wq(ctx, NULL), SF_ERR_NULL_POINTER, "params is NULL");
    BREAK(p.w.format = (sf_qw_format)2, SF_ERR_INVALID_ARG, "w.format 2");
    BREAK(p.w.group_size = 48, SF_ERR_INVALID_ARG, "w.group_size 48 is not 32, 64 or 128");
    BREAK(p.w.group_size = 256, SF_ERR_INVALID_ARG, "group_size 256");
    BREAK((p.w.k = 96, p.w.group_size = 64), SF_ERR_SHAPE, "w.k = 96 is not a multiple of group_size 64");
    BREAK(p.w.n = 0, SF_ERR_SHAPE, "w.n = 0");
    BREAK(p.w.k = (int64_t)1 << 32, SF_ERR_TOO_LARGE, "int32");
    BREAK(p.w.data.data = NULL, SF_ERR_NULL_POINTER, "w.data is required");
    BREAK(p.w.scales.data = NULL, SF_ERR_NULL_POINTER, "w.scales is required");
    BREAK(p.x.data = NULL, SF_ERR_NULL_POINTER, "x is required");
    BREAK(p.y.data = NULL, SF_ERR_NULL_POINTER, "y is required");
    BREAK(p.w.data.shape[1] = K_, SF_ERR_SHAPE, "w.data has shape (5, 128), expected (5, 64)");
    BREAK(p.w.format = SF_QW_INT8, SF_ERR_SHAPE, "w.data has shape (5, 64), expected (5, 128)");
    BREAK(p.w.scales.shape[0] = 2, SF_ERR_SHAPE, "w.scales has shape (2, 5), expected (4, 5)");
    BREAK(p.w.mins.shape[1] = 4, SF_ERR_SHAPE, "w.mins has shape");
    BREAK(p.x.shape[1] = 64, SF_ERR_SHAPE, "x has shape (3, 64), expected (*, 128)");
    BREAK(p.y.shape[0] = 4, SF_ERR_SHAPE, "y has shape (4, 5), expected (3, 5)");
    BREAK(p.bias.shape[0] = 4, SF_ERR_SHAPE, "bias has shape");
    BREAK(p.x.rank = 3, SF_ERR_SHAPE, "x has rank 3");
    BREAK(p.w.data.dtype = SF_F16, SF_ERR_DTYPE, "w.data has dtype f16, expected u8");
    BREAK(p.w.data.dtype = SF_I8, SF_ERR_DTYPE, "w.data has dtype i8, expected u8"); /* int4: u8 only */
    BREAK((p.w.format = SF_QW_INT8, p.w.data.shape[1] = K_, p.w.data.stride[0] = K_, p.w.data.dtype = SF_I8),
          SF_ERR_DTYPE, "w.data has dtype i8, expected u8"); /* int8 with mins: unsigned codes */
    BREAK((p.w.format = SF_QW_INT8, p.w.data.shape[1] = K_, p.w.data.stride[0] = K_, p.w.data.dtype = SF_I8,
           p.w.mins.data = NULL), SF_OK, NULL);
    BREAK(p.w.scales.dtype = SF_I32, SF_ERR_DTYPE, "w.scales has dtype i32, expected f32, f16 or bf16");
    BREAK(p.w.mins.dtype = SF_BF16, SF_ERR_DTYPE, "w.mins has dtype bf16, expected f16");
    BREAK(p.x.dtype = SF_I32, SF_ERR_DTYPE, "x has dtype i32");
    BREAK(p.y.dtype = SF_BF16, SF_ERR_DTYPE, "y has dtype bf16, expected f16");
    BREAK(p.bias.dtype = SF_BF16, SF_ERR_DTYPE, "bias has dtype bf16, expected f16 (the dtype of x) or f32");
    BREAK(p.w.data.stride[0] = 65, SF_ERR_STRIDE, "w.data must be contiguous");
    BREAK(p.w.scales.stride[1] = 2, SF_ERR_STRIDE, "w.scales needs a unit innermost stride");
    BREAK(p.w.mins.stride[0] = 6, SF_ERR_STRIDE, "w.mins must be contiguous");
    BREAK(p.x.stride[1] = 2, SF_ERR_STRIDE, "x needs a unit innermost stride");
    BREAK(p.x.stride[0] = 136, SF_OK, NULL); /* padded rows of x: fine */
    BREAK(p.y.stride[0] = 8, SF_OK, NULL);   /* and of y */
    BREAK(p.y.stride[0] = 3, SF_ERR_STRIDE, "output y has overlapping elements");
    BREAK(p.bias.stride[0] = 0, SF_OK, NULL); /* a broadcast bias is an input */
    BREAK(p.y.data = vx + 8, SF_ERR_INVALID_ARG, "output y overlaps input x");
    BREAK((p.y = t2(vd, SF_F16, M_, N_)), SF_ERR_INVALID_ARG, "output y overlaps input w.data");
    BREAK((p.y = t2(vs, SF_F16, 1, N_)), SF_ERR_SHAPE, "y has shape (1, 5)");
    BREAK((p.x.shape[0] = 1, p.y = t2(vm, SF_F16, 1, N_)), SF_ERR_INVALID_ARG, "output y overlaps input w.mins");
    BREAK(p.x.device = 0, SF_ERR_DEVICE, "x is on CUDA device 0 but the context is on the CPU");
    BREAK(p.backend = SF_BACKEND_CUDA, SF_ERR_UNSUPPORTED, "the cuda backend needs a CUDA context");
    BREAK(p.backend = (sf_backend)7, SF_ERR_INVALID_ARG, "unknown backend 7");
    BREAK(p.w.data.data = vd + 1, SF_OK, NULL); /* bytes: any address on the host */
    /* dequantise: the output's checks */
    valid(&p);
    sf_tensor w = t2(vx, SF_BF16, N_, K_);
    EXPECT_STATUS(sf_dequantize_weights(ctx, &p.w, &w), SF_OK, NULL);
    w.shape[1] = 64;
    EXPECT_STATUS(sf_dequantize_weights(ctx, &p.w, &w), SF_ERR_SHAPE, "w has shape (5, 64), expected (5, 128)");
    w = t2(vd, SF_F16, N_, K_ / 4);
    w.shape[1] = K_;
    EXPECT_STATUS(sf_dequantize_weights(ctx, &p.w, &w), SF_ERR_INVALID_ARG, "output w overlaps input q.data");
    EXPECT_STATUS(sf_dequantize_weights(ctx, NULL, &w), SF_ERR_NULL_POINTER, "q is NULL");
    EXPECT_STATUS(sf_quantize_weights(ctx, NULL, &p.w), SF_ERR_NULL_POINTER, "w is NULL");
    EXPECT(strcmp(sf_dtype_name(SF_U8), "u8") == 0 && sf_dtype_size(SF_I8) == 1, "u8 / i8 names and sizes");
}

/* ------------------------------------------------------------------ */
/* SF_QW_TILED: sf_tile_qweight against the layout's formula, written  */
/* here from seqfuse.h, and every reader of the tiled codes            */
/* ------------------------------------------------------------------ */

static int64_t tiled_at(int64_t n, int64_t b, int64_t bp) { /* seqfuse.h's offset */
    return (((n / 128) * (bp / 64) + b / 64) * 8 + (n / 16) % 8) * 1024 + (n % 16) * 64 + b % 64;
}

static void test_tiled(void) {
    /* N past a 128-row band, K whose row bytes are not a multiple of 64 */
    enum { N = 133, K = 96 * 3 };
    static uint8_t rows[N * K], til[256 * 320], back_r[N * K];
    static float sc[(K / 32) * N], mn[(K / 32) * N], dq_r[N * K], dq_t[N * K];
    static float x[3 * K], y_r[3 * N], y_t[3 * N];
    for (int i = 0; i < N * K; i++) rows[i] = (uint8_t)(rnd() >> 24);
    for (int i = 0; i < (K / 32) * N; i++) sc[i] = (float)(0.01 + 0.02 * unif()), mn[i] = (float)(unif() - 0.5);
    for (int i = 0; i < 3 * K; i++) x[i] = (float)(2.0 * unif() - 1.0);
    for (int fmt = 0; fmt < 2; fmt++) {
        const int int4 = fmt == 0;
        const int64_t rb = int4 ? K / 2 : K, bp = (rb + 63) / 64 * 64, np = 256;
        sf_qweight q;
        memset(&q, 0, sizeof q);
        q.format = int4 ? SF_QW_INT4 : SF_QW_INT8;
        q.n = N, q.k = K, q.group_size = 32;
        q.data = t2(rows, SF_U8, N, rb);
        q.scales = t2(sc, SF_F32, K / 32, N);
        q.mins = t2(mn, SF_F32, K / 32, N);
        memset(til, 0xa5, sizeof til);
        const sf_tensor tt = t2(til, SF_U8, np, bp);
        EXPECT_STATUS(sf_tile_qweight(ctx, &q, &tt), SF_OK, NULL);
        /* every element's code where the formula puts it, padding zero */
        int bad = 0;
        for (int64_t n = 0; n < np; n++)
            for (int64_t k = 0; k < bp * (int4 ? 2 : 1); k++) {
                const int64_t unit = k / 8 * 8;
                int e = -1; /* the element in slot k % 8 of its unit */
                const int slot = (int)(k % 8);
                e = slot < 4 ? 2 * slot : 2 * (slot - 4) + 1;
                const int64_t b = int4 ? (unit + slot) / 2 : unit + slot;
                const int got = int4 ? (til[tiled_at(n, b, bp)] >> (4 * (slot & 1))) & 15 : til[tiled_at(n, b, bp)];
                int want = 0;
                if (n < N && unit + e < K)
                    want = int4 ? (rows[n * rb + (unit + e) / 2] >> (4 * ((unit + e) & 1))) & 15
                                : rows[n * rb + unit + e];
                bad += got != want;
            }
        EXPECT(bad == 0, "int%d: %d tiled codes away from the layout's formula", int4 ? 4 : 8, bad);
        /* the readers: dequantisation and the reference product equal the rows' */
        sf_qweight qt = q;
        qt.data = tt, qt.layout = SF_QW_TILED;
        const sf_tensor wr = t2(dq_r, SF_F32, N, K), wt = t2(dq_t, SF_F32, N, K);
        EXPECT_STATUS(sf_dequantize_weights(ctx, &q, &wr), SF_OK, NULL);
        EXPECT_STATUS(sf_dequantize_weights(ctx, &qt, &wt), SF_OK, NULL);
        EXPECT(!memcmp(dq_r, dq_t, sizeof dq_r), "int%d: tiled dequantisation differs from the rows'", int4 ? 4 : 8);
        sf_gemm_wq_params p;
        sf_gemm_wq_params_init(&p);
        p.x = t2(x, SF_F32, 3, K);
        p.w = q;
        p.y = t2(y_r, SF_F32, 3, N);
        p.backend = SF_BACKEND_REF;
        EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
        p.w = qt, p.y = t2(y_t, SF_F32, 3, N);
        EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_OK, NULL);
        EXPECT(!memcmp(y_r, y_t, sizeof y_r), "int%d: the reference product of tiled codes differs", int4 ? 4 : 8);
        p.backend = SF_BACKEND_CPU;
        EXPECT_STATUS(sf_gemm_wq(ctx, &p), SF_ERR_UNSUPPORTED, "the CPU backend reads w.layout SF_QW_ROWS");
        /* the rows back out of the tiles by the definition (round trip) */
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                const int64_t unit = k / 8 * 8, e = k % 8, slot = (e & 1) * 4 + e / 2;
                const int64_t b = int4 ? (unit + slot) / 2 : unit + slot;
                const int c = int4 ? (til[tiled_at(n, b, bp)] >> (4 * (slot & 1))) & 15 : til[tiled_at(n, b, bp)];
                if (int4)
                    back_r[n * rb + k / 2] = (uint8_t)((k & 1) ? (back_r[n * rb + k / 2] & 15) | (c << 4) : c);
                else
                    back_r[n * rb + k] = (uint8_t)c;
            }
        EXPECT(!memcmp(back_r, rows, (size_t)(N * rb)), "int%d: the tiles do not give the rows back", int4 ? 4 : 8);

        /* errors */
        EXPECT_STATUS(sf_tile_qweight(ctx, &qt, &tt), SF_ERR_INVALID_ARG, "q.layout must be SF_QW_ROWS");
        const sf_tensor small = t2(til, SF_U8, N, bp);
        EXPECT_STATUS(sf_tile_qweight(ctx, &q, &small), SF_ERR_SHAPE, "tiled");
        const sf_tensor wrongdt = t2(til, SF_I8, np, bp); /* not q.data's u8 */
        EXPECT_STATUS(sf_tile_qweight(ctx, &q, &wrongdt), SF_ERR_DTYPE, "tiled");
        const sf_tensor onto = t2(rows, SF_U8, np, bp); /* the codes' own memory */
        EXPECT_STATUS(sf_tile_qweight(ctx, &q, &onto), SF_ERR_INVALID_ARG, "overlap");
        EXPECT_STATUS(sf_tile_qweight(ctx, NULL, &tt), SF_ERR_NULL_POINTER, "q is NULL");
        EXPECT_STATUS(sf_tile_qweight(ctx, &q, NULL), SF_ERR_NULL_POINTER, "tiled is NULL");
        sf_qweight qbad = qt;
        qbad.data = t2(til, SF_U8, N, rb); /* a tiled weight with the rows' shape */
        EXPECT_STATUS(sf_dequantize_weights(ctx, &qbad, &wt), SF_ERR_SHAPE, "q.data");
        qbad = q, qbad.layout = (sf_qw_layout)2;
        EXPECT_STATUS(sf_dequantize_weights(ctx, &qbad, &wt), SF_ERR_INVALID_ARG, "q.layout 2");
        EXPECT_STATUS(sf_quantize_weights(ctx, &wr, &qt), SF_ERR_UNSUPPORTED, "sf_tile_qweight");
    }
}

/* On a CUDA context g: the conversions are host-only, and the CUDA
 * backend's own requirements. */
static void test_cuda_errors(sf_ctx *g) {
    for (int i = 0; i < 4 * N_; i++) vs[i] = 0x3c00, vm[i] = 0; /* 1.0, 0 */
    sf_gemm_wq_params p;
    valid(&p);
    sf_tensor w = t2(vx, SF_F16, N_, K_);
    EXPECT(sf_quantize_weights(g, &w, &p.w) == SF_ERR_UNSUPPORTED, "quantize on a CUDA context");
    EXPECT(strstr(sf_ctx_last_error(g), "runs on the host") != NULL, "detail: %s", sf_ctx_last_error(g));
    void *dev = NULL;
    EXPECT(sf_malloc(g, &dev, 1 << 16) == SF_OK, "device allocation: %s", sf_ctx_last_error(g));
    if (dev) {
        sf_ctx *keep = ctx;
        ctx = g; /* EXPECT_STATUS reads ctx's detail */
        unsigned char *b = (unsigned char *)dev;
        sf_gemm_wq_params d;
#define DEV(stmt, want, needle)                                                  \
    do {                                                                         \
        valid(&d);                                                               \
        d.w.data.data = b, d.w.scales.data = b + 4096, d.w.mins.data = b + 8192; \
        d.x.data = b + 12288, d.y.data = b + 20480, d.bias.data = b + 24576;     \
        d.w.data.device = d.w.scales.device = d.w.mins.device = d.x.device = 0;  \
        d.y.device = d.bias.device = 0;                                          \
        stmt;                                                                    \
        EXPECT_STATUS(sf_gemm_wq(g, &d), want, needle);                          \
    } while (0)
        DEV((void)0, SF_OK, NULL);
        DEV((d.x.dtype = d.y.dtype = d.bias.dtype = d.w.scales.dtype = d.w.mins.dtype = SF_F32),
            SF_ERR_UNSUPPORTED, "takes f16 or bf16 x, not f32");
        DEV((d.w.scales.dtype = d.w.mins.dtype = SF_BF16), SF_ERR_UNSUPPORTED, "w.scales (and w.mins) in x's dtype f16");
        DEV(d.w.data.data = b + 1, SF_ERR_ALIGNMENT, "w.data 16-byte aligned");
        DEV((d.x.stride[0] = 132, d.x.shape[0] = d.y.shape[0] = 2), SF_ERR_UNSUPPORTED, "row stride a multiple of 8");
        DEV((d.x.data = b + 12290, d.x.shape[0] = 1, d.y.shape[0] = 1), SF_ERR_UNSUPPORTED, "16-byte aligned");
        DEV(d.backend = SF_BACKEND_CPU, SF_ERR_UNSUPPORTED, "works on host memory");
#undef DEV
        EXPECT(sf_ctx_synchronize(g) == SF_OK, "the launches completed: %s", sf_ctx_last_error(g));
        ctx = keep;
        sf_free(g, dev);
    }
}

int main(int argc, char **argv) {
    const int cuda = split_cuda_part(argc, argv);
    if (cuda < 0) return 2;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL cannot create a CPU context\n");
        return 1;
    }
    if (cuda) {
        sf_ctx *g = NULL;
        const int rc = split_gpu_ctx(&g, "test_gemm_wq");
        if (rc) {
            sf_ctx_destroy(ctx);
            return rc;
        }
        test_cuda_errors(g);
        sf_ctx_destroy(g);
    } else {
        test_hand();
        test_quantize();
        test_repack();
        test_errors();
        test_tiled();
    }
    sf_ctx_destroy(ctx);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
