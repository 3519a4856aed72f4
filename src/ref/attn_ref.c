/* attn_ref.c - reference (test-oracle) softmax attention forward.
 *
 * Deliberately the naive algorithm: for each (batch entry, head) the whole
 * Lq x Lk score matrix is materialised in double, masked, soft-maxed with
 * the max subtracted, and multiplied by V.  O(Lq * Lk) memory, taken from
 * the workspace arena so the CLI can report it next to FlashAttention's
 * O(N).  Serves dense (b, L, H, d) and varlen (total, H, d) layouts with
 * any strides.
 */
#include "internal.h"

#include <math.h>

/* Offset of element (batch b, row r, head h, dim 0) of q/k/v/out: rank 4
 * dense (b, L, H, d) or rank 3 varlen (total, H, d) with r absolute. */
static int64_t row_off(const sf_tensor *t, int varlen, int64_t b, int64_t r, int64_t h) {
    return varlen ? sf_off3(t, r, h, 0) : sf_off4(t, b, r, h, 0);
}

sf_status sf_ref_attn_fwd(sf_ctx *ctx, const sf_attn_problem *pr) {
    const sf_attn_fwd_params *p = pr->p;
    const int64_t H = pr->nheads, Hkv = pr->nheads_kv, d = pr->headdim;
    const int64_t mq = pr->max_lq, mk = pr->max_lk;
    const int vl = pr->varlen;
    if (H <= 0 || d < 0) return SF_OK;
    const int64_t group = Hkv > 0 ? H / Hkv : 1;

    /* Workspace in doubles: the score matrix (mq * mk), K and V of one kv
     * head converted once (2 * mk * d), the current query row and its
     * output accumulator (2 * d).  Sized in 64 bits, checked against the
     * largest allocation size. */
    const double lim = (double)(SIZE_MAX / sizeof(double)) / 2.0;
    const double want = (double)mq * (double)mk + 2.0 * (double)mk * (double)d + 2.0 * (double)d;
    if (want > lim || want > (double)(INT64_MAX / 16))
        return sf_fail(ctx, SF_ERR_TOO_LARGE,
                       "attention ref: the %lld x %lld score matrix does not fit in memory",
                       (long long)mq, (long long)mk);
    size_t nd = (size_t)mq * (size_t)mk + 2 * (size_t)mk * (size_t)d + 2 * (size_t)d + 1;
    double *S = (double *)sf_ws_get(ctx, nd * sizeof(double));
    if (S == NULL) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
    double *Kd = S + mq * mk;
    double *Vd = Kd + mk * d;
    double *qrow = Vd + mk * d;
    double *acc = qrow + d;

    const sf_tensor *q = &p->q, *k = &p->k, *v = &p->v, *o = &p->out, *lse = &p->lse;
    const int64_t qd = q->stride[q->rank - 1], kd = k->stride[k->rank - 1];
    const int64_t vd = v->stride[v->rank - 1], od = o->stride[o->rank - 1];
    const double scale = (double)pr->scale;

    for (int64_t b = 0; b < pr->batch; b++) {
        int64_t q0, lq, k0, lk;
        sf_attn_seq(pr, b, &q0, &lq, &k0, &lk);
        if (lq <= 0) continue;
        /* defensive: the core computed the maxima from the same cu_seqlens */
        if (lq > mq || lk > mk)
            return sf_fail(ctx, SF_ERR_INTERNAL, "attention ref: sequence longer than max");

        int64_t kvh_loaded = -1;
        for (int64_t h = 0; h < H; h++) {
            const int64_t kvh = h / group;
            if (kvh != kvh_loaded) { /* consecutive heads share a kv head */
                for (int64_t j = 0; j < lk; j++) {
                    const int64_t ko = row_off(k, vl, b, k0 + j, kvh);
                    const int64_t vo = row_off(v, vl, b, k0 + j, kvh);
                    for (int64_t c = 0; c < d; c++) {
                        Kd[j * d + c] = (double)sf_ldf(k->data, k->dtype, ko + c * kd);
                        Vd[j * d + c] = (double)sf_ldf(v->data, v->dtype, vo + c * vd);
                    }
                }
                kvh_loaded = kvh;
            }

            /* 1. scores, every entry of the Lq x Lk matrix, softcap and
             *    ALiBi applied; masked ones hold -inf, as the naive
             *    algorithm writes them */
            const double slope = pr->alibi ? (double)pr->alibi[b * pr->alibi_sb + h * pr->alibi_sh] : 0.0;
            for (int64_t i = 0; i < lq; i++) {
                int64_t lo, hi;
                sf_attn_key_range(pr, i, lq, lk, &lo, &hi);
                const int64_t qo = row_off(q, vl, b, q0 + i, h);
                for (int64_t c = 0; c < d; c++)
                    qrow[c] = (double)sf_ldf(q->data, q->dtype, qo + c * qd);
                double *srow = S + i * lk;
                for (int64_t j = 0; j < lk; j++) {
                    if (j < lo || j >= hi) {
                        srow[j] = -INFINITY;
                        continue;
                    }
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; c++) dot += qrow[c] * Kd[j * d + c];
                    srow[j] = sf_attn_score_mod(pr, dot * scale, slope, i, j, lq, lk);
                }
            }

            /* 2. softmax per row (max subtracted, so every exp argument is
             *    <= 0) and 3. out = P V, lse = m + log(l) */
            for (int64_t i = 0; i < lq; i++) {
                double *srow = S + i * lk;
                int64_t lo, hi;
                sf_attn_key_range(pr, i, lq, lk, &lo, &hi);
                /* the max over the visible keys; a NaN score makes m NaN
                 * (fmax would drop it) so bad inputs stay visible */
                double m = -INFINITY;
                for (int64_t j = lo; j < hi; j++)
                    m = (srow[j] > m || isnan(srow[j])) ? srow[j] : m;
                const int64_t oo = row_off(o, vl, b, q0 + i, h);
                float lsev;
                if (lo >= hi) { /* no visible key: out 0, lse -inf */
                    for (int64_t c = 0; c < d; c++) sf_stf(o->data, o->dtype, oo + c * od, 0.0f);
                    lsev = -INFINITY;
                } else {
                    double l = 0.0;
                    for (int64_t j = 0; j < lk; j++) {
                        /* masked entries become probability 0 exactly */
                        srow[j] = (j < lo || j >= hi) ? 0.0 : exp(srow[j] - m);
                        l += srow[j];
                    }
                    for (int64_t c = 0; c < d; c++) acc[c] = 0.0;
                    for (int64_t j = lo; j < hi; j++)
                        for (int64_t c = 0; c < d; c++) acc[c] += srow[j] * Vd[j * d + c];
                    for (int64_t c = 0; c < d; c++)
                        sf_stf(o->data, o->dtype, oo + c * od, (float)(acc[c] / l));
                    lsev = (float)(m + log(l));
                }
                if (pr->has_lse) {
                    const int64_t lso = vl ? sf_off2(lse, h, q0 + i) : sf_off3(lse, b, h, i);
                    sf_stf(lse->data, lse->dtype, lso, lsev);
                }
            }
        }
    }
    return SF_OK;
}
