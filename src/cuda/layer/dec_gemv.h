/* dec_gemv.h - the engine's decode-step products (a few rows of x) on the
 * weight-streaming kernel of sf_gemm_swiglu (gemm_swiglu/decode.cuh), with
 * the layer's neighbours fused in (src/cuda/layer/dec_gemv.cu):
 *
 *   input   x as given, or x = RMSNorm(nres) * nw (the norm before the
 *           product, from the f32 residual stream; bf16: nres * nw is
 *           rounded and the product scaled by 1 / rms after);
 *   output  plain:  y = x W^T (+ bias)
 *           res:    res += x W^T (f32: the residual add after the product)
 *           swiglu: y = silu(x W^T) * (x W_up^T)
 *           qkv:    [q | k | v] = x W^T (+ bias), q and k rotated, k and v
 *                   appended to the paged KV cache (sf_dec_rope below)
 *
 * A Llama layer's decode step is then qkv (norm in, rotary and append
 * out), paged attention, o (res out), gate/up (norm in, SwiGLU) and down
 * (res out): no norm, add, rotary or append launch of its own.
 * Internal to the library; its test is tests/test_dec_gemv.c. */
#ifndef SF_DEC_GEMV_H
#define SF_DEC_GEMV_H

#include "seqfuse.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sf_dec_out { SF_DEC_PLAIN = 0, SF_DEC_RES = 1, SF_DEC_SWIGLU = 2, SF_DEC_QKV = 3 } sf_dec_out;

/* SF_DEC_QKV: an attention layer's stacked q/k/v product (N = qd + 2 kd)
 * with the rotary embedding and the KV-cache append after it, in place of
 * sf_rope and sf_kv_append.  W's q and k rows (and the bias's entries)
 * must come in rotary pairs: rows 2i and 2i + 1 of a head's first R rows
 * are the pair that sf_rope's SF_ROPE_GPTJ style rotates (a NeoX model's
 * rows i and i + R/2, reordered at load); q and k then stay in that order,
 * which attention does not see (q . k is the same under one permutation
 * of both).  Row m of x is rotated at pos[m]; its k and v go to slot
 * lens[m] of its pages (block_table row m), the cache length before the
 * append; a slot outside the table or a page outside the pool skips the
 * row's k and v and records it in the context's paged error word (read
 * by sf_cuda_sync), as sf_kv_append does. */
typedef struct sf_dec_rope {
    void *q;                   /* (M, qd) out, contiguous rows                  */
    void *k_cache, *v_cache;   /* (pages, page_size, kv heads, hd), x's dtype   */
    int64_t cache_page_stride, cache_row_stride; /* elements, both pools        */
    int num_pages, page_size;  /* page_size a power of two                      */
    const int32_t *pos;        /* (M) rotation positions, device                */
    const int32_t *lens;       /* (M) cache lengths before the append, device   */
    const int32_t *block_table;/* (M, bt_stride) page indices, device           */
    int64_t bt_stride;
    int max_pages;             /* pages a table row holds                       */
    const double *turns;       /* (R / 2) f_i / 2 pi (sf_rope's frequencies)    */
    int qd, kd, hd, R;         /* q and k widths, head dim, rotary dim          */
} sf_dec_rope;

/* Rows of x a normed call takes at most: every block rebuilds the normed
 * rows (M K f32 from L2), which at 16 rows cost more than the norm's own
 * launch (H100, llama-1b batch 16: 1.99 ms a step against 1.42). */
#define SF_DEC_NORM_MAX_ROWS 4

typedef struct sf_dec_gemv_args {
    sf_dtype dt;           /* x, W, W_up, bias, y: f16 or bf16                    */
    sf_dec_out out;
    const void *x;         /* (M, K), row stride ldx; NULL: the norm below       */
    int64_t ldx;
    const float *nres;     /* norm in: (M, K) f32, row stride ldn                 */
    const float *nw;       /* norm in: (K) f32                                    */
    int64_t ldn;
    float eps;
    const void *w, *w_up;  /* (N, K), row strides ldw, ldu (w_up: swiglu only)    */
    int64_t ldw, ldu;
    const void *bias;      /* plain: (N) or NULL                                  */
    void *y;               /* plain, swiglu: (M, N), row stride ldy               */
    int64_t ldy;
    float *res;            /* res: (M, N) f32, row stride ldr                     */
    int64_t ldr;
    int M, N, K;
    sf_dec_rope rope;      /* SF_DEC_QKV: where q, k and v go (y unused)    */
    int config;            /* a row of the configuration table (0: the heuristic) */
    int pdl;               /* launch as a programmatic dependent of the kernel
                              ahead in the stream: its weight loads start
                              while that kernel finishes (sm_90)            */
} sf_dec_gemv_args;

/* The configuration rows (for tests and benchmarks): their count, a row's
 * name; SF_AUTOTUNE_FORCE=dec_gemv:NAME pins one for the plain and res
 * calls with config 0 (swiglu keeps w4, sf_gemm_swiglu's dec4 shape). */
int sf_dec_gemv_nconfig(void);
const char *sf_dec_gemv_config_name(int i);

/* NULL when a call can take these arguments, else why not: f16 / bf16;
 * M >= 1 (with the norm: bf16, at most SF_DEC_NORM_MAX_ROWS rows, their K
 * elements within 96 KB of shared memory); K a multiple of 8,
 * x, W, W_up rows 16-byte aligned; the norm's rows 16-byte aligned; no
 * output overlapping an input. */
const char *sf_dec_gemv_supports(const sf_dec_gemv_args *a);

/* Runs it on the context's stream: one launch, no allocation, capturable. */
sf_status sf_cuda_dec_gemv(sf_ctx *ctx, const sf_dec_gemv_args *a);

#ifdef __cplusplus
}
#endif

#endif
