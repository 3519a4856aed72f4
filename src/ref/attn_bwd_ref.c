/* attn_bwd_ref.c - reference (test-oracle) attention backward.
 *
 * The naive algorithm in double, one query row at a time: recompute the
 * row's raw scores t_j = scale q.k_j, the modified scores s_j (softcap,
 * ALiBi) and P_j = exp(s_j - lse) from the given lse; then
 *     D = dO . O,  dP_j = dO . v_j,  dS_j = P_j (dP_j - D),
 *     dT_j = dS_j (1 - tanh^2(t_j / cap))   (softcap; 1 without),
 *     dq += scale dT_j k_j,  dk_j += scale dT_j q,  dv_j += P_j dO.
 * ALiBi's bias is a constant of (i, j): it passes dS through unchanged.
 * A row with no visible key (or lse = -inf) contributes nothing.  dk and dv
 * of a kv head are summed in double over its group's query heads before
 * they are rounded once.  Workspace: K, V, dK, dV of one kv head and a few
 * rows, O(Lk d) doubles.
 */
#include "attn_bwd.h"

#include <math.h>

static int64_t row_off(const sf_tensor *t, int varlen, int64_t b, int64_t r, int64_t h) {
    return varlen ? sf_off3(t, r, h, 0) : sf_off4(t, b, r, h, 0);
}

static void load_row(const sf_tensor *t, int64_t off, int64_t d, double *dst) {
    const int64_t s = t->stride[t->rank - 1];
    for (int64_t c = 0; c < d; c++) dst[c] = (double)sf_ldf(t->data, t->dtype, off + c * s);
}

static void store_row(const sf_tensor *t, int64_t off, int64_t d, const double *src) {
    const int64_t s = t->stride[t->rank - 1];
    for (int64_t c = 0; c < d; c++) sf_stf(t->data, t->dtype, off + c * s, (float)src[c]);
}

sf_status sf_ref_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_problem *bp) {
    const sf_attn_problem *pr = &bp->f;
    const sf_attn_fwd_params *f = pr->p;
    const sf_attn_bwd_params *p = bp->p;
    const int64_t H = pr->nheads, Hkv = pr->nheads_kv, d = pr->headdim;
    const int64_t mk = pr->max_lk;
    const int vl = pr->varlen;
    const int64_t group = H / Hkv;

    /* K, V, dK, dV of one kv head (4 mk d) and q, dO, O, dq rows (4 d) */
    const double want = 4.0 * (double)mk * (double)d + 4.0 * (double)d + 1.0;
    if (want * sizeof(double) > (double)(SIZE_MAX / 2))
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "attention backward ref: %lld keys of dim %lld do not fit",
                       (long long)mk, (long long)d);
    double *Kd = (double *)sf_ws_get(ctx, (size_t)want * sizeof(double));
    if (Kd == NULL) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
    double *Vd = Kd + mk * d, *dKd = Vd + mk * d, *dVd = dKd + mk * d;
    double *qr = dVd + mk * d, *dor = qr + d, *orow = dor + d, *dqr = orow + d;
    const double scale = (double)pr->scale, cap = (double)pr->softcap;

    for (int64_t b = 0; b < pr->batch; b++) {
        int64_t q0, lq, k0, lk;
        sf_attn_seq(pr, b, &q0, &lq, &k0, &lk);
        if (lq > pr->max_lq || lk > mk)
            return sf_fail(ctx, SF_ERR_INTERNAL, "attention backward ref: sequence longer than max");
        for (int64_t kvh = 0; kvh < Hkv; kvh++) {
            for (int64_t j = 0; j < lk; j++) {
                load_row(&f->k, row_off(&f->k, vl, b, k0 + j, kvh), d, Kd + j * d);
                load_row(&f->v, row_off(&f->v, vl, b, k0 + j, kvh), d, Vd + j * d);
            }
            for (int64_t x = 0; x < lk * d; x++) dKd[x] = dVd[x] = 0.0;
            for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
                const double slope =
                    pr->alibi ? (double)pr->alibi[b * pr->alibi_sb + h * pr->alibi_sh] : 0.0;
                for (int64_t i = 0; i < lq; i++) {
                    for (int64_t c = 0; c < d; c++) dqr[c] = 0.0;
                    int64_t lo, hi;
                    sf_attn_key_range(pr, i, lq, lk, &lo, &hi);
                    const int64_t lso = vl ? sf_off2(&f->lse, h, q0 + i) : sf_off3(&f->lse, b, h, i);
                    const double lse = (double)sf_ldf(f->lse.data, f->lse.dtype, lso);
                    if (lo < hi && lse != -INFINITY) {
                        load_row(&f->q, row_off(&f->q, vl, b, q0 + i, h), d, qr);
                        load_row(&p->dout, row_off(&p->dout, vl, b, q0 + i, h), d, dor);
                        load_row(&f->out, row_off(&f->out, vl, b, q0 + i, h), d, orow);
                        double D = 0.0;
                        for (int64_t c = 0; c < d; c++) D += dor[c] * orow[c];
                        for (int64_t j = lo; j < hi; j++) {
                            const double *kj = Kd + j * d, *vj = Vd + j * d;
                            double t = 0.0, dp = 0.0;
                            for (int64_t c = 0; c < d; c++) {
                                t += qr[c] * kj[c];
                                dp += dor[c] * vj[c];
                            }
                            t *= scale;
                            const double s = sf_attn_score_mod(pr, t, slope, i, j, lq, lk);
                            const double P = exp(s - lse);
                            double dT = P * (dp - D);
                            if (cap > 0.0) {
                                const double th = tanh(t / cap);
                                dT *= 1.0 - th * th;
                            }
                            double *dkj = dKd + j * d, *dvj = dVd + j * d;
                            for (int64_t c = 0; c < d; c++) {
                                dqr[c] += scale * dT * kj[c];
                                dkj[c] += scale * dT * qr[c];
                                dvj[c] += P * dor[c];
                            }
                        }
                    }
                    store_row(&p->dq, row_off(&p->dq, vl, b, q0 + i, h), d, dqr);
                }
            }
            for (int64_t j = 0; j < lk; j++) {
                store_row(&p->dk, row_off(&p->dk, vl, b, k0 + j, kvh), d, dKd + j * d);
                store_row(&p->dv, row_off(&p->dv, vl, b, k0 + j, kvh), d, dVd + j * d);
            }
        }
    }
    return SF_OK;
}
