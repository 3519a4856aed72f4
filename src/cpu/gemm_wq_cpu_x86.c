/* gemm_wq_cpu_x86.c - AVX-512 and AVX2 row kernels of the CPU quantised
 * product (the contract is in gemm_wq_cpu.h).
 *
 * Built for baseline x86-64: each kernel carries its own target attribute
 * and gemm_wq_cpu.c calls it only when __builtin_cpu_supports says the CPU
 * has the instructions.  A group of codes is widened to 32-bit lanes
 * (vpmovzxbd / vpmovsxbd), an int4 byte split into its two nibbles (and 15,
 * shift by 4), converted to f32 and multiplied into the group's f32 partial
 * sums of each row of x with FMA; the group's scale then scales the partial
 * sums into the row's accumulator (one FMA), and the min term adds the
 * scalar m[j] * xsum[j].  The codes are decoded once for the SF_WQK_MR rows
 * of x; x stays in L1 across the rows of W.
 */
#include "gemm_wq_cpu.h"

#include <stddef.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define SF_X86_AI static inline __attribute__((always_inline))

/* ------------------------------------------------------------------ */
/* AVX-512F: 16 lanes                                                  */
/* ------------------------------------------------------------------ */

#define T512 __attribute__((target("avx512f")))

T512 SF_X86_AI void k4_512(const sf_wqk_args *a, float *out, const int MR) {
    const int64_t G = a->K / a->g;
    const int g = a->g;
    const __m512i m15 = _mm512_set1_epi32(15);
    __m512 acc[SF_WQK_MR];
    float mt[SF_WQK_MR];
    for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps(), mt[r] = 0.0f;
    for (int64_t j = 0; j < G; j++) {
        const uint8_t *c = a->codes + j * (g / 2);
        __m512 blk[SF_WQK_MR];
        for (int r = 0; r < MR; r++) blk[r] = _mm512_setzero_ps();
        for (int c0 = 0; c0 < g; c0 += 32) {
            const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + c0 / 2)));
            const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(b, m15));
            const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
            for (int r = 0; r < MR; r++) {
                const float *xr = a->x + r * a->xs + j * g + c0;
                blk[r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xr), blk[r]);
                blk[r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), blk[r]);
            }
        }
        const __m512 sv = _mm512_set1_ps(a->s[j * a->ss]);
        for (int r = 0; r < MR; r++) acc[r] = _mm512_fmadd_ps(sv, blk[r], acc[r]);
        if (a->m)
            for (int r = 0; r < MR; r++) mt[r] += a->m[j * a->ss] * a->xsum[r * G + j];
    }
    for (int r = 0; r < MR; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + mt[r];
}

T512 SF_X86_AI void k8_512(const sf_wqk_args *a, float *out, const int MR) {
    const int64_t G = a->K / a->g;
    const int g = a->g;
    __m512 acc[SF_WQK_MR];
    float mt[SF_WQK_MR];
    for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps(), mt[r] = 0.0f;
    for (int64_t j = 0; j < G; j++) {
        const uint8_t *c = a->codes + j * g;
        __m512 blk[SF_WQK_MR];
        for (int r = 0; r < MR; r++) blk[r] = _mm512_setzero_ps();
        for (int c0 = 0; c0 < g; c0 += 16) {
            const __m128i raw = _mm_loadu_si128((const __m128i *)(c + c0));
            const __m512 w = _mm512_cvtepi32_ps(a->sgn ? _mm512_cvtepi8_epi32(raw) : _mm512_cvtepu8_epi32(raw));
            for (int r = 0; r < MR; r++)
                blk[r] = _mm512_fmadd_ps(w, _mm512_loadu_ps(a->x + r * a->xs + j * g + c0), blk[r]);
        }
        const __m512 sv = _mm512_set1_ps(a->s[j * a->ss]);
        for (int r = 0; r < MR; r++) acc[r] = _mm512_fmadd_ps(sv, blk[r], acc[r]);
        if (a->m)
            for (int r = 0; r < MR; r++) mt[r] += a->m[j * a->ss] * a->xsum[r * G + j];
    }
    for (int r = 0; r < MR; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + mt[r];
}

T512 static void int4_512(const sf_wqk_args *a, float *out) {
    switch (a->mr) {
    case 1: k4_512(a, out, 1); break;
    case 2: k4_512(a, out, 2); break;
    case 3: k4_512(a, out, 3); break;
    default: k4_512(a, out, 4); break;
    }
}

T512 static void int8_512(const sf_wqk_args *a, float *out) {
    switch (a->mr) {
    case 1: k8_512(a, out, 1); break;
    case 2: k8_512(a, out, 2); break;
    case 3: k8_512(a, out, 3); break;
    default: k8_512(a, out, 4); break;
    }
}

/* NR rows of W against one row of x (int8): NR independent accumulator
 * chains, one load of x for all. */
T512 SF_X86_AI void k8r_512(const sf_wqk_args *a, float *out, const int NR) {
    const int64_t G = a->K / a->g;
    const int g = a->g;
    __m512 acc[SF_WQK_NR];
    float mt[SF_WQK_NR];
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps(), mt[r] = 0.0f;
    for (int64_t j = 0; j < G; j++) {
        __m512 blk[SF_WQK_NR];
        for (int r = 0; r < NR; r++) blk[r] = _mm512_setzero_ps();
        for (int c0 = 0; c0 < g; c0 += 16) {
            const __m512 xv = _mm512_loadu_ps(a->x + j * g + c0);
            for (int r = 0; r < NR; r++) {
                const __m128i raw = _mm_loadu_si128((const __m128i *)(a->codes + r * a->rb + j * g + c0));
                const __m512 w = _mm512_cvtepi32_ps(a->sgn ? _mm512_cvtepi8_epi32(raw) : _mm512_cvtepu8_epi32(raw));
                blk[r] = _mm512_fmadd_ps(w, xv, blk[r]);
            }
        }
        for (int r = 0; r < NR; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a->s[j * a->ss + r]), blk[r], acc[r]);
        if (a->m)
            for (int r = 0; r < NR; r++) mt[r] += a->m[j * a->ss + r] * a->xsum[j];
    }
    for (int r = 0; r < NR; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + mt[r];
}

T512 static void int8r_512(const sf_wqk_args *a, float *out) {
    switch (a->nr) {
    case 1: k8r_512(a, out, 1); break;
    case 2: k8r_512(a, out, 2); break;
    case 3: k8r_512(a, out, 3); break;
    default: k8r_512(a, out, 4); break;
    }
}

T512 static void f16_512(const uint16_t *src, int64_t n, float *dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n) { /* the tail through a zeroed buffer (masked 16-bit loads want AVX-512BW) */
        uint16_t t[16] = {0};
        for (int64_t e = i; e < n; e++) t[e - i] = src[e];
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)t)));
    }
}

/* Rows of W to f32 in their own order: the two nibbles of a byte are
 * neighbours, put back side by side with a two-source permute. */
T512 static void panel_512(const sf_wqk_args *a, int int4, float *dst, int64_t dstride) {
    const int64_t G = a->K / a->g;
    const int g = a->g;
    const __m512i m15 = _mm512_set1_epi32(15);
    const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (int r = 0; r < a->nr; r++) {
        const uint8_t *c = a->codes + r * a->rb;
        float *o = dst + r * dstride;
        for (int64_t j = 0; j < G; j++) {
            const __m512 sv = _mm512_set1_ps(a->s[j * a->ss + r]);
            const __m512 mv = _mm512_set1_ps(a->m ? a->m[j * a->ss + r] : 0.0f);
            if (int4) {
                for (int c0 = 0; c0 < g; c0 += 32) {
                    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + (j * g + c0) / 2)));
                    const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(b, m15));
                    const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
                    _mm512_storeu_ps(o + j * g + c0, _mm512_fmadd_ps(_mm512_permutex2var_ps(lo, ilo, hi), sv, mv));
                    _mm512_storeu_ps(o + j * g + c0 + 16, _mm512_fmadd_ps(_mm512_permutex2var_ps(lo, ihi, hi), sv, mv));
                }
            } else {
                for (int c0 = 0; c0 < g; c0 += 16) {
                    const __m128i raw = _mm_loadu_si128((const __m128i *)(c + j * g + c0));
                    const __m512 v = _mm512_cvtepi32_ps(a->sgn ? _mm512_cvtepi8_epi32(raw) : _mm512_cvtepu8_epi32(raw));
                    _mm512_storeu_ps(o + j * g + c0, _mm512_fmadd_ps(v, sv, mv));
                }
            }
        }
    }
}

/* MR x NR dot products over K (a multiple of 16): MR * NR accumulators,
 * MR + NR loads per MR * NR FMAs. */
T512 SF_X86_AI void dot_512_t(const float *x, int64_t xs, const float *w, int64_t ws, int64_t K, float *out,
                              int64_t os, const int MR, const int NR) {
    __m512 acc[SF_WQK_MR][SF_WQK_MR];
    for (int i = 0; i < MR; i++)
        for (int r = 0; r < NR; r++) acc[i][r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
        __m512 wv[SF_WQK_MR];
        for (int r = 0; r < NR; r++) wv[r] = _mm512_loadu_ps(w + r * ws + k);
        for (int i = 0; i < MR; i++) {
            const __m512 xv = _mm512_loadu_ps(x + i * xs + k);
            for (int r = 0; r < NR; r++) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int r = 0; r < NR; r++) out[i * os + r] = _mm512_reduce_add_ps(acc[i][r]);
}

T512 static void dot_512(const float *x, int64_t xs, int mr, const float *w, int64_t ws, int nr, int64_t K,
                         float *out, int64_t os) {
    if (mr == 4 && nr == 4)
        dot_512_t(x, xs, w, ws, K, out, os, 4, 4);
    else /* edges: one row of x at a time */
        for (int i = 0; i < mr; i++) switch (nr) {
            case 1: dot_512_t(x + i * xs, xs, w, ws, K, out + i * os, os, 1, 1); break;
            case 2: dot_512_t(x + i * xs, xs, w, ws, K, out + i * os, os, 1, 2); break;
            case 3: dot_512_t(x + i * xs, xs, w, ws, K, out + i * os, os, 1, 3); break;
            default: dot_512_t(x + i * xs, xs, w, ws, K, out + i * os, os, 1, 4); break;
            }
}

static void int4s_256(const sf_wqk_args *a, float *out); /* below: AVX2 serves both */

static const char *supports_512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? NULL : "the CPU has no AVX-512F";
}

const sf_wqk_impl sf_wqk_avx512 = {"avx512", 16, int4_512, int8_512, int4s_256, int8r_512, panel_512, dot_512, f16_512, supports_512};

/* ------------------------------------------------------------------ */
/* AVX2 + FMA: 8 lanes                                                 */
/* ------------------------------------------------------------------ */

#define T256 __attribute__((target("avx2,fma,f16c")))

T256 SF_X86_AI float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

T256 SF_X86_AI void k4_256(const sf_wqk_args *a, float *out, const int MR) {
    const int64_t G = a->K / a->g;
    const int g = a->g;
    const __m256i m15 = _mm256_set1_epi32(15);
    __m256 acc[SF_WQK_MR];
    float mt[SF_WQK_MR];
    for (int r = 0; r < MR; r++) acc[r] = _mm256_setzero_ps(), mt[r] = 0.0f;
    for (int64_t j = 0; j < G; j++) {
        const uint8_t *c = a->codes + j * (g / 2);
        __m256 blk[SF_WQK_MR];
        for (int r = 0; r < MR; r++) blk[r] = _mm256_setzero_ps();
        for (int c0 = 0; c0 < g; c0 += 16) {
            const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c + c0 / 2)));
            const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(b, m15));
            const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
            for (int r = 0; r < MR; r++) {
                const float *xr = a->x + r * a->xs + j * g + c0;
                blk[r] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xr), blk[r]);
                blk[r] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xr + 8), blk[r]);
            }
        }
        const __m256 sv = _mm256_set1_ps(a->s[j * a->ss]);
        for (int r = 0; r < MR; r++) acc[r] = _mm256_fmadd_ps(sv, blk[r], acc[r]);
        if (a->m)
            for (int r = 0; r < MR; r++) mt[r] += a->m[j * a->ss] * a->xsum[r * G + j];
    }
    for (int r = 0; r < MR; r++) out[r] = hsum256(acc[r]) + mt[r];
}

T256 SF_X86_AI void k8_256(const sf_wqk_args *a, float *out, const int MR) {
    const int64_t G = a->K / a->g;
    const int g = a->g;
    __m256 acc[SF_WQK_MR];
    float mt[SF_WQK_MR];
    for (int r = 0; r < MR; r++) acc[r] = _mm256_setzero_ps(), mt[r] = 0.0f;
    for (int64_t j = 0; j < G; j++) {
        const uint8_t *c = a->codes + j * g;
        __m256 blk[SF_WQK_MR];
        for (int r = 0; r < MR; r++) blk[r] = _mm256_setzero_ps();
        for (int c0 = 0; c0 < g; c0 += 8) {
            const __m128i raw = _mm_loadl_epi64((const __m128i *)(c + c0));
            const __m256 w = _mm256_cvtepi32_ps(a->sgn ? _mm256_cvtepi8_epi32(raw) : _mm256_cvtepu8_epi32(raw));
            for (int r = 0; r < MR; r++)
                blk[r] = _mm256_fmadd_ps(w, _mm256_loadu_ps(a->x + r * a->xs + j * g + c0), blk[r]);
        }
        const __m256 sv = _mm256_set1_ps(a->s[j * a->ss]);
        for (int r = 0; r < MR; r++) acc[r] = _mm256_fmadd_ps(sv, blk[r], acc[r]);
        if (a->m)
            for (int r = 0; r < MR; r++) mt[r] += a->m[j * a->ss] * a->xsum[r * G + j];
    }
    for (int r = 0; r < MR; r++) out[r] = hsum256(acc[r]) + mt[r];
}

T256 static void int4_256(const sf_wqk_args *a, float *out) {
    switch (a->mr) {
    case 1: k4_256(a, out, 1); break;
    case 2: k4_256(a, out, 2); break;
    case 3: k4_256(a, out, 3); break;
    default: k4_256(a, out, 4); break;
    }
}

T256 static void int8_256(const sf_wqk_args *a, float *out) {
    switch (a->mr) {
    case 1: k8_256(a, out, 1); break;
    case 2: k8_256(a, out, 2); break;
    case 3: k8_256(a, out, 3); break;
    default: k8_256(a, out, 4); break;
    }
}

__attribute__((target("avx2,f16c"))) static void f16_256(const uint16_t *src, int64_t n, float *dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) {
        __m128i h = _mm_cvtsi32_si128(src[i]);
        dst[i] = _mm_cvtss_f32(_mm_cvtph_ps(h));
    }
}

/* int4, NR rows of W against one row of x, without shuffles: 32 bytes of
 * codes (64 elements) sit in 8 dword lanes of 8 nibbles each; nibble t of
 * every lane (shift by 4 t, and 15) is one vector of elements 8 i + t,
 * which x prepared by sf_wq_prep_x8 holds at [8 t, 8 t + 8).  Lanes 0-3
 * are group c / g, lanes 4-7 group (c + 32) / g: the scales go in per half.
 * Two partial sums a row (even, odd t) and NR rows keep 2 NR FMA chains in
 * flight; x is read from L1 as memory operands. */
T256 SF_X86_AI void k4s_256(const sf_wqk_args *a, float *out, const int NR) {
    const int64_t G = a->K / a->g;
    const int g = a->g;
    const __m256i m15 = _mm256_set1_epi32(15);
    __m256 acc[SF_WQK_NR];
    float mt[SF_WQK_NR];
    for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps(), mt[r] = 0.0f;
    for (int64_t c = 0; c < a->K; c += 64) {
        const float *xc = a->x + c;
        const int64_t j0 = c / g, j1 = (c + 32) / g;
        for (int r = 0; r < NR; r++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(a->codes + r * a->rb + c / 2));
            __m256 e = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(w, m15)), _mm256_loadu_ps(xc));
            __m256 o = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 4), m15)),
                                     _mm256_loadu_ps(xc + 8));
            e = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 8), m15)), _mm256_loadu_ps(xc + 16), e);
            o = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 12), m15)), _mm256_loadu_ps(xc + 24), o);
            e = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 16), m15)), _mm256_loadu_ps(xc + 32), e);
            o = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 20), m15)), _mm256_loadu_ps(xc + 40), o);
            e = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 24), m15)), _mm256_loadu_ps(xc + 48), e);
            o = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 28)), _mm256_loadu_ps(xc + 56), o);
            const __m256 sv = _mm256_set_m128(_mm_set1_ps(a->s[j1 * a->ss + r]), _mm_set1_ps(a->s[j0 * a->ss + r]));
            acc[r] = _mm256_fmadd_ps(sv, _mm256_add_ps(e, o), acc[r]);
        }
    }
    if (a->m)
        for (int64_t j = 0; j < G; j++)
            for (int r = 0; r < NR; r++) mt[r] += a->m[j * a->ss + r] * a->xsum[j];
    for (int r = 0; r < NR; r++) out[r] = hsum256(acc[r]) + mt[r];
}

T256 static void int4s_256(const sf_wqk_args *a, float *out) {
    switch (a->nr) {
    case 1: k4s_256(a, out, 1); break;
    case 2: k4s_256(a, out, 2); break;
    case 3: k4s_256(a, out, 3); break;
    default: k4s_256(a, out, 4); break;
    }
}

/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has
 * no "f16c" */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

static const char *supports_256(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()
               ? NULL
               : "the CPU has no AVX2 + FMA + F16C";
}

const sf_wqk_impl sf_wqk_avx2 = {"avx2", 8, int4_256, int8_256, int4s_256, NULL, NULL, NULL, f16_256, supports_256};

#else /* not x86-64 with GCC or clang: no SIMD kernels */

static const char *supports_none(void) { return "built without x86-64 SIMD kernels"; }
const sf_wqk_impl sf_wqk_avx512 = {"avx512", 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, supports_none};
const sf_wqk_impl sf_wqk_avx2 = {"avx2", 8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, supports_none};

#endif
