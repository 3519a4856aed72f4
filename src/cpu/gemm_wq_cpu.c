/* gemm_wq_cpu.c - CPU backend of the weight-only quantised product y = x W^T.
 *
 * The codes are never expanded to memory: a row kernel (gemm_wq_cpu.h)
 * decodes one row of W group by group in registers and multiplies it into
 * up to SF_WQK_MR rows of x at once, with the group's scale applied to the
 * group's f32 partial sum and the min term taken from per-group sums of x:
 *   y[i, n] = sum_j s[j, n] (sum_{k in j} v[n, k] x[i, k]) + m[j, n] xsum[i, j]
 * (int4 without mins: v the nibble, m = -8 s).  At M = 1..4 (decode) this
 * reads each code byte once, bandwidth-bound; one row of x takes SF_WQK_NR
 * rows of W a call (independent accumulators in flight).  From WQ_PANEL_M
 * rows of x (prefill) a block of WQ_NB rows of W is dequantised once into an
 * f32 panel (w = s v + m, one rounding as the reference's w) that stays in
 * the thread's cache while every row of x passes over it in 4 x 4 tiles of
 * dot products (FMA-bound: 8 loads per 16 FMAs), about twice the rate of
 * decoding in registers per 4 rows of x at M = 32.  Without a panel kernel
 * (avx2, c) x is walked in blocks of WQ_XB rows instead.
 *
 * Implementations, best first (SF_AUTOTUNE_FORCE=gemm_wq_cpu:NAME pins
 * one): avx512 and avx2 (gemm_wq_cpu_x86.c, chosen at run time from the
 * CPU's features; the library is built for baseline x86-64) and c, the
 * portable loops below.  All sum in f32.
 *
 * Workspace: x in f32 (int4: in the kernels' lane order), the group sums of
 * x, and per thread the f32 scales and mins of WQ_NB rows of W, gathered
 * with one contiguous read per group from the (G, N) tensors.  Blocks of
 * WQ_NB rows of W are shared out statically over the OpenMP threads.
 */
#include "cpu_common.h"
#include "gemm_wq.h"
#include "gemm_wq_cpu.h"
#include "autotune.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WQ_XB 64 /* rows of x per cache block (64 x 4 KB at K = 1024)   */
#define WQ_NB 32 /* rows of W per scheduling unit and per scale gather  */
#define WQ_CL 16 /* lane width of the portable kernels                  */
/* Products of fewer multiply-adds run on the calling thread: waking the
 * others costs more than they save (a 192 x 576 decode projection streams
 * ~60 KB, some microseconds; a fork and join costs about as much, far
 * more when the cores are shared). */
#define WQ_PAR_MIN 262144.0
/* Rows of x from which a block of W is dequantised once into an f32 panel
 * (prefill) rather than decoded in registers for every SF_WQK_MR rows. */
#define WQ_PANEL_M 8
/* Blocks of rows ahead whose scales are prefetched */
#define WQ_PF 2

/* ------------------------------------------------------------------ */
/* the portable kernels (any CPU): WQ_CL lanes the compiler vectorises  */
/* ------------------------------------------------------------------ */

/* End of group j: its scale times the group's partial sums into acc, and
 * its min times the group's sum of x into mt. */
static inline void wq_group_end(const sf_wqk_args *a, int64_t j, int64_t G, float acc[][WQ_CL],
                                float blk[][WQ_CL], float *mt) {
    for (int r = 0; r < a->mr; r++) {
        for (int i = 0; i < WQ_CL; i++) acc[r][i] += a->s[j * a->ss] * blk[r][i];
        if (a->m) mt[r] += a->m[j * a->ss] * a->xsum[r * G + j];
    }
}

/* Each row's lanes summed, plus its min term. */
static inline void wq_finish(const sf_wqk_args *a, float acc[][WQ_CL], const float *mt, float *out) {
    for (int r = 0; r < a->mr; r++) {
        float t = 0.0f;
        for (int i = 0; i < WQ_CL; i++) t += acc[r][i];
        out[r] = t + mt[r];
    }
}

static void int4_c(const sf_wqk_args *a, float *out) {
    const int64_t G = a->K / a->g;
    float acc[SF_WQK_MR][WQ_CL], blk[SF_WQK_MR][WQ_CL], mt[SF_WQK_MR];
    memset(acc, 0, sizeof acc);
    memset(mt, 0, sizeof mt);
    for (int64_t j = 0; j < G; j++) {
        const uint8_t *c = a->codes + j * (a->g / 2);
        memset(blk, 0, sizeof blk);
        for (int c0 = 0; c0 < a->g; c0 += 2 * WQ_CL) {
            float lo[WQ_CL], hi[WQ_CL];
            for (int i = 0; i < WQ_CL; i++) lo[i] = (float)(c[c0 / 2 + i] & 15), hi[i] = (float)(c[c0 / 2 + i] >> 4);
            for (int r = 0; r < a->mr; r++) {
                const float *xr = a->x + r * a->xs + j * a->g + c0;
                for (int i = 0; i < WQ_CL; i++) blk[r][i] += lo[i] * xr[i] + hi[i] * xr[WQ_CL + i];
            }
        }
        wq_group_end(a, j, G, acc, blk, mt);
    }
    wq_finish(a, acc, mt, out);
}

static void int8_c(const sf_wqk_args *a, float *out) {
    const int64_t G = a->K / a->g;
    float acc[SF_WQK_MR][WQ_CL], blk[SF_WQK_MR][WQ_CL], mt[SF_WQK_MR];
    memset(acc, 0, sizeof acc);
    memset(mt, 0, sizeof mt);
    for (int64_t j = 0; j < G; j++) {
        const uint8_t *c = a->codes + j * a->g;
        memset(blk, 0, sizeof blk);
        for (int c0 = 0; c0 < a->g; c0 += WQ_CL) {
            float w[WQ_CL];
            for (int i = 0; i < WQ_CL; i++) w[i] = a->sgn ? (float)(int8_t)c[c0 + i] : (float)c[c0 + i];
            for (int r = 0; r < a->mr; r++) {
                const float *xr = a->x + r * a->xs + j * a->g + c0;
                for (int i = 0; i < WQ_CL; i++) blk[r][i] += w[i] * xr[i];
            }
        }
        wq_group_end(a, j, G, acc, blk, mt);
    }
    wq_finish(a, acc, mt, out);
}

static const char *supports_c(void) { return NULL; }
static const sf_wqk_impl wqk_c = {"c", WQ_CL, int4_c, int8_c, NULL, NULL, NULL, NULL, NULL, supports_c};

/* ------------------------------------------------------------------ */
/* choosing the implementation                                          */
/* ------------------------------------------------------------------ */

static const sf_wqk_impl *const impls[] = {&sf_wqk_avx512, &sf_wqk_avx2, &wqk_c};
enum { N_IMPLS = (int)(sizeof impls / sizeof impls[0]) };

/* The implementation for this process: the one SF_AUTOTUNE_FORCE names, or
 * the first this CPU supports.  Decided once (the CPU and the environment
 * are read once); a racing first call decides the same. */
static sf_status pick_impl(sf_ctx *ctx, const sf_wqk_impl **out) {
    static int chosen = -1; /* index, or -2: the forced name cannot run */
    static char why[160];
    int c = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (c == -1) {
        char buf[48];
        const char *want = sf_autotune_forced_name("gemm_wq_cpu", buf, sizeof buf);
        char msg[160] = "";
        c = -2;
        for (int i = 0; i < N_IMPLS && c == -2; i++) {
            if (want && strcmp(want, impls[i]->name) != 0) continue;
            const char *no = impls[i]->supports();
            if (!no)
                c = i;
            else if (want) {
                snprintf(msg, sizeof msg, "'%s' cannot run here: %s", want, no);
                break;
            }
        }
        if (c == -2 && want && !msg[0]) snprintf(msg, sizeof msg, "'%s' is not one of avx512, avx2, c", want);
        if (c == -2) memcpy(why, msg, sizeof why);
        __atomic_store_n(&chosen, c, __ATOMIC_RELEASE);
    }
    if (c < 0) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_gemm_wq: SF_AUTOTUNE_FORCE=gemm_wq_cpu:%s", why);
    *out = impls[c];
    return SF_OK;
}

/* Scales (and mins) of rows n0 .. n0 + nr of q into s[j * WQ_NB + r] (m
 * likewise); entries past nr are left alone (their kernels never run).
 * Each group's run of nr values is contiguous, but each lies in another
 * page: the lines of the block WQ_PF ahead are asked for now, the hardware cannot guess
 * them. */
static void gather_one(const sf_tensor *t, const sf_wqk_impl *impl, int64_t N, int64_t n0, int64_t nr, int64_t G,
                       float *dst) {
    const int ahead = n0 + (WQ_PF + 1) * WQ_NB <= N; /* the block WQ_PF ahead is whole */
    const size_t es = sf_dtype_size(t->dtype);
    for (int64_t j = 0; j < G; j++) {
        const char *src = (const char *)t->data + (size_t)(j * N + n0) * es;
        if (ahead)
            for (size_t l = 0; l < WQ_NB * es; l += 64) __builtin_prefetch(src + WQ_PF * WQ_NB * es + l, 0, 2);
        float *o = dst + j * WQ_NB;
        if (t->dtype == SF_F32)
            for (int64_t r = 0; r < nr; r++) o[r] = ((const float *)src)[r];
        else if (t->dtype == SF_F16 && impl->f16_row)
            impl->f16_row((const uint16_t *)src, nr, o);
        else
            for (int64_t r = 0; r < nr; r++) o[r] = sf_ldf(t->data, t->dtype, j * N + n0 + r);
    }
}

static void gather_block(const sf_qweight *q, const sf_wqk_impl *impl, int64_t n0, int64_t nr, int64_t G, float *s,
                         float *m) {
    gather_one(&q->scales, impl, q->n, n0, nr, G, s);
    if (m) gather_one(&q->mins, impl, q->n, n0, nr, G, m);
}

/* Row i of x into f32 at dst (int4: in the kernels' lane order, or with
 * lanes = 0 in the *_rows kernels' order) and its group sums into
 * xs[0 .. G) when asked. */
static void prep_row(const sf_tensor *x, int64_t i, int64_t K, int g, int int4, int lanes, float *dst, float *xs) {
    float buf[2048]; /* a widened chunk of a non-f32 row */
    const int64_t G = K / g;
    if (x->dtype == SF_F32 || !int4) {
        const float *src = (const float *)x->data + i * x->stride[0];
        if (x->dtype != SF_F32) {
            sf_cpu_row_in(x->data, x->dtype, i * x->stride[0], K, dst);
            src = dst;
        } else if (int4) {
            if (lanes)
                sf_wq_prep_x4(src, K, lanes, dst);
            else
                sf_wq_prep_x8(src, K, dst);
        }
        if (xs)
            for (int64_t j = 0; j < G; j++) {
                float t = 0.0f;
                for (int e = 0; e < g; e++) t += src[j * g + e];
                xs[j] = t;
            }
        return;
    }
    /* int4 from f16 / bf16: widen and reorder in chunks (whole groups) */
    for (int64_t c = 0; c < K; c += 2048) {
        const int64_t n = sf_cpu_min(2048, K - c);
        sf_cpu_row_in(x->data, x->dtype, i * x->stride[0] + c, n, buf);
        if (lanes)
            sf_wq_prep_x4(buf, n, lanes, dst + c);
        else
            sf_wq_prep_x8(buf, n, dst + c);
        if (xs)
            for (int64_t j = 0; j < n / g; j++) {
                float t = 0.0f;
                for (int e = 0; e < g; e++) t += buf[j * g + e];
                xs[c / g + j] = t;
            }
    }
}

/* ------------------------------------------------------------------ */
/* the product                                                          */
/* ------------------------------------------------------------------ */

sf_status sf_cpu_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr) {
    const sf_gemm_wq_params *p = pr->p;
    const sf_qweight *q = &p->w;
    const sf_tensor *x = &p->x, *y = &p->y, *bias = &p->bias;
    const int64_t M = pr->M, N = pr->N, K = pr->K, G = pr->G, KP = sf_cpu_rup(K, 16), GP = sf_cpu_rup(G, 16);
    const int int4 = pr->int4, has_min = pr->has_min, g = pr->group;
    const int nt = sf_cpu_threads(ctx);
    if (q->layout != SF_QW_ROWS)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_gemm_wq: the CPU backend reads w.layout SF_QW_ROWS; SF_QW_TILED is the CUDA backend's");
    const sf_wqk_impl *impl = NULL;
    sf_status st = pick_impl(ctx, &impl);
    if (st != SF_OK) return st;
    const sf_wqk_fn fn = int4 ? impl->int4 : impl->int8;
    /* one row of x: the *_rows kernels (int4: with x in their own order) */
    const sf_wqk_fn fn_rows = M != 1 ? NULL : !int4 ? impl->int8_rows : K % 64 == 0 ? impl->int4_rows : NULL;
    /* many rows of x: dequantise each block of W once into an f32 panel */
    const int use_panel = impl->panel && M >= WQ_PANEL_M;
    /* the min term: the mins, or -8 s for int4 without them; the row
     * kernels take it from group sums of x */
    const int use_m = has_min || int4, need_xsum = use_m && !use_panel;
    /* x is read in place when it is f32 and the kernel takes it as it is */
    const int x_direct = x->dtype == SF_F32 && (!int4 || use_panel);
    const int64_t per_thread = 2 * WQ_NB * GP + (use_panel ? WQ_NB * KP : 0);
    const double need = 4.0 * ((x_direct ? 0.0 : (double)M * (double)KP) + (need_xsum ? (double)M * (double)GP : 0.0) +
                               (double)nt * (double)per_thread) + 128.0;
    if (need > (double)(SIZE_MAX / 2))
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_gemm_wq: the CPU workspace (%.3g bytes) is past the address space", need);
    void *ws = sf_ws_get(ctx, (size_t)need);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    float *xw = sf_cpu_align64(ws);
    float *xsum = xw + (x_direct ? 0 : M * KP);
    float *tbuf = xsum + (need_xsum ? M * GP : 0);
    const float *xf = x_direct ? (const float *)x->data : xw;
    const int64_t xrs = x_direct ? x->stride[0] : KP;
    if (!x_direct || need_xsum) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (M * K > 65536)
#endif
        for (int64_t i = 0; i < M; i++)
            prep_row(x, i, K, g, int4 && !use_panel, int4 && fn_rows ? 0 : impl->lanes, xw + i * KP,
                     need_xsum ? xsum + i * G : NULL);
    }
    const int64_t row_bytes = sf_wq_row_bytes(int4, K);
    const int64_t nblk = (N + WQ_NB - 1) / WQ_NB;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if ((double)M * (double)N * (double)K >= WQ_PAR_MIN)
#endif
    {
        float *s = tbuf + (int64_t)sf_cpu_tid() * per_thread, *m = s + WQ_NB * GP, *panel = m + WQ_NB * GP;
        sf_wqk_args a;
        a.K = K, a.g = g, a.sgn = !has_min, a.ss = WQ_NB, a.xs = xrs, a.rb = row_bytes;
        /* the blocks are independent (nowait): the region's end is the one join */
        if (use_panel) {
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
            for (int64_t bi = 0; bi < nblk; bi++) {
                const int64_t nb0 = bi * WQ_NB, nr = sf_cpu_min(WQ_NB, N - nb0);
                gather_block(q, impl, nb0, nr, G, s, has_min ? m : NULL);
                if (int4 && !has_min)
                    for (int64_t e = 0; e < G * WQ_NB; e++) m[e] = -8.0f * s[e];
                a.codes = (const uint8_t *)q->data.data + nb0 * row_bytes;
                a.nr = (int)nr, a.s = s, a.m = use_m ? m : NULL;
                impl->panel(&a, int4, panel, KP);
                for (int64_t i = 0; i < M; i += SF_WQK_MR) {
                    const int mr = (int)sf_cpu_min(SF_WQK_MR, M - i);
                    for (int64_t r = 0; r < nr; r += SF_WQK_MR) {
                        const int nc = (int)sf_cpu_min(SF_WQK_MR, nr - r);
                        float o[SF_WQK_MR * SF_WQK_MR];
                        impl->dot(xf + i * xrs, xrs, mr, panel + r * KP, KP, nc, K, o, SF_WQK_MR);
                        for (int t = 0; t < mr; t++)
                            for (int c = 0; c < nc; c++) {
                                const int64_t n = nb0 + r + c;
                                const float bv = pr->has_bias ? sf_ldf(bias->data, bias->dtype, n * bias->stride[0]) : 0.0f;
                                sf_stf(y->data, y->dtype, sf_off2(y, i + t, n), o[t * SF_WQK_MR + c] + bv);
                            }
                    }
                }
            }
        }
        for (int64_t x0 = 0; x0 < M && !use_panel; x0 += WQ_XB) {
            const int64_t x1 = sf_cpu_min(M, x0 + WQ_XB);
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
            for (int64_t bi = 0; bi < nblk; bi++) {
                const int64_t nb0 = bi * WQ_NB, nr = sf_cpu_min(WQ_NB, N - nb0);
                gather_block(q, impl, nb0, nr, G, s, has_min ? m : NULL);
                if (int4 && !has_min)
                    for (int64_t e = 0; e < G * WQ_NB; e++) m[e] = -8.0f * s[e];
                if (x1 - x0 == 1 && fn_rows) { /* one row of x: SF_WQK_NR rows of W a call */
                    a.x = xf + x0 * xrs, a.xsum = xsum + x0 * G, a.mr = 1;
                    for (int64_t r = 0; r < nr; r += SF_WQK_NR) {
                        const int64_t n = nb0 + r;
                        float o[SF_WQK_NR];
                        a.nr = (int)sf_cpu_min(SF_WQK_NR, nr - r);
                        a.codes = (const uint8_t *)q->data.data + n * row_bytes;
                        a.s = s + r, a.m = use_m ? m + r : NULL;
                        /* the same rows of the next block, asked for now: a
                         * row is a few lines, too short a stream for the
                         * hardware prefetcher to follow */
                        if (n + WQ_NB + a.nr <= N)
                            for (int64_t l = 0; l < a.nr * row_bytes; l += 64)
                                __builtin_prefetch(a.codes + WQ_NB * row_bytes + l, 0, 2);
                        fn_rows(&a, o);
                        for (int t = 0; t < a.nr; t++) {
                            const float bv = pr->has_bias ? sf_ldf(bias->data, bias->dtype, (n + t) * bias->stride[0]) : 0.0f;
                            sf_stf(y->data, y->dtype, sf_off2(y, x0, n + t), o[t] + bv);
                        }
                    }
                    continue;
                }
                for (int64_t r = 0; r < nr; r++) {
                    const int64_t n = nb0 + r;
                    const float bv = pr->has_bias ? sf_ldf(bias->data, bias->dtype, n * bias->stride[0]) : 0.0f;
                    a.codes = (const uint8_t *)q->data.data + n * row_bytes;
                    a.s = s + r, a.m = use_m ? m + r : NULL;
                    for (int64_t i = x0; i < x1; i += SF_WQK_MR) {
                        float o[SF_WQK_MR];
                        a.mr = (int)sf_cpu_min(SF_WQK_MR, x1 - i);
                        a.x = xf + i * xrs;
                        a.xsum = xsum + i * G;
                        fn(&a, o);
                        if (y->dtype == SF_F32) {
                            float *yo = (float *)y->data + i * y->stride[0] + n;
                            for (int t = 0; t < a.mr; t++) yo[t * y->stride[0]] = o[t] + bv;
                        } else {
                            for (int t = 0; t < a.mr; t++) sf_stf(y->data, y->dtype, sf_off2(y, i + t, n), o[t] + bv);
                        }
                    }
                }
            }
        }
    }
    return SF_OK;
}
