/* dequant.cuh - integer codes to 16-bit pairs for mma.sync, and the matching
 * order of x.
 *
 * The codes become exact small integers (u - 8, u, or the signed byte) in
 * f16 / bf16; the group's scale and min are applied later, in f32, to the
 * product (gemm_wq.cu).  A lane holds 8 consecutive elements e0..e7 of one
 * row of W for one 32-element sub-block and makes the four pairs
 *   P_j = (e_j, e_{j+4}),  j = 0..3,
 * which is what the OR-into-the-mantissa trick gives for free on 8 nibbles
 * of one 32-bit word: (v >> 4j) & 0x000f000f puts nibbles j and j+4 in the
 * two halves; OR 0x6400 (f16 1024, unit spacing up to 2048) or 0x4300
 * (bf16 128, unit spacing up to 256) makes 1024 + u / 128 + u, and one fma
 * (x 1 - (1024 + offset)) leaves the exact integer.  Bytes (int8) go the
 * same way in f16 (1024 + u, u < 256); in bf16, whose 8 significant bits
 * cannot hold 128 + u, through f32 (2^23 + u, minus 2^23 + offset), then
 * the upper halves of the two exact floats.
 * The k order inside an mma is free as long as both operands share it, so
 * x's 8 elements are permuted into the same pairs (prmt, x_pairs).
 */
#ifndef SF_GEMM_WQ_DEQUANT_CUH
#define SF_GEMM_WQ_DEQUANT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

template <typename T> struct wq_bits;
template <> struct wq_bits<__half> {
    static constexpr uint32_t ONE2 = 0x3C003C00u;   /* (1, 1)             */
    static constexpr uint32_t MAGIC4 = 0x64006400u; /* (1024, 1024)       */
    static __device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c) {
        uint32_t d;
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
        return d;
    }
    static __device__ __forceinline__ float tof(uint16_t h) { return __half2float(__ushort_as_half(h)); }
    static __device__ __forceinline__ __half fromf(float v) { return __float2half_rn(v); }
    /* -(1024 + off) in both halves */
    static __device__ __forceinline__ uint32_t neg4(int off) {
        const uint32_t h = 0xE400u + (uint32_t)off;
        return h | (h << 16);
    }
};
template <> struct wq_bits<__nv_bfloat16> {
    static constexpr uint32_t ONE2 = 0x3F803F80u;
    static constexpr uint32_t MAGIC4 = 0x43004300u; /* (128, 128)         */
    static __device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c) {
        uint32_t d;
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
        return d;
    }
    static __device__ __forceinline__ float tof(uint16_t h) {
        return __bfloat162float(__ushort_as_bfloat16(h));
    }
    static __device__ __forceinline__ __nv_bfloat16 fromf(float v) { return __float2bfloat16_rn(v); }
    static __device__ __forceinline__ uint32_t neg4(int off) { /* -(128 + off) */
        const uint32_t h = 0xC300u + (uint32_t)off;
        return h | (h << 16);
    }
};

/* (a & mask) | bits in one LOP3 */
static __device__ __forceinline__ uint32_t wq_and_or(uint32_t a, uint32_t mask, uint32_t bits) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
    return d;
}

/* 8 nibbles (elements e0..e7 of a row, e_i in bits 4i..4i+3) -> P0..P3.
 * off = 8 (symmetric: u - 8) or 0 (with mins: u). */
template <typename T>
static __device__ __forceinline__ void wq_int4_pairs(uint32_t v, int off, uint32_t p[4]) {
    const uint32_t nb = wq_bits<T>::neg4(off);
#pragma unroll
    for (int j = 0; j < 4; j++)
        p[j] = wq_bits<T>::fma2(wq_and_or(v >> (4 * j), 0x000f000fu, wq_bits<T>::MAGIC4), wq_bits<T>::ONE2, nb);
}

/* 8 bytes (lo: e0..e3, hi: e4..e7) -> P0..P3; sgn: the bytes are signed
 * (symmetric int8), else unsigned (with mins). */
static __device__ __forceinline__ void wq_int8_pairs_h(uint32_t lo, uint32_t hi, bool sgn, uint32_t p[4]) {
    if (sgn) lo ^= 0x80808080u, hi ^= 0x80808080u; /* q + 128 */
    const uint32_t nb = wq_bits<__half>::neg4(sgn ? 128 : 0);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        /* byte j of lo into byte 0, byte j of hi into byte 2 */
        const uint32_t t = __byte_perm(lo, hi, (uint32_t)(j | ((4 + j) << 8)));
        p[j] = wq_bits<__half>::fma2(wq_and_or(t, 0x00ff00ffu, 0x64006400u), wq_bits<__half>::ONE2, nb);
    }
}
static __device__ __forceinline__ void wq_int8_pairs_b(uint32_t lo, uint32_t hi, bool sgn, uint32_t p[4]) {
    if (sgn) lo ^= 0x80808080u, hi ^= 0x80808080u;
    const float base = sgn ? 8388736.0f : 8388608.0f; /* 2^23 + 128, 2^23 */
#pragma unroll
    for (int j = 0; j < 4; j++) {
        /* [byte j, 0, 0, 0x4B]: the float 2^23 + byte */
        const float a = __uint_as_float(__byte_perm(lo, 0x4B000000u, (uint32_t)(0x7540 | j))) - base;
        const float b = __uint_as_float(__byte_perm(hi, 0x4B000000u, (uint32_t)(0x7540 | j))) - base;
        /* exact integers of at most 8 bits: their bf16 is the upper half */
        p[j] = __byte_perm(__float_as_uint(a), __float_as_uint(b), 0x7632);
    }
}
template <typename T>
static __device__ __forceinline__ void wq_int8_pairs(uint32_t lo, uint32_t hi, bool sgn, uint32_t p[4]);
template <>
__device__ __forceinline__ void wq_int8_pairs<__half>(uint32_t lo, uint32_t hi, bool sgn, uint32_t p[4]) {
    wq_int8_pairs_h(lo, hi, sgn, p);
}
template <>
__device__ __forceinline__ void wq_int8_pairs<__nv_bfloat16>(uint32_t lo, uint32_t hi, bool sgn, uint32_t p[4]) {
    wq_int8_pairs_b(lo, hi, sgn, p);
}

/* x's 8 consecutive 16-bit values (h0..h7 in q.x..q.w) -> the same pairs
 * P_j = (h_j, h_{j+4}). */
static __device__ __forceinline__ void wq_x_pairs(uint4 q, uint32_t p[4]) {
    p[0] = __byte_perm(q.x, q.z, 0x5410);
    p[1] = __byte_perm(q.x, q.z, 0x7632);
    p[2] = __byte_perm(q.y, q.w, 0x5410);
    p[3] = __byte_perm(q.y, q.w, 0x7632);
}

#endif
