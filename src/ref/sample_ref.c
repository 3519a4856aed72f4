/* sample_ref.c - reference sf_embed and sf_sample: the test oracle.
 * Sampling is the engine's host sampler (src/model/sample.c) step for step:
 * the processed logits of a row are sorted (larger value first, then the
 * lower id), cut by top-k, top-p over the softmax of the top-k in double,
 * min-p, and the draw walks the kept prefix accumulating exp(v - max) in
 * double.  It allocates its sort buffer per call (an oracle, not a hot
 * path). */
#include "sample_ops.h"

#include <stdlib.h>

sf_status sf_ref_embed(sf_ctx *ctx, const sf_embed_problem *pr) {
    (void)ctx;
    const sf_tensor *tb = pr->table, *o = pr->out;
    const int32_t *ids = (const int32_t *)pr->ids->data;
    for (int64_t i = 0; i < pr->n; i++) {
        const int64_t r = ids[i * pr->ids->stride[0]];
        for (int64_t j = 0; j < pr->D; j++)
            sf_stf(o->data, o->dtype, sf_off2(o, i, j), sf_ldf(tb->data, tb->dtype, sf_off2(tb, r, j)));
    }
    return SF_OK;
}

typedef struct cand {
    float v;
    int32_t id;
} cand;

static int by_value(const void *a, const void *b) {
    const cand *x = (const cand *)a, *y = (const cand *)b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Row slot: slots[i] or i. */
static int64_t row_slot(const sf_sample_problem *pr, int64_t i) {
    const sf_tensor *sl = pr->slots;
    return sl->data ? ((const int32_t *)sl->data)[i * sl->stride[0]] : i;
}

/* One row: the processed logits into c (non-NaN ones), then the token. */
static int32_t sample_row(const sf_sample_problem *pr, int64_t i, int64_t slot, cand *c, uint64_t *state) {
    const sf_tensor *lg = pr->logits, *sn = pr->seen;
    const uint8_t *mark = sn->data ? (const uint8_t *)sn->data + slot * sn->stride[0] : NULL;
    int64_t n = 0;
    for (int64_t j = 0; j < pr->V; j++) {
        const float x = sf_ldf(lg->data, lg->dtype, sf_off2(lg, i, j));
        const float v = sf_smp_value(x, mark ? mark[j] != 0 : 0, pr->penalize, pr->penalty, pr->greedy,
                                     pr->temperature);
        if (!isnan(v)) c[n].v = v, c[n++].id = (int32_t)j;
    }
    if (pr->greedy) {
        int64_t best = 0;
        for (int64_t j = 1; j < n; j++)
            if (c[j].v > c[best].v) best = j;
        return n ? c[best].id : 0;
    }
    const double u = sf_smp_uniform(sf_smp_next(state));
    if (n == 0) return 0;
    qsort(c, (size_t)n, sizeof(cand), by_value);
    if (pr->top_k > 0 && pr->top_k < n) n = pr->top_k;
    const float mx = c[0].v;
    double sum = 0;
    for (int64_t j = 0; j < n; j++) sum += sf_smp_weight_d(c[j].v, mx);
    if (pr->top_p < 1.0f) {
        double cum = 0;
        int64_t keep = n;
        for (int64_t j = 0; j < n; j++) {
            cum += sf_smp_weight_d(c[j].v, mx) / sum;
            if (cum >= pr->top_p) {
                keep = j + 1;
                break;
            }
        }
        n = keep;
    }
    if (pr->min_p > 0.0f) {
        int64_t keep = 1;
        while (keep < n && sf_smp_weight_d(c[keep].v, mx) >= pr->min_p) keep++;
        n = keep;
    }
    double tot = 0;
    for (int64_t j = 0; j < n; j++) tot += sf_smp_weight_d(c[j].v, mx);
    const double t = u * tot;
    double acc = 0;
    for (int64_t j = 0; j < n; j++) {
        acc += sf_smp_weight_d(c[j].v, mx);
        if (t < acc) return c[j].id;
    }
    return c[n - 1].id;
}

sf_status sf_ref_sample(sf_ctx *ctx, const sf_sample_problem *pr) {
    cand *c = (cand *)malloc((size_t)pr->V * sizeof(cand));
    if (!c) return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "sf_sample: out of host memory for the reference's sort");
    int64_t *rs = (int64_t *)pr->rng->data;
    int32_t *tok = (int32_t *)pr->tokens->data;
    const sf_tensor *sn = pr->seen;
    for (int64_t i = 0; i < pr->n; i++) {
        const int64_t slot = row_slot(pr, i);
        uint64_t *st = (uint64_t *)&rs[slot * pr->rng->stride[0]];
        const int32_t t = sample_row(pr, i, slot, c, st);
        tok[i * pr->tokens->stride[0]] = t;
        if (sn->data) ((uint8_t *)sn->data)[slot * sn->stride[0] + t] = 1;
    }
    free(c);
    return SF_OK;
}
