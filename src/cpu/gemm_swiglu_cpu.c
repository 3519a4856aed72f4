/* gemm_swiglu_cpu.c - CPU backend of the gate/up projection with SwiGLU.
 *
 * x is converted to f32 once (into the workspace; an f32 x is read in
 * place).  The outputs are shared out in blocks of GS_RB over the OpenMP
 * threads; a thread converts the block's GS_RB rows of w_gate and of w_up to
 * f32 (a buffer of 2 GS_RB rows that stays in its cache), then takes the
 * 2 GS_RB dot products of every row of x against it, 8 independent f32
 * lanes each (the compiler vectorises them; one load of x serves all the
 * rows), and writes silu(g) * u.  No BLAS: the library has no dependency.
 */
#include "cpu_common.h"
#include "gemm_swiglu.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define GS_RB 4           /* outputs per block: GS_RB gate rows + GS_RB up rows */
#define GS_NR (2 * GS_RB) /* rows of the block's f32 buffer                        */

/* out[r] = sum_k x[k] * w[r * K + k] for the GS_NR rows of w. */
static void dot_rows(const float *x, const float *w, int64_t K, float *out) {
    float a[GS_NR][8];
    memset(a, 0, sizeof a);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        for (int r = 0; r < GS_NR; r++)
            for (int u = 0; u < 8; u++) a[r][u] += x[k + u] * w[r * K + k + u];
    for (int r = 0; r < GS_NR; r++) {
        for (int64_t t = k; t < K; t++) a[r][0] += x[t] * w[r * K + t];
        out[r] = ((a[r][0] + a[r][1]) + (a[r][2] + a[r][3])) + ((a[r][4] + a[r][5]) + (a[r][6] + a[r][7]));
    }
}

sf_status sf_cpu_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_problem *pr) {
    const sf_gemm_swiglu_params *p = pr->p;
    const sf_tensor *x = &p->x, *wg = &p->w_gate, *wu = &p->w_up, *y = &p->y;
    const int64_t M = pr->M, I = pr->I, K = pr->K, KP = sf_cpu_rup(K, 16);
    const int nt = sf_cpu_threads(ctx);
    /* x in f32 (unless read in place), GS_NR rows of W per thread */
    const float *xf = NULL;
    int64_t xrs = 0;
    float *wbufs = NULL;
    sf_status st = sf_cpu_x_f32(ctx, "sf_gemm_swiglu", x, M, K, KP, nt, (int64_t)GS_NR * KP, &xf, &xrs, &wbufs);
    if (st != SF_OK) return st;
    const int64_t nblk = (I + GS_RB - 1) / GS_RB;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (int64_t bi = 0; bi < nblk; bi++) {
        float *wb = wbufs + (int64_t)sf_cpu_tid() * GS_NR * KP;
        const int64_t i0 = bi * GS_RB;
        const int nr = (int)sf_cpu_min(GS_RB, I - i0);
        /* a partial last block repeats its first row (those sums are not used) */
        for (int r = 0; r < GS_RB; r++) {
            const int64_t i = i0 + (r < nr ? r : 0);
            sf_cpu_row_in(wg->data, wg->dtype, i * wg->stride[0], K, wb + r * K);
            sf_cpu_row_in(wu->data, wu->dtype, i * wu->stride[0], K, wb + (GS_RB + r) * K);
        }
        for (int64_t m = 0; m < M; m++) {
            float o[GS_NR];
            dot_rows(xf + m * xrs, wb, K, o);
            for (int r = 0; r < nr; r++) {
                const float g = o[r];
                sf_stf(y->data, y->dtype, sf_off2(y, m, i0 + r), g / (1.0f + expf(-g)) * o[GS_RB + r]);
            }
        }
    }
    return SF_OK;
}
