/* fwd_wsp.cuh - attn_fwd_ws made persistent (sm_90a): one CTA per SM
 * loops over (query tile, batch, head) work tiles, so short sequences do
 * not pay the pipeline fill, drain and epilogue of every tile exposed.
 * Design, budgets and validation: notes/attn_persist.md.
 *
 * Grid = min(tiles, SMs x CTAs per SM); CTA x takes tiles x, x + grid, ...
 * of a static order (wsp_tile): the (batch, head) pairs are cut into
 * sections of G pairs whose K and V fit in about half of L2 (the host
 * picks G); inside a section the query tile is the outer index, last
 * (longest under a bottom-right causal mask) first, the pair inner, so the
 * K/V of a section is read from HBM once and the long causal tiles start
 * first (longest-processing-time order for the static schedule).  Full
 * attention (no mask) takes sections of two pairs: its tiles are equal,
 * and a pair's query tiles then run on neighbouring CTAs at once; masked
 * problems take 4 pairs, or about one grid of tiles when the tile counter
 * hands them out (launch_wsp has the measurements).
 *
 * Roles are those of attn_fwd_ws (see fwd_ws.cuh); what persistence
 * changes:
 *   - the K/V ring's stage and phase come from a running load counter kv
 *     (stage kv % NST, parity (kv / NST) & 1) that both sides advance by the
 *     key-tile count n of every tile, never reset, so the producer streams
 *     the next tile's K/V into stages the consumers free while they finish
 *     the current one;
 *   - Q has NQ buffers (3 for the 128-row d 64 kernels, 2 for wsp192 and
 *     d 128; 1 at d 192 / 256), each with a "full" mbarrier (count 1, the TMA bytes)
 *     and an "empty" one (4 * NC warp arrivals after the epilogue, which
 *     stages O in the Q buffer).  Tile number it (of this CTA) uses buffer
 *     it % NQ, whose use count u = it / NQ gives the parity (u & 1).  A
 *     tile with no keys (n == 0) still passes through both barriers (the
 *     producer arrives on "full" without a copy) so the parities stay in step.
 *     One buffer (QS) is split by consumer warpgroup: each 64-row slice has
 *     its own pair of barriers (the empty one 4 warp arrivals), so the first
 *     warpgroup's next Q loads while the others finish the tile;
 *   - the producer issues K_0, then Q (QS: the first slice), then V_0 of a
 *     tile (QS: then the other slices): with one Q buffer the first K tile
 *     still loads while the consumers finish the previous tile's epilogue;
 *   - the pingpong token (named barriers 1..NC) cycles across tiles without
 *     a break; the last consumer's hand-over of the CTA's last turn is
 *     taken by consumer 0 after its last tile, so every barrier ends balanced
 *     (the 112-key d 64 kernel has no pingpong: PP below);
 *   - in masked problems the two warpgroups of the 128-row d 64 kernel swap
 *     their row halves on odd tiles (RS below).
 * Per-tile state (running max, sum, O) is set up at the top of each tile,
 * the schedule entry and the row key ranges there too or (PRE, below)
 * while the previous tile's last P V runs; fully masked rows write 0 and lse
 * -inf as in attn_fwd_ws.
 * Epilogue: each consumer warp writes its 16 rows of O into the Q buffer by
 * stmatrix and stores them by TMA (tmo: 16-row boxes), then hands the buffer
 * back once the store has read it (with two Q buffers only after the next
 * tile's first S, so the warp does not wait for the copy).  The producer's
 * waits sleep in the
 * try_wait (mbar_wait_sleep) rather than spin.  These three, with the
 * k-step descriptors by addition and the schedule's divisions by
 * multiplication (FastDiv), took ~20% of the instructions of d 128 L 512
 * (ncu: 851 warp instructions a key tile against cuDNN's 662; d 128 L 512
 * +11% without them).
 * Instantiated for d 64 (128 or 192 rows, 3 stages; 112-key tiles too), 128
 * and 256 (128 rows, 2 stages; 64-key tiles too at d 256); d 192 spills two
 * registers (8 bytes a tile) and is not used.
 * Registers: the producer's tile loop uses R0-R17 at most of its 24 / 32 (SASS),
 * the consumers keep the limits of attn_fwd_ws (240 / 160), no spills; the
 * clustered kernel (CL 2) gives its producer 32 and its consumers 232.
 */
#ifndef SF_ATTN_FWD_WSP_CUH
#define SF_ATTN_FWD_WSP_CUH

#include "attn/fwd_ws.cuh"
#include "common/fastdiv.h"

#include <type_traits>

namespace sf_attn {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using sf_wg::bulk_commit;
using sf_wg::bulk_wait_read0;
using sf_wg::cluster_rank;
using sf_wg::cluster_sync;
using sf_wg::mbar_wait_sleep;
using sf_wg::tma_load4_mc;
using sf_wg::tma_store4;
using sf_wg::wg_desc_add;
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void st_shared_u32(uint32_t a, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
    return v;
}
#endif

/* Static schedule of the persistent kernel, built by the host. */
struct WspSched {
    int ntiles;  /* n_mtiles * batch * nheads                                  */
    int group;   /* (batch, head) pairs per L2 section, >= 1                   */
    FastDiv d_per, d_group, d_heads, d_hkv; /* by group * n_mtiles, group, nheads, heads_per_kv */
    /* dynamic schedule (NULL: static): ctr[0] hands out the tiles after the
     * first gridDim.x, ctr[1] counts the CTAs done with it; both zero at
     * launch, the last CTA resets them */
    unsigned int *ctr;
};

template <int D, int BM_, int NST, int BN_ = WsBn<D>::value>
struct WspTraits : WsTraits<D, BM_, NST, BN_> {
    typedef WsTraits<D, BM_, NST, BN_> B;
    /* Q barrier pairs (full, empty) for nq buffers: one buffer is split into
     * one slice per consumer warpgroup, each with its own pair */
    static constexpr int qbars(int nq) { return nq == 1 ? B::NC : nq; }
    static constexpr size_t smem_for(int nq) {
        return (size_t)nq * B::QBYTES + (size_t)2 * NST * B::KVBYTES + (size_t)(2 * qbars(nq) + 4 * NST) * 8 + 16 +
               1024;
    }
    /* a second Q buffer when it fits: d 64 (16 or 24 KiB more), d 128 (32);
     * a third for the 128-row d 64 kernels (wsp128, wsp128k112), whose short
     * tiles (1-2 key tiles at causal L 512, 2 for ViT) otherwise wait for a
     * Q load that could start only after the previous tile's first S (ViT:
     * 191 -> 195 TFLOP/s); wsp192 and d 128 gain nothing, so they keep two. */
    static constexpr int NQ = (D == 64 && BM_ == 128 && smem_for(3) <= 227 * 1024) ? 3
                              : smem_for(2) <= 227 * 1024                         ? 2
                                                                                  : 1;
    /* one Q buffer (d 256): split by consumer warpgroup (QS), so that the
     * next tile's Q rows of the first warpgroup load while the others still
     * finish the current tile; the Q map's boxes are then 64 rows */
    static constexpr bool QS = NQ == 1;
    static constexpr int NQB = qbars(NQ), QROWS = QS ? 64 : BM_;
    static constexpr int KV_OFF = NQ * B::QBYTES;
    static constexpr int BAR_OFF = KV_OFF + 2 * NST * B::KVBYTES;
    static constexpr size_t SMEM = smem_for(NQ);
    static_assert(SMEM <= 227 * 1024, "over the opt-in shared memory of sm_90");
    static_assert(B::QBYTES % 1024 == 0 && B::KVBYTES % 1024 == 0, "1 KiB-aligned tiles (128-byte swizzle)");
};

/* One work tile: (batch, head) pair bh = batch * nheads + head, first query
 * row m0, key tiles [t_end - n, t_end) and the key columns [full_lo,
 * full_hi) that no row of the tile masks.  Batch, head and the row count
 * are derived where they are used: kept across the key loop, they cost
 * d 192 two spilled registers. */
struct WspTile {
    int bh, m0, t_end, n, full_lo, full_hi;
};

template <int BM, int BN>
__device__ __forceinline__ WspTile wsp_tile(const FwdParams &p, const WspSched &sc, int t) {
    const int nm = p.n_mtiles, bh_all = p.batch * p.nheads;
    const int per = sc.group * nm;          /* tiles per full section */
    const int sec = sc.d_per.div(t);
    const int w = t - sec * per;
    const int g0 = sec * sc.group;
    const int gsz = min(sc.group, bh_all - g0); /* the last section may be short */
    const int mi = gsz == sc.group ? sc.d_group.div(w) : w / gsz;
    const int bh = g0 + (w - mi * gsz);
    WspTile r;
    r.bh = bh;
    r.m0 = (nm - 1 - mi) * BM;
    const int mrows = min(BM, p.lq - r.m0);
    int lo_first, hi_first, lo_last, hi_last;
    key_range(r.m0, p.lq, p.lk, p.wl, p.wr, lo_first, hi_first);
    key_range(r.m0 + mrows - 1, p.lq, p.lk, p.wl, p.wr, lo_last, hi_last);
    const int t_begin = lo_first / BN;
    r.t_end = hi_last > lo_first ? (hi_last + BN - 1) / BN : t_begin;
    r.n = r.t_end - t_begin;
    r.full_lo = lo_last;
    r.full_hi = hi_first;
    return r;
}

/* attn_fwd_wsp: see the file comment.  tmq/tmk/tmv as for attn_fwd_ws.
 * CL: CTAs per cluster (MC below). */
template <typename T, int D, int BM_, int NST, int BN_ = WsBn<D>::value, int CL = 1>
__global__ void __launch_bounds__(128 * (BM_ / 64 + 1), 1)
    attn_fwd_wsp(const FwdParams p, const WspSched sc, const __grid_constant__ CUtensorMap tmq,
                 const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv,
                 const __grid_constant__ CUtensorMap tmo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef WspTraits<D, BM_, NST, BN_> Tr;
    constexpr int BM = Tr::BM, BN = Tr::BN, NC = Tr::NC, NS = BN / 8, NO = D / 8, CB = D / 64;
    /* half tiles (below): 128-key tiles, d 128, and d 64 with 128-row tiles
     * (wsp128, the causal choice there).  On the H200 they gave causal d 128
     * +2-6% and d 64 +1-4%, but the two-bodied loop cost the 192-row d 64
     * kernel (wsp192, the non-causal choice) 6-9% without any half tile to
     * take, so it keeps the plain loop. */
    constexpr bool HD = BN == 128 && (D == 128 || BM == 128);
    /* OB: one body for the key-tile loop (d 64).  A half tile is only ever
     * a tile's first key tile: the two 64-row halves of a 128-row tile see
     * key bounds 64 apart, so after the first key tile hw - n0 > BN / 2,
     * unless the bounds are clamped at 0 (rows with no key, Lq > Lk causal),
     * and then the tile is masked for every row of the warpgroup and the
     * full softmax gives the same P = 0.  With OB the loop takes no half
     * softmax, and a half first tile's P is padded with zeros so that the
     * next P V runs over all BN keys (adding exact zeros): two loop bodies
     * and two softmax copies fewer (4656 -> 3120 instructions).  ncu (stop
     * 21, causal L 512) had 5.7% of the warp samples waiting for
     * instruction fetch (cuDNN 1.3%); pinned, d 64 +0.5-2.4%.  d 128
     * measured 2-4% slower without the half softmax and keeps both bodies. */
    constexpr bool OB = HD && D == 64;
    /* narrow first tiles and empty leading turns (below, as attn_fwd_ws):
     * 80-key tiles (d 256) */
    constexpr int NN = BN == 80 ? 48 : 0;
    /* FT: the first key tile's softmax without the vote and the rescale
     * factors (ws_softmax's FIRST), and so no rescale of O before the
     * second P V (d 64 causal L 4096: +3%).  Not in the 80-key kernel, where
     * ptxas then serialised the wgmma pipeline (C7511). */
    constexpr bool FT = NN == 0;
    /* SK: empty turns for the leading key tiles no row of the warpgroup sees
     * (ws_skip_leading): 80-key tiles, and 64-key tiles at d 256 (wsp128k64:
     * the first 64 rows of a causal 128-row tile see one 64-key tile fewer
     * than the tile) */
    constexpr bool SK = NN > 0 || (D == 256 && BN == 64);
    /* PP: pingpong turns between the consumer warpgroups (below).  The
     * 112-key d 64 kernel (wsp128k112, the ViT choice: 2 key tiles a query
     * tile) runs without: each warpgroup issues its products as soon as its
     * softmax is done (ViT: 182 -> 190 TFLOP/s).  The other kernels keep
     * it: without it d 128 L 16384 lost 4%. */
    constexpr bool PP = !(D == 64 && BN == 112);
    static_assert(PP || !SK, "empty leading turns take pingpong turns");
    /* RS: in masked problems the two consumer warpgroups of the 128-row
     * 128-key d 64 kernel (wsp128, the causal choice at L 512-1024) swap
     * their 64-row halves from one tile to the next, so that the half whose
     * rows see more keys (the causal diagonal's second half) changes hands
     * (and pingpong position): causal L 512 250 -> 260 TFLOP/s.  Why is
     * open: the halves reversed on every tile (the heavier half always
     * first) lost 3%; at d 128 the swap was level. */
    constexpr bool RS = D == 64 && BM == 128 && BN == 128 && Tr::NC == 2;
    /* MC (CL = 2): launched in clusters of two CTAs that take neighbouring
     * query tiles of one (batch, head) pair at a time (the host's schedule:
     * full attention, one pair a section, an even number of query tiles, an
     * even grid, no tile counter), so both walk the same key tiles.  Each
     * CTA's producer loads half of the 64-column boxes of every K and V
     * stage and multicasts them to both; a stage's full barrier expects the
     * whole stage, its empty barrier counts the consumer warps of both CTAs
     * (kv_release), so neither producer overwrites a stage its partner
     * still reads.  K and V leave L2 once per 256 query rows instead of once
     * per 128: at the power cap the L2 traffic is energy that the tensor
     * cores do not get.  Clustered, the sustained clock rises 4% while a
     * cycle does 2.6% less (the two CTAs wait for each other's stage
     * releases): d 128 L 16384 640 -> 650 TFLOP/s at the cap, short
     * sequences 2-5% slower, so the autotuner chooses (wsp128c2). */
    static_assert(CL == 1 || (CL == 2 && CB % 2 == 0), "clusters of two, an even number of 64-column boxes");
    constexpr int NQ = Tr::NQ, NQB = Tr::NQB;
    constexpr bool QS = Tr::QS;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sbase = (sf_smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sK = sbase + Tr::KV_OFF, sV = sK + NST * Tr::KVBYTES;
    /* mbarriers: Q full [NQB], Q empty [NQB] (a pair per buffer, or per
     * slice with QS), then per stage K full, V full, K empty, V empty */
    const uint32_t bQf = sbase + Tr::BAR_OFF, bQe = bQf + 8 * NQB;
    const uint32_t bKf = bQe + 8 * NQB, bVf = bKf + 8 * NST, bKe = bVf + 8 * NST, bVe = bKe + 8 * NST;
    /* the tile index of each Q buffer's (slice's) current use (dynamic
     * schedule): written by the producer before its "full" arrival */
    const uint32_t sTile = bVe + 8 * NST;

    /* wg through a shuffle from lane 0: known warp-uniform, so the wgmma
     * descriptors built from it stay in uniform registers (no R2UR) */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);

    if (tid == 0) {
        for (int q = 0; q < NQB; q++) {
            mbar_init(bQf + 8 * q, 1);
            mbar_init(bQe + 8 * q, QS ? 4 : 4 * NC);
        }
        for (int s = 0; s < NST; s++) {
            mbar_init(bKf + 8 * s, 1);
            mbar_init(bVf + 8 * s, 1);
            mbar_init(bKe + 8 * s, 4 * NC * CL);
            mbar_init(bVe + 8 * s, 4 * NC * CL);
        }
        mbar_init_fence();
    }
    /* MC: both CTAs' barriers set up before any arrival or copy reaches them */
    if constexpr (CL > 1)
        cluster_sync();
    else
        __syncthreads();

    if (wg == 0) {
        /* ---- producer ---- */
        /* MC: 32 registers for the producer (its cluster rank and the
         * multicast mask), 232 for the consumers: no spills either side
         * (+1% per GHz at the power cap against 24 / 240). */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(CL > 1 ? 32 : Tr::REG_P));
        /* dynamic schedule: the whole warp 0 runs the loop (its values stay
         * warp-uniform, in uniform registers, the counter's index by a
         * shuffle); lane 0 issues the copies and the arrivals.  The static
         * schedule needs lane 0 only; with clusters the other 31 lanes would
         * wait for it in the __syncwarp before the final cluster barrier (a
         * diverged warp: its lane 0 seems to resume from its barrier waits
         * later), so the whole warp runs the loop there (0.5% fewer cycles). */
        if (warp == 0 && (sc.ctr || CL > 1 || lane == 0)) {
            const bool one = lane == 0;
            uint32_t kv = 0; /* K/V loads issued so far (all tiles) */
            int it = 0;
            int t = blockIdx.x;
            /* Q of tile t into buffer (QS: slice) qi once its last use is
             * released (parity par), the tile index before the arrival
             * (release) that the consumers' wait (acquire) pairs with; no
             * copy for a tile without keys or past the end */
            auto load_q = [&](int qi, uint32_t par, int m0, int h, int b, bool copy) {
                mbar_wait_sleep(bQe + 8 * qi, par);
                if (one) {
                    st_shared_u32(sTile + 4 * qi, (uint32_t)t);
                    if (copy) {
                        const uint32_t sQ = sbase + (QS ? qi * (64 * 128) : qi * Tr::QBYTES);
                        mbar_expect_tx(bQf + 8 * qi, Tr::QBYTES / (QS ? NC : 1));
#pragma unroll
                        for (int c = 0; c < CB; c++)
                            tma_load4(sQ + c * (BM * 128), &tmq, c * 64, m0 + (QS ? qi * 64 : 0), h, b, bQf + 8 * qi);
                    } else {
                        mbar_arrive(bQf + 8 * qi);
                    }
                }
            };
            /* a K or V stage (free in every CTA of the cluster: the empty
             * barrier counts all their consumer warps): this CTA's boxes of
             * it (MC: its half, to both CTAs) */
            auto kv_load = [&](uint32_t dst, const CUtensorMap *map, int n0, int hk, int b, uint32_t bar) {
                mbar_expect_tx(bar, Tr::KVBYTES);
                /* the rank read where it is used: held in a register across
                 * the loop it made the 24-register producer spill 32 bytes
                 * (20 now, lane 0 only: L1 hits) */
                const int c0 = CL > 1 ? (int)cluster_rank() * (CB / CL) : 0;
#pragma unroll
                for (int i = 0; i < CB / CL; i++) {
                    const int c = c0 + i;
                    if constexpr (CL > 1)
                        tma_load4_mc(dst + c * (BN * 128), map, c * 64, n0, hk, b, bar, (uint16_t)((1u << CL) - 1u));
                    else
                        tma_load4(dst + c * (BN * 128), map, c * 64, n0, hk, b, bar);
                }
            };
            for (; t < sc.ntiles; it++) {
                const WspTile w = wsp_tile<BM, BN>(p, sc, t);
                const int qb = it % NQ;
                /* use it / NQ of buffer qb waits for the release of use it / NQ - 1
                 * (the first use passes: parity 1 of a fresh barrier) */
                const uint32_t qpar = ((uint32_t)(it / NQ) & 1u) ^ 1u;
                const int b = sc.d_heads.div(w.bh), h = w.bh - b * p.nheads;
                const int hk = sc.d_hkv.div(h);
                /* the counter's next index, fetched (lane 0) before the waits
                 * of the tile's last K/V stage so that its latency overlaps them */
                unsigned nxt = 0;
                if (sc.ctr && one && w.n == 0) nxt = atomicAdd(sc.ctr, 1u);
                for (int j = 0; j < w.n; j++, kv++) {
                    const int st = (int)(kv % NST);
                    const uint32_t ph = (kv / NST) & 1u;
                    const int n0 = (w.t_end - 1 - j) * BN;
                    if (sc.ctr && one && j == w.n - 1) nxt = atomicAdd(sc.ctr, 1u);
                    mbar_wait_sleep(bKe + 8 * st, ph ^ 1u);
                    if (one) kv_load(sK + st * Tr::KVBYTES, &tmk, n0, hk, b, bKf + 8 * st);
                    /* Q (QS: the first warpgroup's slice) after K_0 */
                    if (j == 0) load_q(qb, qpar, w.m0, h, b, true);
                    mbar_wait_sleep(bVe + 8 * st, ph ^ 1u);
                    if (one) kv_load(sV + st * Tr::KVBYTES, &tmv, n0, hk, b, bVf + 8 * st);
                    /* QS: the other slices after V_0 (their warpgroups take
                     * their first turn after the first one's) */
                    if (QS && j == 0)
                        for (int q = 1; q < NC; q++) load_q(q, qpar, w.m0, h, b, true);
                }
                if (w.n == 0) {
                    /* no keys: the consumers only stage zeros in the buffer;
                     * complete its phase without a copy */
                    for (int q = 0; q < (QS ? NC : 1); q++) load_q(QS ? q : qb, qpar, 0, 0, 0, false);
                }
                /* the next tile: the static stride, or the counter's index
                 * (the shuffle makes lane 0's fetch uniform) */
                if (sc.ctr) {
                    t = (int)gridDim.x + (int)__shfl_sync(0xffffffffu, nxt, 0);
                } else {
                    t += (int)gridDim.x;
                }
            }
            if (sc.ctr) {
                /* the consumers learn the end from an index past it, handed
                 * over as a tile without a copy */
                const int qb = it % NQ;
                for (int q = 0; q < (QS ? NC : 1); q++)
                    load_q(QS ? q : qb, ((uint32_t)(it / NQ) & 1u) ^ 1u, 0, 0, 0, false);
                if (one) {
                    /* every CTA makes one fetch past the end; the last CTA
                     * to be done with the counter zeroes it for the next launch */
                    if (atomicAdd(sc.ctr + 1, 1u) == gridDim.x - 1) {
                        atomicExch(sc.ctr, 0u);
                        atomicExch(sc.ctr + 1, 0u);
                    }
                }
            }
        }
    } else {
        /* ---- consumers ---- */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CL > 1 ? 232 : Tr::REG_C));
        const int cw = wg - 1, wq = warp & 3;
        const int g = lane >> 2, tq = lane & 3;
        const int lq = p.lq, lk = p.lk;
        const float scale = p.scale_log2;
        const uint32_t vlbo = BN * 128, vsbo = 1024;
        /* pingpong turn: wait for mine (barrier 1 + cw), hand the next to
         * the following consumer; the last one starts the cycle */
        const int my_bar = 1 + cw, other_bar = 1 + (cw + 1) % NC;
        if (PP && cw == NC - 1) named_arrive(1, 256);

        uint32_t kv = 0; /* K/V tiles consumed so far (all tiles) */
        int it = 0;
        /* (lane 0, two Q buffers) the buffer whose O store may still be
         * reading it, -1 none: its release waits until the next tile's first
         * S has completed, so the warp does not stall on the copy (ncu: 2-4%
         * of the samples at L 512 waited there).  The producer needs it two
         * tiles later only.  With one Q buffer the next tile needs it at once. */
        int pend = -1;
        auto release_q = [&]() { /* pend: a buffer, or with QS this warpgroup's slice */
            if (lane == 0 && pend >= 0) {
                bulk_wait_read0();
                mbar_arrive(bQe + 8 * pend);
                pend = -1;
            }
        };
        /* A tile's set-up: its schedule entry, the warpgroup's 64-row half
         * (RS: swapped on odd tiles), this thread's rows' key ranges and hw,
         * the warpgroup's largest key bound (HD / SK, below).  PRE: for the
         * static schedule the next tile's is computed while this tile's last
         * P V runs (ncu: ~190 instructions a warp and tile at the top of the
         * tile, on the way from one tile's last P V to the next one's first
         * S; causal d 128 L 512 +1.5% with it); but d 64 wsp128 -4.5% (-5% with
         * the set-up during the tile's first S instead), wsp192 -2.5% (their
         * last P V is half as long: the set-up outlasts it) and d 256 with
         * 64-key tiles (wsp128k64) -0.9% at L 512. */
        constexpr bool PRE = D == 128 || (D == 64 && BN == 112) || (D == 256 && BN == 80);
        struct TileSet {
            WspTile w;
            int cr, r0, rlo[2], rhi[2], hw;
        };
        auto setup = [&](int tt, int itx) {
            TileSet c;
            c.w = wsp_tile<BM, BN>(p, sc, tt);
            c.cr = RS && (itx & 1) && (p.wl >= 0 || p.wr >= 0) ? cw ^ 1 : cw;
            c.r0 = c.w.m0 + c.cr * 64 + wq * 16 + g; /* sequence-relative row */
            key_range(c.r0, lq, lk, p.wl, p.wr, c.rlo[0], c.rhi[0]);
            key_range(c.r0 + 8, lq, lk, p.wl, p.wr, c.rlo[1], c.rhi[1]);
            c.hw = 0;
            if constexpr (HD || SK) {
                int lw;
                key_range(min(c.w.m0 + c.cr * 64 + 63, lq - 1), lq, lk, p.wl, p.wr, lw, c.hw);
            }
            return c;
        };
        TileSet nx;
        bool have_nx = false;
        for (int t = blockIdx.x;; t += gridDim.x, it++) {
            const int qb = it % NQ, qi = QS ? cw : qb; /* Q buffer, its barriers (QS: slice) */
            /* dynamic schedule: the tile comes with its Q buffer (the wait
             * below passes at once after this one) */
            if (sc.ctr) {
                /* lane 0 reads it (before its own arrival that releases the
                 * buffer and the word), the shuffle hands it to the warp */
                mbar_wait(bQf + 8 * qi, (uint32_t)(it / NQ) & 1u);
                uint32_t v = 0;
                if (lane == 0) v = ld_shared_u32(sTile + 4 * qi);
                t = (int)__shfl_sync(0xffffffffu, v, 0);
            }
            if (t >= sc.ntiles) break;
            const TileSet cx = PRE && have_nx ? nx : setup(t, it);
            have_nx = false;
            const WspTile w = cx.w;
            const int cr = cx.cr, r0 = cx.r0;
            const int rlo[2] = {cx.rlo[0], cx.rlo[1]}, rhi[2] = {cx.rhi[0], cx.rhi[1]};
            const uint32_t sQ = sbase + qb * Tr::QBYTES;

            float o[NO][4];
#pragma unroll
            for (int i = 0; i < NO; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
            float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f}, alpha[2] = {1.f, 1.f};

            /* Q landed (n > 0), or the producer marked the buffer handed over (n == 0) */
            mbar_wait(bQf + 8 * qi, (uint32_t)(it / NQ) & 1u);
            if (w.n > 0) {
                const int n = w.n;
                float s[NS][4];
                uint32_t pa[NS / 2][4];
                /* Half tiles (HD): a key tile whose second BN / 2 keys are
                 * masked for every row of this warpgroup (the causal
                 * diagonal's upper half for the first 64 rows of a 128-row
                 * tile) takes the softmax and P V over its first half only:
                 * the skipped P would be 0, so the output is the same bit for
                 * bit (OB: the P V of such a tile over all BN keys unless it
                 * is the last, the second half of P zero).  (S stays a full
                 * product: a branch between m64n64 and m64n128 made ptxas
                 * serialise the wgmma pipeline.)  hw: the
                 * key bound of the warpgroup's last row, the largest of its
                 * rows (the bounds grow with the row). */
                const int hw = cx.hw;
                /* widths of a P V (and of a narrow S): all BN keys, a half
                 * tile's first half, a narrow tile's first NN */
                typedef std::integral_constant<int, BN> FullW;
                typedef std::integral_constant<int, BN / 2> HalfW;
                typedef std::integral_constant<int, (NN > 0 ? NN : BN)> NarrowW;
                /* S_j = Q K_j^T over the tile's first W keys (issue only).  The
                 * descriptors of the k-steps are the tile's first plus a
                 * constant (wg_desc_add: one add on the address field) rather
                 * than built per k-step: ncu counted ~100 uniform-datapath
                 * instructions a key tile for them. */
                const uint64_t dq0 = wg_desc(sQ + cr * (64 * 128), 16, 1024);
                auto issue_s_w = [&](int st, auto wd) {
                    constexpr int W = decltype(wd)::value;
                    const uint64_t dk0 = wg_desc(sK + st * Tr::KVBYTES, 16, 1024);
#pragma unroll
                    for (int kk = 0; kk < D / 16; kk++) {
                        const uint32_t off = (kk >> 2) * (BN * 128) + (kk & 3) * 32;
                        const uint32_t qoff = (kk >> 2) * (BM * 128) + (kk & 3) * 32;
                        Wg<T, W>::ss(&s[0][0], wg_desc_add(dq0, qoff), wg_desc_add(dk0, off), kk > 0);
                    }
                };
                auto issue_s = [&](int st) { issue_s_w(st, FullW{}); };
                /* O += P V over the first W keys (the rest of P is 0) */
                auto issue_pv = [&](int st, auto wd) {
                    constexpr int KS = decltype(wd)::value / 16;
                    const uint64_t dv0 = wg_desc(sV + st * Tr::KVBYTES, vlbo, vsbo);
#pragma unroll
                    for (int kk = 0; kk < KS; kk++) Wg<T, D>::rs(&o[0][0], pa[kk], wg_desc_add(dv0, kk * 2048));
                };
                /* first: the tile's first key tile (ws_softmax's FIRST) */
                auto softmax = [&](int n0, bool hf, auto first) {
                    constexpr bool F = decltype(first)::value;
                    const int need_mask = mask_kind(n0, BN, w.full_lo, w.full_hi);
                    if (HD && hf)
                        return ws_softmax<NS, HD ? NS / 2 : NS, Tr::LAZY, F>(s, mrow, lrow, alpha, n0, need_mask,
                                                                            rlo, rhi, tq, scale);
                    return ws_softmax<NS, NS, Tr::LAZY, F>(s, mrow, lrow, alpha, n0, need_mask, rlo, rhi, tq, scale);
                };
                auto pack = [&](bool hf) {
                    if (HD && hf)
                        pack_p<T, NS, HD ? NS / 2 : NS>(pa, s);
                    else
                        pack_p<T, NS>(pa, s);
                };
                auto release = [&](uint32_t bar) { kv_release<CL>(bar, lane); };

                /* SK (80-key tiles and wsp128k64's 64-key ones, d 256), as in
                 * attn_fwd_ws: the warpgroup's first js key tiles (the highest
                 * keys) are masked for all of its rows and take empty turns;
                 * with NN (80-key tiles) its first real tile takes S,
                 * the softmax and (next turn) P V over its first NN keys only
                 * when no row sees past them; the other columns of s are set to
                 * 0 before that S (which does not write them) and the softmax
                 * leaves them alone, so they pack to P = 0.  (Zeroed after the
                 * softmax instead, as attn_fwd_ws does, ptxas serialised this
                 * kernel's wgmma pipeline: C7515.)  Skipped keys would give
                 * P = 0: the same output bit for bit. */
                int js = 0;
                bool narrow = false;
                if constexpr (SK)
                    js = ws_skip_leading<BN, NN, NST, CL>(n, w.t_end, hw, kv, narrow, bKf, bVf, bKe, bVe, my_bar,
                                                      other_bar, lane);
                /* A warpgroup of wsp192 whose 64 rows all lie past the
                 * sequence's end (the last tile when lq is not a multiple
                 * of 192: one warpgroup at L 512 and 2048, two at L 1024)
                 * takes empty turns for every key tile (its rows are not
                 * stored; causal L 2048: +2.4%). */
                if constexpr (PP && !SK && NC == 3)
                    if (w.m0 + cr * 64 >= lq)
                        js = ws_skip_leading<BN, NN, NST, CL>(n, w.t_end, 0, kv, narrow, bKf, bVf, bKe, bVe, my_bar,
                                                          other_bar, lane);
                if (js < n) {
                    /* first key tile: S only */
                    bool hprev; /* the half flag of the tile whose P is in pa */
                    bool resc;  /* O needs alpha before that P V (ws_softmax) */
                    {
                        const uint32_t c = kv + (uint32_t)js;
                        if (NN > 0 && narrow) {
#pragma unroll
                            for (int i = NarrowW::value / 8; i < NS; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
                        }
                        ws_turn_first_s<PP, CL>(bKf, bKe, (int)(c % NST), (c / NST) & 1u, my_bar, other_bar, s, lane,
                                        [&](int q) {
                                            if (NN > 0 && narrow)
                                                issue_s_w(q, NarrowW{});
                                            else
                                                issue_s(q);
                                        });
                        release_q();
                        const int n0 = (w.t_end - 1 - js) * BN;
                        if (NN > 0 && narrow) {
                            const int need_mask = mask_kind(n0, BN, w.full_lo, w.full_hi);
                            resc = ws_softmax<NS, NarrowW::value / 8, Tr::LAZY>(s, mrow, lrow, alpha, n0, need_mask,
                                                                                rlo, rhi, tq, scale);
                            pack_p<T, NS>(pa, s);
                            hprev = false;
                        } else {
                            const bool hf = HD && hw <= n0 + BN / 2;
                            resc = softmax(n0, hf, std::integral_constant<bool, FT>{});
                            pack(hf);
                            hprev = hf;
                            /* OB: the half tile's P padded with zeros */
                            if constexpr (OB)
                                if (hf) {
#pragma unroll
                                    for (int kk = NS / 4; kk < NS / 2; kk++) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
                                }
                        }
                    }

                    /* one pingpong turn: S_j issued, P_{j-1} V_{j-1} over the
                     * first W keys (a straight-line body per width, as ptxas
                     * serialises wgmma stages that span a branch), the softmax
                     * of S_j */
                    auto step = [&](auto wd, int j) {
                        const uint32_t c = kv + (uint32_t)j, pc = c - 1u;
                        const int st = (int)(c % NST), ps = (int)(pc % NST);
                        const uint32_t ph = (c / NST) & 1u, pph = (pc / NST) & 1u;
                        ws_turn_issue<Tr::LAZY, PP, CL>(bKf, bKe, bVf, st, ph, ps, pph, my_bar, other_bar, resc, s, o, alpha,
                                                lane, issue_s, [&](int q) { issue_pv(q, wd); });
                        const int n0 = (w.t_end - 1 - j) * BN;
                        const bool hf = !OB && HD && hw <= n0 + BN / 2;
                        resc = softmax(n0, hf, std::false_type{});
                        wg_wait<0>();
                        reg_fence(o);
                        release(bVe + 8 * ps);
                        pack(hf);
                        hprev = hf;
                    };
                    for (int j = js + 1; j < n; j++) {
                        if constexpr (HD) {
                            if (!OB && hprev)
                                step(HalfW{}, j);
                            else
                                step(FullW{}, j);
                        } else {
                            if (NN > 0 && narrow && j == js + 1)
                                step(NarrowW{}, j);
                            else
                                step(FullW{}, j);
                        }
                    }
                    /* last P V (after a narrow tile over all BN keys, as in
                     * attn_fwd_ws); the hand-over always happens (the cycle
                     * goes on into the next tile; the final one is absorbed
                     * below) */
                    auto last_pv = [&](auto wd) {
                        const uint32_t pc = kv + (uint32_t)(n - 1);
                        const int ps = (int)(pc % NST);
                        if (!Tr::LAZY || resc) scale_o(o, alpha);
                        mbar_wait(bVf + 8 * ps, (pc / NST) & 1u);
                        if (PP) named_sync(my_bar, 256);
                        wg_fence();
                        issue_pv(ps, wd);
                        wg_commit();
                        if (PP) named_arrive(other_bar, 256);
                        if (PRE && !sc.ctr && t + (int)gridDim.x < sc.ntiles) {
                            nx = setup(t + (int)gridDim.x, it + 1);
                            have_nx = true;
                        }
                        wg_wait<0>();
                        reg_fence(o);
                        release(bVe + 8 * ps);
                    };
                    if (HD && hprev)
                        last_pv(HalfW{});
                    else
                        last_pv(FullW{});
                } else {
                    /* every key tile masked for this warpgroup: the last turn
                     * empty too */
                    if (PP) named_sync(my_bar, 256);
                    if (PP) named_arrive(other_bar, 256);
                }
                kv += (uint32_t)n;
            }

            /* ---- epilogue: normalise, lse, O through this WG's Q slice ---- */
            const int b = sc.d_heads.div(w.bh), h = w.bh - b * p.nheads;
            float inv[2];
            finish_rows(p, lrow, mrow, inv, b, h, 0, r0, lq, tq);
            /* every wgmma of this warpgroup that read its Q slice has completed */
            named_sync(1 + NC + cw, 128);
            /* O (normalised, 16-bit) into this warp's 16 rows of the Q buffer */
            stage_o<T, NO, BM>(sQ, o, inv, cr * 64 + wq * 16, lane);
            /* the warp's rows to global memory by TMA (rows past lq are not
             * written), then the Q buffer back to the producer once the copy
             * has read it: the stores are made visible to the async proxy
             * (fence, every thread), the warp converges, lane 0 issues */
            fence_async_smem();
            __syncwarp();
            release_q(); /* a tile without keys had no first S */
            if (lane == 0) {
                const int wr0 = w.m0 + cr * 64 + wq * 16;
                if (wr0 < lq) {
#pragma unroll
                    for (int c = 0; c < CB; c++)
                        tma_store4(&tmo, sQ + c * (BM * 128) + (cr * 64 + wq * 16) * 128, c * 64, wr0, h, b);
                    bulk_commit();
                }
                pend = qi;
                if constexpr (NQ == 1) release_q();
            }
        }
        /* the last stores: complete before the CTA ends */
        if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
        /* the last consumer's final hand-over (or the opening one, if this
         * CTA had no keys at all) is still pending on barrier 1 */
        if (PP && cw == 0) named_sync(1, 256);
    }
    /* MC: no CTA ends while its partner may still arrive on its barriers */
    if constexpr (CL > 1) {
        __syncwarp();
        cluster_sync();
    }
#else
    (void)p;
    (void)sc;
    (void)tmq;
    (void)tmk;
    (void)tmv;
    (void)tmo;
#endif
}

} /* namespace sf_attn */

#endif
