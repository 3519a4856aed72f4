/* ssd_ref.c - reference (test-oracle) Mamba-2 SSD forward and decode step.
 *
 * The plain sequential recurrence, token by token, with every piece of
 * state math in double.  No chunking, no tiling: this is what the fast
 * backends are measured against, so it follows the documented formulas
 * literally (dt processing, exponent clamp, D, z gate) and nothing else.
 * Inputs are read through sf_ldf with the tensors' own strides, so any
 * stride the header allows is served.
 */
#include "internal.h"

#include <math.h>

/* y * silu(z) in double. */
static double ref_gate(double y, double z) { return y * (z / (1.0 + exp(-z))); }

static double ref_D(const sf_tensor *D, int has_D, int per_channel, int64_t h, int64_t p) {
    if (!has_D) return 0.0;
    int64_t off = per_channel ? sf_off2(D, h, p) : h * D->stride[0];
    return (double)sf_ldf(D->data, D->dtype, off);
}

sf_status sf_ref_ssd_fwd(sf_ctx *ctx, const sf_ssd_problem *pr) {
    const sf_ssd_fwd_params *p = pr->p;
    const int64_t P = pr->headdim, N = pr->dstate;
    if (pr->nseg == 0) return SF_OK;
    if (pr->seg == NULL)
        return sf_fail(ctx, SF_ERR_INTERNAL, "ssd ref: no host segment list");
    if (P <= 0 || N <= 0) return SF_OK; /* nothing to compute or write */

    /* Workspace: the P x N state of one (segment, head) and the current
     * token's B and C converted once (they are reused by all P rows).
     * The arena is host memory: the core sends only CPU contexts here.
     * Not the host-scratch arena, which holds the segment list. */
    size_t need = ((size_t)P * (size_t)N + 2 * (size_t)N) * sizeof(double);
    double *state = (double *)sf_ws_get(ctx, need);
    if (state == NULL) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
    double *bt = state + P * N;
    double *ct = bt + N;

    const double dmin = (double)p->dt_min, dmax = (double)p->dt_max;
    const sf_tensor *x = &p->x, *dtt = &p->dt, *A = &p->A, *B = &p->B, *C = &p->C;
    const sf_tensor *z = &p->z, *out = &p->out;
    const sf_tensor *init = &p->initial_states, *fin = &p->final_states;

    for (int64_t s = 0; s < pr->nseg; s++) {
        const sf_ssd_segment *sg = &pr->seg[s];
        const int64_t b = sg->b;
        for (int64_t h = 0; h < pr->nheads; h++) {
            const int64_t g = h / pr->heads_per_group;
            const double Ah = (double)sf_ldf(A->data, A->dtype, h * A->stride[0]);
            const double bias =
                pr->has_dt_bias ? (double)sf_ldf(p->dt_bias.data, p->dt_bias.dtype,
                                                 h * p->dt_bias.stride[0])
                                : 0.0;

            if (pr->has_init && sg->init >= 0) {
                for (int64_t i = 0; i < P; i++)
                    for (int64_t n = 0; n < N; n++)
                        state[i * N + n] = (double)sf_ldf(
                            init->data, init->dtype, sf_off4(init, sg->init, h, i, n));
            } else {
                for (int64_t i = 0; i < P * N; i++) state[i] = 0.0;
            }

            for (int64_t t = sg->start; t < sg->end; t++) {
                double dt = (double)sf_ldf(dtt->data, dtt->dtype, sf_off3(dtt, b, t, h));
                dt = sf_dt_process_d(dt, bias, p->dt_softplus, dmin, dmax);
                /* exponent clamped to <= 0: the decay never exceeds 1 */
                double e = dt * Ah;
                const double dA = exp(e < 0.0 ? e : 0.0);
                for (int64_t n = 0; n < N; n++) {
                    bt[n] = (double)sf_ldf(B->data, B->dtype, sf_off4(B, b, t, g, n));
                    ct[n] = (double)sf_ldf(C->data, C->dtype, sf_off4(C, b, t, g, n));
                }
                for (int64_t i = 0; i < P; i++) {
                    const double xv =
                        (double)sf_ldf(x->data, x->dtype, sf_off4(x, b, t, h, i));
                    const double dx = dt * xv;
                    double *row = state + i * N;
                    double y = 0.0;
                    for (int64_t n = 0; n < N; n++) {
                        row[n] = dA * row[n] + dx * bt[n];
                        y += row[n] * ct[n];
                    }
                    y += ref_D(&p->D, pr->has_D, pr->D_per_channel, h, i) * xv;
                    if (pr->has_z)
                        y = ref_gate(y, (double)sf_ldf(z->data, z->dtype,
                                                        sf_off4(z, b, t, h, i)));
                    sf_stf(out->data, out->dtype, sf_off4(out, b, t, h, i), (float)y);
                }
            }

            if (pr->has_final && sg->final >= 0) {
                for (int64_t i = 0; i < P; i++)
                    for (int64_t n = 0; n < N; n++)
                        sf_stf(fin->data, fin->dtype, sf_off4(fin, sg->final, h, i, n),
                               (float)state[i * N + n]);
            }
        }
    }
    return SF_OK;
}

sf_status sf_ref_ssd_step(sf_ctx *ctx, const sf_ssd_step_problem *pr) {
    (void)ctx;
    const sf_ssd_step_params *p = pr->p;
    const int64_t P = pr->headdim, N = pr->dstate;
    const double dmin = (double)p->dt_min, dmax = (double)p->dt_max;
    const sf_tensor *st = &p->state, *x = &p->x, *dtt = &p->dt, *A = &p->A;
    const sf_tensor *B = &p->B, *C = &p->C, *z = &p->z, *out = &p->out;

    /* No workspace: each state element is read, updated in double and
     * stored back once; y accumulates in a scalar per row. */
    for (int64_t i = 0; i < pr->batch; i++) {
        int64_t s = i;
        if (pr->has_idx)
            s = sf_ldi(p->state_idx.data, p->state_idx.dtype, i * p->state_idx.stride[0]);
        /* Padding (negative) leaves the state alone and outputs zeros.  An
         * entry past the pool was rejected by the core; treat it the same
         * way here rather than touch memory outside the state tensor. */
        const int skip = s < 0 || s >= pr->nslots;
        for (int64_t h = 0; h < pr->nheads; h++) {
            if (skip) {
                for (int64_t j = 0; j < P; j++)
                    sf_stf(out->data, out->dtype, sf_off3(out, i, h, j), 0.0f);
                continue;
            }
            const int64_t g = h / pr->heads_per_group;
            const double Ah = (double)sf_ldf(A->data, A->dtype, h * A->stride[0]);
            const double bias =
                pr->has_dt_bias ? (double)sf_ldf(p->dt_bias.data, p->dt_bias.dtype,
                                                 h * p->dt_bias.stride[0])
                                : 0.0;
            double dt = (double)sf_ldf(dtt->data, dtt->dtype, sf_off2(dtt, i, h));
            dt = sf_dt_process_d(dt, bias, p->dt_softplus, dmin, dmax);
            double e = dt * Ah;
            const double dA = exp(e < 0.0 ? e : 0.0);
            for (int64_t j = 0; j < P; j++) {
                const double xv = (double)sf_ldf(x->data, x->dtype, sf_off3(x, i, h, j));
                const double dx = dt * xv;
                double y = 0.0;
                for (int64_t n = 0; n < N; n++) {
                    const int64_t so = sf_off4(st, s, h, j, n);
                    const double bn = (double)sf_ldf(B->data, B->dtype, sf_off3(B, i, g, n));
                    const double cn = (double)sf_ldf(C->data, C->dtype, sf_off3(C, i, g, n));
                    const double v = dA * (double)sf_ldf(st->data, st->dtype, so) + dx * bn;
                    /* the state is stored rounded to its dtype (f32, f16
                     * or bf16); y uses the double value, as the forward
                     * does within a sequence */
                    sf_stf(st->data, st->dtype, so, (float)v);
                    y += v * cn;
                }
                y += ref_D(&p->D, pr->has_D, pr->D_per_channel, h, j) * xv;
                if (pr->has_z)
                    y = ref_gate(y, (double)sf_ldf(z->data, z->dtype, sf_off3(z, i, h, j)));
                sf_stf(out->data, out->dtype, sf_off3(out, i, h, j), (float)y);
            }
        }
    }
    return SF_OK;
}
