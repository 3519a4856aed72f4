/* gemm_swiglu_ref.c - reference (test-oracle) gate/up projection with
 * SwiGLU: the definition of seqfuse.h literally, both products summed in
 * double, silu in double, every tensor read through its own strides. */
#include "gemm_swiglu.h"

#include <math.h>

sf_status sf_ref_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_problem *pr) {
    (void)ctx;
    const sf_gemm_swiglu_params *p = pr->p;
    const sf_tensor *x = &p->x, *wg = &p->w_gate, *wu = &p->w_up, *y = &p->y;
    for (int64_t m = 0; m < pr->M; m++)
        for (int64_t i = 0; i < pr->I; i++) {
            double g = 0.0, u = 0.0;
            for (int64_t k = 0; k < pr->K; k++) {
                const double xv = (double)sf_ldf(x->data, x->dtype, sf_off2(x, m, k));
                g += xv * (double)sf_ldf(wg->data, wg->dtype, sf_off2(wg, i, k));
                u += xv * (double)sf_ldf(wu->data, wu->dtype, sf_off2(wu, i, k));
            }
            sf_stf(y->data, y->dtype, sf_off2(y, m, i), (float)(g / (1.0 + exp(-g)) * u));
        }
    return SF_OK;
}
