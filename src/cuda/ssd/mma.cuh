/* mma.cuh - the SSD's mma.sync fragment traits (per dtype, on top of
 * common/ptx.cuh) and tile staging, shared by the kernels of every stage.
 *
 * 16-bit inputs (f16, bf16): mma.sync m16n8k16, f32 accumulation, fragments
 * loaded with ldmatrix (.trans where the tile is stored k-major).
 * f32 inputs: mma.sync m16n8k8 TF32.  ldmatrix moves 16-bit elements only, so
 * fragments come from scalar shared loads, each rounded to TF32 (cvt.rna:
 * the tensor core would otherwise truncate, doubling the error); tiles are
 * raw f32 copies made with cp.async.
 *
 * Shared layouts (ld = leading dimension in elements; pads chosen so that
 * fragment loads of one warp hit 32 distinct banks):
 *   16-bit: ld*2 bytes = 16 mod 128 for every tile (cols + 8 with cols % 64 == 0,
 *           and also fine for cols == 32): 8 ldmatrix rows land in 8 bank groups.
 *   f32:    row-major A / "col" B loads read s[g*ld + t]: ld = 4 mod 32 (cols + 4);
 *           k-major loads read s[t*ld + g]: ld = 8 mod 32 (cols + 8); the P.X
 *           product reads s[2t*ld + g]: ld = 4 mod 16 (cols + 4).
 */
#ifndef SF_SSD_MMA_CUH
#define SF_SSD_MMA_CUH

#include "common/cuda_common.h"
#include "common/ptx.cuh"
#include <stdint.h>

/* Fragment traits.  Every load gives one A fragment (16 x K) or two B
 * fragments (K x 8 each, n-tiles n0 and n0 + 8: b[0..1] and b[2..3]). */
template <typename T> struct ssd_mma;

template <typename T16> struct ssd_mma16 {
    static constexpr int K = 16;
    /* s[m][k] row-major */
    static __device__ __forceinline__ void load_a(uint32_t a[4], const T16 *s, int ld, int m0,
                                                  int k0) {
        const int l = threadIdx.x & 31;
        sf_ldsm_x4(a, s + (m0 + (l & 15)) * ld + k0 + (l >> 4) * 8);
    }
    /* s[k][m] (A transposed in memory) */
    static __device__ __forceinline__ void load_a_t(uint32_t a[4], const T16 *s, int ld, int m0,
                                                    int k0) {
        const int l = threadIdx.x & 31, q = l >> 3;
        sf_ldsm_x4_t(a, s + (k0 + (l & 7) + (q >> 1) * 8) * ld + m0 + (q & 1) * 8);
    }
    /* s[n][k] */
    static __device__ __forceinline__ void load_b2(uint32_t b[4], const T16 *s, int ld, int n0,
                                                   int k0) {
        const int l = threadIdx.x & 31;
        sf_ldsm_x4(b, s + (n0 + (l & 7) + ((l >> 4) << 3)) * ld + k0 + ((l >> 3) & 1) * 8);
    }
    /* s[k][n] */
    static __device__ __forceinline__ void load_b2_t(uint32_t b[4], const T16 *s, int ld, int n0,
                                                     int k0) {
        const int l = threadIdx.x & 31;
        sf_ldsm_x4_t(b, s + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + n0 + (l >> 4) * 8);
    }
    /* B operand of P.X with the key order of acc_to_a: the natural one */
    static __device__ __forceinline__ void load_bx2(uint32_t b[4], const T16 *s, int ld, int n0,
                                                    int k0) {
        load_b2_t(b, s, ld, n0, k0);
    }
};

static __device__ __forceinline__ uint32_t ssd_pack(__nv_bfloat16, float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
static __device__ __forceinline__ uint32_t ssd_pack(__half, float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}


static __device__ __forceinline__ float2 ssd_unpack(__nv_bfloat16, uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&v));
}
static __device__ __forceinline__ float2 ssd_unpack(__half, uint32_t v) {
    return __half22float2(*reinterpret_cast<__half2 *>(&v));
}

/* a (2 x 16-bit) times (w.x, w.y), rounded back to 16 bits */
static __device__ __forceinline__ uint32_t ssd_mul2(__nv_bfloat16, uint32_t a, float2 w) {
    __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162 *>(&a);
    float2 f = __bfloat1622float2(v);
    return ssd_pack(__nv_bfloat16{}, f.x * w.x, f.y * w.y);
}
static __device__ __forceinline__ uint32_t ssd_mul2(__half, uint32_t a, float2 w) {
    __half2 v = *reinterpret_cast<__half2 *>(&a);
    float2 f = __half22float2(v);
    return ssd_pack(__half{}, f.x * w.x, f.y * w.y);
}

template <> struct ssd_mma<__nv_bfloat16> : ssd_mma16<__nv_bfloat16> {
    /* A fragment from load_a_t: multiply k column j by w[j] (w 8-byte aligned) */
    static __device__ __forceinline__ void scale_a(uint32_t a[4], const float *w) {
        const int t = threadIdx.x & 3;
        const float2 w0 = *reinterpret_cast<const float2 *>(w + 2 * t);
        const float2 w8 = *reinterpret_cast<const float2 *>(w + 8 + 2 * t);
        __nv_bfloat16 tag{};
        a[0] = ssd_mul2(tag, a[0], w0);
        a[1] = ssd_mul2(tag, a[1], w0);
        a[2] = ssd_mul2(tag, a[2], w8);
        a[3] = ssd_mul2(tag, a[3], w8);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4],
                                               const uint32_t *b) {
        sf_mma16<__nv_bfloat16>::run(c, a, b[0], b[1]);
    }
    /* accumulator n-tiles c[0], c[1] (keys k0..k0+15) -> A fragment */
    static __device__ __forceinline__ void acc_to_a(uint32_t a[4], const float (*c)[4]) {
        __nv_bfloat16 tag{};
        a[0] = ssd_pack(tag, c[0][0], c[0][1]);
        a[1] = ssd_pack(tag, c[0][2], c[0][3]);
        a[2] = ssd_pack(tag, c[1][0], c[1][1]);
        a[3] = ssd_pack(tag, c[1][2], c[1][3]);
    }
};

template <> struct ssd_mma<__half> : ssd_mma16<__half> {
    /* A fragment from load_a_t: multiply k column j by w[j] (w 8-byte aligned) */
    static __device__ __forceinline__ void scale_a(uint32_t a[4], const float *w) {
        const int t = threadIdx.x & 3;
        const float2 w0 = *reinterpret_cast<const float2 *>(w + 2 * t);
        const float2 w8 = *reinterpret_cast<const float2 *>(w + 8 + 2 * t);
        __half tag{};
        a[0] = ssd_mul2(tag, a[0], w0);
        a[1] = ssd_mul2(tag, a[1], w0);
        a[2] = ssd_mul2(tag, a[2], w8);
        a[3] = ssd_mul2(tag, a[3], w8);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4],
                                               const uint32_t *b) {
        sf_mma16<__half>::run(c, a, b[0], b[1]);
    }
    static __device__ __forceinline__ void acc_to_a(uint32_t a[4], const float (*c)[4]) {
        __half tag{};
        a[0] = ssd_pack(tag, c[0][0], c[0][1]);
        a[1] = ssd_pack(tag, c[0][2], c[0][3]);
        a[2] = ssd_pack(tag, c[1][0], c[1][1]);
        a[3] = ssd_pack(tag, c[1][2], c[1][3]);
    }
};

template <> struct ssd_mma<float> {
    static constexpr int K = 8;
    static __device__ __forceinline__ void load_a(uint32_t a[4], const float *s, int ld, int m0,
                                                  int k0) {
        const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
        const float *p = s + (m0 + g) * ld + k0 + t;
        a[0] = __float_as_uint(sf_tf32(p[0]));
        a[1] = __float_as_uint(sf_tf32(p[8 * ld]));
        a[2] = __float_as_uint(sf_tf32(p[4]));
        a[3] = __float_as_uint(sf_tf32(p[8 * ld + 4]));
    }
    static __device__ __forceinline__ void load_a_t(uint32_t a[4], const float *s, int ld, int m0,
                                                    int k0) {
        const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
        const float *p = s + (k0 + t) * ld + m0 + g;
        a[0] = __float_as_uint(p[0]);
        a[1] = __float_as_uint(p[8]);
        a[2] = __float_as_uint(p[4 * ld]);
        a[3] = __float_as_uint(p[4 * ld + 8]);
    }
    static __device__ __forceinline__ void load_b2(uint32_t b[4], const float *s, int ld, int n0,
                                                   int k0) {
        const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
        const float *p = s + (n0 + g) * ld + k0 + t;
        b[0] = __float_as_uint(sf_tf32(p[0]));
        b[1] = __float_as_uint(sf_tf32(p[4]));
        b[2] = __float_as_uint(sf_tf32(p[8 * ld]));
        b[3] = __float_as_uint(sf_tf32(p[8 * ld + 4]));
    }
    static __device__ __forceinline__ void load_b2_t(uint32_t b[4], const float *s, int ld, int n0,
                                                     int k0) {
        const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
        const float *p = s + (k0 + t) * ld + n0 + g;
        b[0] = __float_as_uint(sf_tf32(p[0]));
        b[1] = __float_as_uint(sf_tf32(p[4 * ld]));
        b[2] = __float_as_uint(sf_tf32(p[8]));
        b[3] = __float_as_uint(sf_tf32(p[4 * ld + 8]));
    }
    /* The accumulator holds keys 2t, 2t+1 in lane t; the k8 A fragment wants
     * k slots t and t+4.  The sum over k does not care about order, so k slot
     * t means key 2t and slot t+4 key 2t+1, on both operands: no shuffles. */
    static __device__ __forceinline__ void load_bx2(uint32_t b[4], const float *s, int ld, int n0,
                                                    int k0) {
        const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
        const float *p = s + (k0 + 2 * t) * ld + n0 + g;
        b[0] = __float_as_uint(sf_tf32(p[0]));
        b[1] = __float_as_uint(sf_tf32(p[ld]));
        b[2] = __float_as_uint(sf_tf32(p[8]));
        b[3] = __float_as_uint(sf_tf32(p[ld + 8]));
    }
    /* load_a_t returns raw f32; scale_a multiplies k column j by w[j] and rounds */
    static __device__ __forceinline__ void scale_a(uint32_t a[4], const float *w) {
        const int t = threadIdx.x & 3;
        const float w0 = w[t], w4 = w[t + 4];
        a[0] = __float_as_uint(sf_tf32(__uint_as_float(a[0]) * w0));
        a[1] = __float_as_uint(sf_tf32(__uint_as_float(a[1]) * w0));
        a[2] = __float_as_uint(sf_tf32(__uint_as_float(a[2]) * w4));
        a[3] = __float_as_uint(sf_tf32(__uint_as_float(a[3]) * w4));
    }
    static __device__ __forceinline__ void acc_to_a(uint32_t a[4], const float (*c)[4]) {
        a[0] = __float_as_uint(sf_tf32(c[0][0]));
        a[1] = __float_as_uint(sf_tf32(c[0][2]));
        a[2] = __float_as_uint(sf_tf32(c[0][1]));
        a[3] = __float_as_uint(sf_tf32(c[0][3]));
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4],
                                               const uint32_t *b) {
        sf_mma_tf32(c, a, b[0], b[1]);
    }
};

/* Shared-tile padding (elements) per the bank analysis at the top. */
template <typename T> struct ssd_pad {
    static constexpr int ROW = 8;   /* row-major / "col" operand tiles */
    static constexpr int KMAJ = 8;  /* k-major tiles (load_*_t)         */
    static constexpr int PX = 8;    /* X tile of the P.X product        */
};
template <> struct ssd_pad<float> {
    static constexpr int ROW = 4;
    static constexpr int KMAJ = 8;
    static constexpr int PX = 4;
};

/* ------------------------------------------------------------------ */
/* Element conversion for staging                                       */
/* ------------------------------------------------------------------ */

/* 16 bytes of T from global (aligned) as floats. */
template <typename T> struct ssd_vec;
template <> struct ssd_vec<float> {
    static constexpr int V = 4;
    static __device__ __forceinline__ void load(float f[4], const float *g) {
        float4 u = __ldg(reinterpret_cast<const float4 *>(g));
        f[0] = u.x; f[1] = u.y; f[2] = u.z; f[3] = u.w;
    }
    static __device__ __forceinline__ void store(float *g, const float f[4]) {
        *reinterpret_cast<float4 *>(g) = make_float4(f[0], f[1], f[2], f[3]);
    }
};
template <typename T16> struct ssd_vec16 {
    static constexpr int V = 8;
    static __device__ __forceinline__ void load(float f[8], const T16 *g) {
        uint4 u = __ldg(reinterpret_cast<const uint4 *>(g));
        const T16 *e = reinterpret_cast<const T16 *>(&u);
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] = sf_elem<T16>::to_f(e[i]);
    }
    static __device__ __forceinline__ void store(T16 *g, const float f[8]) {
        uint4 u;
        T16 *e = reinterpret_cast<T16 *>(&u);
#pragma unroll
        for (int i = 0; i < 8; i++) e[i] = sf_elem<T16>::from_f(f[i]);
        *reinterpret_cast<uint4 *>(g) = u;
    }
};
template <> struct ssd_vec<__half> : ssd_vec16<__half> {};
template <> struct ssd_vec<__nv_bfloat16> : ssd_vec16<__nv_bfloat16> {};

/* V floats (times sc) to shared memory in operand format, one vector store
 * (V * sizeof(T) bytes: 16, or 8 for a 16-bit tile staged from f32). */
template <typename T, int V>
static __device__ __forceinline__ void ssd_st_smem(T *d, const float *f, float sc) {
    if constexpr (sizeof(T) == 4) {
        static_assert(V == 4, "f32 tiles stage 4 at a time");
        *reinterpret_cast<float4 *>(d) = make_float4(sf_tf32(f[0] * sc), sf_tf32(f[1] * sc),
                                                      sf_tf32(f[2] * sc), sf_tf32(f[3] * sc));
    } else {
        uint32_t w[V / 2];
        T tag{};
#pragma unroll
        for (int i = 0; i < V / 2; i++) w[i] = ssd_pack(tag, f[2 * i] * sc, f[2 * i + 1] * sc);
        if constexpr (V == 8)
            *reinterpret_cast<uint4 *>(d) = make_uint4(w[0], w[1], w[2], w[3]);
        else
            *reinterpret_cast<uint2 *>(d) = make_uint2(w[0], w[1]);
    }
}

/* Stages a rows x cols tile (row r at g + r * gstride, unit column stride)
 * into shared s[r * ld + col] in operand format (TF32-rounded for f32),
 * synchronously through registers: each thread first issues up to 8
 * independent 16-byte loads, then converts and stores them (one load
 * latency per 8 vectors, not per vector).  Rows >= rows_valid and columns
 * >= cols_valid become 0.  cols is a multiple of the 16-byte vector width
 * of S; vec says the global rows are 16-byte aligned. */
template <typename T, int NT, typename S>
static __device__ __forceinline__ void ssd_stage(T *s, int ld, const S *g, int64_t gstride,
                                                 int rows, int cols, int rows_valid,
                                                 int cols_valid, bool vec) {
    constexpr int V = ssd_vec<S>::V, U = 8;
    const int vpr = cols / V, total = rows * vpr;
    for (int base = threadIdx.x; base < total; base += NT * U) {
        uint4 raw[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int idx = base + u * NT;
            raw[u] = make_uint4(0u, 0u, 0u, 0u);
            if (idx < total) {
                const int r = idx / vpr, cv = (idx - r * vpr) * V;
                const S *src = g + (int64_t)r * gstride + cv;
                if (r < rows_valid && vec && cv + V <= cols_valid) {
                    raw[u] = __ldg(reinterpret_cast<const uint4 *>(src));
                } else if (r < rows_valid) {
                    S *e = reinterpret_cast<S *>(&raw[u]);
                    for (int k = 0; k < V; k++)
                        if (cv + k < cols_valid) e[k] = src[k];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int idx = base + u * NT;
            if (idx < total) {
                const int r = idx / vpr, cv = (idx - r * vpr) * V;
                const S *e = reinterpret_cast<const S *>(&raw[u]);
                float f[V];
#pragma unroll
                for (int k = 0; k < V; k++) f[k] = sf_elem<S>::to_f(e[k]);
                ssd_st_smem<T, V>(s + r * ld + cv, f, 1.0f);
            }
        }
    }
}

/* Raw copy of a rows x cols tile of T into shared memory with cp.async;
 * rows/columns past the valid ones are zero-filled with plain stores, and a
 * vector that is unaligned or straddles cols_valid is copied element-wise
 * (plain loads: only odd layouts take that path).  f32 tiles stay raw here:
 * the f32 fragment loads round to TF32. */
template <typename T, int NT>
static __device__ __forceinline__ void ssd_stage_async(T *s, int ld, const T *g, int64_t gstride,
                                                       int rows, int cols, int rows_valid,
                                                       int cols_valid, bool vec) {
    constexpr int V = 16 / sizeof(T);
    const int vpr = cols / V;
    for (int idx = threadIdx.x; idx < rows * vpr; idx += NT) {
        const int r = idx / vpr, cv = (idx - r * vpr) * V;
        T *d = s + r * ld + cv;
        const T *src = g + (int64_t)r * gstride + cv;
        if (r < rows_valid && vec && cv + V <= cols_valid) {
            sf_cp_async16(d, src);
        } else {
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (r < rows_valid) {
                T *e = reinterpret_cast<T *>(&u);
                for (int k = 0; k < V; k++)
                    if (cv + k < cols_valid) e[k] = src[k];
            }
            *reinterpret_cast<uint4 *>(d) = u;
        }
    }
}

#endif
