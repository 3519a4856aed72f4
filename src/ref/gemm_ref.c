/* gemm_ref.c - reference (test-oracle) dense product: the definition of
 * seqfuse.h literally, every product and sum in double. */
#include "gemm.h"

sf_status sf_ref_gemm(sf_ctx *ctx, const sf_gemm_problem *pr) {
    (void)ctx;
    const sf_gemm_params *p = pr->p;
    const sf_tensor *x = &p->x, *w = &p->w, *y = &p->y, *b = &p->bias;
    for (int64_t i = 0; i < pr->M; i++)
        for (int64_t n = 0; n < pr->N; n++) {
            double acc = 0.0;
            for (int64_t k = 0; k < pr->K; k++)
                acc += (double)sf_ldf(x->data, x->dtype, sf_off2(x, i, k)) *
                       (double)sf_ldf(w->data, w->dtype, sf_off2(w, n, k));
            if (pr->has_bias) acc += (double)sf_ldf(b->data, b->dtype, n * b->stride[0]);
            if (p->beta != 0.0f)
                acc += (double)p->beta * (double)sf_ldf(y->data, y->dtype, sf_off2(y, i, n));
            sf_stf(y->data, y->dtype, sf_off2(y, i, n), (float)acc);
        }
    return SF_OK;
}
