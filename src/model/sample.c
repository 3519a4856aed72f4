/* sample.c - token sampling: repetition penalty, greedy, temperature, top-k,
 * top-p, min-p, in that order (Hugging Face's processor order), with a
 * splitmix64 stream per sequence. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t sfm_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int sfm_sampler_init(sfm_sampler *sm, int V) {
    sm->V = V;
    sm->val = malloc((size_t)V * sizeof(float));
    sm->cand = malloc((size_t)V * sizeof(sfm_cand));
    sm->seen = calloc((size_t)V, 1);
    if (!sm->val || !sm->cand || !sm->seen) {
        sfm_sampler_free(sm);
        return 0;
    }
    return 1;
}

void sfm_sampler_free(sfm_sampler *sm) {
    free(sm->val);
    free(sm->cand);
    free(sm->seen);
    sm->val = NULL, sm->cand = NULL, sm->seen = NULL;
}

/* qsort order: larger value first, then the lower id (a total order, so the
 * result does not depend on the sort's stability). */
static int by_value(const void *a, const void *b) {
    const sfm_cand *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t sfm_sample(sfm_sampler *sm, const float *logits, const sf_sampling *s, const int32_t *hist,
                   int64_t nhist, uint64_t *rng) {
    const int V = sm->V;
    float *v = sm->val;
    memcpy(v, logits, (size_t)V * sizeof(float));
    if (s->repetition_penalty != 1.0f && s->repetition_penalty > 0.0f) {
        /* once per distinct token, from its original logit */
        for (int64_t i = 0; i < nhist; i++) {
            const int32_t t = hist[i];
            if (t < 0 || t >= V || sm->seen[t]) continue;
            sm->seen[t] = 1;
            v[t] = v[t] > 0 ? v[t] / s->repetition_penalty : v[t] * s->repetition_penalty;
        }
        for (int64_t i = 0; i < nhist; i++)
            if (hist[i] >= 0 && hist[i] < V) sm->seen[hist[i]] = 0;
    }
    if (!(s->temperature > 0.0f)) {
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (v[i] > v[best]) best = i;
        return best;
    }
    int n = 0;
    for (int i = 0; i < V; i++) {
        v[i] /= s->temperature;
        if (!isnan(v[i])) sm->cand[n].v = v[i], sm->cand[n++].id = i;
    }
    if (n == 0) return 0;
    qsort(sm->cand, (size_t)n, sizeof(sfm_cand), by_value);
    if (s->top_k > 0 && s->top_k < n) n = s->top_k;
    /* softmax over the kept candidates (in place of their values) */
    const float mx = sm->cand[0].v;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)sm->cand[i].v - mx);
    /* top-p: the smallest prefix reaching top_p (at least one) */
    if (s->top_p > 0.0f && s->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += exp((double)sm->cand[i].v - mx) / sum;
            if (cum >= s->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    /* min-p: probability >= min_p times the largest (which is exp(0) / sum) */
    if (s->min_p > 0.0f) {
        int keep = 1;
        while (keep < n && exp((double)sm->cand[keep].v - mx) >= s->min_p) keep++;
        n = keep;
    }
    double tot = 0;
    for (int i = 0; i < n; i++) tot += exp((double)sm->cand[i].v - mx);
    const double u = (double)(sfm_rng_next(rng) >> 11) * 0x1.0p-53 * tot;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)sm->cand[i].v - mx);
        if (u < acc) return sm->cand[i].id;
    }
    return sm->cand[n - 1].id;
}
