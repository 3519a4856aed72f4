/* gemm_wq_ref.c - reference (test-oracle) weight-only quantised product: the
 * definition of seqfuse.h literally, every weight dequantised in double from
 * its code, scale and min, every product and sum in double. */
#include "gemm_wq.h"

sf_status sf_ref_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr) {
    (void)ctx;
    const sf_gemm_wq_params *p = pr->p;
    const sf_qweight *q = &p->w;
    const sf_tensor *x = &p->x, *y = &p->y, *b = &p->bias;
    for (int64_t i = 0; i < pr->M; i++)
        for (int64_t n = 0; n < pr->N; n++) {
            double acc = 0.0;
            for (int64_t k = 0; k < pr->K; k++) {
                const int64_t j = k / pr->group;
                const double w = (double)sf_wq_scale(q, j, n) * (double)sf_wq_value(q, n, k) +
                                 (double)sf_wq_min(q, j, n);
                acc += (double)sf_ldf(x->data, x->dtype, sf_off2(x, i, k)) * w;
            }
            if (pr->has_bias) acc += (double)sf_ldf(b->data, b->dtype, n * b->stride[0]);
            sf_stf(y->data, y->dtype, sf_off2(y, i, n), (float)acc);
        }
    return SF_OK;
}
