/* gemm_wq_cpu.h - the row kernels of the CPU quantised product
 * (gemm_wq_cpu.c drives them; the x86 SIMD ones live in gemm_wq_cpu_x86.c).
 *
 * A kernel takes one row of W (its codes, its groups' f32 scales and mins)
 * against up to SF_WQK_MR rows of x and writes
 *   out[r] = sum_j s[j] * (sum_{k in group j} v_k x_r[k]) + sum_j m[j] * xsum_r[j]
 * with v the raw code (int4: the nibble 0..15; int8: the byte, signed when
 * `sgn` is set): the int4 symmetric offset of 8 comes in as m[j] = -8 s[j].
 * (s[j] stands for s[j * ss], m likewise.)  Sums are f32.  An int4 kernel reads x prepared by sf_wq_prep_x4 at its
 * lane width (the pairs of a code byte split into two runs of lanes); an
 * int8 kernel reads x as it is.  Not installed; include only from src/cpu.
 */
#ifndef SF_GEMM_WQ_CPU_H
#define SF_GEMM_WQ_CPU_H

#include <stdint.h>

#define SF_WQK_MR 4 /* rows of x a kernel call serves (one decode of W's row) */
#define SF_WQK_NR 4 /* rows of W a *_rows kernel call serves                  */

typedef struct sf_wqk_args {
    const uint8_t *codes; /* the row's codes: K / 2 bytes (int4) or K        */
    int64_t K;
    int g;                /* group size: 32, 64 or 128                       */
    int sgn;              /* int8: signed codes                              */
    const float *s, *m;   /* G scales; G mins or NULL; ss floats apart       */
    int64_t ss;
    const float *x;       /* mr rows of (prepared) x, xs floats apart        */
    int64_t xs;
    const float *xsum;    /* mr rows of G group sums of x, G apart (with m)  */
    int mr;               /* 1 .. SF_WQK_MR                                  */
    int nr;               /* rows of W (the *_rows kernels, one row of x):
                           * row r's codes at codes + r * rb, its scales at
                           * s + r, mins at m + r; out[r]                    */
    int64_t rb;
} sf_wqk_args;

typedef void (*sf_wqk_fn)(const sf_wqk_args *a, float *out);

/* One implementation: its name (SF_AUTOTUNE_FORCE=gemm_wq_cpu:NAME pins it),
 * the int4 lane width that its prepared x assumes, its kernels, and whether
 * this CPU runs it (NULL) or why not. */
typedef struct sf_wqk_impl {
    const char *name;
    int lanes;
    sf_wqk_fn int4, int8;
    sf_wqk_fn int4_rows, int8_rows; /* up to SF_WQK_NR rows of W against one
                                     * row of x (independent sums: more in
                                     * flight at decode); NULL: none.  int4:
                                     * K a multiple of 64, x in the order of
                                     * sf_wq_prep_x8 */
    /* Prefill: rows of W dequantised once into an f32 panel, then dot
     * products of SF_WQK_MR rows of x by SF_WQK_MR rows of the panel at
     * a time (x in its own order); NULL: none.
     * panel: a->nr rows of W (codes at a->codes, a->rb apart; scales, mins
     *   at a->s + r, a->m + r, a->ss apart by group) into dst, K floats
     *   each, `dstride` apart: w = s v + m (int4 without mins: m = -8 s).
     * dot: out[i * os + r] = sum_k x_i[k] w_r[k] for i < mr rows of x
     *   (a->x, a->xs apart) and r < nr rows of w (w, ws apart). */
    void (*panel)(const sf_wqk_args *a, int int4, float *dst, int64_t dstride);
    void (*dot)(const float *x, int64_t xs, int mr, const float *w, int64_t ws, int nr, int64_t K, float *out,
                int64_t os);
    /* n f16 values (bits) to f32: the scales and mins of f16 checkpoints
     * (exact); NULL: the portable conversion */
    void (*f16_row)(const uint16_t *src, int64_t n, float *dst);
    const char *(*supports)(void);
} sf_wqk_impl;

/* The x86 implementations (NULL entries off x86-64 or without the
 * compiler's target attributes). */
extern const sf_wqk_impl sf_wqk_avx512, sf_wqk_avx2;

/* x (K floats, K a multiple of 2 * lanes) into the int4 kernels' order:
 * each run of 2 * lanes elements becomes its even elements, then its odd
 * ones (a code byte holds elements 2i, 2i + 1 in its low, high nibble). */
static inline void sf_wq_prep_x4(const float *x, int64_t K, int lanes, float *dst) {
    for (int64_t c = 0; c < K; c += 2 * lanes)
        for (int i = 0; i < lanes; i++) {
            dst[c + i] = x[c + 2 * i];
            dst[c + lanes + i] = x[c + 2 * i + 1];
        }
}

/* x (K floats, K a multiple of 64) into the int4 *_rows kernels' order:
 * in each run of 64, element 8 i + t goes to 8 t + i (a dword of codes
 * holds elements 8 i .. 8 i + 7). */
static inline void sf_wq_prep_x8(const float *x, int64_t K, float *dst) {
    for (int64_t c = 0; c < K; c += 64)
        for (int t = 0; t < 8; t++)
            for (int i = 0; i < 8; i++) dst[c + 8 * t + i] = x[c + 8 * i + t];
}

#endif
