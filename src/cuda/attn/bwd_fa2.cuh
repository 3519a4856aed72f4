/* bwd_fa2.cuh - the dK/dV (and fast-mode dQ) kernel of the attention
 * backward in the FlashAttention-2 scheme on mma.sync m16n8k16 (bf16/f16
 * operands, f32 accumulators; sm_80+), head dims up to DM = 64 or 128.
 *
 * One CTA of NW warps per (kv head, sequence, key block of BN = 16 NW keys);
 * the grid's slowest dimension is the key block, so under a causal mask the
 * blocks that see the most query rows start first.  K and V of the block
 * stay in shared memory; warp w owns keys 16w..16w+15 and their dK, dV rows
 * in registers.  The CTA walks the group's query heads and, for each, the
 * query blocks of BM rows (64, or 32: fewer registers) that see the key
 * block (a contiguous range), with Q, dO, lse and D of the next block
 * loading (cp.async, two stages) while the current one is processed:
 *     S^T  = K Q^T,  dP^T = V dO^T        (per warp 16 keys x BM queries; A
 *                                          by ldmatrix from K, V; B by
 *                                          ldmatrix from the Q, dO rows)
 *     P^T  = exp(mod(scale S^T) - lse),  dS^T = P^T (dP^T - D) dmod scale
 *     dV  += P^T dO,  dK += dS^T Q       (P^T, dS^T reused from the
 *                                          accumulators as A fragments, B by
 *                                          ldmatrix.trans from dO, Q)
 *     dQ   = dS K  (DQ, fast mode)        dS^T through shared memory as
 *                                          dS[query][key]; each warp takes
 *                                          16 rows x DM / (NW / (BM / 16)) cols
 *                                          and adds them to the f32
 *                                          accumulator (red.global.add.v2.f32
 *                                          on sm_90, atomicAdd before)
 * Tiles without a masked element (whole blocks inside the band, no softcap
 * or ALiBi) take the short path P = 2^(s scale log2 e - lse log2 e); the
 * others evaluate the mask, softcap and ALiBi per element as the reference.
 * Shared rows are padded by 8 elements (16 bytes): ldmatrix's 8 row
 * addresses of a matrix land in 8 distinct 16-byte bank groups.
 * P and dS are rounded to the operand type before their products, as in
 * FlashAttention-2.  Without p.vec16 (d % 8 or a row start not 16-byte
 * aligned) the tiles are loaded element by element instead of by cp.async.
 */
#ifndef SF_ATTN_BWD_FA2_CUH
#define SF_ATTN_BWD_FA2_CUH

#include "attn/bwd_simt.cuh"

namespace sf_attn {

template <int DM, int NW, int BM, bool DQ> struct Fa2Smem {
    static constexpr int BN = 16 * NW;
    static constexpr int LDR = DM + 8;  /* row of K, V, Q, dO   */
    static constexpr int LDS = BN + 8;  /* row of dS[query][key] */
    static constexpr size_t elems = (size_t)2 * BN * LDR + (size_t)4 * BM * LDR + (DQ ? (size_t)BM * LDS : 0);
    static constexpr size_t bytes = elems * 2 + (size_t)4 * BM * sizeof(float);
};

/* n rows (of NR) of a tensor into the tile X (row stride LDR), rows past n
 * and dims past d zero; cp.async (16 bytes) with vec16, else plain loads. */
template <typename T, int DM, int NR, int NT>
__device__ __forceinline__ void fa2_load(T *X, const T *base, int64_t sr, int n, int d, int vec16) {
    constexpr int LDR = DM + 8;
    if (vec16) {
        for (int idx = threadIdx.x; idx < NR * (DM / 8); idx += NT) {
            const int r = idx / (DM / 8), c = 8 * (idx % (DM / 8));
            const bool in = r < n && c < d;
            sf_cp_async16_zfill(X + r * LDR + c, in ? (const void *)(base + (int64_t)r * sr + c) : (const void *)base,
                                in ? 16 : 0);
        }
        return;
    }
    const T zero = sf_elem<T>::from_f(0.f);
    for (int idx = threadIdx.x; idx < NR * DM; idx += NT) {
        const int r = idx / DM, c = idx - r * DM;
        X[r * LDR + c] = (r < n && c < d) ? base[(int64_t)r * sr + c] : zero;
    }
}

/* B fragments of n-tiles n0 / 8 and n0 / 8 + 1 for the k rows k0..k0+15 of a
 * row-major tile X[k][n] (stride LDR) by ldmatrix.x4.trans: lanes 8m..8m+7
 * address rows k0 + 8 (m & 1) + 0..7 at column n0 + 8 (m >> 1); b[0], b[1]
 * are the first n-tile's registers, b[2], b[3] the second's. */
template <typename T, int LDR>
__device__ __forceinline__ void fa2_ldsm_b2(uint32_t b[4], const T *X, int k0, int n0, int lane) {
    const int m = lane >> 3, rr = lane & 7;
    sf_ldsm_x4_t(b, X + (k0 + rr + 8 * (m & 1)) * LDR + n0 + 8 * (m >> 1));
}

/* A fragment (16 x 16) at rows r0.., cols c0.. of a row-major tile. */
template <int LD, typename T>
__device__ __forceinline__ void fa2_ldsm_a(uint32_t a[4], const T *X, int r0, int c0, int lane) {
    const int m = lane >> 3, rr = lane & 7;
    sf_ldsm_x4(a, X + (r0 + rr + 8 * (m & 1)) * LD + c0 + 8 * (m >> 1));
}

/* B fragments of n-tiles n0 / 8 and n0 / 8 + 1, k = c0..c0+15, from a tile
 * stored n-major (X[n][k], rows are n): b[0], b[1] the first, b[2], b[3] the
 * second. */
template <int LD, typename T>
__device__ __forceinline__ void fa2_ldsm_bn(uint32_t b[4], const T *X, int n0, int c0, int lane) {
    const int m = lane >> 3, rr = lane & 7;
    sf_ldsm_x4(b, X + (n0 + rr + 8 * (m >> 1)) * LD + c0 + 8 * (m & 1));
}

/* Four 8 x 8 blocks of 16-bit elements, held in the accumulator fragment
 * layout (r[i]: row l / 4, columns 2 (l % 4).. of block i), stored
 * transposed: lane l gives the address of row l % 8 of stored block l / 8
 * (sm_90). */
template <typename T> __device__ __forceinline__ void fa2_stsm_t(T *p, const uint32_t r[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(sf_smem_u32(p)),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
#else
    (void)p, (void)r;
#endif
}

/* Adds (a, b) to the two consecutive floats at p (p 8-byte aligned). */
__device__ __forceinline__ void fa2_red2(float *p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

/* The first and one past the last query block (of BM rows) whose rows see
 * a key in [j0, j0 + nk): key_range's bounds grow with the row, so the
 * blocks that do form one contiguous range. */
template <int BM>
__device__ __forceinline__ void fa2_qblocks(int lq, int lk, int wl, int wr, int j0, int nk, int &ib0, int &ib1) {
    const int nb = (lq + BM - 1) / BM;
    ib0 = nb;
    ib1 = nb;
    for (int ib = 0; ib < nb; ib++) {
        const int i0 = ib * BM, nq = min(BM, lq - i0);
        int lo0, hi0, lo1, hi1;
        key_range(i0, lq, lk, wl, wr, lo0, hi0);
        key_range(i0 + nq - 1, lq, lk, wl, wr, lo1, hi1);
        const bool in = !(hi1 <= j0 || lo0 >= j0 + nk);
        if (in && ib0 == nb) ib0 = ib;
        if (!in && ib0 != nb) {
            ib1 = ib;
            break;
        }
    }
}

/* Whether every element of the (query block i0.. nq rows, key block j0.. nk
 * keys) tile is unmasked and plain (no softcap, no ALiBi: the caller's
 * loop-invariant); such a tile takes the short path P = 2^(s sl2 - lse2).
 * (Written as one conditional update: in the wgmma kernel an early return
 * cost 44 bytes of spills.) */
template <int BM, int BN>
__device__ __forceinline__ bool fa2_tile_full(const BwdParams &p, bool plain, int i0, int nq, int j0, int nk, int lq,
                                              int lk) {
    bool full = plain && nq == BM && nk == BN;
    if (full) {
        int lo0, hi0, lo1, hi1;
        key_range(i0, lq, lk, p.wl, p.wr, lo0, hi0);
        key_range(i0 + nq - 1, lq, lk, p.wl, p.wr, lo1, hi1);
        full = lo1 <= j0 && hi0 >= j0 + nk; /* lo and hi grow with the row */
    }
    return full;
}

/* The per-row statistic a backward kernel keeps for slot x (0 .. 2 BM - 1)
 * of the query block at row i0 of head h: x < BM the lse of row i0 + x in
 * log2 units (-inf past the sequence's lq rows), else D of row i0 + x - BM
 * (0 past them). */
template <int BM>
__device__ __forceinline__ float bwd_row_stat(const BwdParams &p, int b, int64_t q0, int h, int i0, int lq, int x) {
    const int r = x & (BM - 1);
    if (i0 + r >= lq) return x < BM ? -INFINITY : 0.f;
    if (x < BM) return p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (q0 + i0 + r) * p.l_sr] * 1.4426950408889634f;
    return p.dsum[(int64_t)h * p.rows_q + bwd_grow(p, b, q0, i0 + r)];
}

/* P^T and dS^T in place, element by element (mask, softcap, ALiBi), of a
 * warp's 16-key fragment: element e of n-tile n is key kr + g + 8 (e >> 1),
 * query 8 n + 2 t + (e & 1) of the (i0, j0) tile; sL the rows' lse (log2
 * units), sD their D. */
template <int NQ>
__device__ __forceinline__ void fa2_masked_pds(const BwdParams &p, float (&s)[NQ][4], float (&dp)[NQ][4], const float *sL,
                                               const float *sD, int b, int h, int i0, int nq, int j0, int nk, int lq,
                                               int lk, int kr, int g, int t) {
    const float slope = bwd_slope(p, b, h);
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
                    bwd_elem_grad(p, s[n][e], dp[n][e], sD[ql], l, i, key, lq, lk, slope, P, dS);
                }
            }
            s[n][e] = P;
            dp[n][e] = dS;
        }
}

/* dK, dV rows kr + g and kr + g + 8 of key block j0 from a warp's m16
 * fragments of columns c0.. (any d, any dk / dv strides): the FA2 and wg
 * kernels' epilogue */
template <typename T, int ND>
__device__ __forceinline__ void fa2_store_dkdv(const BwdParams &p, const float (&dk)[ND][4], const float (&dv)[ND][4],
                                               int b, int kvh, int64_t k0, int j0, int nk, int kr, int g, int t,
                                               int c0 = 0) {
    const int d = p.d;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int kl = kr + g + 8 * half;
        if (kl >= nk) continue;
        T *gk = (T *)p.dk + (int64_t)b * p.dk_sb + (k0 + j0 + kl) * p.dk_sr + (int64_t)kvh * p.dk_sh;
        T *gv = (T *)p.dv + (int64_t)b * p.dv_sb + (k0 + j0 + kl) * p.dv_sr + (int64_t)kvh * p.dv_sh;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int col = c0 + 8 * n + 2 * t;
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
}

template <typename T, int DM, int NW, int BM, int MB, bool DQ>
__global__ void __launch_bounds__(NW * 32, MB) attn_bwd_fa2(const BwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using SM = Fa2Smem<DM, NW, BM, DQ>;
    constexpr int NT = NW * 32, BN = SM::BN, LDR = SM::LDR, LDS = SM::LDS;
    constexpr int KD = DM / 16, ND = DM / 8, NQ = BM / 8;
    constexpr int WR = BM / 16, WC = NW / WR, NDQ = ND / WC; /* dQ: row, column groups; n-tiles a warp */
    static_assert(NW % WR == 0 && ND % WC == 0 && NDQ % 2 == 0 && (BM & (BM - 1)) == 0, "warp layout");
    using MMA = sf_mma16<T>;
    T *sK = reinterpret_cast<T *>(smem_raw), *sV = sK + BN * LDR;
    T *sQ0 = sV + BN * LDR;                        /* stage s: sQ0 + s * 2 * BM * LDR, dO after Q */
    T *sdS = sQ0 + 4 * BM * LDR;                   /* DQ only */
    float *sStat = reinterpret_cast<float *>(sdS + (DQ ? BM * LDS : 0)); /* stage s: lse2 then D */

    const int kvh = blockIdx.x, b = blockIdx.y, j0 = blockIdx.z * BN;
    int64_t q0, k0;
    int lq, lk;
    bwd_seq(p, b, q0, lq, k0, lk);
    if (j0 >= lk) return;
    const int nk = min(BN, lk - j0), d = p.d;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int kr = 16 * warp;
    int ib0, ib1;
    fa2_qblocks<BM>(lq, lk, p.wl, p.wr, j0, nk, ib0, ib1);
    const int nbq = ib1 - ib0, items = nbq * p.heads_per_kv;
    const float L2E = 1.4426950408889634f, sl2 = p.scale * L2E;
    const bool plain = p.softcap <= 0.f && !p.alibi;

    fa2_load<T, DM, BN, NT>(sK, (const T *)p.k + (int64_t)b * p.k_sb + (k0 + j0) * p.k_sr + (int64_t)kvh * p.k_sh,
                            p.k_sr, nk, d, p.vec16);
    fa2_load<T, DM, BN, NT>(sV, (const T *)p.v + (int64_t)b * p.v_sb + (k0 + j0) * p.v_sr + (int64_t)kvh * p.v_sh,
                            p.v_sr, nk, d, p.vec16);

    /* item it: head kvh * hpk + it / nbq, query block ib0 + it % nbq */
    auto issue = [&](int it) {
        const int h = kvh * p.heads_per_kv + it / nbq, i0 = (ib0 + it % nbq) * BM, nq = min(BM, lq - i0);
        T *sq = sQ0 + (it & 1) * 2 * BM * LDR;
        fa2_load<T, DM, BM, NT>(sq, (const T *)p.q + (int64_t)b * p.q_sb + (q0 + i0) * p.q_sr + (int64_t)h * p.q_sh,
                                    p.q_sr, nq, d, p.vec16);
        fa2_load<T, DM, BM, NT>(sq + BM * LDR,
                                    (const T *)p.dout + (int64_t)b * p.do_sb + (q0 + i0) * p.do_sr +
                                        (int64_t)h * p.do_sh,
                                    p.do_sr, nq, d, p.vec16);
    };
    /* lse (log2 units; threads < BM) or D (threads BM..2 BM - 1) of item it's row threadIdx.x % BM */
    auto stat = [&](int it) -> float {
        return bwd_row_stat<BM>(p, b, q0, kvh * p.heads_per_kv + it / nbq, (ib0 + it % nbq) * BM, lq, threadIdx.x);
    };
    float st_next = 0.f;
    if (items > 0) {
        issue(0);
        if (threadIdx.x < 2 * BM) sStat[threadIdx.x] = stat(0);
    }
    sf_cp_async_commit();

    float dk[ND][4], dv[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;

    for (int it = 0; it < items; it++) {
        __syncthreads(); /* stage (it + 1) & 1 and sdS: the previous item's readers are done */
        if (it + 1 < items) {
            issue(it + 1);
            if (threadIdx.x < 2 * BM) st_next = stat(it + 1);
        }
        sf_cp_async_commit();
        sf_cp_async_wait<1>(); /* item it (and K, V) landed */
        __syncthreads();

        const int gh = it / nbq, h = kvh * p.heads_per_kv + gh, i0 = (ib0 + it % nbq) * BM;
        const int nq = min(BM, lq - i0);
        const T *sQ = sQ0 + (it & 1) * 2 * BM * LDR, *sdO = sQ + BM * LDR;
        const float *sL = sStat + (it & 1) * 2 * BM, *sD = sL + BM;

        /* S^T and dP^T: 16 keys x BM queries per warp */
        float s[NQ][4], dp[NQ][4];
#pragma unroll
        for (int n = 0; n < NQ; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
        for (int kb = 0; kb < KD; kb++) {
            uint32_t ak[4], av[4];
            fa2_ldsm_a<LDR>(ak, sK, kr, 16 * kb, lane);
            fa2_ldsm_a<LDR>(av, sV, kr, 16 * kb, lane);
#pragma unroll
            for (int n = 0; n < NQ; n += 2) {
                uint32_t bq[4], bo[4];
                fa2_ldsm_bn<LDR>(bq, sQ, 8 * n, 16 * kb, lane);
                fa2_ldsm_bn<LDR>(bo, sdO, 8 * n, 16 * kb, lane);
                MMA::run(s[n], ak, bq[0], bq[1]);
                MMA::run(s[n + 1], ak, bq[2], bq[3]);
                MMA::run(dp[n], av, bo[0], bo[1]);
                MMA::run(dp[n + 1], av, bo[2], bo[3]);
            }
        }

        /* P^T and dS^T in place (element e: key kr + g + 8 (e >> 1), query 8n + 2t + (e & 1)) */
        const bool full = fa2_tile_full<BM, BN>(p, plain, i0, nq, j0, nk, lq, lk);
        if (full) {
#pragma unroll
            for (int n = 0; n < NQ; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int ql = 8 * n + 2 * t + (e & 1);
                    const float P = sf_ex2(fmaf(s[n][e], sl2, -sL[ql]));
                    s[n][e] = P;
                    dp[n][e] = P * (dp[n][e] - sD[ql]) * p.scale;
                }
        } else {
            fa2_masked_pds<NQ>(p, s, dp, sL, sD, b, h, i0, nq, j0, nk, lq, lk, kr, g, t);
        }

        /* dV += P^T dO, dK += dS^T Q */
#pragma unroll
        for (int kb = 0; kb < BM / 16; kb++) {
            uint32_t ap[4], ad[4];
            ap[0] = MMA::pack(s[2 * kb][0], s[2 * kb][1]);
            ap[1] = MMA::pack(s[2 * kb][2], s[2 * kb][3]);
            ap[2] = MMA::pack(s[2 * kb + 1][0], s[2 * kb + 1][1]);
            ap[3] = MMA::pack(s[2 * kb + 1][2], s[2 * kb + 1][3]);
            ad[0] = MMA::pack(dp[2 * kb][0], dp[2 * kb][1]);
            ad[1] = MMA::pack(dp[2 * kb][2], dp[2 * kb][3]);
            ad[2] = MMA::pack(dp[2 * kb + 1][0], dp[2 * kb + 1][1]);
            ad[3] = MMA::pack(dp[2 * kb + 1][2], dp[2 * kb + 1][3]);
            if (DQ) {
                /* dS^T to shared memory as dS[query][key]: register r of ad is the 8 x 8
                 * block of keys kr + 8 (r & 1).., queries 16 kb + 8 (r >> 1).. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                {
                    const int m = lane >> 3, rr = lane & 7;
                    fa2_stsm_t(sdS + (16 * kb + rr + 8 * (m >> 1)) * LDS + kr + 8 * (m & 1), ad);
                }
#else
                uint16_t *s16 = reinterpret_cast<uint16_t *>(sdS);
                const int q = 16 * kb + 2 * t, kk = kr + g;
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int qq = q + 8 * (r >> 1), kc = kk + 8 * (r & 1);
                    s16[qq * LDS + kc] = (uint16_t)(ad[r] & 0xffffu);
                    s16[(qq + 1) * LDS + kc] = (uint16_t)(ad[r] >> 16);
                }
#endif
            }
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                uint32_t bo[4], bq[4];
                fa2_ldsm_b2<T, LDR>(bo, sdO, 16 * kb, 8 * n, lane);
                fa2_ldsm_b2<T, LDR>(bq, sQ, 16 * kb, 8 * n, lane);
                MMA::run(dv[n], ap, bo[0], bo[1]);
                MMA::run(dv[n + 1], ap, bo[2], bo[3]);
                MMA::run(dk[n], ad, bq[0], bq[1]);
                MMA::run(dk[n + 1], ad, bq[2], bq[3]);
            }
        }

        if (DQ) {
            __syncthreads(); /* dS complete */
            const int qr = 16 * (warp % WR), cb = (warp / WR) * NDQ; /* rows, first n-tile of this warp */
            float c[NDQ][4];
#pragma unroll
            for (int n = 0; n < NDQ; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) c[n][e] = 0.f;
#pragma unroll
            for (int kb = 0; kb < BN / 16; kb++) {
                uint32_t as[4];
                fa2_ldsm_a<LDS>(as, sdS, qr, 16 * kb, lane);
#pragma unroll
                for (int n = 0; n < NDQ; n += 2) {
                    uint32_t bk[4];
                    fa2_ldsm_b2<T, LDR>(bk, sK, 16 * kb, 8 * (cb + n), lane);
                    MMA::run(c[n], as, bk[0], bk[1]);
                    MMA::run(c[n + 1], as, bk[2], bk[3]);
                }
            }
            float *acc0 = p.dqacc + (bwd_grow(p, b, q0, i0 + qr + g) * p.nheads + h) * (int64_t)d;
            float *acc1 = acc0 + (int64_t)8 * p.nheads * d; /* row + 8: rows are consecutive here */
            const bool in0 = qr + g < nq, in1 = qr + g + 8 < nq;
#pragma unroll
            for (int n = 0; n < NDQ; n++) {
                const int col = 8 * (cb + n) + 2 * t;
                if (col + 1 < d) { /* d even: 8-byte aligned pairs */
                    if ((d & 1) == 0) {
                        if (in0) fa2_red2(acc0 + col, c[n][0], c[n][1]);
                        if (in1) fa2_red2(acc1 + col, c[n][2], c[n][3]);
                    } else {
                        if (in0) atomicAdd(acc0 + col, c[n][0]), atomicAdd(acc0 + col + 1, c[n][1]);
                        if (in1) atomicAdd(acc1 + col, c[n][2]), atomicAdd(acc1 + col + 1, c[n][3]);
                    }
                } else if (col < d) {
                    if (in0) atomicAdd(acc0 + col, c[n][0]);
                    if (in1) atomicAdd(acc1 + col, c[n][2]);
                }
            }
        }
        if (it + 1 < items && threadIdx.x < 2 * BM) sStat[((it + 1) & 1) * 2 * BM + threadIdx.x] = st_next;
    }
    sf_cp_async_wait<0>();

    fa2_store_dkdv<T, ND>(p, dk, dv, b, kvh, k0, j0, nk, kr, g, t);
#endif
}

/* The FA2 rows' preprocess with 16-byte rows (d % 8 == 0; o and dout rows
 * 16-byte aligned): D = rowsum(dO * O) and, with ZERO, the (row, head)'s dQ
 * accumulator row zeroed (no separate memset).  A group of G lanes (a power
 * of two >= d / 8) per (row, head), 8 elements a lane, reduced by shuffles. */
template <typename T, int G, bool ZERO>
__global__ void __launch_bounds__(256) attn_bwd_fa2_pre(const BwdParams p) {
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G;
    const int c = 8 * (int)(threadIdx.x % G);
    const bool live = w < p.rows_q * p.nheads;
    float s = 0.f;
    int64_t g = 0;
    int h = 0;
    if (live) {
        g = w / p.nheads;
        h = (int)(w - g * p.nheads);
        int64_t b = 0, i = g;
        if (!p.varlen) {
            b = g / p.lq;
            i = g - b * p.lq;
        }
        if (c < p.d) {
            const uint4 ov = *reinterpret_cast<const uint4 *>((const T *)p.o + b * p.o_sb + i * p.o_sr +
                                                              (int64_t)h * p.o_sh + c);
            const uint4 gv = *reinterpret_cast<const uint4 *>((const T *)p.dout + b * p.do_sb + i * p.do_sr +
                                                              (int64_t)h * p.do_sh + c);
            const T *oe = reinterpret_cast<const T *>(&ov), *ge = reinterpret_cast<const T *>(&gv);
#pragma unroll
            for (int k = 0; k < 8; k++) s = fmaf(sf_elem<T>::to_f(oe[k]), sf_elem<T>::to_f(ge[k]), s);
            if (ZERO) {
                float4 *a = reinterpret_cast<float4 *>(p.dqacc + w * p.d + c);
                a[0] = make_float4(0.f, 0.f, 0.f, 0.f);
                a[1] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
    }
#pragma unroll
    for (int m = G / 2; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
    if (live && c == 0) p.dsum[(int64_t)h * p.rows_q + g] = s;
}

/* The fast mode's postprocess with 16-byte dq rows: the f32 accumulator to
 * dq, 8 elements (two float4 loads, one 16-byte store) a thread. */
template <typename T>
__global__ void __launch_bounds__(256) attn_bwd_fa2_dq_out(const BwdParams p) {
    const int cpr = p.d / 8; /* chunks a (row, head) */
    const int64_t n = p.rows_q * p.nheads * cpr;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t w = x / cpr, g = w / p.nheads;
        const int h = (int)(w - g * p.nheads), c = 8 * (int)(x - w * cpr);
        int64_t b = 0, i = g;
        if (!p.varlen) {
            b = g / p.lq;
            i = g - b * p.lq;
        }
        const float4 *a = reinterpret_cast<const float4 *>(p.dqacc + w * p.d + c);
        const float4 u = a[0], v = a[1];
        uint4 r;
        r.x = sf_mma16<T>::pack(u.x, u.y);
        r.y = sf_mma16<T>::pack(u.z, u.w);
        r.z = sf_mma16<T>::pack(v.x, v.y);
        r.w = sf_mma16<T>::pack(v.z, v.w);
        *reinterpret_cast<uint4 *>((T *)p.dq + b * p.dq_sb + i * p.dq_sr + (int64_t)h * p.dq_sh + c) = r;
    }
}

} /* namespace sf_attn */

#endif
