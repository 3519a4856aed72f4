/* gemm_cpu.c - CPU backend of the dense product y = x W^T (+ bias) (+ beta y).
 *
 * Everything is f32: a 16-bit x is widened once into the workspace (an f32
 * x is read in place), a 16-bit W a block of rows at a time.
 *  - With BLAS (SF_WITH_BLAS): one sgemm per block of GB rows of W (one
 *    sgemm in all for f32 x and W), straight into an f32 y with beta, or
 *    into an f32 block that is then rounded into y; the bias is added after.
 *    BLAS threads itself.
 *  - Without: the rows of W are shared out in blocks of RB over the OpenMP
 *    threads; each block (widened into the thread's buffer when 16-bit)
 *    stays in cache while every row of x passes over it, RB dot products at
 *    a time in 8 independent f32 lanes that the compiler vectorises.
 */
#include "cpu_common.h"
#include "gemm.h"

#include <stdint.h>
#include <string.h>

#define RB 4    /* rows of W per dot-product block (loop path)          */
#define GB 256  /* rows of W per sgemm when W is widened (BLAS path)    */

#ifdef SF_WITH_BLAS
/* The CBLAS entry point, declared here so that no cblas.h is needed at
 * build time (the enum values are the CBLAS standard's). */
void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* Whether a (rows, cols) tensor's row stride can be BLAS's leading
 * dimension as it is. */
static int ld_ok(const sf_tensor *t, int64_t rows, int64_t cols) {
    return rows == 1 || (t->stride[0] >= cols && t->stride[0] <= INT32_MAX);
}
/* The leading dimension passed for it (any value >= cols for one row). */
static int ld_of(const sf_tensor *t, int64_t rows, int64_t cols) {
    return rows == 1 ? (int)cols : (int)t->stride[0];
}
#endif

/* y[i, n] from the f32 product v: + bias + beta * y_old, rounded to y. */
static inline void store_out(const sf_gemm_problem *pr, int64_t i, int64_t n, float v, float bv) {
    const sf_tensor *y = &pr->p->y;
    const int64_t o = sf_off2(y, i, n);
    v += bv;
    if (pr->p->beta != 0.0f) v += pr->p->beta * sf_ldf(y->data, y->dtype, o);
    sf_stf(y->data, y->dtype, o, v);
}

static inline float bias_at(const sf_gemm_problem *pr, int64_t n) {
    const sf_tensor *b = &pr->p->bias;
    return pr->has_bias ? sf_ldf(b->data, b->dtype, n * b->stride[0]) : 0.0f;
}

#ifndef SF_WITH_BLAS
/* out[r] = x . w_r for r < nr (w_r = w + r * ws), 8 lanes each. */
static void dot_rows(const float *x, const float *w, int64_t ws, int64_t K, int nr, float *out) {
    float a[RB][8];
    memset(a, 0, sizeof a);
    const float *wr[RB];
    for (int r = 0; r < RB; r++) wr[r] = w + (r < nr ? r : 0) * ws;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        for (int r = 0; r < RB; r++)
            for (int u = 0; u < 8; u++) a[r][u] += x[k + u] * wr[r][k + u];
    for (int r = 0; r < nr; r++) {
        for (int64_t t = k; t < K; t++) a[r][0] += x[t] * wr[r][t];
        out[r] = ((a[r][0] + a[r][1]) + (a[r][2] + a[r][3])) + ((a[r][4] + a[r][5]) + (a[r][6] + a[r][7]));
    }
}
#endif

sf_status sf_cpu_gemm(sf_ctx *ctx, const sf_gemm_problem *pr) {
    const sf_gemm_params *p = pr->p;
    const sf_tensor *x = &p->x, *w = &p->w;
    const int64_t M = pr->M, N = pr->N, K = pr->K, KP = sf_cpu_rup(K, 16);
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* no OpenMP with BLAS: unused */
#ifdef SF_WITH_BLAS
    /* BLAS takes a leading dimension in [cols, INT_MAX]: other row strides
     * (a single row may have any) go through the widening copies */
    const int x_direct = x->dtype == SF_F32 && ld_ok(x, M, K);
    const int w_direct = w->dtype == SF_F32 && ld_ok(w, N, K);
    const sf_tensor *y = &p->y;
    const int y_direct = y->dtype == SF_F32 && ld_ok(y, M, N);
    const int64_t gb = w_direct ? N : (N < GB ? N : GB);
    const double wbuf = w_direct ? 0.0 : (double)gb * (double)KP;
    const double obuf = y_direct ? 0.0 : (double)M * (double)gb;
#else
    const int x_direct = x->dtype == SF_F32, w_direct = w->dtype == SF_F32;
    const double wbuf = w_direct ? 0.0 : (double)nt * RB * (double)KP, obuf = 0.0;
#endif
    const double need = 4.0 * ((x_direct ? 0.0 : (double)M * (double)KP) + wbuf + obuf) + 192.0;
    if (need > (double)(SIZE_MAX / 2))
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_gemm: the CPU workspace (%.3g bytes) is past the address space", need);
    void *ws = sf_ws_get(ctx, (size_t)need);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    float *xs = sf_cpu_align64(ws);
    float *wb = sf_cpu_align64(xs + (x_direct ? 0 : M * KP));
    const float *xf = x_direct ? (const float *)x->data : xs;
#ifdef SF_WITH_BLAS
    const int64_t xrs = x_direct ? ld_of(x, M, K) : KP;
#else
    const int64_t xrs = x_direct ? x->stride[0] : KP;
#endif
    if (!x_direct) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int64_t i = 0; i < M; i++) sf_cpu_row_in(x->data, x->dtype, i * x->stride[0], K, xs + i * KP);
    }
#ifdef SF_WITH_BLAS
    float *ob = sf_cpu_align64(wb + (w_direct ? 0 : gb * KP));
    for (int64_t n0 = 0; n0 < N; n0 += gb) {
        const int64_t nb = sf_cpu_min(gb, N - n0);
        const float *wf = (const float *)w->data + n0 * w->stride[0];
        int64_t wrs = ld_of(w, N, K);
        if (!w_direct) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
            for (int64_t r = 0; r < nb; r++) sf_cpu_row_in(w->data, w->dtype, (n0 + r) * w->stride[0], K, wb + r * KP);
            wf = wb, wrs = KP;
        }
        if (y_direct) {
            float *yf = (float *)y->data + n0;
            cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)M, (int)nb, (int)K, 1.0f, xf,
                        (int)xrs, wf, (int)wrs, p->beta, yf, ld_of(y, M, N));
            if (pr->has_bias)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t r = 0; r < nb; r++) yf[i * y->stride[0] + r] += bias_at(pr, n0 + r);
        } else {
            cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)M, (int)nb, (int)K, 1.0f, xf,
                        (int)xrs, wf, (int)wrs, 0.0f, ob, (int)nb);
            for (int64_t i = 0; i < M; i++)
                for (int64_t r = 0; r < nb; r++) store_out(pr, i, n0 + r, ob[i * nb + r], bias_at(pr, n0 + r));
        }
    }
#else
    const int64_t nblk = (N + RB - 1) / RB;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (int64_t bi = 0; bi < nblk; bi++) {
        const int64_t n0 = bi * RB;
        const int nr = (int)sf_cpu_min(RB, N - n0);
        const float *wf = (const float *)w->data + n0 * w->stride[0];
        int64_t wrs = w->stride[0];
        if (!w_direct) {
            float *buf = wb + (int64_t)sf_cpu_tid() * RB * KP;
            for (int r = 0; r < nr; r++) sf_cpu_row_in(w->data, w->dtype, (n0 + r) * w->stride[0], K, buf + r * KP);
            wf = buf, wrs = KP;
        }
        float bv[RB] = {0, 0, 0, 0};
        for (int r = 0; r < nr; r++) bv[r] = bias_at(pr, n0 + r);
        for (int64_t i = 0; i < M; i++) {
            float o[RB];
            dot_rows(xf + i * xrs, wf, wrs, K, nr, o);
            for (int r = 0; r < nr; r++) store_out(pr, i, n0 + r, o[r], bv[r]);
        }
    }
#endif
    return SF_OK;
}
