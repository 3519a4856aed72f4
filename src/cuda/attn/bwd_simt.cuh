/* bwd_simt.cuh - the attention backward's kernels, FlashAttention-2
 * structure on plain f32 FMAs (every sm_80+ GPU, every head dim to 256):
 *
 *   attn_bwd_pre      D = rowsum(dO * O) per (row, head), f32, one warp each
 *   attn_bwd_dkdv     one CTA per (key tile of 32, kv head, sequence): K, V
 *                     of the tile in shared memory (f32), dK and dV in
 *                     registers; loops over the group's query heads and the
 *                     query tiles of 32 rows that see the tile, recomputing
 *                     P = exp(s - lse) and dS = P (dP - D) (1 - tanh^2) scale;
 *                     with DQ, adds the tile's dQ partial dS K to the f32
 *                     accumulator with atomicAdd (fast mode)
 *   attn_bwd_dq       deterministic mode: one CTA per (query tile, head,
 *                     sequence) recomputes dS over the key tiles of its band
 *                     in key order and writes dQ itself (no atomics, a fixed
 *                     summation order, at the price of recomputing S and dP)
 *   attn_bwd_dq_out   fast mode: the f32 accumulator converted to dq
 *
 * Shared tiles are f32 rows padded to DM + 1 floats: a warp reads one row
 * of Q or dO (broadcast) against 32 rows of K or V (odd stride: 32 banks).
 * Thread t owns key (or query) row t / 4 and dims t % 4 + 4 e of the tile's
 * dK/dV (or dQ) accumulators, DM / 4 of each in registers.  These kernels
 * are the correctness baseline of the backward; the tensor-core mainloop
 * (mma.sync m16n8k16 / wgmma) is to replace the two products per tile.
 */
#ifndef SF_ATTN_BWD_SIMT_CUH
#define SF_ATTN_BWD_SIMT_CUH

#include "attn/bwd_params.h"

namespace sf_attn {

constexpr int BWD_T = 32;   /* query rows and keys per tile */
constexpr int BWD_NT = 128; /* threads per CTA              */
constexpr int BWD_SLD = BWD_T + 1;

/* Shared memory of a DM kernel, in floats: Q, dO, K, V tiles, P and dS,
 * the tile's lse and D. */
template <int DM> struct BwdSmem {
    static constexpr int LD = DM + 1;
    static constexpr int floats = 4 * BWD_T * LD + 2 * BWD_T * BWD_SLD + 2 * BWD_T;
    static constexpr size_t bytes = (size_t)floats * sizeof(float);
};

/* Global row of the f32 workspaces (D, dQ accumulator). */
__device__ __forceinline__ int64_t bwd_grow(const BwdParams &p, int b, int64_t q0, int i) {
    return p.varlen ? q0 + i : (int64_t)b * p.lq + i;
}

/* n rows (of 32) of a tensor into the f32 tile s (row stride LD), rows past
 * n zero; base points at the first row's head. */
template <typename T, int LD>
__device__ __forceinline__ void bwd_load_rows(float *s, const T *base, int64_t sr, int n, int d) {
    for (int idx = threadIdx.x; idx < BWD_T * d; idx += BWD_NT) {
        const int r = idx / d, c = idx - r * d;
        s[r * LD + c] = r < n ? sf_elem<T>::to_f(base[(int64_t)r * sr + c]) : 0.f;
    }
}

/* P and dS (scale folded in) of query rows i0 + r (r < nq) against keys
 * j0 + j (j < nk) into sP, sdS; zero where masked or outside. */
template <int DM>
__device__ __forceinline__ void bwd_tile_scores(const BwdParams &p, const float *sQ, const float *sdO,
                                                const float *sK, const float *sV, const float *sL,
                                                const float *sD, float *sP, float *sdS, int i0, int nq, int j0,
                                                int nk, int lq, int lk, float slope) {
    constexpr int LD = DM + 1;
    const int j = threadIdx.x & 31;
    for (int r = threadIdx.x >> 5; r < BWD_T; r += BWD_NT / 32) {
        const float *qi = sQ + r * LD, *oi = sdO + r * LD, *kj = sK + j * LD, *vj = sV + j * LD;
        float s = 0.f, dp = 0.f;
        for (int c = 0; c < p.d; c++) {
            s = fmaf(qi[c], kj[c], s);
            dp = fmaf(oi[c], vj[c], dp);
        }
        float P = 0.f, dS = 0.f;
        const int i = i0 + r, key = j0 + j;
        if (r < nq && j < nk) {
            int lo, hi;
            key_range(i, lq, lk, p.wl, p.wr, lo, hi);
            const float l = sL[r];
            if (key >= lo && key < hi && l != -INFINITY) {
                const float t = s * p.scale;
                float sm = t, dmod = 1.f;
                if (p.softcap > 0.f) {
                    const float th = tanhf(t / p.softcap);
                    sm = p.softcap * th;
                    dmod = 1.f - th * th;
                }
                if (p.alibi) {
                    const int64_t dist = (int64_t)i + lk - lq - key;
                    sm -= slope * (float)(dist < 0 ? -dist : dist);
                }
                P = expf(sm - l);
                dS = P * (dp - sD[r]) * dmod * p.scale;
            }
        }
        sP[r * BWD_SLD + j] = P;
        sdS[r * BWD_SLD + j] = dS;
    }
}

/* lse and D of query rows i0.. (nq of them) of head h into sL, sD. */
__device__ __forceinline__ void bwd_load_stats(const BwdParams &p, float *sL, float *sD, int b, int h, int64_t q0,
                                               int i0, int nq) {
    for (int r = threadIdx.x; r < BWD_T; r += BWD_NT) {
        const bool in = r < nq;
        sL[r] = in ? p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (q0 + i0 + r) * p.l_sr] : -INFINITY;
        sD[r] = in ? p.dsum[(int64_t)h * p.rows_q + bwd_grow(p, b, q0, i0 + r)] : 0.f;
    }
}

__device__ __forceinline__ float bwd_slope(const BwdParams &p, int b, int h) {
    return p.alibi ? p.alibi[(int64_t)b * p.alibi_sb + (int64_t)h * p.alibi_sh] : 0.f;
}

/* P and dS of an element inside the mask (the tensor-core kernels' masked
 * path): unscaled score s of row i and key `key`, the row's lse in log2
 * units and D, dP; softcap and ALiBi as the forward. */
__device__ __forceinline__ void bwd_elem_grad(const BwdParams &p, float s, float dp, float Dq, float lse2, int i,
                                              int key, int lq, int lk, float slope, float &P, float &dS) {
    const float tt = s * p.scale;
    float sm = tt, dmod = 1.f;
    if (p.softcap > 0.f) {
        const float th = tanhf(tt / p.softcap);
        sm = p.softcap * th;
        dmod = 1.f - th * th;
    }
    if (p.alibi) {
        const int64_t dist = (int64_t)i + lk - lq - key;
        sm -= slope * (float)(dist < 0 ? -dist : dist);
    }
    P = exp2f(sm * 1.4426950408889634f - lse2);
    dS = P * (dp - Dq) * dmod * p.scale;
}

template <typename T>
__global__ void __launch_bounds__(256) attn_bwd_pre(const BwdParams p) {
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= p.rows_q * p.nheads) return;
    const int64_t g = w / p.nheads;
    const int h = (int)(w - g * p.nheads);
    int64_t b = 0, i = g;
    if (!p.varlen) {
        b = g / p.lq;
        i = g - b * p.lq;
    }
    const T *o = (const T *)p.o + b * p.o_sb + i * p.o_sr + (int64_t)h * p.o_sh;
    const T *g_ = (const T *)p.dout + b * p.do_sb + i * p.do_sr + (int64_t)h * p.do_sh;
    float s = 0.f;
    for (int c = lane; c < p.d; c += 32) s = fmaf(sf_elem<T>::to_f(o[c]), sf_elem<T>::to_f(g_[c]), s);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
    if (lane == 0) p.dsum[(int64_t)h * p.rows_q + g] = s;
}

template <typename T, int DM, bool DQ>
__global__ void __launch_bounds__(BWD_NT) attn_bwd_dkdv(const BwdParams p) {
    extern __shared__ float smem[];
    constexpr int LD = DM + 1, E = DM / 4;
    float *sQ = smem, *sdO = sQ + BWD_T * LD, *sK = sdO + BWD_T * LD, *sV = sK + BWD_T * LD;
    float *sP = sV + BWD_T * LD, *sdS = sP + BWD_T * BWD_SLD, *sL = sdS + BWD_T * BWD_SLD, *sD = sL + BWD_T;
    const int kvh = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * BWD_T;
    int64_t q0, k0;
    int lq, lk;
    bwd_seq(p, b, q0, lq, k0, lk);
    if (j0 >= lk) return;
    const int nk = min(BWD_T, lk - j0), d = p.d;
    bwd_load_rows<T, LD>(sK, (const T *)p.k + (int64_t)b * p.k_sb + (k0 + j0) * p.k_sr + (int64_t)kvh * p.k_sh,
                         p.k_sr, nk, d);
    bwd_load_rows<T, LD>(sV, (const T *)p.v + (int64_t)b * p.v_sb + (k0 + j0) * p.v_sr + (int64_t)kvh * p.v_sh,
                         p.v_sr, nk, d);
    const int rr = threadIdx.x >> 2, cq = threadIdx.x & 3;
    float dk[E], dv[E];
#pragma unroll
    for (int e = 0; e < E; e++) dk[e] = dv[e] = 0.f;

    for (int g = 0; g < p.heads_per_kv; g++) {
        const int h = kvh * p.heads_per_kv + g;
        const float slope = bwd_slope(p, b, h);
        for (int i0 = 0; i0 < lq; i0 += BWD_T) {
            const int nq = min(BWD_T, lq - i0);
            int lo0, hi0, lo1, hi1;
            key_range(i0, lq, lk, p.wl, p.wr, lo0, hi0);
            key_range(i0 + nq - 1, lq, lk, p.wl, p.wr, lo1, hi1);
            if (hi1 <= j0 || lo0 >= j0 + nk) continue; /* outside the band: uniform over the CTA */
            __syncthreads(); /* the previous tile's readers are done */
            bwd_load_rows<T, LD>(sQ, (const T *)p.q + (int64_t)b * p.q_sb + (q0 + i0) * p.q_sr + (int64_t)h * p.q_sh,
                                 p.q_sr, nq, d);
            bwd_load_rows<T, LD>(sdO,
                                 (const T *)p.dout + (int64_t)b * p.do_sb + (q0 + i0) * p.do_sr + (int64_t)h * p.do_sh,
                                 p.do_sr, nq, d);
            bwd_load_stats(p, sL, sD, b, h, q0, i0, nq);
            __syncthreads();
            bwd_tile_scores<DM>(p, sQ, sdO, sK, sV, sL, sD, sP, sdS, i0, nq, j0, nk, lq, lk, slope);
            __syncthreads();
            for (int r = 0; r < BWD_T; r++) {
                const float pv = sP[r * BWD_SLD + rr], ds = sdS[r * BWD_SLD + rr];
#pragma unroll
                for (int e = 0; e < E; e++) {
                    const int c = cq + 4 * e;
                    if (c < d) {
                        dv[e] = fmaf(pv, sdO[r * LD + c], dv[e]);
                        dk[e] = fmaf(ds, sQ[r * LD + c], dk[e]);
                    }
                }
            }
            if (DQ && rr < nq) {
                float *acc = p.dqacc + (bwd_grow(p, b, q0, i0 + rr) * p.nheads + h) * (int64_t)d;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    const int c = cq + 4 * e;
                    if (c < d) {
                        float a = 0.f;
                        for (int j = 0; j < nk; j++) a = fmaf(sdS[rr * BWD_SLD + j], sK[j * LD + c], a);
                        if (a != 0.f) atomicAdd(acc + c, a);
                    }
                }
            }
        }
    }
    if (rr < nk) {
        T *gk = (T *)p.dk + (int64_t)b * p.dk_sb + (k0 + j0 + rr) * p.dk_sr + (int64_t)kvh * p.dk_sh;
        T *gv = (T *)p.dv + (int64_t)b * p.dv_sb + (k0 + j0 + rr) * p.dv_sr + (int64_t)kvh * p.dv_sh;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int c = cq + 4 * e;
            if (c < d) {
                gk[c] = sf_elem<T>::from_f(dk[e]);
                gv[c] = sf_elem<T>::from_f(dv[e]);
            }
        }
    }
}

template <typename T, int DM>
__global__ void __launch_bounds__(BWD_NT) attn_bwd_dq(const BwdParams p) {
    extern __shared__ float smem[];
    constexpr int LD = DM + 1, E = DM / 4;
    float *sQ = smem, *sdO = sQ + BWD_T * LD, *sK = sdO + BWD_T * LD, *sV = sK + BWD_T * LD;
    float *sP = sV + BWD_T * LD, *sdS = sP + BWD_T * BWD_SLD, *sL = sdS + BWD_T * BWD_SLD, *sD = sL + BWD_T;
    const int h = blockIdx.y, b = blockIdx.z, i0 = blockIdx.x * BWD_T;
    int64_t q0, k0;
    int lq, lk;
    bwd_seq(p, b, q0, lq, k0, lk);
    if (i0 >= lq) return;
    const int nq = min(BWD_T, lq - i0), d = p.d, kvh = h / p.heads_per_kv;
    const float slope = bwd_slope(p, b, h);
    bwd_load_rows<T, LD>(sQ, (const T *)p.q + (int64_t)b * p.q_sb + (q0 + i0) * p.q_sr + (int64_t)h * p.q_sh, p.q_sr,
                         nq, d);
    bwd_load_rows<T, LD>(sdO, (const T *)p.dout + (int64_t)b * p.do_sb + (q0 + i0) * p.do_sr + (int64_t)h * p.do_sh,
                         p.do_sr, nq, d);
    bwd_load_stats(p, sL, sD, b, h, q0, i0, nq);
    const int rr = threadIdx.x >> 2, cq = threadIdx.x & 3;
    float dq[E];
#pragma unroll
    for (int e = 0; e < E; e++) dq[e] = 0.f;
    int lo0, hi0, lo1, hi1;
    key_range(i0, lq, lk, p.wl, p.wr, lo0, hi0);
    key_range(i0 + nq - 1, lq, lk, p.wl, p.wr, lo1, hi1);
    for (int j0 = lo0 / BWD_T * BWD_T; j0 < hi1; j0 += BWD_T) {
        const int nk = min(BWD_T, lk - j0);
        __syncthreads();
        bwd_load_rows<T, LD>(sK, (const T *)p.k + (int64_t)b * p.k_sb + (k0 + j0) * p.k_sr + (int64_t)kvh * p.k_sh,
                             p.k_sr, nk, d);
        bwd_load_rows<T, LD>(sV, (const T *)p.v + (int64_t)b * p.v_sb + (k0 + j0) * p.v_sr + (int64_t)kvh * p.v_sh,
                             p.v_sr, nk, d);
        __syncthreads();
        bwd_tile_scores<DM>(p, sQ, sdO, sK, sV, sL, sD, sP, sdS, i0, nq, j0, nk, lq, lk, slope);
        __syncthreads();
        for (int j = 0; j < nk; j++) {
            const float ds = sdS[rr * BWD_SLD + j];
#pragma unroll
            for (int e = 0; e < E; e++) {
                const int c = cq + 4 * e;
                if (c < d) dq[e] = fmaf(ds, sK[j * LD + c], dq[e]);
            }
        }
    }
    if (rr < nq) {
        T *gq = (T *)p.dq + (int64_t)b * p.dq_sb + (q0 + i0 + rr) * p.dq_sr + (int64_t)h * p.dq_sh;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int c = cq + 4 * e;
            if (c < d) gq[c] = sf_elem<T>::from_f(dq[e]);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(256) attn_bwd_dq_out(const BwdParams p) {
    const int64_t n = p.rows_q * p.nheads * p.d;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t g = x / ((int64_t)p.nheads * p.d), rem = x - g * p.nheads * p.d;
        const int h = (int)(rem / p.d), c = (int)(rem - (int64_t)h * p.d);
        int64_t b = 0, i = g;
        if (!p.varlen) {
            b = g / p.lq;
            i = g - b * p.lq;
        }
        ((T *)p.dq)[b * p.dq_sb + i * p.dq_sr + (int64_t)h * p.dq_sh + c] = sf_elem<T>::from_f(p.dqacc[x]);
    }
}

} /* namespace sf_attn */

#endif
