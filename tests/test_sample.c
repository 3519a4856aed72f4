/* test_sample.c - sf_embed and sf_sample: hand-computed cases of the rules
 * (greedy ties, NaN, the penalty, seen updates, one RNG draw per sampled
 * row), every backend against the reference token for token on random
 * logits (V from 1 to 151936, permuted slots, every setting combination,
 * f32/f16/bf16), a chi-square test of the reference's draws against the
 * probabilities computed here, and every validation error.  The CUDA part
 * runs when a device is present and says SKIP otherwise.
 * Seed: SF_TEST_SEED, else the clock (printed).  SF_SAMPLE_QUICK=1: small
 * cases only (the compute-sanitizer runs).  Public API only. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expect.h"
#include "split_test.h"

static int failures, checks;
static uint64_t rs = 1;

static uint64_t xr(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return rs;
}
static double ur(void) { return (double)(xr() >> 11) * 0x1.0p-53; }

/* ---- f16 / bf16 encodings (round to nearest even) ---- */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* normal and infinite values only (the tests stay in that range) */
static uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7e00u;
    if (a >= 0x477ff000u) return sign | 0x7c00u;
    if (a < 0x38800000u) return sign; /* flush: the tests keep |v| >= 2^-14 or 0 */
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
static float from_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t bits;
    if (e == 0) bits = sign; /* no subnormals in the tests */
    else if (e == 0x1f) bits = sign | 0x7f800000u | (m << 13);
    else bits = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static void st(void *p, sf_dtype dt, int64_t i, float v) {
    if (dt == SF_F32) ((float *)p)[i] = v;
    else if (dt == SF_F16) ((uint16_t *)p)[i] = to_f16(v);
    else ((uint16_t *)p)[i] = to_bf16(v);
}
static float ld(const void *p, sf_dtype dt, int64_t i) {
    if (dt == SF_F32) return ((const float *)p)[i];
    if (dt == SF_F16) return from_f16(((const uint16_t *)p)[i]);
    return from_bf16(((const uint16_t *)p)[i]);
}

static sf_tensor t1(void *d, sf_dtype dt, int dev, int64_t a) {
    return sf_tensor_contiguous(d, dt, dev, 1, (int64_t[]){a});
}
static sf_tensor t2(void *d, sf_dtype dt, int dev, int64_t a, int64_t b) {
    return sf_tensor_contiguous(d, dt, dev, 2, (int64_t[]){a, b});
}

static const sf_dtype fdt[3] = {SF_F32, SF_F16, SF_BF16};
static const char *const fdt_name[3] = {"f32", "f16", "bf16"};

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FAIL host out of memory\n");
        exit(1);
    }
    return p;
}

/* A device copy of a host buffer (NULL when gpu is NULL: the host one). */
static void *dev_copy(sf_ctx *gpu, const void *h, size_t bytes) {
    void *d = NULL;
    if (sf_malloc(gpu, &d, bytes ? bytes : 1) != SF_OK || sf_memcpy(gpu, d, h, bytes) != SF_OK) {
        printf("FAIL device allocation or copy of %zu bytes: %s\n", bytes, sf_ctx_last_error(gpu));
        exit(1);
    }
    return d;
}
static void dev_back(sf_ctx *gpu, void *h, void *d, size_t bytes) {
    if (sf_memcpy(gpu, h, d, bytes) != SF_OK) {
        printf("FAIL device copy back: %s\n", sf_ctx_last_error(gpu));
        exit(1);
    }
    sf_free(gpu, d);
}

/* ================================ sf_embed ================================ */

/* Every dtype pair on the context's device, with backend be (host) or the
 * CUDA one (gpu != NULL); bad ids are zero rows on a GPU. */
static void embed_case(sf_ctx *ctx, sf_ctx *gpu, sf_backend be, int64_t V, int64_t D, int64_t n) {
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            const size_t tb = (size_t)(V * D) * 4, ob = (size_t)(n * D) * 4;
            float *tf = (float *)xmalloc((size_t)(V * D) * 4);
            void *tab = xmalloc(tb), *out = xmalloc(ob);
            int32_t *ids = (int32_t *)xmalloc((size_t)n * 4);
            for (int64_t i = 0; i < V * D; i++) tf[i] = (float)(ur() * 8.0 - 4.0), st(tab, fdt[a], i, tf[i]);
            for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(xr() % (uint64_t)V);
            if (gpu && n > 2) ids[1] = -3, ids[2] = (int32_t)V; /* zero rows on a GPU */
            for (int64_t i = 0; i < n * D; i++) st(out, fdt[b], i, NAN);
            sf_status s;
            if (gpu) {
                void *dt = dev_copy(gpu, tab, tb), *di = dev_copy(gpu, ids, (size_t)n * 4), *dout = dev_copy(gpu, out, ob);
                const sf_tensor T = t2(dt, fdt[a], 0, V, D), I = t1(di, SF_I32, 0, n), O = t2(dout, fdt[b], 0, n, D);
                s = sf_embed(gpu, &T, &I, &O);
                if (s == SF_OK) s = sf_ctx_synchronize(gpu);
                sf_free(gpu, dt), sf_free(gpu, di);
                dev_back(gpu, out, dout, ob);
            } else {
                sf_ctx_set_backend(ctx, be);
                const sf_tensor T = t2(tab, fdt[a], -1, V, D), I = t1(ids, SF_I32, -1, n), O = t2(out, fdt[b], -1, n, D);
                s = sf_embed(ctx, &T, &I, &O);
            }
            EXPECT(s == SF_OK, "sf_embed %s -> %s V %lld D %lld: %s", fdt_name[a], fdt_name[b], (long long)V,
                   (long long)D, sf_ctx_last_error(gpu ? gpu : ctx));
            int bad = 0;
            for (int64_t i = 0; i < n && !bad; i++)
                for (int64_t j = 0; j < D && !bad; j++) {
                    const int ok = ids[i] >= 0 && ids[i] < V;
                    const float src = ok ? ld(tab, fdt[a], ids[i] * D + j) : 0.0f;
                    float want = src;
                    if (fdt[b] == SF_F16) want = from_f16(to_f16(src));
                    if (fdt[b] == SF_BF16) want = from_bf16(to_bf16(src));
                    const float got = ld(out, fdt[b], i * D + j);
                    if (!(got == want)) {
                        printf("FAIL sf_embed %s -> %s (%s): out[%lld, %lld] = %g, want %g\n", fdt_name[a],
                               fdt_name[b], gpu ? "cuda" : sf_backend_name(be), (long long)i, (long long)j,
                               (double)got, (double)want);
                        bad = 1;
                    }
                }
            checks++;
            failures += bad;
            free(tf), free(tab), free(out), free(ids);
        }
}

static void embed_errors(sf_ctx *ctx) {
    float tab[6 * 4], out[3 * 4];
    int32_t ids[3] = {0, 5, 2};
    int64_t ids64[3] = {0, 1, 2};
    sf_tensor T = t2(tab, SF_F32, -1, 6, 4), I = t1(ids, SF_I32, -1, 3), O = t2(out, SF_F32, -1, 3, 4);
    sf_ctx_set_backend(ctx, SF_BACKEND_AUTO);
    for (int i = 0; i < 24; i++) tab[i] = (float)i;
    EXPECT_STATUS(sf_embed(ctx, &T, &I, &O), SF_OK, NULL);
    EXPECT(out[4] == 20.0f && out[11] == 11.0f, "sf_embed values %g %g", (double)out[4], (double)out[11]);
    EXPECT_STATUS(sf_embed(ctx, NULL, &I, &O), SF_ERR_NULL_POINTER, "table");
    EXPECT_STATUS(sf_embed(ctx, &T, NULL, &O), SF_ERR_NULL_POINTER, "ids");
    EXPECT_STATUS(sf_embed(ctx, &T, &I, NULL), SF_ERR_NULL_POINTER, "out");
    ids[1] = 6;
    EXPECT_STATUS(sf_embed(ctx, &T, &I, &O), SF_ERR_INDEX, "ids[1]");
    ids[1] = -1;
    EXPECT_STATUS(sf_embed(ctx, &T, &I, &O), SF_ERR_INDEX, "ids[1]");
    ids[1] = 1;
    const sf_tensor I64 = t1(ids64, SF_I64, -1, 3);
    EXPECT_STATUS(sf_embed(ctx, &T, &I64, &O), SF_ERR_DTYPE, "ids");
    const sf_tensor O2 = t2(out, SF_F32, -1, 2, 4), O3 = t2(out, SF_F32, -1, 3, 3);
    EXPECT_STATUS(sf_embed(ctx, &T, &I, &O2), SF_ERR_SHAPE, "out");
    EXPECT_STATUS(sf_embed(ctx, &T, &I, &O3), SF_ERR_SHAPE, "out");
    const sf_tensor Ti = t2(tab, SF_I32, -1, 6, 4), T0 = t2(tab, SF_F32, -1, 0, 4);
    EXPECT_STATUS(sf_embed(ctx, &Ti, &I, &O), SF_ERR_DTYPE, "table");
    EXPECT_STATUS(sf_embed(ctx, &T0, &I, &O), SF_ERR_SHAPE, "table");
    const sf_tensor Oa = t2(tab, SF_F32, -1, 3, 4);
    EXPECT_STATUS(sf_embed(ctx, &T, &I, &Oa), SF_ERR_INVALID_ARG, NULL); /* out over the table */
    sf_tensor Ts = T;
    Ts.stride[1] = 2, Ts.shape[1] = 2;
    const sf_tensor O22 = t2(out, SF_F32, -1, 3, 2);
    EXPECT_STATUS(sf_embed(ctx, &Ts, &I, &O22), SF_ERR_STRIDE, "table");
    const sf_tensor In = t1(ids, SF_I32, -1, 0), On = t2(out, SF_F32, -1, 0, 4);
    EXPECT_STATUS(sf_embed(ctx, &T, &In, &On), SF_OK, NULL);
}

/* ================================ sf_sample =============================== */

typedef struct setting {
    const char *name;
    float T;
    int top_k;
    float top_p, min_p, pen;
} setting;

static const setting settings[] = {
    {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f},       {"greedy+penalty", 0.0f, 0, 1.0f, 0.0f, 1.3f},
    {"temperature", 1.0f, 0, 1.0f, 0.0f, 1.0f},  {"top_k40", 0.7f, 40, 1.0f, 0.0f, 1.0f},
    {"top_k1", 1.0f, 1, 1.0f, 0.0f, 1.0f},       {"top_p0.9", 1.0f, 0, 0.9f, 0.0f, 1.0f},
    {"min_p0.1", 1.3f, 0, 1.0f, 0.1f, 1.0f},     {"all", 0.8f, 100, 0.95f, 0.05f, 1.2f},
    {"penalty+top_p", 1.0f, 0, 0.8f, 0.0f, 1.5f}, {"top_k>V", 2.0f, 1 << 30, 0.999f, 0.0f, 1.0f},
};
#define NSET ((int)(sizeof settings / sizeof settings[0]))

static sf_sampling make_s(const setting *c) {
    sf_sampling s;
    sf_sampling_init(&s);
    s.temperature = c->T, s.top_k = c->top_k, s.top_p = c->top_p, s.min_p = c->min_p;
    s.repetition_penalty = c->pen;
    return s;
}

/* One call on host buffers (be) or through device copies (gpu). */
static sf_status run_sample(sf_ctx *ctx, sf_ctx *gpu, sf_backend be, const void *lg, sf_dtype dt, int64_t n,
                            int64_t V, const sf_sampling *s, const int32_t *slots, uint8_t *seen, int64_t S,
                            int64_t *rng, int32_t *tok) {
    const size_t lb = (size_t)(n * V) * (dt == SF_F32 ? 4 : 2);
    if (!gpu) {
        sf_ctx_set_backend(ctx, be);
        const sf_tensor L = t2((void *)lg, dt, -1, n, V), Sl = t1((void *)slots, SF_I32, -1, slots ? n : 0),
                        Se = t2(seen, SF_U8, -1, S, V), R = t1(rng, SF_I64, -1, S), Tk = t1(tok, SF_I32, -1, n);
        return sf_sample(ctx, &L, s, slots ? &Sl : NULL, seen ? &Se : NULL, &R, &Tk);
    }
    void *dl = dev_copy(gpu, lg, lb), *dsl = slots ? dev_copy(gpu, slots, (size_t)n * 4) : NULL;
    void *dse = seen ? dev_copy(gpu, seen, (size_t)(S * V)) : NULL, *dr = dev_copy(gpu, rng, (size_t)S * 8);
    void *dt_ = dev_copy(gpu, tok, (size_t)n * 4);
    const sf_tensor L = t2(dl, dt, 0, n, V), Sl = t1(dsl, SF_I32, 0, n), Se = t2(dse, SF_U8, 0, S, V),
                    R = t1(dr, SF_I64, 0, S), Tk = t1(dt_, SF_I32, 0, n);
    sf_status st_ = sf_sample(gpu, &L, s, slots ? &Sl : NULL, seen ? &Se : NULL, &R, &Tk);
    if (st_ == SF_OK) st_ = sf_ctx_synchronize(gpu);
    sf_free(gpu, dl), sf_free(gpu, dsl);
    if (seen) dev_back(gpu, seen, dse, (size_t)(S * V));
    dev_back(gpu, rng, dr, (size_t)S * 8);
    dev_back(gpu, tok, dt_, (size_t)n * 4);
    return st_;
}

/* A slot's RNG state after one splitmix64 draw. */
static uint64_t splitmix(uint64_t x) { return x + 0x9e3779b97f4a7c15ull; }

static long agree_rows, agree_diff;

/* Random logits through the reference and a backend (cpu or gpu): same
 * tokens except near-boundary draws (counted), the same RNG states (one
 * draw per sampled row, none for greedy), seen = before | the tokens. */
/* dist 0: uniform in [-6, 6); 1: in [0, 0.02) (one histogram bin: the
 * searches refine by key bits); 2: nine in ten exactly 0.5 (ties ordered
 * by id inside one bin). */
static float draw_logit(int dist) {
    if (dist == 1) return (float)(ur() * 0.02);
    if (dist == 2 && xr() % 10 != 0) return 0.5f;
    return (float)(ur() * 12.0 - 6.0);
}

static void agree_case(sf_ctx *ctx, sf_ctx *gpu, int64_t V, int64_t n, int d, const setting *c, int dist) {
    const sf_dtype dt = fdt[d];
    const int64_t S = n + 3;
    const size_t es = dt == SF_F32 ? 4 : 2;
    void *lg = xmalloc((size_t)(n * V) * es);
    for (int64_t i = 0; i < n * V; i++) st(lg, dt, i, draw_logit(dist));
    if (V >= 7) {
        st(lg, dt, 1, NAN);
        if (n > 1) st(lg, dt, V + 2, -INFINITY);
    }
    int32_t *perm = (int32_t *)xmalloc((size_t)S * 4);
    for (int64_t i = 0; i < S; i++) perm[i] = (int32_t)i;
    for (int64_t i = S - 1; i > 0; i--) {
        const int64_t j = (int64_t)(xr() % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    uint8_t *seen0 = (uint8_t *)xmalloc((size_t)(S * V)), *seen_r = (uint8_t *)xmalloc((size_t)(S * V)),
            *seen_b = (uint8_t *)xmalloc((size_t)(S * V));
    for (int64_t i = 0; i < S * V; i++) seen0[i] = (xr() % 20) == 0;
    int64_t rng0[80], rng_r[80], rng_b[80];
    for (int64_t i = 0; i < S; i++) rng0[i] = (int64_t)xr();
    int32_t tok_r[80], tok_b[80];
    memcpy(seen_r, seen0, (size_t)(S * V)), memcpy(seen_b, seen0, (size_t)(S * V));
    memcpy(rng_r, rng0, sizeof rng0), memcpy(rng_b, rng0, sizeof rng0);
    for (int i = 0; i < 80; i++) tok_r[i] = tok_b[i] = -7;
    const sf_sampling s = make_s(c);
    sf_status a = run_sample(ctx, NULL, SF_BACKEND_REF, lg, dt, n, V, &s, perm, seen_r, S, rng_r, tok_r);
    sf_status b = run_sample(ctx, gpu, SF_BACKEND_CPU, lg, dt, n, V, &s, perm, seen_b, S, rng_b, tok_b);
    const char *bn = gpu ? "cuda" : "cpu";
    EXPECT(a == SF_OK && b == SF_OK, "sf_sample %s V %lld %s: ref %s, %s %s (%s)", c->name, (long long)V,
           fdt_name[d], sf_status_string(a), bn, sf_status_string(b), sf_ctx_last_error(gpu ? gpu : ctx));
    const int greedy = !(c->T > 0.0f);
    int diff = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t sl = perm[i];
        if (tok_r[i] < 0 || tok_r[i] >= V || tok_b[i] < 0 || tok_b[i] >= V) {
            bad = 1;
            printf("FAIL %s V %lld %s row %lld: tokens ref %d %s %d outside [0, V)\n", c->name, (long long)V,
                   fdt_name[d], (long long)i, tok_r[i], bn, tok_b[i]);
            continue;
        }
        if (tok_r[i] != tok_b[i]) {
            diff++;
            printf("note: %s V %lld %s row %lld: ref token %d, %s token %d\n", c->name, (long long)V,
                   fdt_name[d], (long long)i, tok_r[i], bn, tok_b[i]);
        }
        const int64_t want = greedy ? rng0[sl] : (int64_t)splitmix((uint64_t)rng0[sl]);
        if (rng_r[sl] != want || rng_b[sl] != want) {
            bad = 1;
            printf("FAIL %s V %lld row %lld: rng of slot %lld not advanced by exactly %d draw(s)\n", c->name,
                   (long long)V, (long long)i, (long long)sl, greedy ? 0 : 1);
        }
        seen0[sl * V + tok_r[i]] |= 2, seen0[sl * V + tok_b[i]] |= 4;
    }
    for (int64_t i = n; i < S; i++)
        if (rng_r[perm[i]] != rng0[perm[i]] || rng_b[perm[i]] != rng0[perm[i]]) {
            bad = 1;
            printf("FAIL %s: the unused slot %d's rng changed\n", c->name, perm[i]);
        }
    for (int64_t i = 0; i < S * V && !bad; i++) {
        const int wr = (seen0[i] & 1) || (seen0[i] & 2), wb = (seen0[i] & 1) || (seen0[i] & 4);
        if (seen_r[i] != wr || seen_b[i] != wb) {
            bad = 1;
            printf("FAIL %s V %lld %s: seen[%lld] ref %d %s %d, want %d %d\n", c->name, (long long)V, fdt_name[d],
                   (long long)i, seen_r[i], bn, seen_b[i], wr, wb);
        }
    }
    checks++;
    failures += bad;
    if (greedy) EXPECT(diff == 0, "%s V %lld %s: greedy tokens differ in %d rows", c->name, (long long)V, fdt_name[d], diff);
    else agree_rows += n, agree_diff += diff;
    free(lg), free(perm), free(seen0), free(seen_r), free(seen_b);
}

/* quick (SF_SAMPLE_QUICK=1, for the sanitizers): small vocabularies, and
 * crowded bins at V = 5000 (still past the search's 2048-element gather) */
static void agree_all(sf_ctx *ctx, sf_ctx *gpu, int quick) {
    static const int64_t Vs[] = {1, 7, 1000, 49152, 151936};
    agree_rows = agree_diff = 0;
    for (int v = 0; v < (quick ? 3 : 5); v++)
        for (int d = 0; d < 3; d++)
            for (int c = 0; c < NSET; c++) {
                const int64_t n = quick ? 4 : Vs[v] <= 1000 ? 64 : Vs[v] <= 49152 ? 6 : 3;
                agree_case(ctx, gpu, Vs[v], n, d, &settings[c], 0);
            }
    /* crowded bins at the large vocabularies */
    static const setting dense[] = {{"temperature", 1.0f, 0, 1.0f, 0.0f, 1.0f},
                                    {"top_p0.9", 1.0f, 0, 0.9f, 0.0f, 1.0f},
                                    {"top_k20000", 1.0f, 20000, 1.0f, 0.0f, 1.0f},
                                    {"min_p0.99", 1.0f, 0, 1.0f, 0.99f, 1.3f},
                                    {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f}};
    for (int dist = 1; dist <= 2; dist++)
        for (int v = quick ? 4 : 3; v < 5; v++)
            for (int d = 0; d < 3; d += 2)
                for (int c = 0; c < 5; c++)
                    agree_case(ctx, gpu, quick ? 5000 : Vs[v], quick ? 2 : 3, d, &dense[c], dist);
    /* a draw within rounding of a boundary may go either way; with random
     * f32 logits that is rare (about 1e-6 of a row's mass per boundary) */
    printf("%s against the reference: %ld of %ld sampled rows differ\n", gpu ? "cuda" : "cpu", agree_diff, agree_rows);
    EXPECT(agree_diff * 100 <= agree_rows, "%ld of %ld sampled rows differ from the reference", agree_diff, agree_rows);
}

/* Hand-computed rules on both host backends. */
static void rules(sf_ctx *ctx) {
    for (int b = 0; b < 2; b++) {
        const sf_backend be = b ? SF_BACKEND_CPU : SF_BACKEND_REF;
        sf_sampling s;
        sf_sampling_init(&s);
        float lg[4 * 4] = {1, 3, 3, 2, /* ties: the lower id */
                           NAN, 1, 2, NAN, /* NaN skipped */
                           NAN, NAN, NAN, NAN, /* all NaN: 0 */
                           -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        int64_t rng[4] = {11, 22, 33, 44};
        int32_t tok[4] = {-1, -1, -1, -1};
        uint8_t seen[4 * 4] = {0};
        EXPECT(run_sample(ctx, NULL, be, lg, SF_F32, 4, 4, &s, NULL, seen, 4, rng, tok) == SF_OK, "greedy call");
        EXPECT(tok[0] == 1 && tok[1] == 2 && tok[2] == 0 && tok[3] == 0, "%s greedy: %d %d %d %d, want 1 2 0 0",
               sf_backend_name(be), tok[0], tok[1], tok[2], tok[3]);
        EXPECT(rng[0] == 11 && rng[3] == 44, "greedy rows draw nothing");
        EXPECT(seen[1] && seen[4 + 2] && seen[8] && seen[12] && !seen[0] && !seen[2], "seen marks the tokens");
        /* the penalty: 2 / 1.5 < 1.9 and -1 * 1.5 < -1.2 */
        float lp[2 * 2] = {2.0f, 1.9f, -1.0f, -1.2f};
        uint8_t sp[2 * 2] = {1, 0, 1, 0};
        int64_t rp[2] = {5, 6};
        int32_t tp[2];
        s.repetition_penalty = 1.5f;
        EXPECT(run_sample(ctx, NULL, be, lp, SF_F32, 2, 2, &s, NULL, sp, 2, rp, tp) == SF_OK, "penalty call");
        EXPECT(tp[0] == 1 && tp[1] == 1, "%s penalty: %d %d, want 1 1", sf_backend_name(be), tp[0], tp[1]);
        EXPECT(sp[0] == 1 && sp[1] == 1 && sp[3] == 1, "seen keeps its marks and gains the tokens");
        /* without seen there is no penalty */
        EXPECT(run_sample(ctx, NULL, be, lp, SF_F32, 2, 2, &s, NULL, NULL, 2, rp, tp) == SF_OK, "no seen");
        EXPECT(tp[0] == 0 && tp[1] == 0, "%s no seen, no penalty: %d %d", sf_backend_name(be), tp[0], tp[1]);
        /* sampling with top_k 1 is greedy but draws once */
        sf_sampling_init(&s);
        s.temperature = 0.5f, s.top_k = 1;
        rp[0] = 5, rp[1] = 6;
        EXPECT(run_sample(ctx, NULL, be, lp, SF_F32, 2, 2, &s, NULL, NULL, 2, rp, tp) == SF_OK, "top_k 1");
        EXPECT(tp[0] == 0 && tp[1] == 0 && rp[0] == (int64_t)splitmix(5) && rp[1] == (int64_t)splitmix(6),
               "%s top_k 1: %d %d", sf_backend_name(be), tp[0], tp[1]);
        /* a row stride past V (a view of wider rows) samples as the copy */
        {
            float wide[3 * 9], tight[3 * 6];
            for (int i = 0; i < 27; i++) wide[i] = (float)((i * 7) % 11) * 0.37f;
            for (int r = 0; r < 3; r++)
                for (int j = 0; j < 6; j++) tight[r * 6 + j] = wide[r * 9 + j];
            int64_t ra[3] = {1, 2, 3}, rb[3] = {1, 2, 3};
            int32_t ta[3], tb[3];
            sf_sampling sv;
            sf_sampling_init(&sv);
            sv.temperature = 1.0f, sv.top_p = 0.9f;
            sf_ctx_set_backend(ctx, be);
            sf_tensor Lw = t2(wide, SF_F32, -1, 3, 6);
            Lw.stride[0] = 9;
            const sf_tensor Ra = t1(ra, SF_I64, -1, 3), Ta = t1(ta, SF_I32, -1, 3);
            EXPECT(sf_sample(ctx, &Lw, &sv, NULL, NULL, &Ra, &Ta) == SF_OK, "strided logits");
            EXPECT(run_sample(ctx, NULL, be, tight, SF_F32, 3, 6, &sv, NULL, NULL, 3, rb, tb) == SF_OK, "tight");
            EXPECT(ta[0] == tb[0] && ta[1] == tb[1] && ta[2] == tb[2] && ra[2] == rb[2],
                   "%s: a strided view samples differently from its copy", sf_backend_name(be));
        }
        /* V = 1 and an all-NaN sampled row: token 0, one draw */
        s.top_k = 0;
        float l1[2] = {NAN, 0.25f};
        EXPECT(run_sample(ctx, NULL, be, l1, SF_F32, 2, 1, &s, NULL, NULL, 2, rp, tp) == SF_OK, "V 1");
        EXPECT(tp[0] == 0 && tp[1] == 0 && rp[0] == (int64_t)splitmix(splitmix(5)), "%s V 1", sf_backend_name(be));
    }
}

/* The reference's (and CPU's) draw frequencies against the probabilities
 * of the rules, computed here in double; a fixed seed, and a chi-square
 * threshold far above its expectation (the degrees of freedom), so the
 * test cannot flake but a wrong cut or a biased walk fails it. */
static void chi_square(sf_ctx *ctx) {
    static const float lg[7] = {1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 1.7f, 0.9f};
    static const setting cs[] = {{"T1", 1.0f, 0, 1.0f, 0.0f, 1.0f},   {"T0.7 k4", 0.7f, 4, 1.0f, 0.0f, 1.0f},
                                 {"p0.8", 1.0f, 0, 0.8f, 0.0f, 1.0f}, {"minp0.3", 1.2f, 0, 1.0f, 0.3f, 1.0f},
                                 {"pen", 1.0f, 5, 0.9f, 0.0f, 2.0f}};
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 5; k++) {
            const setting *c = &cs[k];
            /* the probabilities: penalty on ids 1 and 3, sort, cuts, softmax */
            double v[7], p[7] = {0};
            int ord[7];
            for (int i = 0; i < 7; i++) {
                float x = lg[i];
                if (c->pen != 1.0f && (i == 1 || i == 3)) x = x > 0 ? x / c->pen : x * c->pen;
                v[i] = (double)(x / c->T), ord[i] = i;
            }
            for (int i = 0; i < 7; i++)
                for (int j = i + 1; j < 7; j++)
                    if (v[ord[j]] > v[ord[i]]) {
                        const int t = ord[i];
                        ord[i] = ord[j], ord[j] = t;
                    }
            int keep = c->top_k > 0 && c->top_k < 7 ? c->top_k : 7;
            double sum = 0;
            for (int i = 0; i < keep; i++) sum += exp(v[ord[i]] - v[ord[0]]);
            if (c->top_p < 1.0f) {
                double cum = 0;
                for (int i = 0; i < keep; i++)
                    if ((cum += exp(v[ord[i]] - v[ord[0]]) / sum) >= c->top_p) {
                        keep = i + 1;
                        break;
                    }
            }
            if (c->min_p > 0.0f) {
                int m = 1;
                while (m < keep && exp(v[ord[m]] - v[ord[0]]) >= c->min_p) m++;
                keep = m;
            }
            double tot = 0;
            for (int i = 0; i < keep; i++) tot += exp(v[ord[i]] - v[ord[0]]);
            for (int i = 0; i < keep; i++) p[ord[i]] = exp(v[ord[i]] - v[ord[0]]) / tot;
            const int draws = 20000;
            long cnt[7] = {0};
            int64_t rng = 12345;
            uint8_t seen[7] = {0, 1, 0, 1, 0, 0, 0};
            const sf_sampling s = make_s(c);
            int ok = 1;
            for (int t = 0; t < draws && ok; t++) {
                int32_t tok = -1;
                uint8_t sn[7];
                memcpy(sn, seen, 7);
                ok = run_sample(ctx, NULL, b ? SF_BACKEND_CPU : SF_BACKEND_REF, lg, SF_F32, 1, 7, &s, NULL,
                                c->pen != 1.0f ? sn : NULL, 1, &rng, &tok) == SF_OK && tok >= 0 && tok < 7;
                if (ok) cnt[tok]++;
            }
            EXPECT(ok, "chi-square %s: a call failed", c->name);
            double chi = 0;
            int dof = -1, outside = 0;
            for (int i = 0; i < 7; i++) {
                if (p[i] == 0) {
                    outside += cnt[i] != 0;
                    continue;
                }
                const double e = p[i] * draws;
                chi += (cnt[i] - e) * (cnt[i] - e) / e, dof++;
            }
            EXPECT(!outside, "chi-square %s (%s): a token outside the kept set was drawn", c->name,
                   b ? "cpu" : "ref");
            const double lim = dof + 10.0 * sqrt(2.0 * (dof > 0 ? dof : 1)) + 10.0;
            EXPECT(chi <= lim, "chi-square %s (%s): %.2f over %d dof (limit %.1f)", c->name, b ? "cpu" : "ref", chi,
                   dof, lim);
        }
}

static void sample_errors(sf_ctx *ctx) {
    float lg[3 * 5] = {0};
    int32_t tok[3], sl[3] = {2, 0, 1}, tok4[4];
    int64_t rng[3] = {1, 2, 3};
    int32_t rng32[3];
    uint8_t seen[3 * 5] = {0};
    float seenf[3 * 5];
    sf_sampling s;
    sf_sampling_init(&s);
    sf_ctx_set_backend(ctx, SF_BACKEND_AUTO);
    sf_tensor L = t2(lg, SF_F32, -1, 3, 5), Sl = t1(sl, SF_I32, -1, 3), Se = t2(seen, SF_U8, -1, 3, 5),
              R = t1(rng, SF_I64, -1, 3), T = t1(tok, SF_I32, -1, 3);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, &R, &T), SF_OK, NULL);
    EXPECT_STATUS(sf_sample(ctx, NULL, &s, &Sl, &Se, &R, &T), SF_ERR_NULL_POINTER, "logits");
    EXPECT_STATUS(sf_sample(ctx, &L, NULL, &Sl, &Se, &R, &T), SF_ERR_NULL_POINTER, "s");
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, NULL, &T), SF_ERR_NULL_POINTER, "rng");
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, &R, NULL), SF_ERR_NULL_POINTER, "tokens");
    EXPECT_STATUS(sf_sample(ctx, &L, &s, NULL, NULL, &R, &T), SF_OK, NULL);
    sf_tensor X = L;
    X.dtype = SF_I32;
    EXPECT_STATUS(sf_sample(ctx, &X, &s, &Sl, &Se, &R, &T), SF_ERR_DTYPE, "logits");
    X = t1(lg, SF_F32, -1, 15);
    EXPECT_STATUS(sf_sample(ctx, &X, &s, &Sl, &Se, &R, &T), SF_ERR_SHAPE, "logits");
    X = t2(lg, SF_F32, -1, 3, 0);
    EXPECT_STATUS(sf_sample(ctx, &X, &s, &Sl, NULL, &R, &T), SF_ERR_SHAPE, "logits");
    X = L, X.shape[1] = 2, X.stride[1] = 2;
    EXPECT_STATUS(sf_sample(ctx, &X, &s, &Sl, NULL, &R, &T), SF_ERR_STRIDE, "logits");
    X = t1(rng32, SF_I32, -1, 3);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, &X, &T), SF_ERR_DTYPE, "rng");
    X = t1(rng, SF_I64, -1, 0);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, NULL, &X, &T), SF_ERR_SHAPE, "rng");
    X = t2(seen, SF_U8, -1, 3, 4);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &X, &R, &T), SF_ERR_SHAPE, "seen");
    X = t2(seenf, SF_F32, -1, 3, 5);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &X, &R, &T), SF_ERR_DTYPE, "seen");
    X = t1(tok4, SF_I32, -1, 4);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, &R, &X), SF_ERR_SHAPE, "tokens");
    X = t1(rng, SF_I32, -1, 3);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, &R, &X), SF_ERR_INVALID_ARG, NULL); /* tokens over rng */
    X = t1(sl, SF_I32, -1, 1);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &X, &Se, &R, &T), SF_ERR_SHAPE, "slots");
    sl[1] = 3;
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, &R, &T), SF_ERR_INDEX, "slots[1]");
    sl[1] = -1;
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, &R, &T), SF_ERR_INDEX, "slots[1]");
    sl[1] = 2;
    EXPECT_STATUS(sf_sample(ctx, &L, &s, &Sl, &Se, &R, &T), SF_ERR_INDEX, "twice");
    sl[1] = 0;
    const sf_tensor R2 = t1(rng, SF_I64, -1, 2), Se2 = t2(seen, SF_U8, -1, 2, 5);
    EXPECT_STATUS(sf_sample(ctx, &L, &s, NULL, &Se2, &R2, &T), SF_ERR_SHAPE, "slots");
    const sf_tensor L0 = t2(lg, SF_F32, -1, 0, 5), T0 = t1(tok, SF_I32, -1, 0);
    EXPECT_STATUS(sf_sample(ctx, &L0, &s, NULL, NULL, &R, &T0), SF_OK, NULL);
}

int main(int argc, char **argv) {
    const int cuda = split_cuda_part(argc, argv);
    if (cuda < 0) return 2;
    const char *e = getenv("SF_TEST_SEED");
    const uint64_t seed = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
    printf("test_sample: seed %llu (SF_TEST_SEED to repeat)\n", (unsigned long long)seed);
    rs = seed * 2654435761u + 1;
    sf_ctx *ctx = NULL;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL no CPU context\n");
        return 1;
    }
    const int quick = getenv("SF_SAMPLE_QUICK") != NULL;
    if (cuda) { /* the CUDA backend against the reference */
        sf_ctx *gpu = NULL;
        const int rc = split_gpu_ctx(&gpu, "test_sample");
        if (rc) {
            sf_ctx_destroy(ctx);
            return rc;
        }
        embed_case(ctx, gpu, SF_BACKEND_CUDA, 37, 19, 11);
        embed_case(ctx, gpu, SF_BACKEND_CUDA, 50, 64, 9);
        agree_all(ctx, gpu, quick);
        sf_ctx_destroy(gpu);
    } else {
        embed_errors(ctx);
        embed_case(ctx, NULL, SF_BACKEND_REF, 37, 19, 11);
        embed_case(ctx, NULL, SF_BACKEND_CPU, 37, 19, 11);
        embed_case(ctx, NULL, SF_BACKEND_CPU, 50, 64, 9);
        sample_errors(ctx);
        rules(ctx);
        chi_square(ctx);
        agree_all(ctx, NULL, quick);
    }
    sf_ctx_destroy(ctx);
    printf("%s: %d checks, %d failures\n", failures ? "FAIL" : "PASS", checks, failures);
    return failures ? 1 : 0;
}
