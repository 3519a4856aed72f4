/* layer_ref.c - reference (test-oracle) causal depthwise conv1d, its
 * decode update, and gated RMSNorm.
 *
 * Literal loops over the documented formulas, every sum in double, every
 * tensor read through sf_ldf with its own strides: the fast backends are
 * measured against this, so it does nothing clever.  The conv reads the
 * "extended" sequence [initial_state (W-1 values, or zeros), x[start..end)]
 * through one lookup, so the window, the halo and the final state all come
 * from the same definition. */
#include "layer_ops.h"

#include <math.h>

static double ref_silu(double v) { return v / (1.0 + exp(-v)); }

/* Element r of channel c of segment sg's extended sequence: r < 0 is the
 * initial state (its last entry is r = -1), r >= 0 is token start + r. */
static double conv_ext(const sf_conv1d_problem *pr, const sf_conv1d_segment *sg, int64_t c,
                       int64_t r) {
    const sf_conv1d_params *p = pr->p;
    if (r >= 0)
        return (double)sf_ldf(p->x.data, p->x.dtype, sf_off3(&p->x, sg->b, sg->start + r, c));
    if (!pr->has_init) return 0.0;
    const sf_tensor *in = &p->initial_state;
    return (double)sf_ldf(in->data, in->dtype, sf_off3(in, sg->state, c, pr->width - 1 + r));
}

sf_status sf_ref_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_problem *pr) {
    (void)ctx;
    const sf_conv1d_params *p = pr->p;
    const int64_t W = pr->width;
    if (pr->nseg > 0 && pr->seg == NULL)
        return sf_fail(ctx, SF_ERR_INTERNAL, "conv1d ref: no host segment list");
    for (int64_t s = 0; s < pr->nseg; s++) {
        const sf_conv1d_segment *sg = &pr->seg[s];
        const int64_t len = sg->end - sg->start;
        for (int64_t c = 0; c < pr->dim; c++) {
            double w[4];
            for (int64_t k = 0; k < W; k++)
                w[k] = (double)sf_ldf(p->weight.data, p->weight.dtype, sf_off2(&p->weight, c, k));
            const double bias =
                pr->has_bias ? (double)sf_ldf(p->bias.data, p->bias.dtype, c * p->bias.stride[0])
                             : 0.0;
            for (int64_t r = 0; r < len; r++) {
                double acc = bias;
                for (int64_t k = 0; k < W; k++) acc += w[k] * conv_ext(pr, sg, c, r - (W - 1) + k);
                if (pr->silu) acc = ref_silu(acc);
                sf_stf(p->out.data, p->out.dtype, sf_off3(&p->out, sg->b, sg->start + r, c),
                       (float)acc);
            }
            if (pr->has_final)
                for (int64_t k = 0; k < W - 1; k++)
                    sf_stf(p->final_state.data, p->final_state.dtype,
                           sf_off3(&p->final_state, sg->state, c, k),
                           (float)conv_ext(pr, sg, c, len - (W - 1) + k));
        }
    }
    return SF_OK;
}

sf_status sf_ref_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_problem *pr) {
    (void)ctx;
    const sf_conv1d_update_params *p = pr->p;
    const int64_t W = pr->width;
    const sf_tensor *st = &p->conv_state;
    for (int64_t i = 0; i < pr->batch; i++) {
        int64_t s = i;
        if (pr->has_idx) s = sf_ldi(p->state_idx.data, p->state_idx.dtype, i * p->state_idx.stride[0]);
        for (int64_t c = 0; c < pr->dim; c++) {
            const int64_t oo = sf_off2(&p->out, i, c);
            if (s < 0 || s >= pr->nslots) { /* padding: state untouched, output zero */
                sf_stf(p->out.data, p->out.dtype, oo, 0.0f);
                continue;
            }
            double win[4];
            for (int64_t k = 0; k < W - 1; k++)
                win[k] = (double)sf_ldf(st->data, st->dtype, sf_off3(st, s, c, k));
            win[W - 1] = (double)sf_ldf(p->x.data, p->x.dtype, sf_off2(&p->x, i, c));
            double acc =
                pr->has_bias ? (double)sf_ldf(p->bias.data, p->bias.dtype, c * p->bias.stride[0])
                             : 0.0;
            for (int64_t k = 0; k < W; k++)
                acc += win[k] *
                       (double)sf_ldf(p->weight.data, p->weight.dtype, sf_off2(&p->weight, c, k));
            if (pr->silu) acc = ref_silu(acc);
            sf_stf(p->out.data, p->out.dtype, oo, (float)acc);
            for (int64_t k = 0; k < W - 1; k++)
                sf_stf(st->data, st->dtype, sf_off3(st, s, c, k), (float)win[k + 1]);
        }
    }
    return SF_OK;
}

sf_status sf_ref_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_problem *pr) {
    (void)ctx;
    const sf_rmsnorm_gated_params *p = pr->p;
    const int64_t G = pr->group;
    for (int64_t r = 0; r < pr->rows; r++) {
        for (int64_t g0 = 0; g0 < pr->dim; g0 += G) {
            /* pass 1: mean of squares of the normalised quantity */
            double ss = 0.0;
            for (int64_t c = g0; c < g0 + G; c++) {
                double h = (double)sf_ldf(p->x.data, p->x.dtype, sf_off2(&p->x, r, c));
                if (pr->has_z && !pr->norm_before_gate)
                    h *= ref_silu((double)sf_ldf(p->z.data, p->z.dtype, sf_off2(&p->z, r, c)));
                ss += h * h;
            }
            const double rs = 1.0 / sqrt(ss / (double)G + (double)pr->eps);
            /* pass 2: scale, weight, and the gate after the norm */
            for (int64_t c = g0; c < g0 + G; c++) {
                double h = (double)sf_ldf(p->x.data, p->x.dtype, sf_off2(&p->x, r, c));
                double gz = pr->has_z
                                ? ref_silu((double)sf_ldf(p->z.data, p->z.dtype, sf_off2(&p->z, r, c)))
                                : 1.0;
                if (!pr->norm_before_gate) h *= gz;
                double o = h * rs *
                           (double)sf_ldf(p->weight.data, p->weight.dtype, c * p->weight.stride[0]);
                if (pr->norm_before_gate) o *= gz;
                sf_stf(p->out.data, p->out.dtype, sf_off2(&p->out, r, c), (float)o);
            }
        }
    }
    return SF_OK;
}
