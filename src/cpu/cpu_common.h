/* cpu_common.h - small helpers shared by the CPU backend's files. */
#ifndef SF_CPU_COMMON_H
#define SF_CPU_COMMON_H

#include "internal.h"

#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static inline int64_t sf_cpu_rup(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
static inline int64_t sf_cpu_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* The first 64-byte boundary at or after p (workspace carving). */
static inline float *sf_cpu_align64(void *p) {
    return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* This thread's index inside a parallel region (0 outside, or without OpenMP). */
static inline int sf_cpu_tid(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Threads a CPU op may use: the context's count, 1 without OpenMP. */
static inline int sf_cpu_threads(const sf_ctx *ctx) {
#ifdef _OPENMP
    return ctx->nthreads > 0 ? ctx->nthreads : 1;
#else
    (void)ctx;
    return 1;
#endif
}

/* n contiguous elements at data + off (in elements) to f32, and back
 * (rounded to nearest even): the row conversions of the row-wise ops. */
static inline void sf_cpu_row_in(const void *data, sf_dtype dt, int64_t off, int64_t n, float *dst) {
    if (dt == SF_F32) {
        memcpy(dst, (const float *)data + off, (size_t)n * sizeof(float));
    } else if (dt == SF_BF16) {
        const uint16_t *s = (const uint16_t *)data + off;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &u, 4);
        }
    } else {
        const uint16_t *s = (const uint16_t *)data + off;
        for (int64_t i = 0; i < n; i++) dst[i] = sf_f16_to_f32(s[i]);
    }
}

static inline void sf_cpu_row_out(void *data, sf_dtype dt, int64_t off, int64_t n, const float *src) {
    if (dt == SF_F32) {
        memcpy((float *)data + off, src, (size_t)n * sizeof(float));
    } else if (dt == SF_BF16) {
        uint16_t *d = (uint16_t *)data + off;
        for (int64_t i = 0; i < n; i++) d[i] = sf_f32_to_bf16(src[i]);
    } else {
        uint16_t *d = (uint16_t *)data + off;
        for (int64_t i = 0; i < n; i++) d[i] = sf_f32_to_f16(src[i]);
    }
}

/* The workspace of a product over rows of x (M, K; unit inner stride): x
 * widened to f32 rows of KP floats (unless it is f32 already: read in
 * place), then per_thread floats for each of nt threads (64-byte aligned
 * after x).  Gives x's f32 rows and their stride, and the thread buffers. */
static inline sf_status sf_cpu_x_f32(sf_ctx *ctx, const char *op, const sf_tensor *x, int64_t M, int64_t K,
                                     int64_t KP, int nt, int64_t per_thread, const float **xf, int64_t *xrs,
                                     float **tbufs) {
    const int x_direct = x->dtype == SF_F32;
    const double need = 4.0 * ((x_direct ? 0.0 : (double)M * (double)KP) + (double)nt * (double)per_thread) + 128.0;
    if (need > (double)(SIZE_MAX / 2))
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: the CPU workspace (%.3g bytes) is past the address space", op, need);
    void *ws = sf_ws_get(ctx, (size_t)need);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    float *xs = sf_cpu_align64(ws);
    *tbufs = xs + (x_direct ? 0 : M * KP);
    *xf = x_direct ? (const float *)x->data : xs;
    *xrs = x_direct ? x->stride[0] : KP;
    if (!x_direct) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int64_t i = 0; i < M; i++) sf_cpu_row_in(x->data, x->dtype, i * x->stride[0], K, xs + i * KP);
    }
    return SF_OK;
}

#endif
