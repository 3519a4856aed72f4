/* test_ref_attn.c - the attention part of the reference checks: hand-computed
 * softmax values, an online-softmax formulation with the masks written from
 * their definitions, and a GQA mapping check (see test_ref_independent.c). */
#include "ref_check.h"

/* ========================================================== attention */
typedef struct {
    const char *name;
    int64_t b, H, Hkv, d;
    int64_t Lq, Lk;           /* dense lengths                               */
    int nvl;                  /* > 0: varlen with these per-sequence lengths */
    int64_t lq[6], lk[6];
    int causal, wl, wr;
    float scale;              /* 0: 1/sqrt(d)                                */
    int lay;
    sf_dtype dt;
    float softcap;            /* > 0: capped scores                          */
    int alibi;                /* slopes: 0 none, 1 (H), 2 (b, H): slope_of() */
} attn_case;

/* ALiBi slope of (sequence s, head h): distinct per head, and per sequence
 * when the case has a slope per batch entry. */
static double slope_of(const attn_case *c, int64_t s, int64_t h) {
    return 0.1 + 0.05 * (double)h + (c->alibi == 2 ? 0.02 * (double)s : 0.0);
}

/* Visibility written from the header's definition of the masks. */
static int visible(const attn_case *c, int64_t i, int64_t j, int64_t lq, int64_t lk) {
    int64_t pos = i + lk - lq;
    return (!c->causal || j <= pos) && (c->wl < 0 || j >= pos - c->wl) &&
           (c->wr < 0 || j <= pos + c->wr);
}

/* One pass over the keys with the online softmax (running max and sum,
 * rescaling the accumulator when the max grows): a different algorithm
 * from the reference's materialised two-pass softmax.  Arrays are
 * (rows, heads, d) with rows = batch * L (dense) or the packed total. */
static void attn_online(const attn_case *c, const double *q, const double *k, const double *v,
                        double *o, double *lse, int64_t nrows_q) {
    const int64_t H = c->H, Hkv = c->Hkv, d = c->d;
    const int64_t nb = c->nvl ? c->nvl : c->b;
    const double sc = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)d);
    int64_t q0 = 0, k0 = 0;
    for (int64_t s = 0; s < nb; s++) {
        const int64_t lq = c->nvl ? c->lq[s] : c->Lq, lk = c->nvl ? c->lk[s] : c->Lk;
        for (int64_t h = 0; h < H; h++) {
            const int64_t kvh = h / (H / Hkv);
            for (int64_t i = 0; i < lq; i++) {
                const double *qi = q + ((q0 + i) * H + h) * d;
                double *oi = o + ((q0 + i) * H + h) * d;
                double m = -INFINITY, l = 0.0;
                for (int64_t t = 0; t < d; t++) oi[t] = 0.0;
                for (int64_t j = 0; j < lk; j++) {
                    if (!visible(c, i, j, lq, lk)) continue;
                    const double *kj = k + ((k0 + j) * Hkv + kvh) * d;
                    const double *vj = v + ((k0 + j) * Hkv + kvh) * d;
                    double sv = 0.0;
                    for (int64_t t = 0; t < d; t++) sv += qi[t] * kj[t];
                    sv *= sc;
                    if (c->softcap > 0.0f) sv = c->softcap * tanh(sv / c->softcap);
                    if (c->alibi) sv -= slope_of(c, s, h) * fabs((double)(i + lk - lq - j));
                    if (sv > m) {
                        double corr = exp(m - sv); /* 0 on the first key */
                        l *= corr;
                        for (int64_t t = 0; t < d; t++) oi[t] *= corr;
                        m = sv;
                    }
                    double pj = exp(sv - m);
                    l += pj;
                    for (int64_t t = 0; t < d; t++) oi[t] += pj * vj[t];
                }
                if (l > 0.0)
                    for (int64_t t = 0; t < d; t++) oi[t] /= l;
                /* lse laid out as the library's: dense (b, H, Lq), varlen (H, total) */
                int64_t li = c->nvl ? h * nrows_q + q0 + i : (s * H + h) * lq + i;
                lse[li] = l > 0.0 ? m + log(l) : -INFINITY;
            }
        }
        q0 += lq;
        k0 += lk;
    }
}

typedef struct {
    tbuf q, k, v, o, lse, cq, ck, ali;
    sf_attn_fwd_params p;
    int64_t nq, nk; /* rows of q and of k (dense: b * L) */
} attn_setup;

static void attn_prepare(const attn_case *c, attn_setup *a, double *q, double *k, double *v) {
    memset(a, 0, sizeof *a);
    const int64_t H = c->H, Hkv = c->Hkv, d = c->d;
    int64_t tq = 0, tk = 0;
    for (int s = 0; s < c->nvl; s++) tq += c->lq[s], tk += c->lk[s];
    a->nq = c->nvl ? tq : c->b * c->Lq;
    a->nk = c->nvl ? tk : c->b * c->Lk;
    /* dense (b, L, H, d) and lse (b, H, Lq); varlen (total, H, d), lse (H, total) */
    const int r = c->nvl ? 3 : 4, o = c->nvl ? 1 : 0;
    const int64_t qs[4] = {c->b, c->Lq, H, d}, ks[4] = {c->b, c->Lk, Hkv, d};
    const int64_t qv[3] = {tq, H, d}, kv[3] = {tk, Hkv, d};
    const int64_t ls[3] = {c->b, H, c->Lq}, lv[2] = {H, tq};
    tb_new(&a->q, c->dt, r, o ? qv : qs, c->lay, 1, q);
    tb_new(&a->o, c->dt, r, o ? qv : qs, c->lay, 1, NULL);
    tb_new(&a->k, c->dt, r, o ? kv : ks, c->lay, 1, k);
    tb_new(&a->v, c->dt, r, o ? kv : ks, c->lay, 1, v);
    tb_new(&a->lse, SF_F32, r - 1, o ? lv : ls, c->lay, 0, NULL);
    tb_make(&a->cq, SF_I32, 1, (int64_t[]){c->nvl + 1}, LAY_DENSE, 1);
    tb_make(&a->ck, SF_I32, 1, (int64_t[]){c->nvl + 1}, LAY_DENSE, 1);
    double cq[8] = {0}, ck[8] = {0};
    for (int s = 0; s < c->nvl; s++) cq[s + 1] = cq[s] + (double)c->lq[s], ck[s + 1] = ck[s] + (double)c->lk[s];
    tb_put(&a->cq, cq);
    tb_put(&a->ck, ck);
    sf_attn_fwd_params_init(&a->p);
    a->p.q = a->q.t; a->p.k = a->k.t; a->p.v = a->v.t; a->p.out = a->o.t; a->p.lse = a->lse.t;
    if (c->nvl) {
        a->p.cu_seqlens_q = a->cq.t;
        a->p.cu_seqlens_k = a->ck.t;
    }
    if (c->alibi) {
        const int64_t nb = c->nvl ? c->nvl : c->b;
        double sl[64];
        for (int64_t s = 0; s < nb; s++)
            for (int64_t h = 0; h < H; h++) sl[s * H + h] = slope_of(c, s, h);
        if (c->alibi == 1)
            tb_new(&a->ali, SF_F32, 1, (int64_t[]){H}, LAY_DENSE, 0, sl);
        else
            tb_new(&a->ali, SF_F32, 2, (int64_t[]){nb, H}, c->lay, 0, sl);
        a->p.alibi_slopes = a->ali.t;
    }
    a->p.softcap = c->softcap;
    a->p.softmax_scale = c->scale;
    a->p.causal = c->causal;
    a->p.window_left = c->wl;
    a->p.window_right = c->wr;
    a->p.backend = SF_BACKEND_REF;
}

static void attn_release(attn_setup *a) {
    tbuf *all[] = {&a->q, &a->k, &a->v, &a->o, &a->lse, &a->cq, &a->ck, &a->ali};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tb_free(all[i]);
}

/* Random case: reference vs the online formulation, out and lse; rows
 * that see no key must be exactly 0 with lse -inf. */
static void run_attn_case(sf_ctx *ctx, const attn_case *c) {
    attn_setup a;
    int64_t tq = c->nvl ? 0 : c->b * c->Lq, tk = c->nvl ? 0 : c->b * c->Lk;
    for (int s = 0; s < c->nvl; s++) tq += c->lq[s], tk += c->lk[s];
    const int64_t nq = tq * c->H * c->d, nk = tk * c->Hkv * c->d, nl = tq * c->H;
    double *q = xcalloc((size_t)nq, sizeof(double)), *k = xcalloc((size_t)nk, sizeof(double));
    double *v = xcalloc((size_t)nk, sizeof(double));
    double *ow = xcalloc((size_t)nq, sizeof(double)), *og = xcalloc((size_t)nq, sizeof(double));
    double *lw = xcalloc((size_t)nl, sizeof(double)), *lg = xcalloc((size_t)nl, sizeof(double));
    fill_u(q, nq, -2, 2); /* wide enough that the softmax is far from uniform */
    fill_u(k, nk, -2, 2);
    fill_u(v, nk, -1, 1);
    attn_prepare(c, &a, q, k, v);
    attn_online(c, q, k, v, ow, lw, tq);
    sf_status s = sf_attn_fwd(ctx, &a.p);
    if (s != SF_OK) {
        FAILF("attn %s: sf_attn_fwd returned %s: %s", c->name, sf_status_string(s),
              sf_ctx_last_error(ctx));
    } else {
        char what[128];
        tb_get(&a.o, og);
        tb_get(&a.lse, lg);
        snprintf(what, sizeof what, "attn %s: out", c->name);
        double eo = expect_close(what, og, ow, nq, dtype_tol(c->dt));
        double worst = 0.0;
        int64_t masked = 0, bad_masked = 0;
        for (int64_t i = 0; i < nl; i++) {
            if (isinf(lw[i])) {
                masked++;
                if (!(isinf(lg[i]) && lg[i] < 0)) bad_masked++;
                continue;
            }
            double e = fabs(lg[i] - lw[i]);
            if (!(e <= worst)) worst = e;
        }
        /* exact zeros in the output rows of fully masked (row, head) pairs */
        for (int64_t r = 0; r < tq; r++)
            for (int64_t h = 0; h < c->H; h++) {
                int64_t li;
                if (c->nvl) {
                    li = h * tq + r;
                } else {
                    int64_t bi = r / c->Lq, i = r % c->Lq;
                    li = (bi * c->H + h) * c->Lq + i;
                }
                if (!isinf(lw[li])) continue;
                for (int64_t t = 0; t < c->d; t++)
                    if (og[(r * c->H + h) * c->d + t] != 0.0) bad_masked++;
            }
        if (!(worst <= 1e-5)) FAILF("attn %s: lse off by %.3e", c->name, worst);
        if (bad_masked)
            FAILF("attn %s: %lld outputs of fully masked rows are not 0 / lse not -inf", c->name,
                  (long long)bad_masked);
        if (!tb_guard_ok(&a.o) || !tb_guard_ok(&a.lse))
            FAILF("attn %s: written outside the output views", c->name);
        printf("  attn %-26s out err %.1e  lse err %.1e  (%lld rows see no key)\n", c->name, eo,
               worst, (long long)masked);
    }
    attn_release(&a);
    free(q); free(k); free(v); free(ow); free(og); free(lw); free(lg);
}

/* One head, d = 2, Lq = 2, Lk = 3, scale 1.  Keys are chosen so every
 * exp(score) is an integer:
 *   q0 = (1, 0): scores (0, ln2, ln3) -> weights (1, 2, 3) / 6, lse ln 6
 *   q1 = (0, 1): scores (0, ln3, 0)   -> weights (1, 3, 1) / 5, lse ln 5
 * v0 = (1, 0), v1 = (0, 1), v2 = (1, 1).  Causal, bottom-right aligned:
 * row 0 sits at key 1 and sees keys 0..1 -> weights (1, 2) / 3, lse ln 3;
 * row 1 sees all three. */
static void run_attn_hand(sf_ctx *ctx) {
    const attn_case c = {"hand", 1, 1, 1, 2, 2, 3, 0, {0}, {0}, 0, -1, -1, 1.0f, LAY_DENSE, SF_F32, 0.0f, 0};
    double q[4] = {1, 0, 0, 1};
    double k[6] = {0, 0, log(2.0), log(3.0), log(3.0), 0};
    double v[6] = {1, 0, 0, 1, 1, 1};
    const double want_out[2][4] = {
        {(1.0 + 3.0) / 6.0, (2.0 + 3.0) / 6.0, (1.0 + 1.0) / 5.0, (3.0 + 1.0) / 5.0},
        {1.0 / 3.0, 2.0 / 3.0, (1.0 + 1.0) / 5.0, (3.0 + 1.0) / 5.0}};
    const double want_lse[2][2] = {{log(6.0), log(5.0)}, {log(3.0), log(5.0)}};
    for (int causal = 0; causal < 2; causal++) {
        attn_case cc = c;
        cc.causal = causal;
        attn_setup a;
        attn_prepare(&cc, &a, q, k, v);
        sf_status s = sf_attn_fwd(ctx, &a.p);
        if (s != SF_OK) {
            FAILF("attn hand (causal %d): %s: %s", causal, sf_status_string(s), sf_ctx_last_error(ctx));
        } else {
            double o[4], l[2];
            tb_get(&a.o, o);
            tb_get(&a.lse, l);
            for (int i = 0; i < 4; i++)
                if (!(fabs(o[i] - want_out[causal][i]) <= 1e-6))
                    FAILF("attn hand (causal %d): out[%d] = %.9f, want %.9f", causal, i, o[i],
                          want_out[causal][i]);
            for (int i = 0; i < 2; i++)
                if (!(fabs(l[i] - want_lse[causal][i]) <= 1e-6))
                    FAILF("attn hand (causal %d): lse[%d] = %.9f, want %.9f", causal, i, l[i],
                          want_lse[causal][i]);
            printf("  attn hand-computed (causal %d)       ok\n", causal);
        }
        attn_release(&a);
    }
}

/* GQA: V of kv head g is the constant g + 1, so every output element of
 * query head h must be h / (H / Hkv) + 1 whatever the softmax weights. */
static void run_attn_gqa(sf_ctx *ctx) {
    const int64_t hkvs[3] = {1, 2, 4};
    for (int r = 0; r < 3; r++) {
        attn_case c = {"gqa", 2, 8, hkvs[r], 8, 5, 7, 0, {0}, {0}, 0, -1, -1, 0.0f, LAY_PAD, SF_F32, 0.0f, 0};
        const int64_t nq = c.b * c.Lq * c.H * c.d, nk = c.b * c.Lk * c.Hkv * c.d;
        double *q = xcalloc((size_t)nq, sizeof(double)), *k = xcalloc((size_t)nk, sizeof(double));
        double *v = xcalloc((size_t)nk, sizeof(double)), *o = xcalloc((size_t)nq, sizeof(double));
        fill_u(q, nq, -2, 2);
        fill_u(k, nk, -2, 2);
        for (int64_t i = 0; i < nk; i++) v[i] = (double)((i / c.d) % c.Hkv + 1);
        attn_setup a;
        attn_prepare(&c, &a, q, k, v);
        sf_status s = sf_attn_fwd(ctx, &a.p);
        if (s != SF_OK) {
            FAILF("attn gqa Hkv=%lld: %s: %s", (long long)c.Hkv, sf_status_string(s),
                  sf_ctx_last_error(ctx));
        } else {
            tb_get(&a.o, o);
            int64_t bad = 0;
            for (int64_t i = 0; i < nq; i++) {
                int64_t h = (i / c.d) % c.H;
                if (!(fabs(o[i] - (double)(h / (c.H / c.Hkv) + 1)) <= 1e-6)) bad++;
            }
            if (bad) FAILF("attn gqa H=8 Hkv=%lld: %lld outputs read the wrong kv head",
                           (long long)c.Hkv, (long long)bad);
            else printf("  attn gqa mapping H=8 Hkv=%lld           ok\n", (long long)c.Hkv);
        }
        attn_release(&a);
        free(q); free(k); free(v); free(o);
    }
}

void run_attn_tests(sf_ctx *ctx) {
    run_attn_hand(ctx);
    run_attn_gqa(ctx);
    /*  name                     b  H Hkv  d  Lq  Lk nvl lq               lk               ca  wl  wr scale lay */
    static const attn_case cases[] = {
        {"dense MHA", 2, 4, 4, 16, 13, 13, 0, {0}, {0}, 0, -1, -1, 0.0f, LAY_DENSE, SF_F32, 0.0f, 0},
        {"causal Lq<Lk GQA padded", 2, 6, 2, 8, 5, 11, 0, {0}, {0}, 1, -1, -1, 0.0f, LAY_PAD, SF_F32, 0.0f, 0},
        {"causal Lq>Lk MQA", 1, 4, 1, 8, 9, 4, 0, {0}, {0}, 1, -1, -1, 0.0f, LAY_DENSE, SF_F32, 0.0f, 0},
        {"window (3,2) permuted", 2, 2, 2, 12, 17, 17, 0, {0}, {0}, 0, 3, 2, 0.0f, LAY_PERM, SF_F32, 0.0f, 0},
        {"causal + window_left 2", 1, 4, 2, 16, 20, 24, 0, {0}, {0}, 1, 2, -1, 0.0f, LAY_DENSE, SF_F32, 0.0f, 0},
        {"window (1,1) Lq>Lk", 1, 2, 1, 4, 6, 2, 0, {0}, {0}, 0, 1, 1, 0.0f, LAY_DENSE, SF_F32, 0.0f, 0},
        {"window (0,-1)", 1, 2, 2, 8, 10, 10, 0, {0}, {0}, 0, 0, -1, 0.5f, LAY_DENSE, SF_F32, 0.0f, 0},
        {"varlen causal padded", 0, 4, 2, 8, 0, 0, 4, {3, 0, 5, 1}, {5, 4, 0, 7}, 1, -1, -1, 0.0f, LAY_PAD, SF_F32, 0.0f, 0},
        {"varlen scale 0.3", 0, 4, 2, 8, 0, 0, 4, {3, 0, 5, 1}, {5, 4, 0, 7}, 0, -1, -1, 0.3f, LAY_DENSE, SF_F32, 0.0f, 0},
        {"bf16 causal", 2, 4, 2, 32, 19, 19, 0, {0}, {0}, 1, -1, -1, 0.0f, LAY_DENSE, SF_BF16, 0.0f, 0},
        {"f16 varlen causal", 0, 4, 1, 64, 0, 0, 3, {9, 1, 4}, {12, 1, 0}, 1, -1, -1, 0.0f, LAY_PAD, SF_F16, 0.0f, 0},
        {"head dim 256", 1, 2, 1, 256, 7, 9, 0, {0}, {0}, 0, -1, -1, 0.0f, LAY_DENSE, SF_F32, 0.0f, 0},
        {"softcap 1.5", 2, 4, 2, 16, 13, 13, 0, {0}, {0}, 0, -1, -1, 2.0f, LAY_DENSE, SF_F32, 1.5f, 0},
        {"alibi causal Lq<Lk", 2, 4, 2, 8, 5, 11, 0, {0}, {0}, 1, -1, -1, 0.0f, LAY_PAD, SF_F32, 0.0f, 1},
        {"alibi (b,H) window Lq>Lk", 2, 2, 1, 12, 9, 6, 0, {0}, {0}, 0, 3, 2, 0.0f, LAY_PERM, SF_F32, 0.0f, 2},
        {"varlen alibi (b,H) + cap", 0, 4, 2, 7, 0, 0, 4, {3, 0, 5, 1}, {5, 4, 0, 7}, 1, -1, -1, 0.0f, LAY_PAD, SF_F32, 4.0f, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_attn_case(ctx, &cases[i]);

    /* the naive reference materialises the whole score matrix: its
     * workspace peak must show at least Lq * Lk doubles */
    attn_case big = {"peak", 1, 1, 1, 8, 96, 80, 0, {0}, {0}, 0, -1, -1, 0.0f, LAY_DENSE, SF_F32, 0.0f, 0};
    sf_ctx_reset_workspace_peak(ctx);
    run_attn_case(ctx, &big);
    if (sf_ctx_workspace_peak(ctx) < (size_t)(96 * 80) * sizeof(double))
        FAILF("attn ref: workspace peak %zu bytes is below the %zu-byte score matrix",
              sf_ctx_workspace_peak(ctx), (size_t)(96 * 80) * sizeof(double));
}

