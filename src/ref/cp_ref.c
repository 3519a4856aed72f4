/* cp_ref.c - reference (test-oracle) pieces of context parallelism: the
 * slice log-decay, the entering-state correction, the combine over ranks
 * and the lse merge.  Plain loops over the documented formulas, every sum
 * and exponent in double, tensors read through their own strides. */
#include "cp.h"

#include <math.h>

/* dt processing of sf_ssd_fwd's reference, in double (comparisons so a
 * NaN stays NaN). */
/* min(dt A, 0) of token t, head h of row b. */
static double cp_ref_decay(const sf_cp_ssd_problem *pr, int64_t b, int64_t t, int64_t h) {
    const sf_ssd_fwd_params *p = pr->p;
    const sf_tensor *dtt = &p->dt;
    const double A = (double)sf_ldf(p->A.data, p->A.dtype, h * p->A.stride[0]);
    const double bias =
        pr->has_dt_bias ? (double)sf_ldf(p->dt_bias.data, p->dt_bias.dtype, h * p->dt_bias.stride[0])
                        : 0.0;
    double dt = (double)sf_ldf(dtt->data, dtt->dtype, sf_off3(dtt, b, t, h));
    dt = sf_dt_process_d(dt, bias, p->dt_softplus, (double)p->dt_min, (double)p->dt_max);
    const double e = dt * A;
    return e < 0.0 ? e : 0.0;
}

sf_status sf_ref_cp_logdecay(sf_ctx *ctx, const sf_cp_ssd_problem *pr) {
    (void)ctx;
    const sf_tensor *ld = &pr->logdecay;
    for (int64_t b = 0; b < pr->batch; b++)
        for (int64_t h = 0; h < pr->nheads; h++) {
            double g = 0.0;
            for (int64_t t = 0; t < pr->seqlen; t++) g += cp_ref_decay(pr, b, t, h);
            sf_stf(ld->data, ld->dtype, sf_off2(ld, b, h), (float)g);
        }
    return SF_OK;
}

sf_status sf_ref_cp_correct(sf_ctx *ctx, const sf_cp_ssd_problem *pr) {
    (void)ctx;
    const sf_ssd_fwd_params *p = pr->p;
    const sf_tensor *C = &p->C, *z = &p->z, *out = &p->out, *hin = &pr->h_in;
    const int64_t P = pr->headdim, N = pr->dstate;
    for (int64_t b = 0; b < pr->batch; b++)
        for (int64_t h = 0; h < pr->nheads; h++) {
            const int64_t grp = h / pr->heads_per_group;
            double g = 0.0;
            for (int64_t t = 0; t < pr->seqlen; t++) {
                g += cp_ref_decay(pr, b, t, h); /* inclusive: token t decays h_in too */
                const double e = exp(g);
                for (int64_t i = 0; i < P; i++) {
                    double dot = 0.0;
                    for (int64_t n = 0; n < N; n++)
                        dot += (double)sf_ldf(C->data, C->dtype, sf_off4(C, b, t, grp, n)) *
                               (double)sf_ldf(hin->data, hin->dtype, sf_off4(hin, b, h, i, n));
                    double y = e * dot;
                    if (pr->has_z) {
                        const double zv = (double)sf_ldf(z->data, z->dtype, sf_off4(z, b, t, h, i));
                        y *= zv / (1.0 + exp(-zv));
                    }
                    const int64_t o = sf_off4(out, b, t, h, i);
                    sf_stf(out->data, out->dtype, o, (float)((double)sf_ldf(out->data, out->dtype, o) + y));
                }
            }
        }
    if (!pr->has_final) return SF_OK;
    const sf_tensor *fin = &p->final_states, *st = &pr->state_local, *ld = &pr->logdecay;
    for (int64_t b = 0; b < pr->batch; b++)
        for (int64_t h = 0; h < pr->nheads; h++) {
            const double w = exp((double)sf_ldf(ld->data, ld->dtype, sf_off2(ld, b, h)));
            for (int64_t i = 0; i < P; i++)
                for (int64_t n = 0; n < N; n++) {
                    const double v =
                        w * (double)sf_ldf(hin->data, hin->dtype, sf_off4(hin, b, h, i, n)) +
                        (double)sf_ldf(st->data, st->dtype, sf_off4(st, b, h, i, n));
                    sf_stf(fin->data, fin->dtype, sf_off4(fin, b, h, i, n), (float)v);
                }
        }
    return SF_OK;
}

sf_status sf_ref_cp_combine(sf_ctx *ctx, const sf_cp_combine_problem *pr) {
    (void)ctx;
    const sf_tensor *S = &pr->states_all, *ld = &pr->logdecay_all, *hin = &pr->h_in;
    for (int64_t b = 0; b < pr->batch; b++)
        for (int64_t h = 0; h < pr->nheads; h++)
            for (int64_t i = 0; i < pr->headdim; i++)
                for (int64_t n = 0; n < pr->dstate; n++) {
                    /* h <- exp(ld_q) h + S_q over q < rank: the jump formula
                     * sum_q exp(sum_{q<k<rank} ld_k) S_q, one rank at a time */
                    double v = 0.0;
                    for (int64_t q = 0; q < pr->rank; q++) {
                        const double w = exp((double)sf_ldf(ld->data, ld->dtype, sf_off3(ld, q, b, h)));
                        const int64_t so = q * S->stride[0] + b * S->stride[1] +
                                           h * S->stride[2] + i * S->stride[3] + n * S->stride[4];
                        v = w * v + (double)sf_ldf(S->data, S->dtype, so);
                    }
                    sf_stf(hin->data, hin->dtype, sf_off4(hin, b, h, i, n), (float)v);
                }
    return SF_OK;
}

sf_status sf_ref_cp_merge(sf_ctx *ctx, const sf_cp_merge_problem *pr) {
    (void)ctx;
    const sf_tensor *ao = &pr->a_out, *al = &pr->a_lse, *bo = &pr->b_out, *bl = &pr->b_lse;
    const sf_tensor *dout = &pr->dst_out, *dl = &pr->dst_lse;
    const int has_b = bo->data != NULL;
    for (int64_t b = 0; b < pr->batch; b++)
        for (int64_t l = 0; l < pr->seqlen; l++)
            for (int64_t h = 0; h < pr->nheads; h++) {
                const double la = (double)sf_ldf(al->data, al->dtype, sf_off3(al, b, h, l));
                const double lb =
                    has_b ? (double)sf_ldf(bl->data, bl->dtype, sf_off3(bl, b, h, l)) : -INFINITY;
                /* An empty side (lse -inf) has weight 0 and its out is not
                 * read: it may hold garbage, and 0 * NaN would be NaN. */
                const double m = la > lb ? la : lb;
                double wa = 0.0, wb = 0.0, lse = -INFINITY;
                if (m > -INFINITY) {
                    wa = la > -INFINITY ? exp(la - m) : 0.0;
                    wb = lb > -INFINITY ? exp(lb - m) : 0.0;
                    lse = m + log(wa + wb);
                }
                for (int64_t e = 0; e < pr->headdim; e++) {
                    double v = 0.0;
                    if (wa > 0.0) v += wa * (double)sf_ldf(ao->data, ao->dtype, sf_off4(ao, b, l, h, e));
                    if (wb > 0.0) v += wb * (double)sf_ldf(bo->data, bo->dtype, sf_off4(bo, b, l, h, e));
                    if (wa + wb > 0.0) v /= wa + wb;
                    sf_stf(dout->data, dout->dtype, sf_off4(dout, b, l, h, e), (float)v);
                }
                sf_stf(dl->data, dl->dtype, sf_off3(dl, b, h, l), (float)lse);
            }
    return SF_OK;
}
