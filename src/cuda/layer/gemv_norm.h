/* gemv_norm.h - the engine's decode-step product with the residual add and
 * the next RMSNorm fused in (src/cuda/layer/gemv_norm.cu), for a few rows:
 *
 *     res[m, :] += x[m, :] W^T           (f32, the residual stream)
 *     out[m, :]  = res[m, :] * rstd_m * nw,  rstd_m = 1 / sqrt(mean(res[m, :]^2) + eps)
 *
 * One launch where the engine had a GEMM, then an add + RMSNorm: at a decode
 * step's one to eight rows both are latency-bound, and the product's output
 * never needs to round to x's dtype.  Internal to the library (the engine's
 * products of K <= 2048 followed by a norm: o_proj, SmolLM2's down_proj); its test is
 * tests/test_gemv_norm.c.  SF_AUTOTUNE_FORCE=gemv_norm:apart makes the
 * engine run the product and the norm apart (cuBLAS, sf_add_rmsnorm). */
#ifndef SF_GEMV_NORM_H
#define SF_GEMV_NORM_H

#include "seqfuse.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rows a call takes at most (the kernels hold a row's partial product a
 * register). */
#define SF_GEMV_NORM_MAX_ROWS 8

typedef struct sf_gemv_norm_args {
    sf_dtype dt;            /* x, W and out: f32, f16 or bf16                  */
    const void *x;          /* (M, K), row stride ldx elements                 */
    const void *w;          /* (N, K), row stride ldw elements                 */
    float *res;             /* (M, N) f32, row stride ldr: read and updated    */
    const float *nw;        /* (N) f32: the norm's weight                      */
    void *out;              /* (M, N), row stride ldo                          */
    int64_t ldx, ldw, ldr, ldo;
    int M, N, K;
    float eps;
    void *scratch;          /* sf_gemv_norm_scratch_bytes(N), zeroed once when
                               made; every call leaves it zeroed again        */
} sf_gemv_norm_args;

/* Bytes of scratch a call of N output features needs. */
size_t sf_gemv_norm_scratch_bytes(int N);

/* NULL when the fused kernel serves the call, else why not (the caller then
 * runs the product and the norm apart): rows 1..SF_GEMV_NORM_MAX_ROWS, K a
 * multiple of 16 bytes of x's dtype, x, W rows 16-byte aligned. */
const char *sf_gemv_norm_supports(const sf_gemv_norm_args *a);

/* Runs it on the context's stream: one launch, no allocation, capturable. */
sf_status sf_cuda_gemv_add_rmsnorm(sf_ctx *ctx, const sf_gemv_norm_args *a);

#ifdef __cplusplus
}
#endif

#endif
