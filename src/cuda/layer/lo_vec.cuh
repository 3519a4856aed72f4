/* lo_vec.cuh - V consecutive elements at a time for the layer ops around
 * SSD (layer_ops.cu, conv1d_fwd.cuh): one 16- or 8-byte access when the
 * whole vector is valid, element by element otherwise, converted to and
 * from f32; and the SiLU they share. */
#ifndef SF_LAYER_LO_VEC_CUH
#define SF_LAYER_LO_VEC_CUH

#include "common/cuda_common.h"
#include "common/ptx.cuh"

#include <stdint.h>

template <typename T, int V>
static __device__ __forceinline__ void ld_vec(const T *p, int n, float (&f)[V]) {
    if constexpr (V * sizeof(T) == 16) {
        if (n == V) {
            const uint4 u = *reinterpret_cast<const uint4 *>(p);
            const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
            for (int i = 0; i < V; i++) f[i] = sf_elem<T>::to_f(e[i]);
            return;
        }
    } else if constexpr (V * sizeof(T) == 8) {
        if (n == V) {
            const uint2 u = *reinterpret_cast<const uint2 *>(p);
            const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
            for (int i = 0; i < V; i++) f[i] = sf_elem<T>::to_f(e[i]);
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < V; i++) f[i] = i < n ? sf_elem<T>::to_f(p[i]) : 0.0f;
}

template <typename T, int V>
static __device__ __forceinline__ void st_vec(T *p, int n, const float (&f)[V]) {
    if constexpr (V * sizeof(T) == 16) {
        if (n == V) {
            uint4 u;
            T *e = reinterpret_cast<T *>(&u);
#pragma unroll
            for (int i = 0; i < V; i++) e[i] = sf_elem<T>::from_f(f[i]);
            *reinterpret_cast<uint4 *>(p) = u;
            return;
        }
    } else if constexpr (V * sizeof(T) == 8) {
        if (n == V) {
            uint2 u;
            T *e = reinterpret_cast<T *>(&u);
#pragma unroll
            for (int i = 0; i < V; i++) e[i] = sf_elem<T>::from_f(f[i]);
            *reinterpret_cast<uint2 *>(p) = u;
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < V; i++)
        if (i < n) p[i] = sf_elem<T>::from_f(f[i]);
}

/* SiLU with the SFU's exp and reciprocal (a few ulp, common/ptx.cuh): the
 * IEEE division costs ~10 instructions per element, which made the 16-bit
 * kernels issue-bound (measured: bf16 rmsnorm with z at 1.7 TB/s). */
static __device__ __forceinline__ float lo_silu(float v) { return sf_silu_sfu(v); }

#endif
