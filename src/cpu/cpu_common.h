/* cpu_common.h - small helpers shared by the CPU backend's files. */
#ifndef SF_CPU_COMMON_H
#define SF_CPU_COMMON_H

#include "internal.h"

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

#endif
