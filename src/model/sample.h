/* sample.h - the token samplers of sf_engine_generate (the rules are in
 * seqfuse.h, sf_sampling).  Not installed. */
#ifndef SF_MODEL_SAMPLE_H
#define SF_MODEL_SAMPLE_H

#include <stdint.h>

#include "seqfuse.h"

/* splitmix64: the next 64-bit output of the state *s. */
uint64_t sfm_rng_next(uint64_t *s);

/* Scratch for sfm_sample over a vocabulary of V (owned by the caller). */
typedef struct sfm_cand {
    float v;
    int32_t id;
} sfm_cand;

typedef struct sfm_sampler {
    int V;
    float *val;          /* V: the processed logits */
    sfm_cand *cand;      /* V: candidates, sorted */
    unsigned char *seen; /* V: penalty applied */
} sfm_sampler;

int sfm_sampler_init(sfm_sampler *sm, int V);  /* 0 when out of memory */
void sfm_sampler_free(sfm_sampler *sm);

/* The next token from logits (V floats): penalty over hist (nhist ids),
 * then greedy or the sampling chain, drawing from *rng. */
int32_t sfm_sample(sfm_sampler *sm, const float *logits, const sf_sampling *s, const int32_t *hist,
                   int64_t nhist, uint64_t *rng);

#endif
