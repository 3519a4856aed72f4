/* bwd_ws.cuh - the dK/dV (and dQ) kernel of the attention backward,
 * warp-specialised (the FlashAttention-3 structure) on sm_90a: attn_bwd_wg's
 * tiles and products (bwd_wg.cuh, wgb::), its loads and dQ reduces taken
 * off the computing warps.  Dense batches, 16-bit operands, d <= 64 or 128
 * with 16-byte rows.
 *
 * CTA = 3 warpgroups per (kv head, sequence, key block of BN = 128 keys):
 *   WG0  setmaxnreg.dec 24.
 *        warp 0, the producer (one thread): TMA loads (cp.async.bulk.tensor.4d,
 *        128-byte swizzle, maps built on the host) of K and V once, then of
 *        each item's Q and dO tiles (64 rows) into an NSQ-stage ring.  A
 *        stage is full when its bytes landed ("full" mbarrier), free again
 *        when the 8 consumer warps have arrived ("empty", after their last
 *        product on it).
 *        warp 1, the dQ writer: for each item, waits for a dQ partial in
 *        shared memory ("dqF" mbarrier: 128 consumer threads), adds it into
 *        the f32 accumulator by one 16 KB cp.reduce.async.bulk (DET: after
 *        its turn on the (head, query block) counter, see attn_bwd_wg), and
 *        hands the buffer back once read ("dqE").
 *   WG1, WG2  setmaxnreg.inc 240: attn_bwd_wg's two warpgroups (64 keys
 *        each), the item loop with waits on mbarriers instead of block
 *        barriers; the only barrier between them is the one that publishes
 *        both halves of dS for the dQ product at D 128 (dS double-buffered
 *        by item parity, so the faster warpgroup runs up to an item ahead).
 *        Each warpgroup loads the next item's 64 lse (log2 units) and D
 *        values itself while the current one computes and stores them to
 *        its own double buffer before the dS barrier, which publishes them
 *        (shared data in the generic proxy passes through block barriers
 *        only, which racecheck follows; the tiles come by TMA).
 *        At the end both warpgroups stage dK and dV in the (then free) Q / dO
 *        stages and write them with 16-byte stores (wgb::stage_dkdv).
 * The grid and each CTA's walk over its query blocks: wgb::block_of,
 * wgb::item_row (as attn_bwd_wg).  TMA zero-fills rows past lq / lk and
 * columns past d, so padded tiles are 0 as attn_bwd_wg's cp.async zero fill
 * makes them.
 */
#ifndef SF_ATTN_BWD_WS_CUH
#define SF_ATTN_BWD_WS_CUH

#include "attn/bwd_wg.cuh"
#include "attn/fwd_ws.cuh" /* tma_load4 */

namespace sf_attn {

template <int D, int NSQ> struct WsBwdSmem {
    static constexpr int BN = 128, BM = 64, NT = 384;
    static constexpr int KB = BN * D * 2, QB = BM * D * 2, SB = BM * BN * 2, PB = 64 * 64 * 4;
    /* K, V, NSQ stages of (Q, dO), two dS tiles, two dQ partials, per
     * consumer warpgroup two buffers of (lse2, D), the mbarriers: K/V, full
     * and empty a stage, dqF and dqE a dQ buffer */
    static constexpr int OFF_V = KB, OFF_Q = 2 * KB, OFF_DS = OFF_Q + NSQ * 2 * QB, OFF_DQ = OFF_DS + 2 * SB;
    static constexpr int OFF_ST = OFF_DQ + 2 * PB, OFF_BAR = OFF_ST + 8 * BM * (int)sizeof(float);
    static constexpr int NBAR = 1 + 2 * NSQ + 4;
    static constexpr size_t bytes = (size_t)OFF_BAR + NBAR * 8 + 1024; /* + 1 KiB to align the base */
    static constexpr int REG_P = 24, REG_C = 240; /* 24 x 128 + 240 x 256 = 168 x 384 */
    static_assert(D == 64 || D == 128, "head dim buckets 64 and 128");
    static_assert(bytes <= 227 * 1024, "over the opt-in shared memory of sm_90");
};

template <typename T, int D, int NSQ, bool DET>
__global__ void __launch_bounds__(384, 1)
    attn_bwd_ws(const BwdParams p, const __grid_constant__ CUtensorMap tmq, const __grid_constant__ CUtensorMap tmk,
                const __grid_constant__ CUtensorMap tmv, const __grid_constant__ CUtensorMap tmdo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using SM = WsBwdSmem<D, NSQ>;
    constexpr int BN = SM::BN, BM = SM::BM, CB = D / 64, NQ = BM / 8, ND = D / 8;
    using sf_wg::mbar_arrive;
    using sf_wg::mbar_wait;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sraw = sf_smem_u32(smem_raw);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    const uint32_t sK = sbase, sV = sbase + SM::OFF_V, sQ0 = sbase + SM::OFF_Q, sdS0 = sbase + SM::OFF_DS;
    const uint32_t sdQ0 = sbase + SM::OFF_DQ;
    float *const sStat = reinterpret_cast<float *>(smem_raw + (sbase - sraw) + SM::OFF_ST);
    float4 *const pdQ0 = reinterpret_cast<float4 *>(smem_raw + (sdQ0 - sraw));
    const uint32_t bKV = sbase + SM::OFF_BAR, bFull = bKV + 8, bEmpty = bFull + 8 * NSQ;
    const uint32_t bDqF = bEmpty + 8 * NSQ, bDqE = bDqF + 16;

    int kvh, b, zb;
    wgb::block_of(p, kvh, b, zb);
    const int j0 = zb * BN;
    const int lq = p.lq, lk = p.lk;
    if (j0 >= lk) return;
    const int nk = min(BN, lk - j0);
    /* wg through a shuffle from lane 0: warp-uniform, so the descriptors
     * built from it stay in uniform registers */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    int ib0, ib1;
    fa2_qblocks<BM>(lq, lk, p.wl, p.wr, j0, nk, ib0, ib1);
    const int nbq = ib1 - ib0, items = nbq * p.heads_per_kv, rot = wgb::item_rot(p.zrot, zb, nbq);

    if (tid == 0) {
        sf_wg::mbar_init(bKV, 1);
        for (int s = 0; s < NSQ; s++) {
            sf_wg::mbar_init(bFull + 8 * s, 1);
            sf_wg::mbar_init(bEmpty + 8 * s, 8);
        }
        for (int i = 0; i < 2; i++) {
            sf_wg::mbar_init(bDqF + 8 * i, 128);
            sf_wg::mbar_init(bDqE + 8 * i, 1);
        }
        sf_wg::mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(SM::REG_P));
        if (warp == 0 && lane == 0) {
            /* ---- producer ---- */
            sf_wg::mbar_expect_tx(bKV, 2 * SM::KB);
#pragma unroll
            for (int c = 0; c < CB; c++) {
                tma_load4(sK + c * (BN * 128), &tmk, c * 64, j0, kvh, b, bKV);
                tma_load4(sV + c * (BN * 128), &tmv, c * 64, j0, kvh, b, bKV);
            }
            for (int it = 0; it < items; it++) {
                const int st = it % NSQ;
                const uint32_t ph = (uint32_t)(it / NSQ) & 1u;
                const int h = kvh * p.heads_per_kv + it / nbq, i0 = wgb::item_row(it, nbq, ib0, rot);
                const uint32_t sQ = sQ0 + st * 2 * SM::QB, full = bFull + 8 * st;
                sf_wg::mbar_wait_sleep(bEmpty + 8 * st, ph ^ 1u);
                sf_wg::mbar_expect_tx(full, 2 * SM::QB);
#pragma unroll
                for (int c = 0; c < CB; c++) {
                    tma_load4(sQ + c * (BM * 128), &tmq, c * 64, i0, h, b, full);
                    tma_load4(sQ + SM::QB + c * (BM * 128), &tmdo, c * 64, i0, h, b, full);
                }
            }
        } else if (warp == 1 && lane == 0) {
            /* ---- dQ writer ---- */
            for (int it = 0; it < items; it++) {
                const int h = kvh * p.heads_per_kv + it / nbq, i0 = wgb::item_row(it, nbq, ib0, rot);
                float *dst = p.dqacc + wg_acc_tile(p, b, 0, h, i0 / BM) * (BM * D);
                int *sem = nullptr;
                int ahead = 0;
                if constexpr (DET) {
                    sem = p.sem + ((int64_t)h * p.batch + b) * p.sem_nqb + i0 / BM;
                    ahead = wgb::det_ahead<D>(p, i0, lq, lk, zb);
                }
#pragma unroll
                for (int k = 0; k < D / 64; k++) {
                    /* D 128: buffer k holds warpgroup k's 64 columns, used every item;
                     * D 64: buffer it & 1 holds the sum of both, used every other item */
                    const int buf = D == 128 ? k : (it & 1);
                    const uint32_t use = D == 128 ? (uint32_t)it : (uint32_t)(it >> 1);
                    mbar_wait(bDqF + 8 * buf, use & 1u);
                    if constexpr (DET) {
                        while (sf_wg::ld_acquire_gpu(sem) < ahead) {
                        }
                    }
                    sf_wg::bulk_reduce_add_f32(dst + k * (SM::PB / 4), sdQ0 + buf * SM::PB, SM::PB);
                    sf_wg::bulk_commit();
                    sf_wg::bulk_wait_read<0>();
                    mbar_arrive(bDqE + 8 * buf); /* the buffer back once read */
                    if constexpr (DET) {
                        sf_wg::bulk_wait<0>(); /* the adds done before the next key block's turn */
                        sf_wg::red_release_add_gpu(sem, 1);
                    }
                }
            }
            sf_wg::bulk_wait<0>();
        }
    } else {
        /* ---- consumers ---- */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(SM::REG_C));
        const int cw = wg - 1, g = lane >> 2, t = lane & 3;
        const int kr = 16 * (warp - 4); /* the warp's first key: warpgroup cw holds keys 64 cw.. */
        const bool plain = p.softcap <= 0.f && !p.alibi;
        float dk[ND][4], dv[ND][4];
#pragma unroll
        for (int n = 0; n < ND; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;
        /* lse (log2 units; thread q < BM of the warpgroup) or D (q >= BM) of
         * item it's row q % BM, into the warpgroup's stat buffer it & 1 */
        const int q = tid & 127;
        float *const sStatW = sStat + cw * (4 * BM);
        auto stat = [&](int it) -> float {
            return bwd_row_stat<BM>(p, b, 0, kvh * p.heads_per_kv + it / nbq, wgb::item_row(it, nbq, ib0, rot), lq, q);
        };
        if (items > 0) sStatW[q] = stat(0);
        sf_wg::named_sync(2 + cw, 128); /* item 0's stats */
        mbar_wait(bKV, 0);

        for (int it = 0; it < items; it++) {
            const int st = it % NSQ;
            const uint32_t ph = (uint32_t)(it / NSQ) & 1u;
            const int h = kvh * p.heads_per_kv + it / nbq, i0 = wgb::item_row(it, nbq, ib0, rot), nq = min(BM, lq - i0);
            const uint32_t sQ = sQ0 + st * 2 * SM::QB, sdO = sQ + SM::QB, sdS = sdS0 + (it & 1) * SM::SB;
            const float *sL = sStatW + (it & 1) * 2 * BM, *sD = sL + BM;
            /* the next item's stats, loaded now, stored below into the other
             * buffer (its readers, item it - 1, passed the previous dS
             * barrier) and published by this item's dS barrier */
            const float st_next = it + 1 < items ? stat(it + 1) : 0.f;
            mbar_wait(bFull + 8 * st, ph);

            float s[NQ][4], dp[NQ][4];
            wgb::issue_sdp<T, D>(s, dp, sK, sV, sQ, sdO, cw);
            const bool full = fa2_tile_full<BM, BN>(p, plain, i0, nq, j0, nk, lq, lk);
            wgb::p_ds(p, s, dp, sL, sD, full, b, h, i0, nq, j0, nk, lq, lk, kr, g, t);
            uint32_t pa[BM / 16][4], ad[BM / 16][4];
            wgb::pack_a<T>(s, dp, pa, ad);
            wgb::issue_dkdv<T, D>(dk, dv, pa, ad, sQ, sdO);
            wgb::store_ds(ad, sdS, cw, kr, lane);
            sStatW[((it + 1) & 1) * 2 * BM + q] = st_next;
            if (D == 128) sf_wg::named_sync(1, 256); /* both warpgroups' dS */
            else sf_wg::named_sync(2 + cw, 128);     /* this warpgroup's dS */
            float c[8][4];
            wgb::issue_dq<T, D>(c, sdS, sK, cw);
            sf_wg::wg_wait<0>();
            sf_wg::reg_fence(dv);
            sf_wg::reg_fence(dk);
            sf_wg::reg_fence(c);
            __syncwarp(); /* every lane's reads of the stage before lane 0 hands it back */
            if (lane == 0) mbar_arrive(bEmpty + 8 * st); /* Q and dO of the stage read */

            /* the dQ partial to the writer (see attn_bwd_wg): D 128 the
             * warpgroup's 64 columns in its own buffer; D 64 warpgroup 0's
             * partial, then warpgroup 1's added, in buffer it & 1 */
            const int buf = D == 128 ? cw : (it & 1);
            const uint32_t use = D == 128 ? (uint32_t)it : (uint32_t)(it >> 1);
            float4 *pbuf = pdQ0 + buf * (SM::PB / 16);
            if (D == 128 || cw == 0) mbar_wait(bDqE + 8 * buf, (use & 1u) ^ 1u);
            wgb::put_partial<D>(pbuf, c, cw, warp, lane, 4);
            if (D == 128 || cw == 1) {
                sf_wg::fence_async_smem(); /* for the bulk reduce (async proxy) */
                mbar_arrive(bDqF + 8 * buf);
            }
        }
        /* dK, dV staged in the Q / dO stages (64 KB at D 128: both tiles),
         * free once both warpgroups are past their last products */
        static_assert(NSQ * 2 * SM::QB >= 2 * BN * D * 2, "dK, dV staging fits the Q / dO stages");
        sf_wg::named_sync(1, 256);
        unsigned char *const sKV = smem_raw + (sQ0 - sraw);
        wgb::stage_dkdv<T, D>(sKV, dk, dv, kr, g, t);
        sf_wg::named_sync(1, 256);
        wgb::copy_dkdv<T, D, 256>(p, sKV, b, kvh, 0, j0, nk, tid - 128);
    }
#else
    (void)p;
    (void)tmq;
    (void)tmk;
    (void)tmv;
    (void)tmdo;
#endif
}

} /* namespace sf_attn */

#endif
