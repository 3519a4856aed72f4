/* layer_ops.h - validated problems and backend entry points of the small
 * layer ops around SSD: causal depthwise conv1d (prefill and decode update)
 * and gated RMSNorm.  Built by src/core/layer_ops.c, read by
 * src/ref/layer_ref.c, src/cpu/layer_cpu.c and src/cuda/layer_ops.cu.
 * Not installed; include only from src/. */
#ifndef SF_LAYER_OPS_H
#define SF_LAYER_OPS_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A run of tokens of one batch row that one causal window slides over. */
typedef struct sf_conv1d_segment {
    int64_t b;          /* batch row                                   */
    int64_t start, end; /* token range [start, end) within the row     */
    int64_t state;      /* row of initial_state / final_state           */
} sf_conv1d_segment;

typedef struct sf_conv1d_problem {
    const sf_conv1d_params *p;
    int64_t batch, seqlen, dim;
    int width;                     /* W in 2..4                         */
    int has_bias, has_init, has_final, silu;
    int varlen;                    /* cu_seqlens given                  */
    int64_t nseq;                  /* sequences (cu_seqlens) or batch    */
    /* Host-side segment list (rows, or cu_seqlens sequences); filled
     * only for the host backends. */
    const sf_conv1d_segment *seg;
    int64_t nseg;
} sf_conv1d_problem;

typedef struct sf_conv1d_update_problem {
    const sf_conv1d_update_params *p;
    int64_t batch, dim, nslots;
    int width;
    int has_bias, has_idx, silu;
} sf_conv1d_update_problem;

typedef struct sf_rmsnorm_problem {
    const sf_rmsnorm_gated_params *p;
    int64_t rows, dim, group;      /* group divides dim                 */
    int has_z, norm_before_gate;
    float eps;
} sf_rmsnorm_problem;

sf_status sf_ref_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_problem *pr);
sf_status sf_ref_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_problem *pr);
sf_status sf_ref_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_problem *pr);

sf_status sf_cpu_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_problem *pr);
sf_status sf_cpu_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_problem *pr);
sf_status sf_cpu_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_problem *pr);

/* CUDA backend (src/cuda/layer_ops.cu); in a build without CUDA these
 * come from src/core/layer_nocuda.c and answer SF_ERR_UNSUPPORTED. */
sf_status sf_cuda_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_problem *pr);
sf_status sf_cuda_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_problem *pr);
sf_status sf_cuda_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_problem *pr);

#ifdef __cplusplus
}
#endif
#endif
