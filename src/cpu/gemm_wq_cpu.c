/* gemm_wq_cpu.c - CPU backend of the weight-only quantised product y = x W^T.
 *
 * x is converted to f32 once (into the workspace; an f32 x is read in
 * place).  The rows of W are shared out in blocks of WQ_RB over the OpenMP
 * threads; a thread dequantises its block into an f32 buffer of WQ_RB rows
 * (w = s * v + m: s * v is exact in f32, one rounding with a min) and takes
 * the WQ_RB dot products of every row of x against it, in 8 independent f32
 * lanes per product (the compiler vectorises them; one load of x serves the
 * WQ_RB rows).  The codes are read once, the f32 weights stay in the
 * thread's cache while every row of x passes over them.
 */
#include "cpu_common.h"
#include "gemm_wq.h"

#include <stdint.h>
#include <string.h>

#define WQ_RB 4 /* rows of W per block */

/* Row n of q dequantised to f32 into dst[0 .. K). */
static void dequant_row(const sf_qweight *q, int64_t n, float *dst) {
    const int64_t K = q->k, g = q->group_size, G = K / g;
    const int has_min = q->mins.data != NULL;
    const uint8_t *d = (const uint8_t *)q->data.data + n * sf_wq_row_bytes(q->format == SF_QW_INT4, K);
    for (int64_t j = 0; j < G; j++) {
        const float s = sf_wq_scale(q, j, n), m = sf_wq_min(q, j, n);
        float *o = dst + j * g;
        if (q->format == SF_QW_INT4) {
            const uint8_t *b = d + j * g / 2;
            const int off = has_min ? 0 : 8;
            for (int64_t i = 0; i < g / 2; i++) {
                o[2 * i] = s * (float)((b[i] & 15) - off) + m;
                o[2 * i + 1] = s * (float)((b[i] >> 4) - off) + m;
            }
        } else if (has_min) {
            const uint8_t *b = d + j * g;
            for (int64_t i = 0; i < g; i++) o[i] = s * (float)b[i] + m;
        } else {
            const int8_t *b = (const int8_t *)d + j * g;
            for (int64_t i = 0; i < g; i++) o[i] = s * (float)b[i];
        }
    }
}

/* out[r] = sum_k x[k] * w[r * K + k] for r < nr (nr <= WQ_RB), 8 lanes each
 * (K is a multiple of 32).  A full block runs the fixed-trip loop the
 * compiler vectorises; the last, partial one pads with row 0 (its sums are
 * not used). */
static void dot_rows(const float *x, const float *w, int64_t K, int nr, float *out) {
    float a[WQ_RB][8];
    memset(a, 0, sizeof a);
    const float *wr[WQ_RB];
    for (int r = 0; r < WQ_RB; r++) wr[r] = w + (r < nr ? r : 0) * K;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        for (int r = 0; r < WQ_RB; r++)
            for (int u = 0; u < 8; u++) a[r][u] += x[k + u] * wr[r][k + u];
    for (int r = 0; r < nr; r++) {
        for (int64_t t = k; t < K; t++) a[r][0] += x[t] * w[r * K + t];
        out[r] = ((a[r][0] + a[r][1]) + (a[r][2] + a[r][3])) + ((a[r][4] + a[r][5]) + (a[r][6] + a[r][7]));
    }
}

sf_status sf_cpu_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr) {
    const sf_gemm_wq_params *p = pr->p;
    const sf_qweight *q = &p->w;
    const sf_tensor *x = &p->x, *y = &p->y, *bias = &p->bias;
    const int64_t M = pr->M, N = pr->N, K = pr->K, KP = sf_cpu_rup(K, 16);
    const int nt = sf_cpu_threads(ctx);
    /* x in f32 (unless read in place), WQ_RB rows of W per thread */
    const float *xf = NULL;
    int64_t xrs = 0;
    float *wbufs = NULL;
    sf_status st = sf_cpu_x_f32(ctx, "sf_gemm_wq", x, M, K, KP, nt, (int64_t)WQ_RB * KP, &xf, &xrs, &wbufs);
    if (st != SF_OK) return st;
    const int64_t nblk = (N + WQ_RB - 1) / WQ_RB;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (int64_t bi = 0; bi < nblk; bi++) {
        float *wb = wbufs + (int64_t)sf_cpu_tid() * WQ_RB * KP;
        const int64_t n0 = bi * WQ_RB;
        const int nr = (int)sf_cpu_min(WQ_RB, N - n0);
        for (int r = 0; r < nr; r++) dequant_row(q, n0 + r, wb + r * K);
        float bv[WQ_RB] = {0, 0, 0, 0};
        if (pr->has_bias)
            for (int r = 0; r < nr; r++) bv[r] = sf_ldf(bias->data, bias->dtype, (n0 + r) * bias->stride[0]);
        for (int64_t i = 0; i < M; i++) {
            float o[WQ_RB];
            dot_rows(xf + i * xrs, wb, K, nr, o);
            for (int r = 0; r < nr; r++) sf_stf(y->data, y->dtype, sf_off2(y, i, n0 + r), o[r] + bv[r]);
        }
    }
    return SF_OK;
}
