/* bwd_mma.cuh - the dK/dV kernel of the attention backward on tensor cores
 * (mma.sync m16n8k16, bf16/f16 operands, f32 accumulators; sm_80+), head
 * dims up to DM = 64 or 128.
 *
 * One CTA of 4 warps per (key tile of 64, kv head, sequence); warp w owns
 * keys 16w..16w+15 of the tile and their dK, dV rows in registers.  For each
 * query head of the group and each query tile of 64 rows in the band:
 *     S^T  = K Q^T,  dP^T = V dO^T            (per warp: 16 keys x 64 queries)
 *     P^T  = exp(mod(scale S^T) - lse),  dS^T = P^T (dP^T - D) (1 - tanh^2) scale
 *     dV  += P^T dO,  dK += dS^T Q           (P^T, dS^T reused from the
 *                                             accumulators as A fragments)
 *     dQ   = dS K, added with atomicAdd to the f32 accumulator (fast mode;
 *            dS goes through shared memory, each warp then owns 16 query rows)
 * The products read their B operands as "n-major" rows: Q and dO for S^T and
 * dP^T, and transposed copies Q^T, dO^T, K^T (made while the tiles are
 * loaded) for dV, dK and dQ; every fragment is two 32-bit shared loads per
 * register pair, rows padded by 8 elements (4g + t: no bank conflicts).
 * P and dS are rounded to the operand type before their products, as in
 * FlashAttention-2.  Dims past d are zero in the tiles and never stored.
 * attn_bwd_dq_mma is the deterministic mode's dQ pass on the same fragments.
 * LD (configurations mmal64 / mmal128): the B operands of dV, dK and dQ by
 * ldmatrix.trans from the row-major tiles instead of the transposed copies.
 */
#ifndef SF_ATTN_BWD_MMA_CUH
#define SF_ATTN_BWD_MMA_CUH

#include "attn/bwd_simt.cuh"

namespace sf_attn {

constexpr int BWDM_T = 64;             /* keys and query rows per tile */
constexpr int BWDM_LDT = BWDM_T + 8;   /* row of a transposed tile     */

/* LD: B operands by ldmatrix.trans from the row-major tiles (no transposed
 * copies: 55 KB less shared memory at d 128, two CTAs an SM). */
template <int DM, bool LD> struct BwdMmaSmem {
    static constexpr int LDR = DM + 8; /* row of a row-major tile */
    static constexpr size_t elems = 4 * BWDM_T * LDR + (LD ? 0 : 3 * DM * BWDM_LDT) + BWDM_T * BWDM_LDT;
    static constexpr size_t bytes = elems * 2 + 2 * BWDM_T * sizeof(float);
};

/* n rows (of 64) of a tensor into the row-major tile X (stride LDR) and,
 * when Xt is given, its transpose Xt[c][r] (stride BWDM_LDT); rows past n
 * and dims past d are zero.  With p.vec16 (d % 8 == 0, every row start 16-
 * byte aligned) 8 elements a thread and load, lanes along rows: the 16-byte
 * row-major stores and the 2-byte transposed ones are free of bank conflicts
 * (rows LDR = DM + 8 elements apart, transposed rows 72). */
template <typename T, int DM>
__device__ __forceinline__ void bwdm_load(T *X, T *Xt, const T *base, int64_t sr, int n, int d, int vec16) {
    constexpr int LDR = DM + 8;
    if (vec16) {
        for (int idx = threadIdx.x; idx < BWDM_T * (DM / 8); idx += BWD_NT) {
            const int r = idx % BWDM_T, c = 8 * (idx / BWDM_T);
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r < n && c < d) v = *reinterpret_cast<const uint4 *>(base + (int64_t)r * sr + c);
            *reinterpret_cast<uint4 *>(X + r * LDR + c) = v;
            if (Xt) {
                const T *e = reinterpret_cast<const T *>(&v);
#pragma unroll
                for (int k = 0; k < 8; k++) Xt[(c + k) * BWDM_LDT + r] = e[k];
            }
        }
        return;
    }
    const T zero = sf_elem<T>::from_f(0.f);
    for (int idx = threadIdx.x; idx < BWDM_T * DM; idx += BWD_NT) {
        const int r = idx / DM, c = idx - r * DM;
        const T v = (r < n && c < d) ? base[(int64_t)r * sr + c] : zero;
        X[r * LDR + c] = v;
        if (Xt) Xt[c * BWDM_LDT + r] = v;
    }
}

template <typename T> __device__ __forceinline__ uint32_t bwdm_ld32(const T *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}

/* B fragments of n-tiles n0 / 8 and n0 / 8 + 1 for the k rows k0..k0+15 of a
 * row-major tile X[k][n] (stride LDR) by ldmatrix.x4.trans: lanes 8m..8m+7
 * address rows k0 + 8 (m & 1) + 0..7 at column n0 + 8 (m >> 1); b[0], b[1]
 * are the first n-tile's registers, b[2], b[3] the second's.  Rows LDR
 * elements apart (4 banks of offset each): no conflicts. */
template <typename T, int LDR>
__device__ __forceinline__ void bwdm_ldsm_b2(uint32_t b[4], const T *X, int k0, int n0, int lane) {
    const int m = lane >> 3, rr = lane & 7;
    sf_ldsm_x4_t(b, X + (k0 + rr + 8 * (m & 1)) * LDR + n0 + 8 * (m >> 1));
}

template <typename T, int DM, bool DQ, bool LD>
__global__ void __launch_bounds__(BWD_NT) attn_bwd_dkdv_mma(const BwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int LDR = DM + 8, KD = DM / 16, ND = DM / 8, NQ = BWDM_T / 8;
    using MMA = sf_mma16<T>;
    T *sK = reinterpret_cast<T *>(smem_raw), *sV = sK + BWDM_T * LDR, *sQ = sV + BWDM_T * LDR;
    constexpr int TT = LD ? 0 : DM * BWDM_LDT; /* a transposed copy, none with LD */
    T *sdO = sQ + BWDM_T * LDR, *sKt = sdO + BWDM_T * LDR, *sQt = sKt + TT;
    T *sdOt = sQt + TT, *sdS = sdOt + TT;
    if (LD) sKt = sQt = sdOt = nullptr;
    float *sL = reinterpret_cast<float *>(sdS + BWDM_T * BWDM_LDT), *sD = sL + BWDM_T;

    const int kvh = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * BWDM_T;
    int64_t q0, k0;
    int lq, lk;
    bwd_seq(p, b, q0, lq, k0, lk);
    if (j0 >= lk) return;
    const int nk = min(BWDM_T, lk - j0), d = p.d;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    bwdm_load<T, DM>(sK, sKt, (const T *)p.k + (int64_t)b * p.k_sb + (k0 + j0) * p.k_sr + (int64_t)kvh * p.k_sh,
                     p.k_sr, nk, d, p.vec16);
    bwdm_load<T, DM>(sV, (T *)nullptr,
                     (const T *)p.v + (int64_t)b * p.v_sb + (k0 + j0) * p.v_sr + (int64_t)kvh * p.v_sh, p.v_sr, nk,
                     d, p.vec16);
    float dk[ND][4], dv[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;
    const int kr = 16 * warp; /* this warp's first key row in the tile */

    for (int gh = 0; gh < p.heads_per_kv; gh++) {
        const int h = kvh * p.heads_per_kv + gh;
        const float slope = bwd_slope(p, b, h);
        for (int i0 = 0; i0 < lq; i0 += BWDM_T) {
            const int nq = min(BWDM_T, lq - i0);
            int lo0, hi0, lo1, hi1;
            key_range(i0, lq, lk, p.wl, p.wr, lo0, hi0);
            key_range(i0 + nq - 1, lq, lk, p.wl, p.wr, lo1, hi1);
            if (hi1 <= j0 || lo0 >= j0 + nk) continue; /* outside the band: uniform over the CTA */
            __syncthreads();                           /* the previous tile's readers are done */
            bwdm_load<T, DM>(sQ, sQt,
                             (const T *)p.q + (int64_t)b * p.q_sb + (q0 + i0) * p.q_sr + (int64_t)h * p.q_sh, p.q_sr,
                             nq, d, p.vec16);
            bwdm_load<T, DM>(sdO, sdOt,
                             (const T *)p.dout + (int64_t)b * p.do_sb + (q0 + i0) * p.do_sr + (int64_t)h * p.do_sh,
                             p.do_sr, nq, d, p.vec16);
            for (int r = threadIdx.x; r < BWDM_T; r += BWD_NT) {
                const bool in = r < nq;
                sL[r] = in ? p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (q0 + i0 + r) * p.l_sr] : -INFINITY;
                sD[r] = in ? p.dsum[(int64_t)h * p.rows_q + bwd_grow(p, b, q0, i0 + r)] : 0.f;
            }
            __syncthreads();

            /* S^T and dP^T: 16 keys x 64 queries per warp */
            float s[NQ][4], dp[NQ][4];
#pragma unroll
            for (int n = 0; n < NQ; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
            for (int kb = 0; kb < KD; kb++) {
                const int c0 = 16 * kb + 2 * t;
                uint32_t ak[4], av[4];
                ak[0] = bwdm_ld32(sK + (kr + g) * LDR + c0);
                ak[1] = bwdm_ld32(sK + (kr + g + 8) * LDR + c0);
                ak[2] = bwdm_ld32(sK + (kr + g) * LDR + c0 + 8);
                ak[3] = bwdm_ld32(sK + (kr + g + 8) * LDR + c0 + 8);
                av[0] = bwdm_ld32(sV + (kr + g) * LDR + c0);
                av[1] = bwdm_ld32(sV + (kr + g + 8) * LDR + c0);
                av[2] = bwdm_ld32(sV + (kr + g) * LDR + c0 + 8);
                av[3] = bwdm_ld32(sV + (kr + g + 8) * LDR + c0 + 8);
#pragma unroll
                for (int n = 0; n < NQ; n++) {
                    const T *qr = sQ + (8 * n + g) * LDR + c0, *orr = sdO + (8 * n + g) * LDR + c0;
                    MMA::run(s[n], ak, bwdm_ld32(qr), bwdm_ld32(qr + 8));
                    MMA::run(dp[n], av, bwdm_ld32(orr), bwdm_ld32(orr + 8));
                }
            }
            /* P^T and dS^T in place (element e: key kr + g + 8 (e >> 1), query 8n + 2t + (e & 1)) */
#pragma unroll
            for (int n = 0; n < NQ; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int kl = kr + g + 8 * (e >> 1), ql = 8 * n + 2 * t + (e & 1);
                    const int key = j0 + kl, i = i0 + ql;
                    float P = 0.f, dS = 0.f;
                    if (kl < nk && ql < nq) {
                        int lo, hi;
                        key_range(i, lq, lk, p.wl, p.wr, lo, hi);
                        const float l = sL[ql];
                        if (key >= lo && key < hi && l != -INFINITY) {
                            const float tt = s[n][e] * p.scale;
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
                            P = expf(sm - l);
                            dS = P * (dp[n][e] - sD[ql]) * dmod * p.scale;
                        }
                    }
                    s[n][e] = P;
                    dp[n][e] = dS;
                }
            /* dV += P^T dO, dK += dS^T Q: A from the accumulators, B from dO^T, Q^T */
#pragma unroll
            for (int kb = 0; kb < BWDM_T / 16; kb++) {
                uint32_t ap[4], ad[4];
                (void)ap, (void)ad;
                ap[0] = MMA::pack(s[2 * kb][0], s[2 * kb][1]);
                ap[1] = MMA::pack(s[2 * kb][2], s[2 * kb][3]);
                ap[2] = MMA::pack(s[2 * kb + 1][0], s[2 * kb + 1][1]);
                ap[3] = MMA::pack(s[2 * kb + 1][2], s[2 * kb + 1][3]);
                ad[0] = MMA::pack(dp[2 * kb][0], dp[2 * kb][1]);
                ad[1] = MMA::pack(dp[2 * kb][2], dp[2 * kb][3]);
                ad[2] = MMA::pack(dp[2 * kb + 1][0], dp[2 * kb + 1][1]);
                ad[3] = MMA::pack(dp[2 * kb + 1][2], dp[2 * kb + 1][3]);
                if constexpr (LD) {
#pragma unroll
                    for (int n = 0; n < ND; n += 2) {
                        uint32_t bo[4], bq[4];
                        bwdm_ldsm_b2<T, LDR>(bo, sdO, 16 * kb, 8 * n, lane);
                        bwdm_ldsm_b2<T, LDR>(bq, sQ, 16 * kb, 8 * n, lane);
                        MMA::run(dv[n], ap, bo[0], bo[1]);
                        MMA::run(dv[n + 1], ap, bo[2], bo[3]);
                        MMA::run(dk[n], ad, bq[0], bq[1]);
                        MMA::run(dk[n + 1], ad, bq[2], bq[3]);
                    }
                } else {
                    const int r0 = 16 * kb + 2 * t;
#pragma unroll
                    for (int n = 0; n < ND; n++) {
                        const T *orow = sdOt + (8 * n + g) * BWDM_LDT + r0, *qrow = sQt + (8 * n + g) * BWDM_LDT + r0;
                        MMA::run(dv[n], ap, bwdm_ld32(orow), bwdm_ld32(orow + 8));
                        MMA::run(dk[n], ad, bwdm_ld32(qrow), bwdm_ld32(qrow + 8));
                    }
                }
            }
            if (DQ) {
                /* dS to shared memory as dS[query][key], then dQ = dS K over the tile's keys */
#pragma unroll
                for (int n = 0; n < NQ; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sdS[(8 * n + 2 * t + (e & 1)) * BWDM_LDT + kr + g + 8 * (e >> 1)] = sf_elem<T>::from_f(dp[n][e]);
                __syncthreads();
                const int qr = 16 * warp; /* this warp's query rows of the dQ tile */
                uint32_t as[BWDM_T / 16][4];
#pragma unroll
                for (int kb = 0; kb < BWDM_T / 16; kb++) {
                    const int c0 = 16 * kb + 2 * t;
                    as[kb][0] = bwdm_ld32(sdS + (qr + g) * BWDM_LDT + c0);
                    as[kb][1] = bwdm_ld32(sdS + (qr + g + 8) * BWDM_LDT + c0);
                    as[kb][2] = bwdm_ld32(sdS + (qr + g) * BWDM_LDT + c0 + 8);
                    as[kb][3] = bwdm_ld32(sdS + (qr + g + 8) * BWDM_LDT + c0 + 8);
                }
                float *acc0 = p.dqacc + (bwd_grow(p, b, q0, i0 + qr + g) * p.nheads + h) * (int64_t)d;
                float *acc1 = acc0 + (int64_t)8 * p.nheads * d; /* row + 8: rows are consecutive here */
                const bool in0 = qr + g < nq, in1 = qr + g + 8 < nq;
#pragma unroll
                for (int n = 0; n < ND; n += 2) {
                    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
                    for (int kb = 0; kb < BWDM_T / 16; kb++) {
                        if constexpr (LD) {
                            uint32_t bk[4];
                            bwdm_ldsm_b2<T, LDR>(bk, sK, 16 * kb, 8 * n, lane);
                            MMA::run(c[0], as[kb], bk[0], bk[1]);
                            MMA::run(c[1], as[kb], bk[2], bk[3]);
                        } else {
#pragma unroll
                            for (int u = 0; u < 2; u++) {
                                const T *krow = sKt + (8 * (n + u) + g) * BWDM_LDT + 16 * kb + 2 * t;
                                MMA::run(c[u], as[kb], bwdm_ld32(krow), bwdm_ld32(krow + 8));
                            }
                        }
                    }
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        const int col = 8 * (n + u) + 2 * t;
                        if (col < d) {
                            if (in0 && c[u][0] != 0.f) atomicAdd(acc0 + col, c[u][0]);
                            if (in1 && c[u][2] != 0.f) atomicAdd(acc1 + col, c[u][2]);
                        }
                        if (col + 1 < d) {
                            if (in0 && c[u][1] != 0.f) atomicAdd(acc0 + col + 1, c[u][1]);
                            if (in1 && c[u][3] != 0.f) atomicAdd(acc1 + col + 1, c[u][3]);
                        }
                    }
                }
            }
        }
    }
    /* dK, dV rows kr + g and kr + g + 8 of the tile */
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int kl = kr + g + 8 * half;
        if (kl >= nk) continue;
        T *gk = (T *)p.dk + (int64_t)b * p.dk_sb + (k0 + j0 + kl) * p.dk_sr + (int64_t)kvh * p.dk_sh;
        T *gv = (T *)p.dv + (int64_t)b * p.dv_sb + (k0 + j0 + kl) * p.dv_sr + (int64_t)kvh * p.dv_sh;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int col = 8 * n + 2 * t;
            if (col < d) {
                gk[col] = sf_elem<T>::from_f(dk[n][2 * half]);
                gv[col] = sf_elem<T>::from_f(dv[n][2 * half]);
            }
            if (col + 1 < d) {
                gk[col + 1] = sf_elem<T>::from_f(dk[n][2 * half + 1]);
                gv[col + 1] = sf_elem<T>::from_f(dv[n][2 * half + 1]);
            }
        }
    }
#endif
}

/* Deterministic mode's dQ on tensor cores: one CTA of 4 warps per (query
 * tile of 64, head, sequence); warp w owns query rows 16w..16w+15 and their
 * dQ in registers, and walks the key tiles of the tile's band in key order
 * (a fixed summation order, no atomics):
 *     S = Q K^T, dP = dO V^T (16 queries x 64 keys per warp), P, dS as in
 *     attn_bwd_dkdv_mma, dQ += dS K (dS from the accumulators, K^T shared).
 * Shared: Q and dO of the tile (row-major), K, V and K^T of the key tile. */
template <int DM, bool LD> struct BwdMmaDqSmem {
    static constexpr int LDR = DM + 8;
    static constexpr size_t bytes = (size_t)(4 * BWDM_T * LDR + (LD ? 0 : DM * BWDM_LDT)) * 2;
};

template <typename T, int DM, bool LD>
__global__ void __launch_bounds__(BWD_NT) attn_bwd_dq_mma(const BwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int LDR = DM + 8, KD = DM / 16, ND = DM / 8, NK = BWDM_T / 8;
    using MMA = sf_mma16<T>;
    T *sQ = reinterpret_cast<T *>(smem_raw), *sdO = sQ + BWDM_T * LDR, *sK = sdO + BWDM_T * LDR;
    T *sV = sK + BWDM_T * LDR, *sKt = LD ? nullptr : sV + BWDM_T * LDR;

    const int h = blockIdx.y, b = blockIdx.z, i0 = blockIdx.x * BWDM_T;
    int64_t q0, k0;
    int lq, lk;
    bwd_seq(p, b, q0, lq, k0, lk);
    if (i0 >= lq) return;
    const int nq = min(BWDM_T, lq - i0), d = p.d, kvh = h / p.heads_per_kv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int qr = 16 * warp;
    const float slope = bwd_slope(p, b, h);
    bwdm_load<T, DM>(sQ, (T *)nullptr,
                     (const T *)p.q + (int64_t)b * p.q_sb + (q0 + i0) * p.q_sr + (int64_t)h * p.q_sh, p.q_sr, nq, d,
                     p.vec16);
    bwdm_load<T, DM>(sdO, (T *)nullptr,
                     (const T *)p.dout + (int64_t)b * p.do_sb + (q0 + i0) * p.do_sr + (int64_t)h * p.do_sh, p.do_sr,
                     nq, d, p.vec16);
    /* lse and D of this thread's rows qr + g and qr + g + 8 */
    float lr[2], Dr[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int ql = qr + g + 8 * hr;
        const bool in = ql < nq;
        lr[hr] = in ? p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (q0 + i0 + ql) * p.l_sr] : -INFINITY;
        Dr[hr] = in ? p.dsum[(int64_t)h * p.rows_q + bwd_grow(p, b, q0, i0 + ql)] : 0.f;
    }
    float dq[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dq[n][e] = 0.f;
    int lo0, hi0, lo1, hi1;
    key_range(i0, lq, lk, p.wl, p.wr, lo0, hi0);
    key_range(i0 + nq - 1, lq, lk, p.wl, p.wr, lo1, hi1);
    for (int j0 = lo0 / BWDM_T * BWDM_T; j0 < hi1; j0 += BWDM_T) {
        const int nk = min(BWDM_T, lk - j0);
        __syncthreads(); /* the previous key tile's readers are done */
        bwdm_load<T, DM>(sK, sKt,
                         (const T *)p.k + (int64_t)b * p.k_sb + (k0 + j0) * p.k_sr + (int64_t)kvh * p.k_sh, p.k_sr,
                         nk, d, p.vec16);
        bwdm_load<T, DM>(sV, (T *)nullptr,
                         (const T *)p.v + (int64_t)b * p.v_sb + (k0 + j0) * p.v_sr + (int64_t)kvh * p.v_sh, p.v_sr,
                         nk, d, p.vec16);
        __syncthreads();
        float s[NK][4], dp[NK][4];
#pragma unroll
        for (int n = 0; n < NK; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
        for (int kb = 0; kb < KD; kb++) {
            const int c0 = 16 * kb + 2 * t;
            uint32_t aq[4], ao[4];
            aq[0] = bwdm_ld32(sQ + (qr + g) * LDR + c0);
            aq[1] = bwdm_ld32(sQ + (qr + g + 8) * LDR + c0);
            aq[2] = bwdm_ld32(sQ + (qr + g) * LDR + c0 + 8);
            aq[3] = bwdm_ld32(sQ + (qr + g + 8) * LDR + c0 + 8);
            ao[0] = bwdm_ld32(sdO + (qr + g) * LDR + c0);
            ao[1] = bwdm_ld32(sdO + (qr + g + 8) * LDR + c0);
            ao[2] = bwdm_ld32(sdO + (qr + g) * LDR + c0 + 8);
            ao[3] = bwdm_ld32(sdO + (qr + g + 8) * LDR + c0 + 8);
#pragma unroll
            for (int n = 0; n < NK; n++) {
                const T *kr = sK + (8 * n + g) * LDR + c0, *vr = sV + (8 * n + g) * LDR + c0;
                MMA::run(s[n], aq, bwdm_ld32(kr), bwdm_ld32(kr + 8));
                MMA::run(dp[n], ao, bwdm_ld32(vr), bwdm_ld32(vr + 8));
            }
        }
        /* dS (element e: query qr + g + 8 (e >> 1), key 8n + 2t + (e & 1)) */
#pragma unroll
        for (int n = 0; n < NK; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hr = e >> 1, ql = qr + g + 8 * hr, kl = 8 * n + 2 * t + (e & 1);
                const int key = j0 + kl, i = i0 + ql;
                float dS = 0.f;
                if (kl < nk && ql < nq) {
                    int lo, hi;
                    key_range(i, lq, lk, p.wl, p.wr, lo, hi);
                    if (key >= lo && key < hi && lr[hr] != -INFINITY) {
                        const float tt = s[n][e] * p.scale;
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
                        const float P = expf(sm - lr[hr]);
                        dS = P * (dp[n][e] - Dr[hr]) * dmod * p.scale;
                    }
                }
                dp[n][e] = dS;
            }
        /* dQ += dS K */
#pragma unroll
        for (int kb = 0; kb < BWDM_T / 16; kb++) {
            uint32_t ad[4];
            ad[0] = MMA::pack(dp[2 * kb][0], dp[2 * kb][1]);
            ad[1] = MMA::pack(dp[2 * kb][2], dp[2 * kb][3]);
            ad[2] = MMA::pack(dp[2 * kb + 1][0], dp[2 * kb + 1][1]);
            ad[3] = MMA::pack(dp[2 * kb + 1][2], dp[2 * kb + 1][3]);
            if constexpr (LD) {
#pragma unroll
                for (int n = 0; n < ND; n += 2) {
                    uint32_t bk[4];
                    bwdm_ldsm_b2<T, LDR>(bk, sK, 16 * kb, 8 * n, lane);
                    MMA::run(dq[n], ad, bk[0], bk[1]);
                    MMA::run(dq[n + 1], ad, bk[2], bk[3]);
                }
            } else {
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    const T *krow = sKt + (8 * n + g) * BWDM_LDT + 16 * kb + 2 * t;
                    MMA::run(dq[n], ad, bwdm_ld32(krow), bwdm_ld32(krow + 8));
                }
            }
        }
    }
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int ql = qr + g + 8 * hr;
        if (ql >= nq) continue;
        T *gq = (T *)p.dq + (int64_t)b * p.dq_sb + (q0 + i0 + ql) * p.dq_sr + (int64_t)h * p.dq_sh;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int col = 8 * n + 2 * t;
            if (col < d) gq[col] = sf_elem<T>::from_f(dq[n][2 * hr]);
            if (col + 1 < d) gq[col + 1] = sf_elem<T>::from_f(dq[n][2 * hr + 1]);
        }
    }
#endif
}

} /* namespace sf_attn */

#endif
