/* sample_cpu.c - CPU sf_embed and sf_sample, OpenMP over rows.
 *
 * Sampling needs no sort of the vocabulary and no buffer proportional to
 * it (the call has no workspace).  Every cut of the reference (top-k, the
 * top-p prefix, the min-p count, the draw) is the first position of the
 * candidate order (larger value first, then the lower id) where a prefix
 * count or prefix mass passes a target.  One search finds such a position:
 *   - a first-level histogram of the row (SF_SMP_BINS bins of 1/32 in
 *     v - max, count and fixed-point mass per bin; built once per row)
 *     gives the bin holding it;
 *   - while that bin has more than CAP elements, a pass histograms its
 *     elements by the next 11 bits of their unique 64-bit order key
 *     (sf_smp_key) and keeps the sub-range holding the position;
 *   - the last pass gathers the <= CAP elements of the range, sorts them
 *     and walks them.
 * Masses are the integers of sf_smp_mass, so the prefix sums of every
 * level agree exactly.  The CUDA kernel (src/cuda/sample/sample.cu) runs
 * the same searches with a thread block per row. */
#include "cpu_common.h"
#include "sample_ops.h"

#include <stdlib.h>

sf_status sf_cpu_embed(sf_ctx *ctx, const sf_embed_problem *pr) {
    const sf_tensor *tb = pr->table, *o = pr->out;
    const int32_t *ids = (const int32_t *)pr->ids->data;
    const int64_t n = pr->n, D = pr->D, es = (int64_t)sf_dtype_size(tb->dtype);
    const int same = tb->dtype == o->dtype && o->stride[1] == 1;
    (void)ctx; /* the thread count only, unused without OpenMP */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(sf_cpu_threads(ctx)) if (n * D > 32768)
#endif
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = ids[i * pr->ids->stride[0]];
        if (same) {
            memcpy((char *)o->data + i * o->stride[0] * es, (const char *)tb->data + r * tb->stride[0] * es,
                   (size_t)(D * es));
            continue;
        }
        for (int64_t j = 0; j < D; j++)
            sf_stf(o->data, o->dtype, i * o->stride[0] + j * o->stride[1],
                   sf_ldf(tb->data, tb->dtype, r * tb->stride[0] + j));
    }
    return SF_OK;
}

#define CAP 2048
#define SUB 2048 /* 11 bits a level */

enum { BY_RANK, BY_MASS_GT, BY_MASS_GE };

typedef struct row {
    const sf_sample_problem *pr;
    const void *x;        /* the row of logits (unit inner stride) */
    const uint8_t *mark;  /* the slot's seen row, or NULL            */
    float mx;
} row;

typedef struct elem {
    uint64_t key, mass;
} elem;

typedef struct scratch {
    uint32_t hc[SF_SMP_BINS];
    uint64_t hm[SF_SMP_BINS];
    uint32_t sc[SUB];
    uint64_t sm[SUB];
    elem buf[CAP];
} scratch;

static inline float value(const row *r, int64_t j) {
    const sf_sample_problem *pr = r->pr;
    return sf_smp_value(sf_ldf(r->x, pr->logits->dtype, j), r->mark ? r->mark[j] != 0 : 0, pr->penalize,
                        pr->penalty, pr->greedy, pr->temperature);
}

typedef struct found {
    int ok;
    int64_t rank;
    int32_t id;
    uint64_t incl; /* mass of the prefix up to and including the element */
} found;

static inline int crosses(int kind, int64_t c, uint64_t m, int64_t rank, double mass) {
    if (kind == BY_RANK) return c > rank;
    return kind == BY_MASS_GT ? (double)m > mass : (double)m >= mass;
}

static int by_key_desc(const void *a, const void *b) {
    const uint64_t x = ((const elem *)a)->key, y = ((const elem *)b)->key;
    return (x < y) - (x > y);
}

/* The first position where the prefix count passes `rank` (BY_RANK) or the
 * prefix mass passes `mass` (> or >=); ok = 0 when no position does. */
static found search(const row *r, scratch *w, int kind, int64_t rank, double mass) {
    found f = {0, 0, 0, 0};
    const int64_t V = r->pr->V;
    int64_t c = 0;
    uint64_t m = 0;
    int b = 0;
    for (; b < SF_SMP_BINS; b++) {
        if (crosses(kind, c + w->hc[b], m + w->hm[b], rank, mass)) break;
        c += w->hc[b], m += w->hm[b];
    }
    if (b == SF_SMP_BINS) return f;
    uint64_t lo = 0, hi = UINT64_MAX;
    int64_t cnt = w->hc[b];
    if (cnt > CAP) { /* the bin's key range, then 11 bits a level */
        lo = UINT64_MAX, hi = 0;
        for (int64_t j = 0; j < V; j++) {
            const float v = value(r, j);
            if (isnan(v) || sf_smp_bin(v, r->mx) != b) continue;
            const uint64_t k = sf_smp_key(v, j);
            lo = k < lo ? k : lo, hi = k > hi ? k : hi;
        }
    }
    while (cnt > CAP) {
        /* digits of the range's width (> 0: it holds more than one key), so a
         * level always narrows it by 11 bits */
        const int nb = 64 - __builtin_clzll(hi - lo);
        const int sh = nb > 11 ? nb - 11 : 0;
        memset(w->sc, 0, sizeof w->sc);
        memset(w->sm, 0, sizeof w->sm);
        for (int64_t j = 0; j < V; j++) {
            const float v = value(r, j);
            if (isnan(v) || sf_smp_bin(v, r->mx) != b) continue;
            const uint64_t k = sf_smp_key(v, j);
            if (k < lo || k > hi) continue;
            const int s = (int)((k - lo) >> sh);
            w->sc[s]++, w->sm[s] += sf_smp_mass(v, r->mx);
        }
        int s = SUB - 1;
        for (; s >= 0; s--) {
            if (crosses(kind, c + w->sc[s], m + w->sm[s], rank, mass)) break;
            c += w->sc[s], m += w->sm[s];
        }
        if (s < 0) return f;
        lo += (uint64_t)s << sh;
        const uint64_t top = lo + (((uint64_t)1 << sh) - 1);
        hi = top < hi ? top : hi;
        cnt = w->sc[s];
    }
    int64_t ne = 0;
    for (int64_t j = 0; j < V && ne < cnt; j++) {
        const float v = value(r, j);
        if (isnan(v) || sf_smp_bin(v, r->mx) != b) continue;
        const uint64_t k = sf_smp_key(v, j);
        if (k < lo || k > hi) continue;
        w->buf[ne].key = k, w->buf[ne++].mass = sf_smp_mass(v, r->mx);
    }
    qsort(w->buf, (size_t)ne, sizeof(elem), by_key_desc);
    for (int64_t e = 0; e < ne; e++) {
        c++, m += w->buf[e].mass;
        if (crosses(kind, c, m, rank, mass)) {
            f.ok = 1, f.rank = c - 1, f.incl = m;
            f.id = (int32_t)(0xffffffffu - (uint32_t)w->buf[e].key);
            return f;
        }
    }
    return f;
}

static int32_t sample_row(row *r, scratch *w, uint64_t *state) {
    const sf_sample_problem *pr = r->pr;
    const int64_t V = pr->V;
    /* the largest value and the candidate count (NaN is no candidate) */
    float mx = -INFINITY;
    int64_t N = 0, best = -1;
    for (int64_t j = 0; j < V; j++) {
        const float v = value(r, j);
        if (isnan(v)) continue;
        N++;
        if (best < 0 || v > mx) mx = v, best = j;
    }
    if (pr->greedy) return best < 0 ? 0 : (int32_t)best;
    const double u = sf_smp_uniform(sf_smp_next(state));
    if (N == 0) return 0;
    r->mx = mx;
    memset(w->hc, 0, sizeof w->hc);
    memset(w->hm, 0, sizeof w->hm);
    int64_t M = 0; /* candidates whose weight reaches min_p */
    for (int64_t j = 0; j < V; j++) {
        const float v = value(r, j);
        if (isnan(v)) continue;
        const int b = sf_smp_bin(v, mx);
        const uint64_t ms = sf_smp_mass(v, mx);
        w->hc[b]++, w->hm[b] += ms;
        if (pr->min_p > 0.0f && sf_smp_minp_keep(v, mx, pr->min_p)) M++;
    }
    uint64_t Z = 0;
    for (int b = 0; b < SF_SMP_BINS; b++) Z += w->hm[b];
    const int64_t K = pr->top_k > 0 && pr->top_k < N ? pr->top_k : N;
    uint64_t tot = K == N ? Z : search(r, w, BY_RANK, K - 1, 0).incl;
    int64_t keep = K;
    if (pr->top_p < 1.0f) {
        const found f = search(r, w, BY_MASS_GE, 0, (double)pr->top_p * (double)tot);
        if (f.ok && f.rank + 1 < keep) keep = f.rank + 1, tot = f.incl;
    }
    if (pr->min_p > 0.0f) {
        if (M < 1) M = 1;
        if (M < keep) keep = M, tot = search(r, w, BY_RANK, M - 1, 0).incl;
    }
    found f = search(r, w, BY_MASS_GT, 0, u * (double)tot);
    if (!f.ok || f.rank >= keep) f = search(r, w, BY_RANK, keep - 1, 0);
    return f.id;
}

sf_status sf_cpu_sample(sf_ctx *ctx, const sf_sample_problem *pr) {
    const sf_tensor *lg = pr->logits, *sn = pr->seen, *sl = pr->slots;
    int64_t *rs = (int64_t *)pr->rng->data;
    int32_t *tok = (int32_t *)pr->tokens->data;
    const int64_t es = (int64_t)sf_dtype_size(lg->dtype);
    (void)ctx;
#ifdef _OPENMP
#pragma omp parallel num_threads(sf_cpu_threads(ctx)) if (pr->n > 1)
#endif
    {
        scratch w; /* 80 KB of stack a thread: no allocation in the call */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t i = 0; i < pr->n; i++) {
            const int64_t slot = sl->data ? ((const int32_t *)sl->data)[i * sl->stride[0]] : i;
            row r;
            r.pr = pr;
            r.x = (const char *)lg->data + i * lg->stride[0] * es;
            r.mark = sn->data && pr->penalize ? (const uint8_t *)sn->data + slot * sn->stride[0] : NULL;
            r.mx = 0.0f;
            const int32_t t = sample_row(&r, &w, (uint64_t *)&rs[slot * pr->rng->stride[0]]);
            tok[i * pr->tokens->stride[0]] = t;
            if (sn->data) ((uint8_t *)sn->data)[slot * sn->stride[0] + t] = 1;
        }
    }
    return SF_OK;
}
