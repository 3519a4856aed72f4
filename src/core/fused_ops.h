/* fused_ops.h - validated problems and backend entry points of the fused
 * layer ops: residual add + RMSNorm / LayerNorm, SwiGLU, rotary embedding.
 * Built by src/core/fused_ops.c, read by src/ref/fused_ref.c,
 * src/cpu/fused_cpu.c and src/cuda/fused/.  Not installed; include only
 * from src/. */
#ifndef SF_FUSED_OPS_H
#define SF_FUSED_OPS_H

#include "internal.h"

#include <math.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sf_norm_problem {
    const sf_norm_params *p;
    const char *op;
    int64_t rows, dim;
    int layer;                 /* 1: LayerNorm, 0: RMSNorm              */
    int has_res, has_hout, has_bias;
    float eps;
} sf_norm_problem;

typedef struct sf_swiglu_problem {
    const sf_swiglu_params *p;
    int64_t rows, n;
    int layout;                /* sf_swiglu_layout                       */
} sf_swiglu_problem;

typedef struct sf_rope_problem {
    const sf_rope_params *p;
    int64_t T, H, Hkv, d, R;   /* R: rotary dim, even, <= d              */
    int has_k, has_pos, has_tab, gptj;
    int q_inplace, k_inplace;  /* no q_out / k_out: rotate in place      */
    sf_rope_spec spec;         /* R, gptj, has_tab again, for the shared helpers */
} sf_rope_problem;

/* The checks of a rotary definition that sf_rope and sf_kv_append's rope
 * share: rotary_dim (even, at most the head dim d; 0 means d), style, cos
 * and sin (both or neither, (npos, R/2) f32) or theta and the llama3
 * scaling.  Errors name the field with the prefix pfx ("" or "rope.").
 * Fills s (s->p = p). */
sf_status sf_rope_check(sf_ctx *ctx, const char *op, const char *pfx, const sf_rope_params *p,
                        int64_t d, sf_rope_spec *s);

/* Frequency of pair i (0 <= i < R/2) from theta and the llama3 scaling,
 * in double: the definition both host backends share (seqfuse.h). */
static inline double sf_rope_freq(const sf_rope_params *p, int64_t R, int64_t i) {
    double f = pow((double)p->theta, -2.0 * (double)i / (double)R);
    if (p->scaling != SF_ROPE_LLAMA3) return f;
    const double L = (double)p->original_max_position, lf = (double)p->low_freq_factor,
                 hf = (double)p->high_freq_factor, fac = (double)p->factor;
    const double w = 2.0 * 3.14159265358979323846 / f;
    if (w < L / hf) return f;
    if (w > L / lf) return f / fac;
    const double s = (L / w - lf) / (hf - lf);
    return (1.0 - s) * f / fac + s * f;
}

/* cos and sin of pair i at position pos in double: from the tables, or
 * of the angle pos * f_i with f_i = freq[i] (sf_rope_freq), or computed
 * here when freq is NULL.  The definition both host backends rotate by. */
static inline void sf_rope_angle(const sf_rope_spec *s, const double *freq, int64_t pos, int64_t i,
                                 double *c, double *sn) {
    if (s->has_tab) {
        const sf_tensor *ct = &s->p->cos, *st = &s->p->sin;
        *c = (double)sf_ldf(ct->data, SF_F32, pos * ct->stride[0] + i * ct->stride[1]);
        *sn = (double)sf_ldf(st->data, SF_F32, pos * st->stride[0] + i * st->stride[1]);
        return;
    }
    const double a = (double)pos * (freq ? freq[i] : sf_rope_freq(s->p, s->R, i));
    *c = cos(a);
    *sn = sin(a);
}

/* Position of token t: positions[t], or t. */
static inline int64_t sf_rope_pos(const sf_rope_problem *pr, int64_t t) {
    const sf_tensor *ps = &pr->p->positions;
    return pr->has_pos ? sf_ldi(ps->data, ps->dtype, t * ps->stride[0]) : t;
}

sf_status sf_ref_add_norm(sf_ctx *ctx, const sf_norm_problem *pr);
sf_status sf_ref_swiglu(sf_ctx *ctx, const sf_swiglu_problem *pr);
sf_status sf_ref_rope(sf_ctx *ctx, const sf_rope_problem *pr);

sf_status sf_cpu_add_norm(sf_ctx *ctx, const sf_norm_problem *pr);
sf_status sf_cpu_swiglu(sf_ctx *ctx, const sf_swiglu_problem *pr);
sf_status sf_cpu_rope(sf_ctx *ctx, const sf_rope_problem *pr);
/* The CPU rotation, shared with the paged append (src/cpu/paged_cpu.c):
 * the R/2 (cos, sin) of position pos in f32 (angles in double, freq as
 * sf_rope_angle), and the rotation of the R leading channels of one f32
 * head row in place. */
void sf_cpu_rope_cs(const sf_rope_spec *s, const double *freq, int64_t pos, float *cs, float *sn);
void sf_cpu_rope_row(const sf_rope_spec *s, float *row, const float *cs, const float *sn);

/* CUDA backend: src/cuda/fused/ (norm.cu, swiglu.cu, rope.cu); in a build
 * without CUDA these come from src/core/fused_nocuda.c and answer
 * SF_ERR_UNSUPPORTED. */
sf_status sf_cuda_add_norm(sf_ctx *ctx, const sf_norm_problem *pr);
sf_status sf_cuda_swiglu(sf_ctx *ctx, const sf_swiglu_problem *pr);
sf_status sf_cuda_rope(sf_ctx *ctx, const sf_rope_problem *pr);

#ifdef __cplusplus
}
#endif
#endif
