/* gemm_wq.h - validated problems and backend entry points of the weight-only
 * quantised matrix product (sf_gemm_wq) and of the host conversions of
 * quantised weights (sf_quantize_weights, sf_dequantize_weights,
 * sf_repack_gguf).  Built by src/core/gemm_wq.c, read by src/ref/gemm_wq_ref.c,
 * src/cpu/gemm_wq_cpu.c, src/cpu/qweight_cpu.c and src/cuda/gemm_wq/.  Not
 * installed; include only from src/. */
#ifndef SF_GEMM_WQ_H
#define SF_GEMM_WQ_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sf_gemm_wq_problem {
    const sf_gemm_wq_params *p;
    int64_t M, N, K;
    int64_t G;                 /* groups per row: K / group              */
    int group;                 /* 32, 64 or 128                          */
    int int4;                  /* 1: SF_QW_INT4, 0: SF_QW_INT8           */
    int has_min, has_bias;
} sf_gemm_wq_problem;

/* Bytes of one row of codes. */
static inline int64_t sf_wq_row_bytes(int int4, int64_t k) { return int4 ? k / 2 : k; }

/* The integer value of element (n, k) of a validated, contiguous, host
 * sf_qweight: the code with its offset applied, so that w = s * v + m (m = 0
 * without mins).  int4: u - 8 without mins, u with; int8: the signed byte
 * without mins, the unsigned one with. */
static inline int sf_wq_value(const sf_qweight *q, int64_t n, int64_t k) {
    const int has_min = q->mins.data != NULL;
    const uint8_t *d = (const uint8_t *)q->data.data;
    if (q->format == SF_QW_INT4) {
        const uint8_t b = d[n * (q->k / 2) + k / 2];
        const int u = (k & 1) ? b >> 4 : b & 15;
        return has_min ? u : u - 8;
    }
    const uint8_t b = d[n * q->k + k];
    return has_min ? (int)b : (int)(int8_t)b;
}

/* Scale and min (0 without mins) of group j of row n, as float. */
static inline float sf_wq_scale(const sf_qweight *q, int64_t j, int64_t n) {
    return sf_ldf(q->scales.data, q->scales.dtype, j * q->n + n);
}
static inline float sf_wq_min(const sf_qweight *q, int64_t j, int64_t n) {
    return q->mins.data ? sf_ldf(q->mins.data, q->mins.dtype, j * q->n + n) : 0.0f;
}

sf_status sf_ref_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr);
sf_status sf_cpu_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr);
/* src/cuda/gemm_wq/; src/core/gemm_wq_nocuda.c in a build without CUDA. */
sf_status sf_cuda_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr);

/* Host conversions (src/cpu/qweight_cpu.c), on validated arguments. */
sf_status sf_cpu_quantize_weights(sf_ctx *ctx, const sf_tensor *w, const sf_qweight *q);
sf_status sf_cpu_dequantize_weights(sf_ctx *ctx, const sf_qweight *q, const sf_tensor *w);
sf_status sf_cpu_repack_gguf(sf_ctx *ctx, sf_gguf_type type, const uint8_t *blocks,
                             const sf_qweight *q);

#ifdef __cplusplus
}
#endif
#endif
