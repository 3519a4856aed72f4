/* attn_bwd.h - the validated attention backward (sf_attn_bwd) shared by
 * its front end and backends.  Kept apart from internal.h so the backward's
 * declarations do not touch every CUDA translation unit. */
#ifndef SF_ATTN_BWD_H
#define SF_ATTN_BWD_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The forward's validation (src/core/attn.c), errors under the name op. */
sf_status sf_attn_problem_build(sf_ctx *ctx, const char *op, const sf_attn_fwd_params *p,
                                sf_attn_problem *out);

/* A validated sf_attn_bwd call: the forward's problem (f.p = &p->fwd) and
 * the gradient tensors of p (dout like out; dq, dk, dv like q, k, v). */
typedef struct sf_attn_bwd_problem {
    sf_attn_problem f;
    const sf_attn_bwd_params *p;
    int deterministic;
} sf_attn_bwd_problem;

sf_status sf_ref_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_problem *pr);
sf_status sf_cpu_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_problem *pr);
sf_status sf_cuda_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_problem *pr);

#ifdef __cplusplus
}
#endif

#endif
