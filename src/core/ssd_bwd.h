/* ssd_bwd.h - what the SSD front end (ssd.c, ssd_bwd.c) shares with the
 * backward's backends: the forward's validation as a function, and the
 * validated backward problem.  Kept out of internal.h, which every CUDA
 * translation unit includes. */
#ifndef SF_SSD_BWD_H
#define SF_SSD_BWD_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every check of sf_ssd_fwd on p (op names the caller in messages; out and
 * final_states are named out_name and final_name; sf_check_io of out and
 * final_states against the inputs only when check_io), filling *pr (no
 * segments).  The backward validates its dout and dfinal_states as the
 * forward's out and final_states. */
sf_status sf_ssd_validate(sf_ctx *ctx, const sf_ssd_fwd_params *p, const char *op, const char *out_name,
                          const char *final_name, int check_io, sf_ssd_problem *pr);
/* The host segment list of a validated problem (host tensors only). */
sf_status sf_ssd_build_segments(sf_ctx *ctx, const char *op, sf_ssd_problem *pr);

/* A validated backward.  f describes the forward with f.p->out = dout and
 * f.p->final_states = dfinal_states (so f.has_final says dfinal_states is
 * given, and a segment's final >= 0 names its dfinal_states row).  The
 * gradients are read from p (absent = not wanted). */
typedef struct sf_ssd_bwd_problem {
    sf_ssd_problem f;
    const sf_ssd_bwd_params *p;
} sf_ssd_bwd_problem;

sf_status sf_ref_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *pr);
sf_status sf_cpu_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *pr);
/* CUDA backend (src/cuda/ssd/bwd.cu); SF_ERR_UNSUPPORTED without CUDA. */
sf_status sf_cuda_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *pr);

#ifdef __cplusplus
}
#endif

#endif
