/* bwd_wg256.cuh - the dK/dV/dQ kernel of the attention backward on Hopper
 * wgmma (sm_90a) for head dims 129..256 (D = 256; 16-byte rows, p.vec16).
 *
 * The scheme of attn_bwd_wg (bwd_wg.cuh: a CTA per (kv head, sequence, key
 * block), K and V kept in shared memory, the group's query heads and query
 * blocks walked with the next item's Q, dO, lse and D loading by cp.async
 * meanwhile), re-partitioned because a key block's dK and dV at D 256 fill
 * half the register file even at 64 keys (64 x 256 x 2 f32 = 128 KB): key
 * blocks of BN = 64, query blocks of BM = 64, two warpgroups, each owning
 * half of the columns (128 wg..) of all 64 keys' dK and dV (m64n128
 * accumulators, 128 registers a thread):
 *     S^T  = K Q^T,  dP^T = V dO^T    ss m64n32k16: warpgroup wg takes the
 *                                     queries 32 wg.. of the block
 *     P^T, dS^T in the accumulators     as the other kernels (same rounding)
 *     -> shared: P^T, dS^T as [key][query] (stmatrix), dS as [query][key]
 *        (stmatrix.trans); one barrier publishes both warpgroups' halves
 *     dV  += P^T dO, dK += dS^T Q       sst m64n128k16 (A from the P^T / dS^T
 *                                       tiles, B = the warpgroup's dO / Q
 *                                       columns, MN-major)
 *     dQ   = dS K                       sst m64n128k16 (the warpgroup's
 *                                       columns of K, MN-major)
 * The dQ partial (64 queries x the warpgroup's 128 columns, in registers)
 * goes into the f32 accumulator (wg_acc_tile's layout, so attn_bwd_wg_dq_out
 * converts it) by red.global.add.v4.f32 from the fragments, one float4 a
 * lane and n-tile: shared memory has no room left for 64 KB of staged
 * partials (K, V, two stages of Q and dO: 192 KB).  DET: the key blocks that
 * add to a (head, query block) take turns in key order on p.sem as in
 * attn_bwd_wg, one count a key block: the CTA's first thread waits for its
 * turn while the products run, a barrier, every thread's adds, a barrier,
 * then the first thread's fence and release.
 */
#ifndef SF_ATTN_BWD_WG256_CUH
#define SF_ATTN_BWD_WG256_CUH

#include "attn/bwd_wg.cuh"

namespace sf_attn {

struct Wg256Smem {
    static constexpr int D = 256, BN = 64, BM = 64, NT = 256;
    static constexpr int KB = BN * D * 2; /* K or V tile, bytes     */
    static constexpr int QB = BM * D * 2; /* Q or dO tile           */
    static constexpr int TB = BM * BN * 2; /* P^T, dS^T or dS tile  */
    /* K, V, two stages of (Q, dO), P^T, dS^T, dS, two stages of (lse2, D) */
    static constexpr int OFF_V = KB, OFF_Q = 2 * KB, OFF_PT = OFF_Q + 4 * QB, OFF_DST = OFF_PT + TB;
    static constexpr int OFF_DS = OFF_DST + TB, OFF_ST = OFF_DS + TB;
    /* + 1 KiB to align the base to 1024 */
    static constexpr size_t bytes = (size_t)OFF_ST + 4 * BM * sizeof(float) + 1024;
    static_assert(bytes <= 227 * 1024, "over the opt-in shared memory of sm_90");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace wgb256 {

constexpr int BN = Wg256Smem::BN, BM = Wg256Smem::BM, D = Wg256Smem::D;

/* S^T = K Q^T and dP^T = V dO^T for the warpgroup's 32 queries (rows 32 wg..
 * of the Q / dO tiles): two commit groups */
template <typename T>
__device__ __forceinline__ void issue_sdp(float (&s)[4][4], float (&dp)[4][4], uint32_t sK, uint32_t sV, uint32_t sQ,
                                          uint32_t sdO, int wg) {
    using sf_wg::wg_desc;
    sf_wg::wg_fence();
    /* acc = A B^T over d, A the 64 keys' rows, B the warpgroup's 32 rows: S^T (K, Q), dP^T (V, dO) */
    auto product = [&](float *acc, uint32_t sA, uint32_t sB) {
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint32_t aoff = (kk >> 2) * (BN * 128) + (kk & 3) * 32;
            const uint32_t boff = (kk >> 2) * (BM * 128) + wg * (32 * 128) + (kk & 3) * 32;
            sf_wg::Wg<T, 32>::ss(acc, wg_desc(sA + aoff, 16, 1024), wg_desc(sB + boff, 16, 1024), kk > 0);
        }
        sf_wg::wg_commit();
    };
    product(&s[0][0], sK, sQ);
    product(&dp[0][0], sV, sdO);
}

/* The warp's P^T and dS^T (keys kr.. kr + 15, the warpgroup's queries 32 wg..)
 * rounded to T into the 64 x 64 tiles sPT, sdST ([key][query]) and sdS
 * ([query][key]), 128-byte rows with the 16-byte chunks swizzled by row % 8.
 * Register r of the packed 16-query step kk is the 8 x 8 block of keys
 * kr + 8 (r & 1).., queries 32 wg + 16 kk + 8 (r >> 1)..; stmatrix lane l
 * addresses row l % 8 of block l / 8.  Ends with the async-proxy fence (the
 * tiles are wgmma operands next). */
template <typename T>
__device__ __forceinline__ void store_pds(const float (&s)[4][4], const float (&dp)[4][4], uint32_t sPT, uint32_t sdST,
                                          uint32_t sdS, int wg, int kr, int lane) {
    using MMA = sf_mma16<T>;
    const int m = lane >> 3, rr = lane & 7;
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
        const uint32_t p0 = MMA::pack(s[2 * kk][0], s[2 * kk][1]), p1 = MMA::pack(s[2 * kk][2], s[2 * kk][3]);
        const uint32_t p2 = MMA::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), p3 = MMA::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const uint32_t d0 = MMA::pack(dp[2 * kk][0], dp[2 * kk][1]), d1 = MMA::pack(dp[2 * kk][2], dp[2 * kk][3]);
        const uint32_t d2 = MMA::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
        const uint32_t d3 = MMA::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
        /* [key][query]: lane's row key, chunk (query / 8) */
        const int key = kr + 8 * (m & 1) + rr, qc = 4 * wg + 2 * kk + (m >> 1);
        const uint32_t o = (uint32_t)(key * 128 + (((qc ^ key) & 7) << 4));
        sf_wg::stmatrix_x4(sPT + o, p0, p1, p2, p3);
        sf_wg::stmatrix_x4(sdST + o, d0, d1, d2, d3);
        /* [query][key]: lane's row query, chunk (key / 8) */
        const int q = 32 * wg + 16 * kk + 8 * (m >> 1) + rr, kc = (kr >> 3) + (m & 1);
        sf_wg::stmatrix_x4_t(sdS + (uint32_t)(q * 128 + (((kc ^ q) & 7) << 4)), d0, d1, d2, d3);
    }
    sf_wg::fence_async_smem();
}

/* dQ = dS K, then dV += P^T dO and dK += dS^T Q, on the warpgroup's 128
 * columns (column blocks 2 wg, 2 wg + 1 of the K / dO / Q tiles): two commit
 * groups, dQ's first, so its adds can go out while dV and dK run */
template <typename T>
__device__ __forceinline__ void issue_dkdvdq(float (&dk)[16][4], float (&dv)[16][4], float (&c)[16][4], uint32_t sPT,
                                             uint32_t sdST, uint32_t sdS, uint32_t sQ, uint32_t sdO, uint32_t sK,
                                             int wg) {
    using sf_wg::wg_desc;
    sf_wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
        sf_wg::Wg<T, 128>::sst(&c[0][0], wg_desc(sdS + kk * 32, 16, 1024),
                               wg_desc(sK + 2 * wg * (BN * 128) + kk * 2048, BN * 128, 1024), kk > 0);
    sf_wg::wg_commit();
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        const uint32_t bq = 2 * wg * (BM * 128) + kk * 2048;
        sf_wg::Wg<T, 128>::sst(&dv[0][0], wg_desc(sPT + kk * 32, 16, 1024), wg_desc(sdO + bq, BM * 128, 1024), 1);
        sf_wg::Wg<T, 128>::sst(&dk[0][0], wg_desc(sdST + kk * 32, 16, 1024), wg_desc(sQ + bq, BM * 128, 1024), 1);
    }
    sf_wg::wg_commit();
}

/* The warpgroup's dQ partial into accumulator tile acc (wg_acc_tile's
 * layout: 64-column parts 2 wg, 2 wg + 1; the lane's float4 of n-tile n at
 * ((warp % 4) 8 + n) 32 + lane of its part) */
__device__ __forceinline__ void add_dq(float *acc, const float (&c)[16][4], int wg, int warp, int lane) {
    float *base = acc + 2 * wg * (BM * 64) + 4 * (((warp & 3) * 8) * 32 + lane);
#pragma unroll
    for (int n = 0; n < 16; n++)
        sf_wg::red_add_v4(base + (n >> 3) * (BM * 64) + 4 * 32 * (n & 7), c[n][0], c[n][1], c[n][2], c[n][3]);
}

} /* namespace wgb256 */
#endif

template <typename T, bool DET>
__global__ void __launch_bounds__(256, 1) attn_bwd_wg256(const BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using SM = Wg256Smem;
    constexpr int BN = SM::BN, BM = SM::BM, NT = SM::NT, D = SM::D;
    using sf_wg::fence_async_smem;
    using sf_wg::load_tile_sw_rs;
    using sf_wg::reg_fence;
    using sf_wg::wg_wait;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sraw = sf_smem_u32(smem_raw);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    const uint32_t sK = sbase, sV = sbase + SM::OFF_V, sQ0 = sbase + SM::OFF_Q;
    const uint32_t sPT = sbase + SM::OFF_PT, sdST = sbase + SM::OFF_DST, sdS = sbase + SM::OFF_DS;
    float *sStat = reinterpret_cast<float *>(smem_raw + (sbase - sraw) + SM::OFF_ST); /* stage s: lse2, then D */

    wgb::Place<BN, BM> pl;
    if (!pl.init(p)) return;
    const int d8 = p.d >> 3;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2, g = lane >> 2, t = lane & 3;
    const int kr = 16 * (warp & 3); /* the warp's first key in the block (every warpgroup holds all 64) */
    const bool plain = p.softcap <= 0.f && !p.alibi;

    /* row-stepped tile loads (a thread keeps one 16-byte column chunk): +7% at
     * L 16k over the index arithmetic per copy */
    load_tile_sw_rs<BN, D, NT>(sK, (const T *)p.k + (int64_t)pl.b * p.k_sb + (pl.k0 + pl.j0) * p.k_sr + (int64_t)pl.kvh * p.k_sh,
                               p.k_sr, pl.nk, d8, tid);
    load_tile_sw_rs<BN, D, NT>(sV, (const T *)p.v + (int64_t)pl.b * p.v_sb + (pl.k0 + pl.j0) * p.v_sr + (int64_t)pl.kvh * p.v_sh,
                               p.v_sr, pl.nk, d8, tid);

    /* item it's Q and dO tiles into stage it % 2 */
    auto issue = [&](int it) { pl.template load_item<T, D, NT>(p, sQ0 + (it & 1) * 2 * SM::QB, it, d8, tid); };
    float st_next = 0.f;
    if (pl.items > 0) {
        issue(0);
        if (tid < 2 * BM) sStat[tid] = pl.stat(p, 0, tid);
    }
    sf_cp_async_commit();

    float dk[16][4], dv[16][4];
#pragma unroll
    for (int n = 0; n < 16; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;

    for (int it = 0; it < pl.items; it++) {
        /* one barrier an item: item it (and K, V) landed and visible, and item
         * it - 1's readers of the other stage and of the P / dS tiles done, so
         * item it + 1's loads go out after it (+1-4% over a barrier before the
         * loads and one after their wait) */
        sf_cp_async_wait<0>();
        fence_async_smem();
        __syncthreads();

        const int h = pl.head(p, it), i0 = pl.row(it);
        const int nq = min(BM, pl.lq - i0);
        const uint32_t sQ = sQ0 + (it & 1) * 2 * SM::QB, sdO = sQ + SM::QB;
        const float *sL = sStat + (it & 1) * 2 * BM + 32 * wg, *sD = sL + BM;

        /* this warpgroup's 32 queries */
        const int iw = i0 + 32 * wg, nw = nq - 32 * wg;
        float s[4][4], dp[4][4];
        wgb256::issue_sdp<T>(s, dp, sK, sV, sQ, sdO, wg);
        /* item it + 1's loads issued while S^T and dP^T run */
        if (it + 1 < pl.items) {
            issue(it + 1);
            if (tid < 2 * BM) st_next = pl.stat(p, it + 1, tid);
        }
        sf_cp_async_commit();
        wgb::p_ds(p, s, dp, sL, sD, nw == 32 && fa2_tile_full<32, BN>(p, plain, iw, nw, pl.j0, pl.nk, pl.lq, pl.lk), pl.b, h, iw, nw,
                  pl.j0, pl.nk, pl.lq, pl.lk, kr, g, t);
        wgb256::store_pds<T>(s, dp, sPT, sdST, sdS, wg, kr, lane);
        sf_wg::named_sync(1, 256); /* both warpgroups' P^T, dS^T and dS */

        float c[16][4]; /* dQ: 64 queries x this warpgroup's 128 columns */
        wgb256::issue_dkdvdq<T>(dk, dv, c, sPT, sdST, sdS, sQ, sdO, sK, wg);
        /* DET: this (head, query block)'s counter counts the key blocks done, in
         * order; the CTA's first thread waits for this key block's turn while
         * the products run */
        int *const sem = DET ? p.sem + ((int64_t)h * p.batch + pl.b) * p.sem_nqb + i0 / BM : nullptr;
        if (DET && tid == 0) {
            int lo, hi;
            key_range(i0, pl.lq, pl.lk, p.wl, p.wr, lo, hi);
            const int ahead = pl.zb - lo / BN;
            while (sf_wg::ld_acquire_gpu(sem) < ahead) {
            }
        }
        wg_wait<1>(); /* dQ */
        reg_fence(c);
        /* rows past nq hold zeros (their dS is 0) */
        float *acc = p.dqacc + wg_acc_tile(p, pl.b, pl.q0, h, i0 / BM) * (BM * D);
        if constexpr (DET) {
            sf_wg::named_sync(2, 256); /* our turn */
            wgb256::add_dq(acc, c, wg, warp, lane);
            sf_wg::named_sync(2, 256); /* every thread's adds issued */
            if (tid == 0) {
                __threadfence();
                sf_wg::red_release_add_gpu(sem, 1);
            }
        } else {
            wgb256::add_dq(acc, c, wg, warp, lane);
        }
        wg_wait<0>(); /* dV, dK: the tiles they read are free for the next item */
        reg_fence(dv);
        reg_fence(dk);
        if (it + 1 < pl.items && tid < 2 * BM) sStat[((it + 1) & 1) * 2 * BM + tid] = st_next;
    }
    sf_cp_async_wait<0>();
    fa2_store_dkdv<T, 16>(p, dk, dv, pl.b, pl.kvh, pl.k0, pl.j0, pl.nk, kr, g, t, 128 * wg);
#else
    (void)p;
#endif
}

} /* namespace sf_attn */

#endif
