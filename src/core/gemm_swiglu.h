/* gemm_swiglu.h - the validated problem and backend entry points of the
 * gate/up projection with SwiGLU fused in (sf_gemm_swiglu).  Built by
 * src/core/gemm_swiglu.c, read by src/ref/gemm_swiglu_ref.c,
 * src/cpu/gemm_swiglu_cpu.c and src/cuda/gemm_swiglu/.  Not installed;
 * include only from src/. */
#ifndef SF_GEMM_SWIGLU_H
#define SF_GEMM_SWIGLU_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sf_gemm_swiglu_problem {
    const sf_gemm_swiglu_params *p;
    int64_t M, I, K;
} sf_gemm_swiglu_problem;

sf_status sf_ref_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_problem *pr);
sf_status sf_cpu_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_problem *pr);
/* src/cuda/gemm_swiglu/; src/core/gemm_swiglu_nocuda.c in a build without CUDA. */
sf_status sf_cuda_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_problem *pr);

#ifdef __cplusplus
}
#endif
#endif
