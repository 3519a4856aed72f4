/* ssd_bwd_ref.c - reference (test-oracle) Mamba-2 SSD backward.
 *
 * The forward's sequential recurrence (ssd_ref.c) differentiated and run
 * backwards, token by token, in double.  Per (segment, head), with
 * a_t = exp(min(dt_t A, 0)):
 *     h_t = a_t h_{t-1} + dt_t x_t B_t^T,   y_t = h_t C_t + D x_t,
 *     out_t = y_t silu(z_t)
 * the adjoint of the state, G_t = dL/dh_t, obeys
 *     G_t = dy_t C_t^T + a_{t+1} G_{t+1},   G_end = dfinal_states,
 * and each token's gradients read G_t, h_t and h_{t-1}:
 *     dC_t = h_t^T dy_t,  dB_t = dt_t G_t^T x_t,  dx_t = dt_t G_t B_t + D dy_t,
 *     d(dt_t) = x_t^T G_t B_t + A a_t <G_t, h_{t-1}> [dt_t A < 0],
 *     dA += dt_t a_t <G_t, h_{t-1}> [dt_t A < 0],
 *     dinitial_states = a_start G_start.
 * d(dt) then goes back through the clamp (0 where it is active), softplus
 * (times sigmoid below torch's threshold 20) and the bias (ddt_bias sums
 * it).  The states h_{t-1} are needed in reverse order: the forward is run
 * once keeping the state at every REF_BLOCK-th token, and each block's
 * states are recomputed from its checkpoint as the backward reaches it
 * (memory O((len / block + block) P N) rather than O(len P N)). */
#include "ssd_bwd.h"

#include <math.h>

enum { REF_BLOCK = 64 };

/* silu(z) and its derivative. */
static void ref_silu(double z, double *s, double *ds) {
    const double sg = 1.0 / (1.0 + exp(-z));
    *s = z * sg;
    *ds = sg * (1.0 + z * (1.0 - sg));
}

/* The gradient with respect to the raw dt of one with respect to the
 * processed one, as sf_dt_process_d maps raw to processed. */
static double ref_ddt_raw(double g, double raw, double bias, int softplus, double dmin, double dmax) {
    const double v = raw + bias;
    const double u = softplus ? (v > 20.0 ? v : log1p(exp(v))) : v;
    if (u < dmin || u > dmax) return 0.0; /* clamped: constant in dt */
    if (softplus && v <= 20.0) g *= 1.0 / (1.0 + exp(-v));
    return g;
}

sf_status sf_ref_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *bp) {
    const sf_ssd_problem *pr = &bp->f;
    const sf_ssd_bwd_params *q = bp->p;
    const sf_ssd_fwd_params *p = &q->fwd;
    const int64_t P = pr->headdim, N = pr->dstate, H = pr->nheads, G = pr->ngroups;
    const int64_t Lr = pr->seqlen, nb = pr->batch;
    if (pr->seg == NULL) return sf_fail(ctx, SF_ERR_INTERNAL, "ssd bwd ref: no host segment list");

    int64_t maxlen = 0;
    for (int64_t s = 0; s < pr->nseg; s++)
        if (pr->seg[s].end - pr->seg[s].start > maxlen) maxlen = pr->seg[s].end - pr->seg[s].start;
    const int64_t nblk_max = (maxlen + REF_BLOCK - 1) / REF_BLOCK;
    const int64_t PN = P * N;
    /* Workspace (double): the checkpoints, one block of states (+1 for the
     * state entering it), the adjoint G, this token's B and C, the sums
     * over a group's heads of dB and dC (b, L, G, N), and dA, dD, ddt_bias. */
    size_t nd = 0, nbc = (size_t)nb * (size_t)Lr * (size_t)G * (size_t)N;
    const size_t o_ck = nd;
    nd += (size_t)nblk_max * (size_t)PN;
    const size_t o_st = nd;
    nd += (size_t)(REF_BLOCK + 1) * (size_t)PN;
    const size_t o_G = nd;
    nd += (size_t)PN;
    const size_t o_bc = nd;
    nd += 2 * (size_t)N;
    const size_t o_dB = nd;
    nd += 2 * nbc;
    const size_t o_red = nd;
    nd += (size_t)H * (2 + (size_t)P);
    double *ws = (double *)sf_ws_get(ctx, nd * sizeof(double));
    if (ws == NULL) return SF_ERR_OUT_OF_MEMORY;
    double *ck = ws + o_ck, *st = ws + o_st, *Gs = ws + o_G, *bt = ws + o_bc, *ct = bt + N;
    double *sdB = ws + o_dB, *sdC = sdB + nbc;
    double *sdA = ws + o_red, *sdtb = sdA + H, *sdD = sdtb + H; /* dD: (H, P) even when D is (H) */
    for (size_t i = 0; i < 2 * nbc; i++) sdB[i] = 0.0;
    for (size_t i = 0; i < (size_t)H * (2 + (size_t)P); i++) sdA[i] = 0.0;

    const double dmin = (double)p->dt_min, dmax = (double)p->dt_max;
    const sf_tensor *x = &p->x, *dtt = &p->dt, *A = &p->A, *B = &p->B, *C = &p->C, *z = &p->z;
    const sf_tensor *D = &p->D, *init = &p->initial_states, *dout = &q->dout, *dfin = &q->dfinal_states;
    const int want_dB = q->dB.data != NULL, want_dC = q->dC.data != NULL;

    for (int64_t s = 0; s < pr->nseg; s++) {
        const sf_ssd_segment *sg = &pr->seg[s];
        const int64_t b = sg->b, len = sg->end - sg->start;
        const int64_t nblk = (len + REF_BLOCK - 1) / REF_BLOCK;
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / pr->heads_per_group;
            const double Ah = (double)sf_ldf(A->data, A->dtype, h * A->stride[0]);
            const double bias =
                pr->has_dt_bias ? (double)sf_ldf(p->dt_bias.data, p->dt_bias.dtype, h * p->dt_bias.stride[0])
                                : 0.0;
            /* processed dt and decay of token t */
#define REF_DT(t, dtv, av, live)                                                                       \
    do {                                                                                               \
        dtv = sf_dt_process_d((double)sf_ldf(dtt->data, dtt->dtype, sf_off3(dtt, b, (t), h)), bias,    \
                              p->dt_softplus, dmin, dmax);                                             \
        const double e_ = dtv * Ah;                                                                    \
        live = e_ < 0.0;                                                                               \
        av = exp(live ? e_ : 0.0);                                                                     \
    } while (0)
#define REF_STEP(t, prev, next)                                                                        \
    do {                                                                                               \
        double dtv_, av_;                                                                              \
        int live_;                                                                                     \
        REF_DT(t, dtv_, av_, live_);                                                                   \
        for (int64_t n = 0; n < N; n++) bt[n] = (double)sf_ldf(B->data, B->dtype, sf_off4(B, b, (t), g, n)); \
        for (int64_t i = 0; i < P; i++) {                                                              \
            const double xd = dtv_ * (double)sf_ldf(x->data, x->dtype, sf_off4(x, b, (t), h, i));     \
            for (int64_t n = 0; n < N; n++) (next)[i * N + n] = av_ * (prev)[i * N + n] + xd * bt[n]; \
        }                                                                                              \
    } while (0)

            /* forward: the state entering each block */
            double *cur = st; /* st[0 .. PN) as the running state */
            if (pr->has_init && sg->init >= 0) {
                for (int64_t i = 0; i < P; i++)
                    for (int64_t n = 0; n < N; n++)
                        cur[i * N + n] = (double)sf_ldf(init->data, init->dtype, sf_off4(init, sg->init, h, i, n));
            } else {
                for (int64_t i = 0; i < PN; i++) cur[i] = 0.0;
            }
            for (int64_t j = 0; j < nblk; j++) {
                for (int64_t i = 0; i < PN; i++) ck[j * PN + i] = cur[i];
                const int64_t t0 = sg->start + j * REF_BLOCK;
                const int64_t t1 = t0 + REF_BLOCK < sg->end ? t0 + REF_BLOCK : sg->end;
                for (int64_t t = t0; t < t1; t++) {
                    REF_STEP(t, cur, st + PN); /* into the next slot, then back */
                    for (int64_t i = 0; i < PN; i++) cur[i] = st[PN + i];
                }
            }

            /* backward */
            if (sg->final >= 0 && pr->has_final) {
                for (int64_t i = 0; i < P; i++)
                    for (int64_t n = 0; n < N; n++)
                        Gs[i * N + n] = (double)sf_ldf(dfin->data, dfin->dtype, sf_off4(dfin, sg->final, h, i, n));
            } else {
                for (int64_t i = 0; i < PN; i++) Gs[i] = 0.0;
            }
            for (int64_t j = nblk - 1; j >= 0; j--) {
                const int64_t t0 = sg->start + j * REF_BLOCK;
                const int64_t t1 = t0 + REF_BLOCK < sg->end ? t0 + REF_BLOCK : sg->end;
                /* st[k] = state before token t0 + k; st[k + 1] after it */
                for (int64_t i = 0; i < PN; i++) st[i] = ck[j * PN + i];
                for (int64_t t = t0; t < t1; t++) REF_STEP(t, st + (t - t0) * PN, st + (t - t0 + 1) * PN);
                for (int64_t t = t1 - 1; t >= t0; t--) {
                    const double *hprev = st + (t - t0) * PN, *hcur = hprev + PN;
                    double dtv, av;
                    int live;
                    REF_DT(t, dtv, av, live);
                    for (int64_t n = 0; n < N; n++) {
                        bt[n] = (double)sf_ldf(B->data, B->dtype, sf_off4(B, b, t, g, n));
                        ct[n] = (double)sf_ldf(C->data, C->dtype, sf_off4(C, b, t, g, n));
                    }
                    double *dBt = sdB + ((b * Lr + t) * G + g) * N, *dCt = sdC + ((b * Lr + t) * G + g) * N;
                    double ddt = 0.0, da = 0.0;
                    for (int64_t i = 0; i < P; i++) {
                        const double xv = (double)sf_ldf(x->data, x->dtype, sf_off4(x, b, t, h, i));
                        const double Dv =
                            pr->has_D ? (double)sf_ldf(D->data, D->dtype,
                                                       pr->D_per_channel ? sf_off2(D, h, i) : h * D->stride[0])
                                      : 0.0;
                        double dy = (double)sf_ldf(dout->data, dout->dtype, sf_off4(dout, b, t, h, i));
                        if (pr->has_z) {
                            double y = Dv * xv;
                            for (int64_t n = 0; n < N; n++) y += hcur[i * N + n] * ct[n];
                            const double zv = (double)sf_ldf(z->data, z->dtype, sf_off4(z, b, t, h, i));
                            double sz, dsz;
                            ref_silu(zv, &sz, &dsz);
                            if (q->dz.data) sf_stf(q->dz.data, q->dz.dtype, sf_off4(&q->dz, b, t, h, i), (float)(dy * y * dsz));
                            dy *= sz;
                        }
                        sdD[h * P + i] += dy * xv;
                        double *Gi = Gs + i * N;
                        double gb = 0.0;
                        for (int64_t n = 0; n < N; n++) {
                            dCt[n] += dy * hcur[i * N + n];
                            Gi[n] += dy * ct[n];
                            gb += Gi[n] * bt[n];
                            da += Gi[n] * hprev[i * N + n];
                            dBt[n] += dtv * xv * Gi[n];
                        }
                        ddt += xv * gb;
                        if (q->dx.data)
                            sf_stf(q->dx.data, q->dx.dtype, sf_off4(&q->dx, b, t, h, i), (float)(dtv * gb + Dv * dy));
                    }
                    for (int64_t i = 0; i < PN; i++) Gs[i] *= av;
                    if (live) {
                        ddt += Ah * av * da;
                        sdA[h] += dtv * av * da;
                    }
                    const double raw = (double)sf_ldf(dtt->data, dtt->dtype, sf_off3(dtt, b, t, h));
                    const double gr = ref_ddt_raw(ddt, raw, bias, p->dt_softplus, dmin, dmax);
                    sdtb[h] += gr;
                    if (q->ddt.data) sf_stf(q->ddt.data, q->ddt.dtype, sf_off3(&q->ddt, b, t, h), (float)gr);
                }
            }
            if (q->dinitial_states.data && sg->init >= 0) {
                const sf_tensor *di = &q->dinitial_states;
                for (int64_t i = 0; i < P; i++)
                    for (int64_t n = 0; n < N; n++)
                        sf_stf(di->data, di->dtype, sf_off4(di, sg->init, h, i, n), (float)Gs[i * N + n]);
            }
#undef REF_STEP
#undef REF_DT
        }
    }

    for (int64_t b = 0; b < nb; b++)
        for (int64_t t = 0; t < Lr; t++)
            for (int64_t g = 0; g < G; g++)
                for (int64_t n = 0; n < N; n++) {
                    const size_t o = (size_t)((b * Lr + t) * G + g) * (size_t)N + (size_t)n;
                    if (want_dB) sf_stf(q->dB.data, q->dB.dtype, sf_off4(&q->dB, b, t, g, n), (float)sdB[o]);
                    if (want_dC) sf_stf(q->dC.data, q->dC.dtype, sf_off4(&q->dC, b, t, g, n), (float)sdC[o]);
                }
    for (int64_t h = 0; h < H; h++) {
        if (q->dA.data) ((float *)q->dA.data)[h * q->dA.stride[0]] = (float)sdA[h];
        if (q->ddt_bias.data) ((float *)q->ddt_bias.data)[h * q->ddt_bias.stride[0]] = (float)sdtb[h];
        if (q->dD.data) {
            if (pr->D_per_channel) {
                for (int64_t i = 0; i < P; i++) ((float *)q->dD.data)[sf_off2(&q->dD, h, i)] = (float)sdD[h * P + i];
            } else {
                double acc = 0.0;
                for (int64_t i = 0; i < P; i++) acc += sdD[h * P + i];
                ((float *)q->dD.data)[h * q->dD.stride[0]] = (float)acc;
            }
        }
    }
    return SF_OK;
}
