/* fused_ref.c - reference (test-oracle) residual add + RMSNorm / LayerNorm,
 * SwiGLU and RoPE: literal loops over the formulas of seqfuse.h, every
 * sum and every product in double, every tensor read through sf_ldf with
 * its own strides. */
#include "fused_ops.h"

#include <math.h>

static double ldd(const sf_tensor *t, int64_t off) { return (double)sf_ldf(t->data, t->dtype, off); }

sf_status sf_ref_add_norm(sf_ctx *ctx, const sf_norm_problem *pr) {
    (void)ctx;
    const sf_norm_params *p = pr->p;
    const int64_t D = pr->dim;
    for (int64_t r = 0; r < pr->rows; r++) {
        /* h read element by element as x + residual: an in-place
         * residual_out overwrites element c only after its last read */
#define H_AT(c) (ldd(&p->x, sf_off2(&p->x, r, c)) + \
                 (pr->has_res ? ldd(&p->residual, sf_off2(&p->residual, r, c)) : 0.0))
        double mean = 0.0;
        if (pr->layer) {
            for (int64_t c = 0; c < D; c++) mean += H_AT(c);
            mean /= (double)D;
        }
        double ss = 0.0;
        for (int64_t c = 0; c < D; c++) {
            const double v = H_AT(c) - mean;
            ss += v * v;
        }
        const double rs = 1.0 / sqrt(ss / (double)D + (double)pr->eps);
        for (int64_t c = 0; c < D; c++) {
            const double h = H_AT(c);
            double y = (h - mean) * rs * ldd(&p->weight, c * p->weight.stride[0]);
            if (pr->has_bias) y += ldd(&p->bias, c * p->bias.stride[0]);
            sf_stf(p->out.data, p->out.dtype, sf_off2(&p->out, r, c), (float)y);
            if (pr->has_hout)
                sf_stf(p->residual_out.data, p->residual_out.dtype,
                       sf_off2(&p->residual_out, r, c), (float)h);
        }
#undef H_AT
    }
    return SF_OK;
}

sf_status sf_ref_swiglu(sf_ctx *ctx, const sf_swiglu_problem *pr) {
    (void)ctx;
    const sf_swiglu_params *p = pr->p;
    const sf_tensor *g = &p->gate;
    for (int64_t r = 0; r < pr->rows; r++)
        for (int64_t j = 0; j < pr->n; j++) {
            double a, b;
            switch (pr->layout) {
            case SF_SWIGLU_SEPARATE:
                a = ldd(g, sf_off2(g, r, j));
                b = ldd(&p->up, sf_off2(&p->up, r, j));
                break;
            case SF_SWIGLU_CONCAT:
                a = ldd(g, sf_off2(g, r, j));
                b = ldd(g, sf_off2(g, r, pr->n + j));
                break;
            default:
                a = ldd(g, sf_off2(g, r, 2 * j));
                b = ldd(g, sf_off2(g, r, 2 * j + 1));
                break;
            }
            const double y = a / (1.0 + exp(-a)) * b;
            sf_stf(p->out.data, p->out.dtype, sf_off2(&p->out, r, j), (float)y);
        }
    return SF_OK;
}

/* Rotates one tensor (T, nh, d) into dst (which may be src itself). */
static void ref_rope_tensor(const sf_rope_problem *pr, const sf_tensor *src, const sf_tensor *dst) {
    const int64_t R = pr->R, half = R / 2, nh = src->shape[1];
    for (int64_t t = 0; t < pr->T; t++) {
        const int64_t pos = sf_rope_pos(pr, t);
        for (int64_t h = 0; h < nh; h++) {
            for (int64_t i = 0; i < half; i++) {
                double cs, sn;
                sf_rope_angle(&pr->spec, NULL, pos, i, &cs, &sn);
                const int64_t c1 = pr->gptj ? 2 * i : i, c2 = pr->gptj ? 2 * i + 1 : i + half;
                const double x1 = ldd(src, sf_off3(src, t, h, c1)), x2 = ldd(src, sf_off3(src, t, h, c2));
                sf_stf(dst->data, dst->dtype, sf_off3(dst, t, h, c1), (float)(x1 * cs - x2 * sn));
                sf_stf(dst->data, dst->dtype, sf_off3(dst, t, h, c2), (float)(x2 * cs + x1 * sn));
            }
            if (dst->data != src->data)
                for (int64_t c = R; c < pr->d; c++)
                    sf_stf(dst->data, dst->dtype, sf_off3(dst, t, h, c),
                           sf_ldf(src->data, src->dtype, sf_off3(src, t, h, c)));
        }
    }
}

sf_status sf_ref_rope(sf_ctx *ctx, const sf_rope_problem *pr) {
    (void)ctx;
    const sf_rope_params *p = pr->p;
    ref_rope_tensor(pr, &p->q, pr->q_inplace ? &p->q : &p->q_out);
    if (pr->has_k) ref_rope_tensor(pr, &p->k, pr->k_inplace ? &p->k : &p->k_out);
    return SF_OK;
}
