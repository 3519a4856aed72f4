/* sample_ops.h - validated problems of sf_embed and sf_sample, and the
 * per-element definitions every backend of sf_sample shares (the processed
 * logit, the order, the weight and its fixed-point mass, the histogram bin).
 * Built by src/core/sample.c, read by src/ref/sample_ref.c,
 * src/cpu/sample_cpu.c and src/cuda/sample/.  Not installed; include only
 * from src/. */
#ifndef SF_SAMPLE_OPS_H
#define SF_SAMPLE_OPS_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define SF_SMP_FN static __host__ __device__ __forceinline__
#else
#define SF_SMP_FN static inline
#endif

typedef struct sf_embed_problem {
    const sf_tensor *table, *ids, *out;
    int64_t n, V, D;
} sf_embed_problem;

/* The sampling settings after the front end's normalisation: every step
 * that sf_engine_generate would skip is switched off here (a NaN or
 * out-of-range setting is off, as in src/model/sample.c). */
typedef struct sf_sample_problem {
    const sf_tensor *logits, *slots, *seen, *rng, *tokens;
    int64_t n, V, S;
    int greedy;          /* temperature not > 0                               */
    int penalize;        /* seen given and penalty > 0, != 1                  */
    float penalty;
    float temperature;   /* used when !greedy                                 */
    int64_t top_k;       /* 0: off (else < V is not required)                 */
    float top_p;         /* 1: off, else in (0, 1)                            */
    float min_p;         /* 0: off, else > 0                                  */
} sf_sample_problem;

/* The processed logit of one element: the penalty (a positive logit divided
 * by it, a negative one multiplied), then the temperature, both in f32 as
 * the engine's host sampler; + 0.0f turns -0 into +0 so that the integer
 * order below agrees with the float comparison. */
SF_SMP_FN float sf_smp_value(float logit, int marked, int penalize, float penalty, int greedy,
                             float temperature) {
    float v = logit;
    if (penalize && marked) v = v > 0.0f ? v / penalty : v * penalty;
    if (!greedy) v = v / temperature;
    return v + 0.0f;
}

/* The sort order of the candidates: the larger value first, then the lower
 * id.  As one integer, larger first: the order-preserving image of the f32
 * value in the high 32 bits, the complement of the id in the low ones
 * (unique per element).  NaN values are not candidates. */
SF_SMP_FN uint64_t sf_smp_key(float v, int64_t id) {
    uint32_t b;
    memcpy(&b, &v, 4);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)b << 32) | (uint64_t)(0xffffffffu - (uint32_t)id);
}

/* The weight exp(v - mx) of a candidate: 1 for a value equal to the largest
 * (also when both are infinite, where the difference is NaN). */
SF_SMP_FN double sf_smp_weight_d(float v, float mx) {
    return v == mx ? 1.0 : exp((double)v - (double)mx);
}

/* The fast backends' weight: f32 exp, then fixed point with 40 fraction
 * bits.  Integer masses add exactly and in any order, so every pass over a
 * row and every thread count sees the same prefix sums (deterministic
 * tokens); the truncation costs at most V * 2^-40 of a row's mass (>= 1). */
#define SF_SMP_FIX 1099511627776.0 /* 2^40 */
SF_SMP_FN uint64_t sf_smp_mass(float v, float mx) {
    const float w = v == mx ? 1.0f : expf(v - mx);
    return (uint64_t)((double)w * SF_SMP_FIX);
}

/* min-p's test of a candidate, weight >= min_p, as the reference decides it:
 * in f32 where the f32 weight is clearly on one side, in double within
 * 1e-5 of the threshold (a few elements a row), so the fast backends keep
 * the reference's min-p count. */
SF_SMP_FN int sf_smp_minp_keep(float v, float mx, float min_p) {
    if (v == mx) return 1;
    const float w = expf(v - mx);
    if (fabsf(w - min_p) > 1e-5f * min_p) return w >= min_p;
    return exp((double)v - (double)mx) >= (double)min_p;
}

/* The fast backends' first-level histogram: bins of 1/32 in v - mx (natural
 * log of the weight), SF_SMP_BINS of them, the last one open-ended.  Bin
 * order is candidate order (bin 0 holds the largest values). */
#define SF_SMP_BINS 2048
SF_SMP_FN int sf_smp_bin(float v, float mx) {
    if (v == mx) return 0;
    const float d = (mx - v) * 32.0f;
    return d < (float)(SF_SMP_BINS - 1) ? (int)d : SF_SMP_BINS - 1;
}

/* splitmix64: the engine's per-sequence stream (src/model/sample.c). */
SF_SMP_FN uint64_t sf_smp_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The uniform double in [0, 1) of a draw: its top 53 bits. */
SF_SMP_FN double sf_smp_uniform(uint64_t r) { return (double)(r >> 11) * 0x1.0p-53; }

sf_status sf_ref_embed(sf_ctx *ctx, const sf_embed_problem *pr);
sf_status sf_cpu_embed(sf_ctx *ctx, const sf_embed_problem *pr);
sf_status sf_cuda_embed(sf_ctx *ctx, const sf_embed_problem *pr);

sf_status sf_ref_sample(sf_ctx *ctx, const sf_sample_problem *pr);
sf_status sf_cpu_sample(sf_ctx *ctx, const sf_sample_problem *pr);
/* src/cuda/sample/; in a build without CUDA src/core/sample_nocuda.c
 * answers SF_ERR_UNSUPPORTED. */
sf_status sf_cuda_sample(sf_ctx *ctx, const sf_sample_problem *pr);

#ifdef __cplusplus
}
#endif
#endif
