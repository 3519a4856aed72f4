/* bwd_fa2_dq.cuh - the deterministic mode's dQ pass of the FA2-scheme rows
 * (fa64, fa128): mma.sync m16n8k16, bf16/f16 operands, f32 accumulators.
 *
 * One CTA of NW warps per (query block of 16 NW rows, head, sequence); warp
 * w owns query rows 16w..16w+15 and their dQ in registers.  Q and dO of the
 * block stay in shared memory; the key blocks of FA2Q_BN keys of the band are
 * walked in key order (a fixed summation order: no atomics, bit-identical
 * results), K and V of the next block loading by cp.async (two stages) while
 * the current one is processed:
 *     S = Q K^T, dP = dO V^T        (16 queries x FA2Q_BN keys a warp; A by
 *                                    ldmatrix from Q, dO; B from K, V rows)
 *     P, dS as attn_bwd_fa2,  dQ += dS K  (dS from the accumulators, B by
 *                                    ldmatrix.trans from K)
 * It recomputes S and dP, the price of the fixed order.
 */
#ifndef SF_ATTN_BWD_FA2_DQ_CUH
#define SF_ATTN_BWD_FA2_DQ_CUH

#include "attn/bwd_fa2.cuh"

namespace sf_attn {

constexpr int FA2Q_BN = 64; /* keys per block */

template <int DM, int NW> struct Fa2DqSmem {
    static constexpr int BM = 16 * NW;
    static constexpr int LDR = DM + 8;
    static constexpr size_t bytes = ((size_t)2 * BM * LDR + (size_t)4 * FA2Q_BN * LDR) * 2;
};

template <typename T, int DM, int NW>
__global__ void __launch_bounds__(NW * 32, 1) attn_bwd_fa2_dq(const BwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using SM = Fa2DqSmem<DM, NW>;
    constexpr int NT = NW * 32, BM = SM::BM, LDR = SM::LDR, KD = DM / 16, ND = DM / 8, NK = FA2Q_BN / 8;
    using MMA = sf_mma16<T>;
    T *sQ = reinterpret_cast<T *>(smem_raw), *sdO = sQ + BM * LDR;
    T *sK0 = sdO + BM * LDR; /* stage s: K at sK0 + s * 2 * FA2Q_BN * LDR, V after it */

    /* the last query blocks first: under a causal mask they see the most keys */
    const int h = blockIdx.x, b = blockIdx.y, i0 = (int)(gridDim.z - 1 - blockIdx.z) * BM;
    int64_t q0, k0;
    int lq, lk;
    bwd_seq(p, b, q0, lq, k0, lk);
    if (i0 >= lq) return;
    const int nq = min(BM, lq - i0), d = p.d, kvh = h / p.heads_per_kv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int qr = 16 * warp;
    const float L2E = 1.4426950408889634f, sl2 = p.scale * L2E;
    const bool plain = p.softcap <= 0.f && !p.alibi;
    const float slope = bwd_slope(p, b, h);

    fa2_load<T, DM, BM, NT>(sQ, (const T *)p.q + (int64_t)b * p.q_sb + (q0 + i0) * p.q_sr + (int64_t)h * p.q_sh,
                            p.q_sr, nq, d, p.vec16);
    fa2_load<T, DM, BM, NT>(sdO, (const T *)p.dout + (int64_t)b * p.do_sb + (q0 + i0) * p.do_sr + (int64_t)h * p.do_sh,
                            p.do_sr, nq, d, p.vec16);
    /* lse (log2 units) and D of this thread's rows qr + g and qr + g + 8 */
    float lr[2], Dr[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int ql = qr + g + 8 * hr;
        const bool in = ql < nq;
        lr[hr] = in ? p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (q0 + i0 + ql) * p.l_sr] * L2E : -INFINITY;
        Dr[hr] = in ? p.dsum[(int64_t)h * p.rows_q + bwd_grow(p, b, q0, i0 + ql)] : 0.f;
    }
    int lo0, hi0, lo1, hi1;
    key_range(i0, lq, lk, p.wl, p.wr, lo0, hi0);
    key_range(i0 + nq - 1, lq, lk, p.wl, p.wr, lo1, hi1);
    const int jb0 = lo0 / FA2Q_BN, nkb = hi1 > lo0 ? (hi1 - jb0 * FA2Q_BN + FA2Q_BN - 1) / FA2Q_BN : 0;
    auto issue = [&](int it) {
        const int j0 = (jb0 + it) * FA2Q_BN, nk = min(FA2Q_BN, lk - j0);
        T *sk = sK0 + (it & 1) * 2 * FA2Q_BN * LDR;
        fa2_load<T, DM, FA2Q_BN, NT>(sk, (const T *)p.k + (int64_t)b * p.k_sb + (k0 + j0) * p.k_sr + (int64_t)kvh * p.k_sh,
                                     p.k_sr, nk, d, p.vec16);
        fa2_load<T, DM, FA2Q_BN, NT>(sk + FA2Q_BN * LDR,
                                     (const T *)p.v + (int64_t)b * p.v_sb + (k0 + j0) * p.v_sr + (int64_t)kvh * p.v_sh,
                                     p.v_sr, nk, d, p.vec16);
    };
    if (nkb > 0) issue(0);
    sf_cp_async_commit();

    float dq[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dq[n][e] = 0.f;

    for (int it = 0; it < nkb; it++) {
        __syncthreads(); /* stage (it + 1) & 1: the previous block's readers are done */
        if (it + 1 < nkb) issue(it + 1);
        sf_cp_async_commit();
        sf_cp_async_wait<1>();
        __syncthreads();
        const int j0 = (jb0 + it) * FA2Q_BN, nk = min(FA2Q_BN, lk - j0);
        const T *sK = sK0 + (it & 1) * 2 * FA2Q_BN * LDR, *sV = sK + FA2Q_BN * LDR;

        float s[NK][4], dp[NK][4];
#pragma unroll
        for (int n = 0; n < NK; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
        for (int kb = 0; kb < KD; kb++) {
            uint32_t aq[4], ao[4];
            fa2_ldsm_a<LDR>(aq, sQ, qr, 16 * kb, lane);
            fa2_ldsm_a<LDR>(ao, sdO, qr, 16 * kb, lane);
#pragma unroll
            for (int n = 0; n < NK; n += 2) {
                uint32_t bk[4], bv[4];
                fa2_ldsm_bn<LDR>(bk, sK, 8 * n, 16 * kb, lane);
                fa2_ldsm_bn<LDR>(bv, sV, 8 * n, 16 * kb, lane);
                MMA::run(s[n], aq, bk[0], bk[1]);
                MMA::run(s[n + 1], aq, bk[2], bk[3]);
                MMA::run(dp[n], ao, bv[0], bv[1]);
                MMA::run(dp[n + 1], ao, bv[2], bv[3]);
            }
        }
        /* dS (element e: query qr + g + 8 (e >> 1), key 8n + 2t + (e & 1)) */
        bool full = plain && nq == BM && nk == FA2Q_BN;
        if (full) {
            int a0, b0, a1, b1;
            key_range(i0, lq, lk, p.wl, p.wr, a0, b0);
            key_range(i0 + nq - 1, lq, lk, p.wl, p.wr, a1, b1);
            full = a1 <= j0 && b0 >= j0 + nk;
        }
        if (full) {
#pragma unroll
            for (int n = 0; n < NK; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hr = e >> 1;
                    const float P = sf_ex2(fmaf(s[n][e], sl2, -lr[hr]));
                    dp[n][e] = P * (dp[n][e] - Dr[hr]) * p.scale;
                }
        } else {
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
                            float P;
                            bwd_elem_grad(p, s[n][e], dp[n][e], Dr[hr], lr[hr], i, key, lq, lk, slope, P, dS);
                        }
                    }
                    dp[n][e] = dS;
                }
        }
        /* dQ += dS K */
#pragma unroll
        for (int kb = 0; kb < FA2Q_BN / 16; kb++) {
            uint32_t ad[4];
            ad[0] = MMA::pack(dp[2 * kb][0], dp[2 * kb][1]);
            ad[1] = MMA::pack(dp[2 * kb][2], dp[2 * kb][3]);
            ad[2] = MMA::pack(dp[2 * kb + 1][0], dp[2 * kb + 1][1]);
            ad[3] = MMA::pack(dp[2 * kb + 1][2], dp[2 * kb + 1][3]);
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                uint32_t bk[4];
                fa2_ldsm_b2<T, LDR>(bk, sK, 16 * kb, 8 * n, lane);
                MMA::run(dq[n], ad, bk[0], bk[1]);
                MMA::run(dq[n + 1], ad, bk[2], bk[3]);
            }
        }
    }
    sf_cp_async_wait<0>();
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
