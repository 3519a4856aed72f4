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

/* SF_QW_TILED (seqfuse.h): rows padded to a multiple of 128, row bytes to
 * a multiple of 64; the offset of byte b of row n; the slot of element e
 * (0..7) among the 8 of its unit (e0 e2 e4 e6 e1 e3 e5 e7). */
#ifdef __CUDACC__
#define SF_WQ_HD __host__ __device__
#else
#define SF_WQ_HD
#endif
static inline int64_t sf_wq_tiled_rows(int64_t n) { return (n + 127) / 128 * 128; }
static inline int64_t sf_wq_tiled_row_bytes(int int4, int64_t k) { return (sf_wq_row_bytes(int4, k) + 63) / 64 * 64; }
SF_WQ_HD static inline int64_t sf_wq_tiled_off(int64_t n, int64_t b, int64_t bp) {
    return (((n >> 7) * (bp >> 6) + (b >> 6)) * 8 + ((n >> 4) & 7)) * 1024 + (n & 15) * 64 + (b & 63);
}
SF_WQ_HD static inline int sf_wq_tiled_slot(int e) { return (e & 1) * 4 + (e >> 1); }

/* The code of element (n, k) of a validated, contiguous, host sf_qweight
 * (either layout): u in [0, 15] (int4) or the byte (int8). */
static inline int sf_wq_code(const sf_qweight *q, int64_t n, int64_t k) {
    const uint8_t *d = (const uint8_t *)q->data.data;
    const int int4 = q->format == SF_QW_INT4;
    if (q->layout == SF_QW_TILED) {
        const int64_t pos = (k & ~(int64_t)7) + sf_wq_tiled_slot((int)(k & 7)); /* in a row of slots */
        const uint8_t b = d[sf_wq_tiled_off(n, int4 ? pos / 2 : pos, sf_wq_tiled_row_bytes(int4, q->k))];
        return int4 ? ((pos & 1) ? b >> 4 : b & 15) : b;
    }
    if (int4) {
        const uint8_t b = d[n * (q->k / 2) + k / 2];
        return (k & 1) ? b >> 4 : b & 15;
    }
    return d[n * q->k + k];
}

/* The integer value of element (n, k): the code with its offset applied, so
 * that w = s * v + m (m = 0 without mins).  int4: u - 8 without mins, u
 * with; int8: the signed byte without mins, the unsigned one with. */
static inline int sf_wq_value(const sf_qweight *q, int64_t n, int64_t k) {
    const int has_min = q->mins.data != NULL;
    const int u = sf_wq_code(q, n, k);
    if (q->format == SF_QW_INT4) return has_min ? u : u - 8;
    return has_min ? u : (int)(int8_t)(uint8_t)u;
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
sf_status sf_cpu_tile_qweight(sf_ctx *ctx, const sf_qweight *q, const sf_tensor *tiled);
sf_status sf_cpu_repack_gguf(sf_ctx *ctx, sf_gguf_type type, const uint8_t *blocks,
                             const sf_qweight *q);

#ifdef __cplusplus
}
#endif
#endif
