/* fp8.h - the OCP fp8 e4m3fn (SF_F8E4M3) codec shared by the host
 * backends and the CUDA kernels: 1 sign, 4 exponent (bias 7), 3 mantissa
 * bits; max 448, no infinities, NaN 0x7f / 0xff.  Integer arithmetic on
 * the f32 bits, so every backend gives the same code for the same f32. */
#ifndef SF_FP8_H
#define SF_FP8_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define SF_FP8_FN __host__ __device__ __forceinline__
#else
#define SF_FP8_FN static inline
#endif

/* x rounded to nearest e4m3, ties to even mantissa, saturating to +-448
 * (infinities too); NaN gives 0x7f.  The sign of zero is kept. */
SF_FP8_FN uint8_t sf_f32_to_e4m3(float x) {
    uint32_t u;
#if defined(__CUDA_ARCH__)
    u = __float_as_uint(x);
#else
    memcpy(&u, &x, sizeof u);
#endif
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t ex = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    if (ex == 0xffu && man != 0) return 0x7f;                 /* NaN */
    if (ex >= 127u + 8u && (ex > 135u || man >= 0x600000u))   /* |x| >= 448 */
        return (uint8_t)(sign | 0x7e);
    if (ex == 0) return sign;                                 /* f32 subnormal: below half of 2^-9 */
    const int e = (int)ex - 127;
    const uint32_t m24 = man | 0x800000u;
    /* normal targets keep 3 mantissa bits (shift 20); subnormal targets
     * (e < -6) count units of 2^-9 (shift 14 - e) */
    const int sh = e >= -6 ? 20 : 14 - e;
    if (sh > 24) return sign;                                 /* |x| < 2^-10 */
    uint32_t q = m24 >> sh;
    const uint32_t rem = m24 & ((1u << sh) - 1u), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    /* normal: exponent field e + 7 then the mantissa (a carry of q into 16
     * moves to the next exponent); subnormal: q units of 2^-9, where 8 is
     * the smallest normal's code */
    const uint32_t code = e >= -6 ? ((uint32_t)(e + 7) << 3) + (q - 8u) : q;
    return (uint8_t)(sign | code);
}

/* The value of an e4m3 code (exact in f32). */
SF_FP8_FN float sf_e4m3_to_f32(uint8_t c) {
    const uint32_t e = (c >> 3) & 15u, m = c & 7u;
    if (e == 0) { /* subnormal: m units of 2^-9 */
        const float v = (float)m * (1.0f / 512.0f);
        return (c & 0x80u) ? -v : v;
    }
    /* (8 + m) * 2^(e - 10) from the f32 exponent field; 0x7f / 0xff NaN */
    const uint32_t bits = (e == 15u && m == 7u) ? 0x7fc00000u
                                                : ((uint32_t)(c & 0x80u) << 24) | ((e + 120u) << 23) | (m << 20);
    float v;
#if defined(__CUDA_ARCH__)
    v = __uint_as_float(bits);
#else
    memcpy(&v, &bits, sizeof v);
#endif
    return v;
}

#undef SF_FP8_FN
#endif
