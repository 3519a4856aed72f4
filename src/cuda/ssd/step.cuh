/* ssd_step.cuh - the Mamba-2 decode step (selective_state_update) on the GPU.
 * Included only from ssd_step.cu.
 *
 * Memory-bound: per (token, head) the P x N state is read and written once
 * (8 bytes per element in f32, 4 in f16 / bf16); x, B, C, z, out are noise
 * next to it.  One block per (token, head), 4 warps; a warp owns rows
 * p = warp + 4k and updates each row with 4-element loads/stores across its
 * lanes (16 bytes in f32, 8 in 16 bits; lane l holds columns 4l .. 4l+3 of
 * every 128-column stretch), 4 rows in flight at a time, and reduces the
 * row's dot product with C by butterfly shuffles.
 * Template parameters: T the dtype of x (z, out), TS the state's.  dt, B
 * and C are each T or f32, a flag in the arguments: they are read once per
 * block (the vector paths), so the uniform branch costs nothing measurable
 * next to the state traffic. */
#ifndef SF_SSD_STEP_CUH
#define SF_SSD_STEP_CUH

#include "common/cuda_common.h"

#include <string.h>
#include <type_traits>

struct ssd_step_args {
    void *state;      /* TS */
    const void *x, *dt, *B, *C, *z;
    void *out;
    const float *A, *D, *dt_bias;
    const int *idx;
    int64_t ss[4], xs[2], dts[2], Bs[2], Cs[2], zs[2], os[2];
    int64_t As, Ds[2], biass, idxs;
    int batch, H, P, N, hpg, nslots;
    int has_D, D_pc, has_z, has_bias, softplus, has_idx;
    float dt_min, dt_max;
    int dt32, B32, C32; /* dt, B, C in f32 (else in x's dtype) */
};

/* Element i of an input in x's dtype T, or in f32 when `f32` (dt, B, C). */
template <typename T>
static __device__ __forceinline__ float ssd_step_ld(const void *p, int64_t i, int f32) {
    if constexpr (std::is_same<T, float>::value) {
        (void)f32;
        return ((const float *)p)[i];
    } else {
        return f32 ? ((const float *)p)[i] : sf_elem<T>::to_f(((const T *)p)[i]);
    }
}

/* Four consecutive state elements (4-element aligned) as f32, and back
 * rounded to the state's dtype: one 16-byte access in f32, 8 bytes in
 * f16 / bf16. */
template <typename TS> struct ssd_state4 {
    static __device__ __forceinline__ float4 ld(const TS *p) {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        TS e[4];
        memcpy(e, &u, sizeof u);
        return make_float4(sf_elem<TS>::to_f(e[0]), sf_elem<TS>::to_f(e[1]), sf_elem<TS>::to_f(e[2]),
                           sf_elem<TS>::to_f(e[3]));
    }
    static __device__ __forceinline__ void st(TS *p, float4 v) {
        const TS e[4] = {sf_elem<TS>::from_f(v.x), sf_elem<TS>::from_f(v.y), sf_elem<TS>::from_f(v.z),
                         sf_elem<TS>::from_f(v.w)};
        uint2 u;
        memcpy(&u, e, sizeof u);
        *reinterpret_cast<uint2 *>(p) = u;
    }
};
template <> struct ssd_state4<float> {
    static __device__ __forceinline__ float4 ld(const float *p) { return *reinterpret_cast<const float4 *>(p); }
    static __device__ __forceinline__ void st(float *p, float4 v) { *reinterpret_cast<float4 *>(p) = v; }
};

template <typename T>
static __device__ __forceinline__ float ssd_step_out(const ssd_step_args &a, int h, int p,
                                                     float acc, float xv, const T *zr) {
    if (a.has_D) acc = fmaf(a.D_pc ? a.D[h * a.Ds[0] + (int64_t)p * a.Ds[1]] : a.D[h * a.Ds[0]],
                            xv, acc);
    if (a.has_z) {
        const float zv = sf_elem<T>::to_f(zr[p]);
        acc *= zv / (1.0f + expf(-zv));
    }
    return acc;
}

/* KV > 0: N <= 128 KV, state rows 4-element aligned with unit column stride.
 * KV == 0: any N and strides, one column per lane per 32. */
template <typename T, typename TS, int KV>
__global__ void __launch_bounds__(128) ssd_step_kernel(const ssd_step_args a) {
    const int h = (int)(blockIdx.x % a.H);
    const int i = (int)(blockIdx.x / a.H);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const T *x = (const T *)a.x + (int64_t)i * a.xs[0] + (int64_t)h * a.xs[1];
    T *out = (T *)a.out + (int64_t)i * a.os[0] + (int64_t)h * a.os[1];
    const T *zr = a.has_z ? (const T *)a.z + (int64_t)i * a.zs[0] + (int64_t)h * a.zs[1] : nullptr;
    const int64_t s = a.has_idx ? (int64_t)a.idx[(int64_t)i * a.idxs] : i;
    if (s < 0 || s >= a.nslots) { /* padding or out of range: zero output, state untouched */
        for (int p = tid; p < a.P; p += 128) out[p] = sf_elem<T>::from_f(0.0f);
        return;
    }
    float d = ssd_step_ld<T>(a.dt, (int64_t)i * a.dts[0] + (int64_t)h * a.dts[1], a.dt32);
    if (a.has_bias) d += a.dt_bias[h * a.biass];
    d = sf_dt_process(d, a.softplus, a.dt_min, a.dt_max);
    const float dA = expf(fminf(d * a.A[h * a.As], 0.0f));
    const int grp = h / a.hpg;
    const int64_t Bo = (int64_t)i * a.Bs[0] + (int64_t)grp * a.Bs[1];
    const int64_t Co = (int64_t)i * a.Cs[0] + (int64_t)grp * a.Cs[1];
    TS *st = (TS *)a.state + s * a.ss[0] + (int64_t)h * a.ss[1];

    if constexpr (KV > 0) {
        float4 Bv[KV], Cv[KV];
#pragma unroll
        for (int k = 0; k < KV; k++) {
            const int n = 4 * (lane + 32 * k);
            float bb[4], cc[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                bb[e] = n + e < a.N ? ssd_step_ld<T>(a.B, Bo + n + e, a.B32) * d : 0.0f;
                cc[e] = n + e < a.N ? ssd_step_ld<T>(a.C, Co + n + e, a.C32) : 0.0f;
            }
            Bv[k] = make_float4(bb[0], bb[1], bb[2], bb[3]);
            Cv[k] = make_float4(cc[0], cc[1], cc[2], cc[3]);
        }
        for (int pb = warp; pb < a.P; pb += 16) {
            float4 v[4][KV];
            float xv[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int p = pb + 4 * r;
                xv[r] = p < a.P ? sf_elem<T>::to_f(x[p]) : 0.0f;
#pragma unroll
                for (int k = 0; k < KV; k++) {
                    const int n = 4 * (lane + 32 * k);
                    v[r][k] = (p < a.P && n < a.N) ? ssd_state4<TS>::ld(st + (int64_t)p * a.ss[2] + n)
                                                   : make_float4(0.f, 0.f, 0.f, 0.f);
                }
            }
            float acc[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int p = pb + 4 * r;
                acc[r] = 0.0f;
#pragma unroll
                for (int k = 0; k < KV; k++) {
                    const int n = 4 * (lane + 32 * k);
                    float4 w = v[r][k];
                    w.x = fmaf(dA, w.x, xv[r] * Bv[k].x);
                    w.y = fmaf(dA, w.y, xv[r] * Bv[k].y);
                    w.z = fmaf(dA, w.z, xv[r] * Bv[k].z);
                    w.w = fmaf(dA, w.w, xv[r] * Bv[k].w);
                    if (p < a.P && n < a.N) ssd_state4<TS>::st(st + (int64_t)p * a.ss[2] + n, w);
                    acc[r] = fmaf(w.x, Cv[k].x, acc[r]);
                    acc[r] = fmaf(w.y, Cv[k].y, acc[r]);
                    acc[r] = fmaf(w.z, Cv[k].z, acc[r]);
                    acc[r] = fmaf(w.w, Cv[k].w, acc[r]);
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                for (int r = 0; r < 4; r++) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
            if (lane < 4) {
                float sel = acc[0], xs = xv[0];
#pragma unroll
                for (int r = 1; r < 4; r++) {
                    sel = lane == r ? acc[r] : sel;
                    xs = lane == r ? xv[r] : xs;
                }
                const int p = pb + 4 * lane;
                if (p < a.P) out[p] = sf_elem<T>::from_f(ssd_step_out<T>(a, h, p, sel, xs, zr));
            }
        }
    } else {
        for (int p = warp; p < a.P; p += 4) {
            const float xv = sf_elem<T>::to_f(x[p]);
            float acc = 0.0f;
            for (int n = lane; n < a.N; n += 32) {
                TS *e = st + (int64_t)p * a.ss[2] + (int64_t)n * a.ss[3];
                const float w =
                    fmaf(dA, sf_elem<TS>::to_f(*e), xv * (ssd_step_ld<T>(a.B, Bo + n, a.B32) * d));
                *e = sf_elem<TS>::from_f(w); /* out takes the unrounded value */
                acc = fmaf(w, ssd_step_ld<T>(a.C, Co + n, a.C32), acc);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (lane == 0) out[p] = sf_elem<T>::from_f(ssd_step_out<T>(a, h, p, acc, xv, zr));
        }
    }
}

#endif
