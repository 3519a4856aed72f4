/* ssd_cpu.h - what the CPU SSD forward (ssd_cpu.c) and decode step
 * (ssd_step_cpu.c) share: ISA dispatch macros, denormal flushing, the
 * branch-free exp and f16/bf16 conversions, row conversion to f32. */
#ifndef SF_SSD_CPU_H
#define SF_SSD_CPU_H

#include "cpu_common.h"

#include <stdint.h>
#include <string.h>

/* SSD_NO_X86 builds the portable path (scalar product kernel, no clones)
 * on x86 too, to test it. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(SSD_NO_X86)
#define SSD_X86 1
#include <immintrin.h>
#endif

/* Elementwise loops (exp, conversions) get an AVX-512 and an AVX2 clone
 * where the toolchain can dispatch them (ifunc: ELF + glibc; GCC: clang 14
 * refuses clones of the maybe-unused helpers below). */
#if defined(SSD_X86) && defined(__ELF__) && defined(__GLIBC__) && defined(__has_attribute) && !defined(__clang__)
#if __has_attribute(target_clones)
#define SSD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef SSD_CLONES
#define SSD_CLONES
#endif
/* Row converters below are not used by every file that includes this. */
#if defined(__GNUC__)
#define SSD_MAYBE_UNUSED __attribute__((unused))
#else
#define SSD_MAYBE_UNUSED
#endif

/* Tiles are padded to multiples of 16 floats (one zmm, 64 bytes). */
#define SSD_PAD 16

/* Flush denormals (MXCSR FTZ | DAZ) while a worker runs, restored after.
 * The decay factors exp(g) sweep down through the f32 subnormal range
 * (below 1.2e-38), and every product that reads or makes a subnormal takes
 * a microcode assist: measured 2.4x slower for the whole op at H 8,
 * L 4096, A in [-8, -1].  Flushing changes results by < 1.2e-38 absolute. */
static inline unsigned ssd_fp_enter(void) {
#ifdef SSD_X86
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);
    return csr;
#else
    return 0;
#endif
}

static inline void ssd_fp_leave(unsigned csr) {
#ifdef SSD_X86
    _mm_setcsr(csr);
#else
    (void)csr;
#endif
}


/* ------------------------------------------------------------------ */
/* Vectorisable scalar math                                            */
/* ------------------------------------------------------------------ */

static inline uint32_t ssd_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float ssd_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Selects as integer masks, never as float ternaries: GCC 12 does not
 * if-convert a float ?: (even a clamp) for AVX2 / SSE under the default
 * -ftrapping-math, and such a loop vectorises only in the AVX-512 clone. */
static inline uint32_t ssd_sel(int c, uint32_t a, uint32_t b) {
    const uint32_t m = 0u - (uint32_t)(c != 0);
    return (a & m) | (b & ~m);
}

/* exp(x) for x <= 88, 0 below -87 (the callers pass exponents <= 0, and
 * -z for silu).  2^n p(r), r in [-ln2/2, ln2/2], degree-6 Taylor p:
 * relative error < 2.5e-7.  The rounding to n uses the 1.5*2^23 trick so
 * n's bits come out of the float without a float->int conversion (which
 * would be undefined for NaN). */
static inline float ssd_exp(float x) {
    float xc = ssd_float(ssd_sel(x < -87.0f, 0xc2ae0000u /* -87 */, ssd_bits(x)));
    xc = ssd_float(ssd_sel(xc > 88.0f, 0x42b00000u /* 88 */, ssd_bits(xc)));
    const float tm = xc * 1.44269504088896341f + 12582912.0f;
    const float n = tm - 12582912.0f;
    float r = xc - n * 0.693145751953125f; /* ln2 high part: n * it is exact */
    r = r - n * 1.428606765330187e-06f;    /* ln2 low part */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const float res = p * ssd_float((ssd_bits(tm) - 0x4B400000u + 127u) << 23);
    /* below -87: 0 */
    return ssd_float(ssd_bits(res) & ((uint32_t)(x < -87.0f) - 1u));
}

/* f16 -> f32, exact and branch-free: shift the exponent and mantissa into
 * place and rebias by a multiply with 2^112 (exact, also for subnormals);
 * inf / NaN keep an all-ones exponent. */
static inline float ssd_h2f(uint16_t h) {
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    const uint32_t fb = ssd_sel(em >= (0x7c00u << 13), em | 0x7f800000u,
                                ssd_bits(ssd_float(em) * 0x1p112f));
    return ssd_float(fb | (uint32_t)(h & 0x8000u) << 16);
}

/* f32 -> f16, round to nearest even, branch-free; the same results as
 * sf_f32_to_f16.  Normal halves: rebias and round on bit 13; subnormal
 * halves: adding 0.5f lines the f32 ulp up with the half ulp (2^-24) so the
 * float addition does the rounding. */
static inline uint16_t ssd_f2h(float f) {
    const uint32_t x = ssd_bits(f), a = x & 0x7fffffffu;
    const uint32_t nrm = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13;
    const uint32_t sub = ssd_bits(ssd_float(a) + 0.5f) - 0x3f000000u;
    uint32_t r = ssd_sel(a < 0x38800000u, sub, nrm);
    r = ssd_sel(a >= 0x477ff000u, 0x7c00u, r);
    r = ssd_sel(a > 0x7f800000u, 0x7e00u, r);
    return (uint16_t)(r | ((x >> 16) & 0x8000u));
}

static inline uint16_t ssd_f2bf(float f) {
    const uint32_t x = ssd_bits(f);
    const uint32_t rn = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    return (uint16_t)ssd_sel((x & 0x7fffffffu) > 0x7f800000u, (x >> 16) | 0x40u, rn);
}

/* n elements of a row (unit stride) from element offset `off`, to f32. */
SSD_CLONES SSD_MAYBE_UNUSED static void cvt_in(const void *base, sf_dtype dt, int64_t off, int64_t n,
                              float *restrict dst) {
    if (dt == SF_F32) {
        memcpy(dst, (const float *)base + off, (size_t)n * sizeof(float));
    } else if (dt == SF_F16) {
        const uint16_t *restrict s = (const uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = ssd_h2f(s[i]);
    } else {
        const uint16_t *restrict s = (const uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = ssd_float((uint32_t)s[i] << 16);
    }
}

SSD_CLONES SSD_MAYBE_UNUSED static void cvt_out(void *base, sf_dtype dt, int64_t off, int64_t n,
                               const float *restrict src) {
    if (dt == SF_F32) {
        memcpy((float *)base + off, src, (size_t)n * sizeof(float));
    } else if (dt == SF_F16) {
        uint16_t *restrict d = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) d[i] = ssd_f2h(src[i]);
    } else {
        uint16_t *restrict d = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) d[i] = ssd_f2bf(src[i]);
    }
}

/* v[i] = silu(v[i]) = v / (1 + exp(-v)) with the branch-free exp, so the
 * loop vectorises (libm's expf made the conv prefill expf-bound: 40 ms vs
 * 6.6 ms for 2 x 1024 x 5376 on 2 cores). */
SSD_CLONES SSD_MAYBE_UNUSED static void silu_inplace(float *restrict v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = v[i] / (1.0f + ssd_exp(-v[i]));
}

#endif
