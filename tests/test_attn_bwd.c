/* test_attn_bwd.c - sf_attn_bwd against its oracle, and the oracle against
 * calculus.
 *
 *   --backend ref   the reference backward (double) against central finite
 *                   differences of an attention forward written here in
 *                   double from the header's definitions (cross-checked
 *                   against the library's reference forward), on small
 *                   shapes with every mask and modifier: the oracle's
 *                   oracle.  Also the validation errors.
 *   --backend cpu   the CPU backward against the reference over the case
 *                   table, f32 / f16 / bf16; twice, bit-identical.
 *   --backend cuda  the same on the GPU (77, skipped, without a device),
 *                   fast and deterministic modes; the deterministic mode
 *                   three times, bit-identical.
 * --case S runs only the table's cases whose name contains S, --dtype only
 * one dtype (the sanitizer runs of the device script).
 * Inputs are fresh seeded random values (the seed is printed; --seed N
 * repeats a run); the reference gets f32 copies of exactly the values the
 * backend under test reads (q, k, v, out, lse, dout), so its result is the
 * exact gradient to f32 rounding.  Gradients are poisoned with NaN before
 * each call; any NaN, or a relative Frobenius error over the dtype's
 * tolerance in dq, dk or dv, fails.  Exit 0 passed, 1 failed, 77 skipped. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seqfuse.h"
#include "worst.h"

static uint64_t rng_state;
static double urand(double lo, double hi) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static int failures;
static int served; /* backend calls that ran and were checked */
#define FAILF(...)                  \
    do {                            \
        printf("FAIL ");            \
        printf(__VA_ARGS__);        \
        printf("\n");               \
        failures++;                 \
    } while (0)

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        printf("FAIL host out of memory\n");
        exit(1);
    }
    return p;
}

static size_t esize(sf_dtype dt) { return dt == SF_F32 ? 4 : 2; }

static float bits_to_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float half_to_f(uint16_t h) {
    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) return (s ? -1.0f : 1.0f) * ldexpf((float)m, -24);
    if (e == 31) return bits_to_f(s | 0x7f800000u | (m << 13));
    return bits_to_f(s | ((e + 112) << 23) | (m << 13));
}
static uint16_t f_to_half(float f) { /* round to nearest even, |f| < 65504 */
    const uint32_t u = f_to_bits(f), s = (u >> 16) & 0x8000u;
    if (isnan(f)) return 0x7e00;
    float a = fabsf(f);
    if (a < ldexpf(1.0f, -14)) return (uint16_t)(s | (uint16_t)lrintf(a * ldexpf(1.0f, 24)));
    int e;
    float m = frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    long mi = lrintf(ldexpf(m, 11)); /* 11 significant bits */
    if (mi == 2048) {
        mi = 1024;
        e++;
    }
    return (uint16_t)(s | (uint32_t)((e + 14) << 10) | (uint32_t)(mi - 1024));
}
static float ld(const void *p, sf_dtype dt, size_t i) {
    if (dt == SF_F32) return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return dt == SF_BF16 ? bits_to_f((uint32_t)h << 16) : half_to_f(h);
}
static void st(void *p, sf_dtype dt, size_t i, float v) {
    if (dt == SF_F32) {
        ((float *)p)[i] = v;
        return;
    }
    uint16_t h;
    if (dt == SF_BF16) {
        uint32_t u = f_to_bits(v);
        u += 0x7fffu + ((u >> 16) & 1u);
        h = (uint16_t)(u >> 16);
    } else {
        h = f_to_half(v);
    }
    ((uint16_t *)p)[i] = h;
}

/* ------------------------------------------------------------ problems */
typedef struct {
    const char *name;
    int b, H, Hkv, Lq, Lk, d;
    int causal, wl, wr;
    float scale, softcap;
    int alibi;          /* 0 none, 1 (H), 2 (b, H) */
    int nvl;            /* > 0: varlen, nvl sequences of these lengths */
    int lq[5], lk[5];
} bcase;

/* The host tensors of one problem in dtype dt: row-major (b, L, H, d) or
 * (total, H, d); lse (b, H, Lq) or (H, total). */
typedef struct {
    const bcase *c;
    sf_dtype dt;
    int rank;
    int64_t nq, nk;     /* rows of q (b Lq or total), of k */
    int64_t Lq, Lk;     /* dense lengths or maxima */
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse, *slopes;
    int32_t *cuq, *cuk;
} prob;

static int64_t nq_of(const bcase *c) {
    if (!c->nvl) return (int64_t)c->b * c->Lq;
    int64_t t = 0;
    for (int i = 0; i < c->nvl; i++) t += c->lq[i];
    return t;
}
static int64_t nk_of(const bcase *c) {
    if (!c->nvl) return (int64_t)c->b * c->Lk;
    int64_t t = 0;
    for (int i = 0; i < c->nvl; i++) t += c->lk[i];
    return t;
}
static int nseq(const bcase *c) { return c->nvl ? c->nvl : c->b; }

static void prob_alloc(prob *P, const bcase *c, sf_dtype dt) {
    memset(P, 0, sizeof *P);
    P->c = c;
    P->dt = dt;
    P->rank = c->nvl ? 3 : 4;
    P->nq = nq_of(c);
    P->nk = nk_of(c);
    const size_t es = esize(dt), nqe = (size_t)P->nq * c->H * c->d, nke = (size_t)P->nk * c->Hkv * c->d;
    P->q = xcalloc(nqe, es);
    P->o = xcalloc(nqe, es);
    P->dout = xcalloc(nqe, es);
    P->dq = xcalloc(nqe, es);
    P->k = xcalloc(nke, es);
    P->v = xcalloc(nke, es);
    P->dk = xcalloc(nke, es);
    P->dv = xcalloc(nke, es);
    P->lse = xcalloc((size_t)P->nq * c->H, 4);
    P->slopes = xcalloc((size_t)nseq(c) * c->H, 4);
    if (c->nvl) {
        P->cuq = xcalloc((size_t)c->nvl + 1, 4);
        P->cuk = xcalloc((size_t)c->nvl + 1, 4);
        P->Lq = P->Lk = 0; /* the longest sequences */
        for (int i = 0; i < c->nvl; i++) {
            P->cuq[i + 1] = P->cuq[i] + c->lq[i];
            P->cuk[i + 1] = P->cuk[i] + c->lk[i];
            if (c->lq[i] > P->Lq) P->Lq = c->lq[i];
            if (c->lk[i] > P->Lk) P->Lk = c->lk[i];
        }
    } else {
        P->Lq = c->Lq;
        P->Lk = c->Lk;
    }
    for (int s = 0; s < nseq(c); s++)
        for (int h = 0; h < c->H; h++) P->slopes[s * c->H + h] = (float)urand(0.02, 0.3);
}

static void prob_free(prob *P) {
    void *ps[] = {P->q, P->k, P->v, P->o, P->dout, P->dq, P->dk, P->dv, P->lse, P->slopes, P->cuq, P->cuk};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
}

static sf_tensor tens(const prob *P, void *data, int rows, int heads, sf_dtype dt, int dev) {
    const bcase *c = P->c;
    if (c->nvl) return sf_tensor_contiguous(data, dt, dev, 3, (int64_t[]){rows, heads, c->d});
    return sf_tensor_contiguous(data, dt, dev, 4, (int64_t[]){c->b, rows / c->b, heads, c->d});
}

/* Fills the params for P's buffers (host pointers, or the device copies
 * given in dp[]: q k v o lse dout dq dk dv cuq cuk slopes). */
static void fill_params(const prob *P, sf_attn_bwd_params *bp, void *const *dp, int dev) {
    const bcase *c = P->c;
    sf_attn_bwd_params_init(bp);
    sf_attn_fwd_params *f = &bp->fwd;
    void *q = dp ? dp[0] : P->q, *k = dp ? dp[1] : P->k, *v = dp ? dp[2] : P->v, *o = dp ? dp[3] : P->o;
    void *lse = dp ? dp[4] : P->lse, *dout = dp ? dp[5] : P->dout, *dq = dp ? dp[6] : P->dq;
    void *dk = dp ? dp[7] : P->dk, *dv = dp ? dp[8] : P->dv;
    f->q = tens(P, q, (int)P->nq, c->H, P->dt, dev);
    f->k = tens(P, k, (int)P->nk, c->Hkv, P->dt, dev);
    f->v = tens(P, v, (int)P->nk, c->Hkv, P->dt, dev);
    f->out = tens(P, o, (int)P->nq, c->H, P->dt, dev);
    bp->dout = tens(P, dout, (int)P->nq, c->H, P->dt, dev);
    bp->dq = tens(P, dq, (int)P->nq, c->H, P->dt, dev);
    bp->dk = tens(P, dk, (int)P->nk, c->Hkv, P->dt, dev);
    bp->dv = tens(P, dv, (int)P->nk, c->Hkv, P->dt, dev);
    if (c->nvl) {
        f->lse = sf_tensor_contiguous(lse, SF_F32, dev, 2, (int64_t[]){c->H, P->nq});
        f->cu_seqlens_q = sf_tensor_contiguous(dp ? dp[9] : P->cuq, SF_I32, dev, 1, (int64_t[]){c->nvl + 1});
        f->cu_seqlens_k = sf_tensor_contiguous(dp ? dp[10] : P->cuk, SF_I32, dev, 1, (int64_t[]){c->nvl + 1});
    } else {
        f->lse = sf_tensor_contiguous(lse, SF_F32, dev, 3, (int64_t[]){c->b, c->H, c->Lq});
    }
    f->causal = c->causal;
    f->window_left = c->wl;
    f->window_right = c->wr;
    f->softmax_scale = c->scale;
    f->softcap = c->softcap;
    if (c->alibi == 1) f->alibi_slopes = sf_tensor_contiguous(dp ? dp[11] : P->slopes, SF_F32, dev, 1, (int64_t[]){c->H});
    if (c->alibi == 2)
        f->alibi_slopes = sf_tensor_contiguous(dp ? dp[11] : P->slopes, SF_F32, dev, 2, (int64_t[]){nseq(c), c->H});
}

/* Random q, k, v, dout; out and lse from the library's reference forward. */
static int prob_fill(sf_ctx *cpu, prob *P, double qscale) {
    const bcase *c = P->c;
    const size_t nqe = (size_t)P->nq * c->H * c->d, nke = (size_t)P->nk * c->Hkv * c->d;
    for (size_t i = 0; i < nqe; i++) {
        st(P->q, P->dt, i, (float)urand(-qscale, qscale));
        st(P->dout, P->dt, i, (float)urand(-1.0, 1.0));
    }
    for (size_t i = 0; i < nke; i++) {
        st(P->k, P->dt, i, (float)urand(-qscale, qscale));
        st(P->v, P->dt, i, (float)urand(-1.0, 1.0));
    }
    sf_attn_bwd_params bp;
    fill_params(P, &bp, NULL, -1);
    bp.fwd.backend = SF_BACKEND_REF;
    sf_status s = sf_attn_fwd(cpu, &bp.fwd);
    if (s != SF_OK) {
        FAILF("%s: reference forward: %s: %s", c->name, sf_status_string(s), sf_ctx_last_error(cpu));
        return 0;
    }
    return 1;
}

/* An f32 copy of P (same values) for the oracle. */
static void prob_f32_copy(const prob *P, prob *F) {
    prob_alloc(F, P->c, SF_F32);
    memcpy(F->slopes, P->slopes, (size_t)nseq(P->c) * P->c->H * 4);
    const size_t nqe = (size_t)P->nq * P->c->H * P->c->d, nke = (size_t)P->nk * P->c->Hkv * P->c->d;
    for (size_t i = 0; i < nqe; i++) {
        ((float *)F->q)[i] = ld(P->q, P->dt, i);
        ((float *)F->o)[i] = ld(P->o, P->dt, i);
        ((float *)F->dout)[i] = ld(P->dout, P->dt, i);
    }
    for (size_t i = 0; i < nke; i++) {
        ((float *)F->k)[i] = ld(P->k, P->dt, i);
        ((float *)F->v)[i] = ld(P->v, P->dt, i);
    }
    memcpy(F->lse, P->lse, (size_t)P->nq * P->c->H * 4);
}

static void poison(prob *P) {
    const bcase *c = P->c;
    const size_t es = esize(P->dt);
    memset(P->dq, 0xff, (size_t)P->nq * c->H * c->d * es);
    memset(P->dk, 0xff, (size_t)P->nk * c->Hkv * c->d * es);
    memset(P->dv, 0xff, (size_t)P->nk * c->Hkv * c->d * es);
}

/* relative Frobenius error of got (dtype dt) against want (f32); NaN in got: +inf */
static double rel_err(const void *got, sf_dtype dt, const float *want, size_t n) {
    double e = 0.0, w = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double g = ld(got, dt, i);
        if (isnan(g)) return INFINITY;
        e += (g - want[i]) * (g - want[i]);
        w += (double)want[i] * want[i];
    }
    return w > 0.0 ? sqrt(e / w) : sqrt(e);
}

/* ------------------------------------------- the oracle's oracle: calculus */
/* Row r of sequence s (global row index) and its key range, from the
 * header's definition of the masks. */
static int seq_rows(const prob *P, int s, int64_t *q0, int64_t *lq, int64_t *k0, int64_t *lk) {
    const bcase *c = P->c;
    if (c->nvl) {
        *q0 = P->cuq[s];
        *lq = c->lq[s];
        *k0 = P->cuk[s];
        *lk = c->lk[s];
    } else {
        *q0 = (int64_t)s * c->Lq;
        *lq = c->Lq;
        *k0 = (int64_t)s * c->Lk;
        *lk = c->Lk;
    }
    return 1;
}
static int visible(const bcase *c, int64_t i, int64_t j, int64_t lq, int64_t lk) {
    const int64_t pos = i + lk - lq;
    return (!c->causal || j <= pos) && (c->wl < 0 || j >= pos - c->wl) && (c->wr < 0 || j <= pos + c->wr);
}

/* sum(dO * O) of the forward in double; o (optional) receives O. */
static double fwd_loss(const prob *P, const double *q, const double *k, const double *v, const double *dO,
                       double *o) {
    const bcase *c = P->c;
    const int H = c->H, Hkv = c->Hkv, d = c->d;
    const double sc = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)d);
    double loss = 0.0;
    double *srow = xcalloc((size_t)P->Lk + 1, sizeof(double));
    double acc[256];
    for (int s = 0; s < nseq(c); s++) {
        int64_t q0, lq, k0, lk;
        seq_rows(P, s, &q0, &lq, &k0, &lk);
        for (int h = 0; h < H; h++) {
            const int kvh = h / (H / Hkv);
            const double slope = c->alibi ? P->slopes[(c->alibi == 2 ? s * H : 0) + h] : 0.0;
            for (int64_t i = 0; i < lq; i++) {
                const double *qi = q + ((q0 + i) * H + h) * d;
                double m = -INFINITY, l = 0.0;
                for (int64_t j = 0; j < lk; j++) {
                    srow[j] = -INFINITY;
                    if (!visible(c, i, j, lq, lk)) continue;
                    const double *kj = k + ((k0 + j) * Hkv + kvh) * d;
                    double t = 0.0;
                    for (int x = 0; x < d; x++) t += qi[x] * kj[x];
                    t *= sc;
                    if (c->softcap > 0.0f) t = c->softcap * tanh(t / c->softcap);
                    if (c->alibi) t -= slope * fabs((double)(i + lk - lq - j));
                    srow[j] = t;
                    if (t > m) m = t;
                }
                for (int x = 0; x < d; x++) acc[x] = 0.0;
                if (m > -INFINITY) {
                    for (int64_t j = 0; j < lk; j++) {
                        if (srow[j] == -INFINITY) continue;
                        const double p = exp(srow[j] - m);
                        l += p;
                        const double *vj = v + ((k0 + j) * Hkv + kvh) * d;
                        for (int x = 0; x < d; x++) acc[x] += p * vj[x];
                    }
                    for (int x = 0; x < d; x++) acc[x] /= l;
                }
                const double *gi = dO + ((q0 + i) * H + h) * d;
                for (int x = 0; x < d; x++) {
                    loss += gi[x] * acc[x];
                    if (o) o[((q0 + i) * H + h) * d + x] = acc[x];
                }
            }
        }
    }
    free(srow);
    return loss;
}

/* The reference backward (f32 tensors) against central differences of
 * fwd_loss at the same point, every input element. */
static void fd_case(sf_ctx *cpu, const bcase *c) {
    prob P;
    prob_alloc(&P, c, SF_F32);
    if (!prob_fill(cpu, &P, 1.5)) {
        prob_free(&P);
        return;
    }
    const size_t nqe = (size_t)P.nq * c->H * c->d, nke = (size_t)P.nk * c->Hkv * c->d;
    double *q = xcalloc(nqe, 8), *dO = xcalloc(nqe, 8), *o = xcalloc(nqe, 8);
    double *k = xcalloc(nke, 8), *v = xcalloc(nke, 8);
    for (size_t i = 0; i < nqe; i++) {
        q[i] = ((float *)P.q)[i];
        dO[i] = ((float *)P.dout)[i];
    }
    for (size_t i = 0; i < nke; i++) {
        k[i] = ((float *)P.k)[i];
        v[i] = ((float *)P.v)[i];
    }
    /* this forward is the library's reference forward, to f32 rounding */
    fwd_loss(&P, q, k, v, dO, o);
    double oerr = 0.0;
    for (size_t i = 0; i < nqe; i++) oerr = worst_of(oerr, abs_diff(o[i], ((float *)P.o)[i]));
    if (!(oerr <= 2e-6)) FAILF("fd %s: the test's forward differs from the reference by %.3g", c->name, oerr);

    poison(&P);
    sf_attn_bwd_params bp;
    fill_params(&P, &bp, NULL, -1);
    bp.backend = SF_BACKEND_REF;
    sf_status s = sf_attn_bwd(cpu, &bp);
    if (s != SF_OK) {
        FAILF("fd %s: %s: %s", c->name, sf_status_string(s), sf_ctx_last_error(cpu));
    } else {
        const double eps = 1e-4;
        struct {
            const char *n;
            double *x;
            const float *g;
            size_t n_el;
        } ts[] = {{"dq", q, P.dq, nqe}, {"dk", k, P.dk, nke}, {"dv", v, P.dv, nke}};
        for (int t = 0; t < 3; t++) {
            double maxg = 0.0, maxe = 0.0;
            size_t worst = 0;
            for (size_t i = 0; i < ts[t].n_el; i++) {
                const double x0 = ts[t].x[i];
                ts[t].x[i] = x0 + eps;
                const double lp = fwd_loss(&P, q, k, v, dO, NULL);
                ts[t].x[i] = x0 - eps;
                const double lm = fwd_loss(&P, q, k, v, dO, NULL);
                ts[t].x[i] = x0;
                const double fd = (lp - lm) / (2.0 * eps), g = ts[t].g[i];
                maxg = fmax(maxg, fabs(fd));
                const double e = fabs(fd - g);
                if (!(e <= maxe)) { /* NaN lands here too */
                    maxe = isnan(e) ? INFINITY : e;
                    worst = i;
                }
            }
            const double tol = 1e-6 * fmax(maxg, 1e-3);
            printf("  fd %-24s %s max|grad| %.3g max err %.3g (tol %.3g)\n", c->name, ts[t].n, maxg, maxe, tol);
            if (!(maxe <= tol)) FAILF("fd %s: %s element %zu off by %.3g", c->name, ts[t].n, worst, maxe);
            if (maxg == 0.0 && ts[t].n_el > 0) FAILF("fd %s: %s is all zero: the case checks nothing", c->name, ts[t].n);
        }
    }
    free(q), free(dO), free(o), free(k), free(v);
    prob_free(&P);
}

static const bcase fd_cases[] = {
    {"plain", 2, 2, 2, 5, 7, 8, 0, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"causal_lq>lk_gqa2", 1, 4, 2, 7, 5, 8, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"causal_lq<lk_mqa", 2, 3, 1, 5, 9, 8, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"window_2_1", 1, 2, 2, 9, 9, 8, 0, 2, 1, 0, 0, 0, 0, {0}, {0}},
    {"softcap_scale", 1, 2, 1, 6, 6, 8, 0, -1, -1, 0.4f, 0.8f, 0, 0, {0}, {0}},
    {"alibi_h_causal", 1, 2, 2, 6, 8, 8, 1, -1, -1, 0, 0, 1, 0, {0}, {0}},
    {"alibi_bh_softcap", 2, 2, 2, 5, 5, 8, 0, -1, -1, 0, 2.0f, 2, 0, {0}, {0}},
    {"varlen_empty_gqa", 0, 4, 2, 0, 0, 8, 1, -1, -1, 0, 0, 0, 4, {3, 0, 5, 2}, {4, 2, 0, 6}},
    {"varlen_window_alibi", 0, 2, 1, 0, 0, 16, 0, 3, 0, 0, 0, 2, 3, {6, 1, 4}, {5, 3, 7}},
};

/* ------------------------------------------------------ validation errors */
static void expect_err(sf_ctx *cpu, const sf_attn_bwd_params *bp, sf_status want, const char *needle,
                       const char *what) {
    const sf_status s = sf_attn_bwd(cpu, bp);
    const char *msg = sf_ctx_last_error(cpu);
    if (s != want || !strstr(msg, needle))
        FAILF("error %s: got %s \"%s\", want %s naming %s", what, sf_status_string(s), msg,
              sf_status_string(want), needle);
}

static void error_tests(sf_ctx *cpu) {
    static const bcase c = {"errors", 2, 4, 2, 5, 6, 8, 1, -1, -1, 0, 0, 0, 0, {0}, {0}};
    prob P;
    prob_alloc(&P, &c, SF_F32);
    if (!prob_fill(cpu, &P, 1.0)) {
        prob_free(&P);
        return;
    }
    sf_attn_bwd_params bp, good;
    fill_params(&P, &good, NULL, -1);
    good.backend = SF_BACKEND_CPU;
    if (sf_attn_bwd(cpu, &good) != SF_OK) FAILF("error tests: the valid call fails: %s", sf_ctx_last_error(cpu));
    if (sf_attn_bwd(cpu, NULL) != SF_ERR_NULL_POINTER) FAILF("error tests: NULL params accepted");

    bp = good, bp.fwd.lse.data = NULL;
    expect_err(cpu, &bp, SF_ERR_NULL_POINTER, "lse", "lse absent");
    bp = good, bp.dv.data = NULL;
    expect_err(cpu, &bp, SF_ERR_NULL_POINTER, "dv", "dv absent");
    bp = good, bp.dout.data = NULL;
    expect_err(cpu, &bp, SF_ERR_NULL_POINTER, "dout", "dout absent");
    bp = good, bp.dq.shape[1] = 4;
    expect_err(cpu, &bp, SF_ERR_SHAPE, "dq", "dq shape");
    bp = good, bp.dk.shape[2] = 4;
    expect_err(cpu, &bp, SF_ERR_SHAPE, "dk", "dk heads");
    bp = good, bp.dk.dtype = SF_BF16;
    expect_err(cpu, &bp, SF_ERR_DTYPE, "dk", "dk dtype");
    bp = good, bp.dout.dtype = SF_F16;
    expect_err(cpu, &bp, SF_ERR_DTYPE, "dout", "dout dtype");
    bp = good, bp.dout.stride[3] = 2;
    expect_err(cpu, &bp, SF_ERR_STRIDE, "dout", "dout inner stride");
    bp = good, bp.dq.data = P.q;
    expect_err(cpu, &bp, SF_ERR_INVALID_ARG, "dq", "dq aliases q");
    bp = good, bp.dv.data = P.dk;
    expect_err(cpu, &bp, SF_ERR_INVALID_ARG, "dv", "dv aliases dk");
    bp = good, bp.deterministic = 2;
    expect_err(cpu, &bp, SF_ERR_INVALID_ARG, "deterministic", "deterministic 2");
    bp = good, bp.fwd.k.shape[2] = 3, bp.fwd.v.shape[2] = 3, bp.dk.shape[2] = 3, bp.dv.shape[2] = 3;
    expect_err(cpu, &bp, SF_ERR_SHAPE, "nheads_kv", "kv heads do not divide");
    bp = good, bp.fwd.softcap = -1.0f;
    expect_err(cpu, &bp, SF_ERR_INVALID_ARG, "softcap", "negative softcap");
    bp = good, bp.fwd.lse.dtype = SF_F16;
    expect_err(cpu, &bp, SF_ERR_DTYPE, "lse", "lse dtype");
    prob_free(&P);
}

/* -------------------------------------------------- backends vs reference */
static const bcase cases[] = {
    {"len1_d8", 2, 2, 1, 1, 1, 8, 0, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"lq1_lk17_causal_d8", 1, 2, 2, 1, 17, 8, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"L17_d40", 2, 4, 4, 17, 17, 40, 0, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"L129_d64_causal_gqa4", 1, 8, 2, 129, 129, 64, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"d96_causal_mqa8_lq<lk", 2, 8, 1, 33, 65, 96, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"d128_causal_lq>lk", 1, 8, 1, 65, 33, 128, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"d256_L70", 1, 2, 2, 70, 70, 256, 0, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"window_16_8", 1, 4, 4, 100, 100, 64, 0, 16, 8, 0, 0, 0, 0, {0}, {0}},
    {"softcap_gqa2", 1, 4, 2, 50, 60, 64, 0, -1, -1, 0, 5.0f, 0, 0, {0}, {0}},
    {"alibi_bh_causal", 2, 4, 4, 40, 40, 64, 1, -1, -1, 0, 0, 2, 0, {0}, {0}},
    {"varlen_empty_causal_gqa4", 0, 4, 1, 0, 0, 64, 1, -1, -1, 0, 0, 0, 4, {17, 0, 33, 5}, {20, 8, 0, 5}},
    {"varlen_d40_alibi_h", 0, 2, 2, 0, 0, 40, 0, -1, -1, 0, 0, 1, 3, {1, 130, 64}, {3, 129, 64}},
    {"L200_d128_causal_gqa4", 1, 8, 2, 200, 200, 128, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"d33_causal_gqa2", 2, 4, 2, 45, 50, 33, 1, -1, -1, 0, 0, 0, 0, {0}, {0}}, /* odd d: no 16-byte rows */
    /* several 128-key and 64-row blocks: whole blocks (the FA2 rows' unmasked path), a partial
     * last block, the double-buffered query blocks, GQA heads walked by one CTA */
    {"L300_d64_gqa2", 1, 4, 2, 300, 300, 64, 0, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"L330_d128_causal", 2, 2, 2, 330, 330, 128, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"L256_d128_window_softcap", 1, 2, 1, 256, 384, 128, 0, 100, 30, 0, 3.0f, 0, 0, {0}, {0}},
    /* head dim 256 / 192 over several 64-key blocks (wg256): GQA, causal, window + softcap, varlen */
    {"L300_d256_causal_gqa2", 1, 4, 2, 300, 300, 256, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"L200_d192_window_softcap", 1, 2, 1, 200, 260, 192, 0, 50, 20, 0, 2.0f, 0, 0, {0}, {0}},
    {"varlen_d256_causal", 0, 2, 1, 0, 0, 256, 1, -1, -1, 0, 0, 0, 3, {70, 0, 150}, {90, 40, 150}},
    /* dk, dv rows off 16-byte alignment (GPU runs; see run_bwd) */
    {"L300_d64_gqa2_dkv+1", 1, 4, 2, 300, 300, 64, 0, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"L200_d128_causal_dkv+1", 1, 2, 2, 200, 200, 128, 1, -1, -1, 0, 0, 0, 0, {0}, {0}},
    {"L130_d256_dkv+1", 1, 2, 2, 130, 130, 256, 0, -1, -1, 0, 0, 0, 0, {0}, {0}},
};

static double tol_of(sf_dtype dt, int gpu) {
    if (dt == SF_F32) return gpu ? 5e-5 : 2e-5;
    if (dt == SF_F16) return gpu ? 4e-3 : 1e-3;
    return gpu ? 2e-2 : 6e-3;
}

/* Runs the backward of P on ctx (device dev: inputs copied there, the
 * gradients poisoned there and copied back into P). */
static sf_status run_bwd(sf_ctx *ctx, prob *P, sf_backend be, int det, int dev) {
    const bcase *c = P->c;
    sf_attn_bwd_params bp;
    poison(P);
    if (dev < 0) {
        fill_params(P, &bp, NULL, -1);
        bp.backend = be;
        bp.deterministic = det;
        return sf_attn_bwd(ctx, &bp);
    }
    const size_t es = esize(P->dt), nqe = (size_t)P->nq * c->H * c->d, nke = (size_t)P->nk * c->Hkv * c->d;
    void *host[12] = {P->q, P->k, P->v, P->o, P->lse, P->dout, P->dq, P->dk, P->dv, P->cuq, P->cuk, P->slopes};
    const size_t bytes[12] = {nqe * es, nke * es, nke * es, nqe * es, (size_t)P->nq * c->H * 4, nqe * es,
                              nqe * es, nke * es, nke * es, (size_t)(c->nvl + 1) * 4, (size_t)(c->nvl + 1) * 4,
                              (size_t)nseq(c) * c->H * 4};
    /* cases named "...dkv+1": dk and dv one element past an allocation's
     * start (rows not 16-byte aligned: the kernels' element-wise stores) */
    const size_t shift = strstr(c->name, "dkv+1") ? es : 0;
    void *dp[12] = {0}, *alloc[12] = {0};
    sf_status s = SF_OK;
    for (int i = 0; i < 12 && s == SF_OK; i++) {
        if (!host[i]) continue;
        const size_t sh = i == 7 || i == 8 ? shift : 0;
        s = sf_malloc(ctx, &alloc[i], (bytes[i] ? bytes[i] : 4) + sh);
        dp[i] = alloc[i] ? (char *)alloc[i] + sh : NULL;
        if (s == SF_OK && bytes[i]) s = sf_memcpy(ctx, dp[i], host[i], bytes[i]);
    }
    if (s == SF_OK) {
        fill_params(P, &bp, dp, dev);
        bp.backend = be;
        bp.deterministic = det;
        s = sf_attn_bwd(ctx, &bp);
    }
    for (int i = 6; i < 9 && s == SF_OK; i++)
        if (bytes[i]) s = sf_memcpy(ctx, host[i], dp[i], bytes[i]);
    for (int i = 0; i < 12; i++)
        if (alloc[i]) sf_free(ctx, alloc[i]);
    return s;
}

static int same_bits(const prob *A, const void *dq, const void *dk, const void *dv) {
    const bcase *c = A->c;
    const size_t es = esize(A->dt), nqe = (size_t)A->nq * c->H * c->d, nke = (size_t)A->nk * c->Hkv * c->d;
    return !memcmp(A->dq, dq, nqe * es) && !memcmp(A->dk, dk, nke * es) && !memcmp(A->dv, dv, nke * es);
}

static void backend_case(sf_ctx *cpu, sf_ctx *ctx, const bcase *c, sf_dtype dt, sf_backend be, int dev) {
    static const char *dtn[] = {"f32", "f16", "bf16"};
    prob P, F;
    prob_alloc(&P, c, dt);
    if (!prob_fill(cpu, &P, 2.0)) {
        prob_free(&P);
        return;
    }
    prob_f32_copy(&P, &F);
    sf_status s = run_bwd(cpu, &F, SF_BACKEND_REF, 0, -1);
    if (s != SF_OK) FAILF("%s %s: reference: %s: %s", c->name, dtn[dt], sf_status_string(s), sf_ctx_last_error(cpu));
    const size_t es = esize(dt), nqe = (size_t)P.nq * c->H * c->d, nke = (size_t)P.nk * c->Hkv * c->d;
    for (int det = 0; det <= (dev >= 0 ? 1 : 0) && s == SF_OK; det++) {
        s = run_bwd(ctx, &P, be, det, dev);
        if (s == SF_ERR_UNSUPPORTED && dev >= 0) { /* the CPU serves every case */
            printf("  %-26s %-4s det %d: skipped (%s)\n", c->name, dtn[dt], det, sf_ctx_last_error(ctx));
            continue;
        }
        if (s != SF_OK) {
            FAILF("%s %s det %d: %s: %s", c->name, dtn[dt], det, sf_status_string(s), sf_ctx_last_error(ctx));
            break;
        }
        served++;
        const double eq = rel_err(P.dq, dt, F.dq, nqe), ek = rel_err(P.dk, dt, F.dk, nke),
                     ev = rel_err(P.dv, dt, F.dv, nke), tol = tol_of(dt, dev >= 0);
        printf("  %-26s %-4s det %d: rel err dq %.2e dk %.2e dv %.2e (tol %.0e)\n", c->name, dtn[dt], det, eq, ek,
               ev, tol);
        if (!(eq <= tol && ek <= tol && ev <= tol)) FAILF("%s %s det %d: error over tolerance", c->name, dtn[dt], det);
        /* repeated calls: bit-identical (CPU always; CUDA in deterministic mode) */
        if (dev < 0 || det) {
            void *dq = xcalloc(nqe, es), *dk = xcalloc(nke, es), *dv = xcalloc(nke, es);
            memcpy(dq, P.dq, nqe * es), memcpy(dk, P.dk, nke * es), memcpy(dv, P.dv, nke * es);
            for (int rep = 0; rep < 2 && s == SF_OK; rep++) {
                s = run_bwd(ctx, &P, be, det, dev);
                if (s == SF_OK && !same_bits(&P, dq, dk, dv))
                    FAILF("%s %s det %d: call %d differs from the first in its bits", c->name, dtn[dt], det, rep + 2);
            }
            free(dq), free(dk), free(dv);
        }
    }
    prob_free(&F);
    prob_free(&P);
}

int main(int argc, char **argv) {
    const char *backend = "cpu", *only = NULL;
    int only_dt = -1;
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            ++i;
            only_dt = !strcmp(argv[i], "f32") ? SF_F32 : !strcmp(argv[i], "f16") ? SF_F16 : SF_BF16;
        }
        else {
            printf("usage: test_attn_bwd [--backend ref|cpu|cuda] [--seed N] [--case SUBSTRING] [--dtype f32|f16|bf16]\n");
            return 1;
        }
    }
    if (seed == 0) seed = 1;
    rng_state = seed;
    printf("test_attn_bwd --backend %s --seed %llu\n", backend, (unsigned long long)seed);
    sf_ctx *cpu = NULL;
    if (sf_ctx_create(&cpu, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL no CPU context\n");
        return 1;
    }
    static const sf_dtype dts[] = {SF_F32, SF_F16, SF_BF16};
    if (!strcmp(backend, "ref")) {
        for (size_t i = 0; i < sizeof fd_cases / sizeof fd_cases[0]; i++) fd_case(cpu, &fd_cases[i]);
        error_tests(cpu);
    } else if (!strcmp(backend, "cpu")) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int t = 0; t < 3 && (!only || strstr(cases[i].name, only)); t++)
                if (only_dt < 0 || (int)dts[t] == only_dt) backend_case(cpu, cpu, &cases[i], dts[t], SF_BACKEND_CPU, -1);
    } else if (!strcmp(backend, "cuda")) {
        sf_ctx *gpu = NULL;
        if (sf_cuda_device_count() < 1 || sf_ctx_create(&gpu, 0) != SF_OK) {
            printf("SKIP no CUDA device (or a build without CUDA)\n");
            sf_ctx_destroy(cpu);
            return 77;
        }
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int t = 0; t < 3 && (!only || strstr(cases[i].name, only)); t++)
                if (only_dt < 0 || (int)dts[t] == only_dt) backend_case(cpu, gpu, &cases[i], dts[t], SF_BACKEND_CUDA, 0);
        sf_ctx_destroy(gpu);
    } else {
        printf("unknown backend %s\n", backend);
        return 1;
    }
    sf_ctx_destroy(cpu);
    if (strcmp(backend, "ref") != 0 && !failures && served == 0) {
        /* nothing checked is not a pass: a pinned configuration that serves
         * none of the cases here is a visible skip, else a failure */
        const char *force = getenv("SF_AUTOTUNE_FORCE");
        if (force && force[0]) {
            printf("SKIP: SF_AUTOTUNE_FORCE=%s served no case here\n", force);
            return 77;
        }
        FAILF("no case ran on the %s backend", backend);
    }
    printf(failures ? "FAILED (%d)\n" : "PASSED\n", failures);
    return failures ? 1 : 0;
}
