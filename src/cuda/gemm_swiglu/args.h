/* args.h - the kernel arguments of sf_gemm_swiglu's CUDA kernels (ws.cuh,
 * decode.cuh): y[m, i] = silu(x w_gate^T)[m, i] * (x w_up^T)[m, i], every
 * matrix row-major with unit inner stride and the row strides below
 * (elements). */
#ifndef SF_GEMM_SWIGLU_ARGS_H
#define SF_GEMM_SWIGLU_ARGS_H

#include <stdint.h>

struct GsArgs {
    const void *x, *wg, *wu; /* (M, K), (I, K), (I, K)                    */
    void *y;                 /* (M, I)                                     */
    int64_t x_rs, wg_rs, wu_rs, y_rs;
    int M, I, K;
    int y_pair;              /* y 4-byte aligned with an even row stride:
                                two adjacent outputs in one store          */
};

/* The decode kernel's other modes (decode.cuh DecOut, NORM: the engine's
 * layer products, layer/dec_gemv.h).  Their own type: sf_gemm_swiglu's
 * kernel keeps the smaller argument block (with these fields in it ptxas
 * spilled 12 bytes at the dec4 row's 128-register cap). */
/* The qkv output (DecOut::qkv): q, k and v of an attention layer's decode
 * step from one stacked product whose q and k rows come in rotary pairs
 * (row 2i with row 2i + 1 of a head's first R rows: sf_rope's GPT-J
 * order): q rotated into its buffer, k rotated and v copied into their
 * slots of the paged cache (layer/dec_gemv.h, sf_dec_rope). */
struct GsRope {
    void *q;                    /* (M, qd)                                   */
    void *kc, *vc;              /* pools (pages, page rows, kv heads, hd)    */
    int64_t c_sp, c_sr;         /* their page and row strides (elements)     */
    const int32_t *pos, *lens;  /* (M): rotation positions, cache lengths    */
    const int32_t *bt;          /* (M, bt_rs): block table                   */
    int64_t bt_rs;
    const double *turns;        /* (R / 2): f_i / 2 pi                       */
    unsigned int *err;          /* a bad slot's row + 1 (paged error word)   */
    int qd, kd, hd, R, page_shift, max_pages, num_pages;
};

struct GsArgsX : GsArgs {
    const float *nres, *nw;  /* NORM: x = RMSNorm(nres) * nw, (M, K), (K)   */
    int64_t nres_rs;
    float eps;
    const void *bias;        /* plain: (I) of the weights' dtype, or NULL   */
    float *res;              /* res: (M, I) f32, += x W^T                   */
    int64_t res_rs;
    GsRope rope;             /* qkv                                        */
};

#endif
