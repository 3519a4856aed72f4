/* vec.cuh - V consecutive elements at a time, for the fused layer ops
 * (norm.cu, swiglu.cu, rope.cu): loads and stores of raw vectors, their
 * conversion to and from f32, and the SiLU they share.
 *
 * A raw vector of V elements whose size is a multiple of 16 bytes is
 * 16-byte aligned, so a whole one moves in one (or two, 8 x f32) 16-byte
 * transactions.  The launchers pick VEC = true only when every row start
 * is 16-byte aligned and every row a whole number of vectors: then a
 * vector is whole (n = V) or absent (n = 0), and the kernels carry no
 * element-wise tail code (which, per vector, cost 8 more registers and a
 * branch).  VEC = false (misaligned, odd-strided or odd-length rows) goes
 * element by element and reads nothing past n. */
#ifndef SF_FUSED_VEC_CUH
#define SF_FUSED_VEC_CUH

#include "common/cuda_common.h"
#include "common/ptx.cuh"

#include <stdint.h>

/* aligned to its size up to 16 bytes, so that pairs of 16-bit elements
 * can be written as one 32-bit word (fz_pack2) */
template <typename T, int V> constexpr size_t fz_align() {
    return (V * sizeof(T)) % 16 == 0 ? 16 : (V * sizeof(T)) % 8 == 0 ? 8 : (V * sizeof(T)) % 4 == 0 ? 4 : alignof(T);
}
template <typename T, int V>
struct alignas(fz_align<T, V>()) fz_raw {
    T e[V];
};

/* Whether V elements of T fill whole 16-byte transactions. */
template <typename T, int V> constexpr bool fz_wide() { return (V * sizeof(T)) % 16 == 0; }

template <typename T> static __device__ __forceinline__ T fz_zero() { return sf_elem<T>::from_f(0.0f); }

/* n valid elements of p (VEC: n is 0 or V; else 0 <= n <= V); the rest
 * of r is zero. */
template <typename T, int V, bool VEC>
static __device__ __forceinline__ void fz_ld(const T *p, int n, fz_raw<T, V> &r) {
    if constexpr (VEC) {
        static_assert(fz_wide<T, V>(), "VEC needs whole 16-byte transactions");
        if (n > 0) {
            r = *reinterpret_cast<const fz_raw<T, V> *>(p);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++) r.e[i] = fz_zero<T>();
        }
    } else {
#pragma unroll
        for (int i = 0; i < V; i++) r.e[i] = i < n ? p[i] : fz_zero<T>();
    }
}

template <typename T, int V, bool VEC>
static __device__ __forceinline__ void fz_st(T *p, int n, const fz_raw<T, V> &r) {
    if constexpr (VEC) {
        if (n > 0) *reinterpret_cast<fz_raw<T, V> *>(p) = r;
    } else {
#pragma unroll
        for (int i = 0; i < V; i++)
            if (i < n) p[i] = r.e[i];
    }
}

template <typename T, int V>
static __device__ __forceinline__ void fz_to_f(const fz_raw<T, V> &r, float (&f)[V]) {
#pragma unroll
    for (int i = 0; i < V; i++) f[i] = sf_elem<T>::to_f(r.e[i]);
}

/* f32 -> T, two 16-bit results per conversion instruction where it can */
static __device__ __forceinline__ void fz_pack2(float a, float b, __half *d) {
    *reinterpret_cast<__half2 *>(d) = __floats2half2_rn(a, b);
}
static __device__ __forceinline__ void fz_pack2(float a, float b, __nv_bfloat16 *d) {
    *reinterpret_cast<__nv_bfloat162 *>(d) = __floats2bfloat162_rn(a, b);
}

template <typename T, int V>
static __device__ __forceinline__ void fz_from_f(const float (&f)[V], fz_raw<T, V> &r) {
    if constexpr (sizeof(T) == 2 && V % 2 == 0) {
#pragma unroll
        for (int i = 0; i < V; i += 2) fz_pack2(f[i], f[i + 1], &r.e[i]);
    } else {
#pragma unroll
        for (int i = 0; i < V; i++) r.e[i] = sf_elem<T>::from_f(f[i]);
    }
}

/* Converting load and store. */
template <typename T, int V, bool VEC>
static __device__ __forceinline__ void fz_ldf(const T *p, int n, float (&f)[V]) {
    fz_raw<T, V> r;
    fz_ld<T, V, VEC>(p, n, r);
    fz_to_f<T, V>(r, f);
}

template <typename T, int V, bool VEC>
static __device__ __forceinline__ void fz_stf(T *p, int n, const float (&f)[V]) {
    fz_raw<T, V> r;
    fz_from_f<T, V>(f, r);
    fz_st<T, V, VEC>(p, n, r);
}

/* SiLU v / (1 + e^-v) with the SFU's exp and reciprocal (common/ptx.cuh:
 * 5 instructions, a few ulp).  An IEEE division is ~10 instructions per
 * element and halved the 16-bit rates of layer_ops.cu's kernels.  For
 * v < -88 the result is -0 (the exact value is below 1e-36). */
static __device__ __forceinline__ float fz_silu(float v) { return sf_silu_sfu(v); }

/* Whether p is 16-byte aligned and every row start p + k * stride is too. */
static inline bool fz_rows_aligned(const void *p, int64_t stride, size_t es) {
    return ((uintptr_t)p % 16u) == 0 && ((uint64_t)stride * es) % 16u == 0;
}

#endif
