/* bwd_wg.cuh - the dK/dV (and fast-mode dQ) kernel of the attention
 * backward on Hopper wgmma (sm_90a): 16-bit operands, f32 accumulators,
 * head dims up to D = 64 or 128, rows 16-byte aligned (p.vec16).
 *
 * The scheme of the FA2 kernel (bwd_fa2.cuh: a CTA per (kv head, sequence,
 * key block), K and V of the block kept in shared memory, the group's query
 * heads and query blocks walked with the next block's Q, dO, lse and D
 * loading by cp.async meanwhile), its products on wgmma.  Two warpgroups;
 * each owns 64 of the block's BN = 128 keys and their dK, dV rows (m64
 * accumulators); query blocks of BM = 64 rows:
 *     S^T  = K Q^T,  dP^T = V dO^T    ss m64n64k16 (K, V, Q, dO K-major)
 *     P^T, dS^T in the accumulators     as the FA2 kernel (same rounding)
 *     dV  += P^T dO, dK += dS^T Q       rs m64nDk16 (P^T, dS^T as A
 *                                       fragments; dO, Q MN-major)
 *     dQ   = dS K                       dS^T stored as dS[query][key] by
 *                                       stmatrix.trans; sst m64n64k16 (K
 *                                       MN-major): at D 128 each warpgroup
 *                                       takes 64 of the columns over all 128
 *                                       keys, at D 64 all columns over its
 *                                       own 64 keys (both partials added)
 * then the dQ partials go to shared memory in the accumulator's fragment
 * order (wg_acc_tile's comment) - at D 128 each warpgroup's 64 columns, at D 64
 * warpgroup 0's partial with warpgroup 1's added to it - and into the f32
 * accumulator by 16 KB bulk reduce-adds (cp.reduce.async.bulk), which run
 * while the next item is computed; attn_bwd_wg_dq_out converts the
 * accumulator.  DET
 * (the deterministic mode): the key blocks that add to a (head, query
 * block) take turns in key order on a counter (p.sem, zeroed before the
 * call), each partial's adds complete before the next may start, so every
 * element's sum has one order; the waits form a wavefront one block behind
 * the previous key block (its CTAs launch first: wgb::block_of).  The
 * fast mode runs a head's key blocks together, each walking the query
 * blocks from its own (wgb::item_row).  The dV / dK products run while dS
 * is stored and the dQ product issued: one wait for all three.  Shared
 * tiles in the 128-byte-swizzle layout of common/wgmma.cuh (column blocks
 * of 64 elements x rows, 1024-aligned).
 * Tiles without a masked element take the short path P = 2^(s sl2 - lse2)
 * (S's wait first, dP's product still running); the others evaluate mask,
 * softcap and ALiBi per element as the FA2 kernel.
 */
#ifndef SF_ATTN_BWD_WG_CUH
#define SF_ATTN_BWD_WG_CUH

#include "attn/bwd_fa2.cuh"
#include "common/wgmma.cuh"

namespace sf_attn {

template <int D> struct WgBwdSmem {
    static constexpr int BN = 128, BM = 64, NT = 256;
    static constexpr int KB = BN * D * 2;  /* K or V tile, bytes  */
    static constexpr int QB = BM * D * 2;  /* Q or dO tile        */
    static constexpr int SB = BM * BN * 2; /* dS[query][key]      */
    static constexpr int PB = 64 * 64 * 4; /* a warpgroup's dQ partial, f32 */
    /* K, V, two stages of (Q, dO), dS, two stages of (lse2, D), the two
     * warpgroups' dQ partials */
    static constexpr int OFF_V = KB, OFF_Q = 2 * KB, OFF_DS = 2 * KB + 4 * QB, OFF_ST = OFF_DS + SB;
    static constexpr int OFF_DQ = OFF_ST + 4 * BM * (int)sizeof(float);
    /* + 1 KiB to align the base to 1024 */
    static constexpr size_t bytes = (size_t)OFF_DQ + 2 * PB + 1024;
    static_assert(D == 64 || D == 128, "wgmma backward: head dim buckets 64 and 128");
};

/* The wg rows' dQ accumulator (p.dqacc): per head, p.acc_nb tiles of 64
 * query rows x D columns in f32; sequence b's query block qb is tile
 * wg_acc_tile (its blocks are contiguous and no two sequences share one).
 * Inside a tile, D / 64 parts of 64 columns, each in the order of the wgmma
 * accumulator fragments: element (row r, column c of the part) at
 * ((r / 16) 8 + c / 8) 128 + (4 (r % 8) + (c % 8) / 2) 4 + 2 ((r % 16) / 8)
 * + c % 2, so a warp's fragment is one float4 a lane, and a part one
 * contiguous 16 KB bulk reduce-add. */
__device__ __forceinline__ int64_t wg_acc_tile(const BwdParams &p, int b, int64_t q0, int h, int qb) {
    const int64_t base = p.varlen ? q0 / 64 + b : (int64_t)b * p.sem_nqb; /* q0 / 64 + b: see bwd.cu */
    return (int64_t)h * p.acc_nb + base + qb;
}

/* The per-item steps of the wgmma backward kernels (attn_bwd_wg here,
 * attn_bwd_ws in bwd_ws.cuh), for warpgroup wg (keys 64 wg.. of the BN = 128
 * key block) and a BM = 64 query block.  Shared tiles in the 128-byte
 * swizzle layout (column blocks of 64 elements x rows). */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace wgb {

constexpr int BN = 128, BM = 64, NQ = BM / 8;

/* S^T = K Q^T and dP^T = V dO^T: two commit groups */
template <typename T, int D>
__device__ __forceinline__ void issue_sdp(float (&s)[NQ][4], float (&dp)[NQ][4], uint32_t sK, uint32_t sV,
                                          uint32_t sQ, uint32_t sdO, int wg) {
    using sf_wg::wg_desc;
    sf_wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t koff = (kk >> 2) * (BN * 128) + wg * (64 * 128) + (kk & 3) * 32;
        const uint32_t qoff = (kk >> 2) * (BM * 128) + (kk & 3) * 32;
        sf_wg::Wg<T, BM>::ss(&s[0][0], wg_desc(sK + koff, 16, 1024), wg_desc(sQ + qoff, 16, 1024), kk > 0);
    }
    sf_wg::wg_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t koff = (kk >> 2) * (BN * 128) + wg * (64 * 128) + (kk & 3) * 32;
        const uint32_t qoff = (kk >> 2) * (BM * 128) + (kk & 3) * 32;
        sf_wg::Wg<T, BM>::ss(&dp[0][0], wg_desc(sV + koff, 16, 1024), wg_desc(sdO + qoff, 16, 1024), kk > 0);
    }
    sf_wg::wg_commit();
}

/* S^T, dP^T (both commit groups in flight) to P^T and dS^T in place;
 * element e of n-tile n: key kr + g + 8 (e >> 1), query 8 n + 2 t + (e & 1)
 * (Q n-tiles of 8 queries from i0).  sL: the rows' lse (log2 units), sD:
 * their D.  full: fa2_tile_full; otherwise fa2_masked_pds. */
template <int Q>
__device__ __forceinline__ void p_ds(const BwdParams &p, float (&s)[Q][4], float (&dp)[Q][4], const float *sL,
                                     const float *sD, bool full, int b, int h, int i0, int nq, int j0, int nk, int lq,
                                     int lk, int kr, int g, int t) {
    const float sl2 = p.scale * 1.4426950408889634f;
    if (full) {
        sf_wg::wg_wait<1>();
        sf_wg::reg_fence(s);
#pragma unroll
        for (int n = 0; n < Q; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = sf_ex2(fmaf(s[n][e], sl2, -sL[8 * n + 2 * t + (e & 1)]));
        sf_wg::wg_wait<0>();
        sf_wg::reg_fence(dp);
#pragma unroll
        for (int n = 0; n < Q; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[n][e] = s[n][e] * (dp[n][e] - sD[8 * n + 2 * t + (e & 1)]) * p.scale;
    } else {
        sf_wg::wg_wait<0>();
        sf_wg::reg_fence(s);
        sf_wg::reg_fence(dp);
        fa2_masked_pds<Q>(p, s, dp, sL, sD, b, h, i0, nq, j0, nk, lq, lk, kr, g, t);
    }
}

/* P^T and dS^T as rs A fragments (16 queries a k-step), rounded to T */
template <typename T>
__device__ __forceinline__ void pack_a(const float (&s)[NQ][4], const float (&dp)[NQ][4], uint32_t (&pa)[BM / 16][4],
                                       uint32_t (&ad)[BM / 16][4]) {
    using MMA = sf_mma16<T>;
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        pa[kk][0] = MMA::pack(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = MMA::pack(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = MMA::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = MMA::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        ad[kk][0] = MMA::pack(dp[2 * kk][0], dp[2 * kk][1]);
        ad[kk][1] = MMA::pack(dp[2 * kk][2], dp[2 * kk][3]);
        ad[kk][2] = MMA::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
        ad[kk][3] = MMA::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
    }
}

/* dV += P^T dO, dK += dS^T Q (B MN-major: LBO the next 64 columns, SBO 8
 * rows): one commit group */
template <typename T, int D>
__device__ __forceinline__ void issue_dkdv(float (&dk)[D / 8][4], float (&dv)[D / 8][4], const uint32_t (&pa)[BM / 16][4],
                                           const uint32_t (&ad)[BM / 16][4], uint32_t sQ, uint32_t sdO) {
    using sf_wg::wg_desc;
    sf_wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        sf_wg::Wg<T, D>::rs(&dv[0][0], pa[kk], wg_desc(sdO + kk * 2048, BM * 128, 1024));
        sf_wg::Wg<T, D>::rs(&dk[0][0], ad[kk], wg_desc(sQ + kk * 2048, BM * 128, 1024));
    }
    sf_wg::wg_commit();
}

/* dS^T to dS[query][key] in the K-major tile sdS: register r of ad[kk] is
 * the 8 x 8 block of keys kr + 8 (r & 1).., queries 16 kk + 8 (r >> 1)..;
 * the keys of warpgroup wg are column block wg, 16-byte chunk (key % 64) / 8.
 * Ends with the async-proxy fence (the tile is a wgmma operand next). */
__device__ __forceinline__ void store_ds(const uint32_t (&ad)[BM / 16][4], uint32_t sdS, int wg, int kr, int lane) {
    const int m = lane >> 3, rr = lane & 7;
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        const int q = 16 * kk + 8 * (m >> 1) + rr, ch = ((kr & 63) >> 3) + (m & 1);
        sf_wg::stmatrix_x4_t(sdS + wg * (BM * 128) + q * 128 + (((ch ^ q) & 7) << 4), ad[kk][0], ad[kk][1], ad[kk][2],
                             ad[kk][3]);
    }
    sf_wg::fence_async_smem();
}

/* dQ = dS K, one commit group: at D 128 warpgroup wg's 64 columns over all
 * BN keys (both warpgroups' dS stored), at D 64 all columns over its own 64
 * keys (its own dS stored) */
template <typename T, int D>
__device__ __forceinline__ void issue_dq(float (&c)[8][4], uint32_t sdS, uint32_t sK, int wg) {
    using sf_wg::wg_desc;
    if constexpr (D == 128) {
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
            sf_wg::Wg<T, 64>::sst(&c[0][0], wg_desc(sdS + (kk >> 2) * (BM * 128) + (kk & 3) * 32, 16, 1024),
                                  wg_desc(sK + wg * (BN * 128) + kk * 2048, BN * 128, 1024), kk > 0);
    } else {
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            sf_wg::Wg<T, 64>::sst(&c[0][0], wg_desc(sdS + wg * (BM * 128) + kk * 32, 16, 1024),
                                  wg_desc(sK + (wg * 64 + kk * 16) * 128, BN * 128, 1024), kk > 0);
    }
    sf_wg::wg_commit();
}

/* dK and dV of the key block through shared memory, for 16-byte coalesced
 * stores (scalar stores from the fragments throttled the store queue at L
 * 1024, 16 items a CTA): attn_bwd_ws's epilogue.  stage_dkdv: the thread's
 * fragments (rows kr + g, kr + g + 8) into two BN x D tiles at sbuf (K,
 * then V), rows of D 16-bit elements whose 16-byte chunks are XOR-swizzled
 * by row % 8 (conflict-free both ways); the caller then syncs every thread
 * that staged, and copy_dkdv (NT threads) writes the rows below nk, the
 * columns below d (16-byte stores where p.dkv16, else element by element). */
template <typename T, int D>
__device__ __forceinline__ void stage_dkdv(unsigned char *sbuf, const float (&dk)[D / 8][4], const float (&dv)[D / 8][4],
                                           int kr, int g, int t) {
    using MMA = sf_mma16<T>;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = kr + g + 8 * half;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const uint32_t off = (uint32_t)r * (D * 2) + (uint32_t)((n ^ (r & 7)) * 16 + 4 * t);
            *reinterpret_cast<uint32_t *>(sbuf + off) = MMA::pack(dk[n][2 * half], dk[n][2 * half + 1]);
            *reinterpret_cast<uint32_t *>(sbuf + BN * D * 2 + off) = MMA::pack(dv[n][2 * half], dv[n][2 * half + 1]);
        }
    }
}
template <typename T, int D, int NT>
__device__ __forceinline__ void copy_dkdv(const BwdParams &p, const unsigned char *sbuf, int b, int kvh, int64_t k0, int j0,
                                          int nk, int tid) {
    constexpr int CH = D / 8; /* 16-byte chunks a row */
    for (int x = tid; x < 2 * BN * CH; x += NT) {
        const int kv = x / (BN * CH), r = (x / CH) % BN, c = x % CH;
        if (r >= nk || 8 * c >= p.d) continue;
        const uint4 v = *reinterpret_cast<const uint4 *>(sbuf + kv * (BN * D * 2) + r * (D * 2) + ((c ^ (r & 7)) * 16));
        T *dst = kv ? (T *)p.dv + (int64_t)b * p.dv_sb + (k0 + j0 + r) * p.dv_sr + (int64_t)kvh * p.dv_sh
                    : (T *)p.dk + (int64_t)b * p.dk_sb + (k0 + j0 + r) * p.dk_sr + (int64_t)kvh * p.dk_sh;
        if (p.dkv16) {
            *reinterpret_cast<uint4 *>(dst + 8 * c) = v;
        } else {
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const uint32_t *pw = &w[e]; /* the two 16-bit elements of word e */
                dst[8 * c + 2 * e] = reinterpret_cast<const T *>(pw)[0];
                dst[8 * c + 2 * e + 1] = reinterpret_cast<const T *>(pw)[1];
            }
        }
    }
}

/* The warpgroup's dQ partial c to shared memory in the accumulator's
 * fragment order (wg_acc_tile), one float4 a lane and n-tile (no bank
 * conflicts); ADD: added to what the same lane of the other warpgroup put
 * there. */
template <bool ADD>
__device__ __forceinline__ void put_dq(float4 *buf, const float (&c)[8][4], int warp, int lane) {
    const int fx = ((warp & 3) * 8) * 32 + lane; /* the lane's float4, n-tile 0 */
#pragma unroll
    for (int n = 0; n < 8; n++) {
        float4 v = make_float4(c[n][0], c[n][1], c[n][2], c[n][3]);
        if (ADD) {
            const float4 u = buf[fx + 32 * n];
            v = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
        }
        buf[fx + 32 * n] = v;
    }
}

/* Rows i0.. (nq of them) of head h's Q and dO into the stage's swizzled
 * BM x D tiles at sq and sq + BM D 2 bytes: row-stepped cp.async by NT
 * threads (det +2-3% over the index arithmetic per copy). */
template <typename T, int D, int NT>
__device__ __forceinline__ void load_qdo(const BwdParams &p, uint32_t sq, int b, int64_t q0, int h, int i0, int nq,
                                         int d8, int tid) {
    sf_wg::load_tile_sw_rs<BM, D, NT>(sq, (const T *)p.q + (int64_t)b * p.q_sb + (q0 + i0) * p.q_sr + (int64_t)h * p.q_sh,
                                      p.q_sr, nq, d8, tid);
    sf_wg::load_tile_sw_rs<BM, D, NT>(sq + BM * D * 2,
                                      (const T *)p.dout + (int64_t)b * p.do_sb + (q0 + i0) * p.do_sr + (int64_t)h * p.do_sh,
                                      p.do_sr, nq, d8, tid);
}

/* The block's kv head, sequence and key block from the 1-D grid of groups
 * of p.zgroup key blocks (a key block past the last one starts at or past
 * every sequence's length: the kernels return):
 * group members fastest, then kv heads, sequences, groups.  The members of
 * a group run together and share a head's Q, dO and dQ accumulator tiles in
 * L2; the deterministic mode takes groups of 1, so the CTAs of key block
 * z - 1, whose reduces z waits for, start first. */
__device__ __forceinline__ void block_of(const BwdParams &p, int &kvh, int &b, int &z) {
    const int nkv = p.nheads / p.heads_per_kv, g = p.zgroup;
    unsigned r = blockIdx.x;
    const int zl = (int)(r % (unsigned)g);
    r /= (unsigned)g;
    kvh = (int)(r % (unsigned)nkv);
    r /= (unsigned)nkv;
    b = (int)(r % (unsigned)p.batch);
    z = (int)(r / (unsigned)p.batch) * g + zl;
}

/* The rotation of key block z's walk over its nbq query blocks: none, or
 * (zrot) forward by z. */
__device__ __forceinline__ int item_rot(int zrot, int z, int nbq) {
    return zrot && nbq ? z % nbq : 0;
}

/* The first query row of a CTA's item it (head kvh * hpk + it / nbq): its
 * query blocks [ib0, ib0 + nbq) walked from ib0 + rot. */
__device__ __forceinline__ int item_row(int it, int nbq, int ib0, int rot) {
    int r = it % nbq + rot;
    r -= r >= nbq ? nbq : 0;
    return (ib0 + r) * BM;
}

/* The item's dQ partial into buffer buf: at D 128 the warpgroup's own 64
 * columns; at D 64 warpgroup 0's partial, then (after named barrier bar of
 * both warpgroups) warpgroup 1's added to it. */
template <int D>
__device__ __forceinline__ void put_partial(float4 *buf, const float (&c)[8][4], int wg, int warp, int lane, int bar) {
    if constexpr (D == 128) {
        put_dq<false>(buf, c, warp, lane);
    } else {
        if (wg == 0) put_dq<false>(buf, c, warp, lane);
        sf_wg::named_sync(bar, 256); /* warpgroup 0's partial written */
        if (wg == 1) put_dq<true>(buf, c, warp, lane);
    }
}

/* The deterministic mode's turn of key block z on the (head, query block)
 * counter: the key blocks that see a query block are contiguous, from the
 * block of its first row's first key, each adding D / 64 reduces */
template <int D>
__device__ __forceinline__ int det_ahead(const BwdParams &p, int i0, int lq, int lk, int z) {
    int lo, hi;
    key_range(i0, lq, lk, p.wl, p.wr, lo, hi);
    return (D / 64) * (z - lo / BN);
}

/* Where a CTA of the wg kernels works: its kv head, sequence and key block
 * (block_of), the sequence's rows and keys, and its items (the query blocks
 * that see the key block, times the group's heads, in item_row's order). */
template <int BN, int BM> struct Place {
    int kvh, b, zb, j0, nk, lq, lk, ib0, nbq, items, rot;
    int64_t q0, k0;
    /* false: the key block starts past the sequence's keys */
    __device__ __forceinline__ bool init(const BwdParams &p) {
        block_of(p, kvh, b, zb);
        j0 = zb * BN;
        bwd_seq(p, b, q0, lq, k0, lk);
        if (j0 >= lk) return false;
        nk = min(BN, lk - j0);
        int ib1;
        fa2_qblocks<BM>(lq, lk, p.wl, p.wr, j0, nk, ib0, ib1);
        nbq = ib1 - ib0, items = nbq * p.heads_per_kv, rot = item_rot(p.zrot, zb, nbq);
        return true;
    }
    /* item it: its query head and first row */
    __device__ __forceinline__ int head(const BwdParams &p, int it) const { return kvh * p.heads_per_kv + it / nbq; }
    __device__ __forceinline__ int row(int it) const { return item_row(it, nbq, ib0, rot); }
    /* item it's Q and dO rows into the tiles at sQ (load_qdo) */
    template <typename T, int D, int NT>
    __device__ __forceinline__ void load_item(const BwdParams &p, uint32_t sQ, int it, int d8, int tid) const {
        const int i0 = row(it);
        load_qdo<T, D, NT>(p, sQ, b, q0, head(p, it), i0, min(BM, lq - i0), d8, tid);
    }
    /* lse (log2 units; threads < BM) or D (threads BM..2 BM - 1) of item it's row tid % BM */
    __device__ __forceinline__ float stat(const BwdParams &p, int it, int tid) const {
        return bwd_row_stat<BM>(p, b, q0, head(p, it), row(it), lq, tid);
    }
};

} /* namespace wgb */
#endif

template <typename T, int D, bool DET>
__global__ void __launch_bounds__(256, 1) attn_bwd_wg(const BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using SM = WgBwdSmem<D>;
    constexpr int BN = SM::BN, BM = SM::BM, NT = SM::NT;
    constexpr int NQ = BM / 8, ND = D / 8;
    using sf_wg::fence_async_smem;
    using sf_wg::load_tile_sw;
    using sf_wg::reg_fence;
    using sf_wg::wg_wait;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sraw = sf_smem_u32(smem_raw);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    const uint32_t sK = sbase, sV = sbase + SM::OFF_V, sQ0 = sbase + SM::OFF_Q, sdS = sbase + SM::OFF_DS;
    float *sStat = reinterpret_cast<float *>(smem_raw + (sbase - sraw) + SM::OFF_ST); /* stage s: lse2, then D */

    wgb::Place<BN, BM> pl;
    if (!pl.init(p)) return;
    const int d8 = p.d >> 3;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2, g = lane >> 2, t = lane & 3;
    const int kr = 16 * warp; /* the warp's first key in the block: warpgroup wg holds keys 64 wg.. */
    /* the dQ partials' two 16 KB buffers: at D 128 one a warpgroup, at D 64
     * one an item parity (warpgroup 1 adds warpgroup 0's partial to its own) */
    const uint32_t sdQ0 = sbase + SM::OFF_DQ;
    float4 *const pdQ0 = reinterpret_cast<float4 *>(smem_raw + (sdQ0 - sraw));
    const bool plain = p.softcap <= 0.f && !p.alibi;

    load_tile_sw<BN, D, NT>(sK, (const T *)p.k + (int64_t)pl.b * p.k_sb + (pl.k0 + pl.j0) * p.k_sr + (int64_t)pl.kvh * p.k_sh,
                            p.k_sr, pl.nk, d8, tid);
    load_tile_sw<BN, D, NT>(sV, (const T *)p.v + (int64_t)pl.b * p.v_sb + (pl.k0 + pl.j0) * p.v_sr + (int64_t)pl.kvh * p.v_sh,
                            p.v_sr, pl.nk, d8, tid);

    /* item it's Q and dO tiles into stage it % 2 */
    auto issue = [&](int it) { pl.template load_item<T, D, NT>(p, sQ0 + (it & 1) * 2 * SM::QB, it, d8, tid); };
    float st_next = 0.f;
    if (pl.items > 0) {
        issue(0);
        if (tid < 2 * BM) sStat[tid] = pl.stat(p, 0, tid);
    }
    sf_cp_async_commit();

    float dk[ND][4], dv[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;

    for (int it = 0; it < pl.items; it++) {
        /* D 64: item it - 2's reduce has read this item's dQ buffer (published by the barrier) */
        if (D == 64 && tid == 128) sf_wg::bulk_wait_read<1>();
        __syncthreads(); /* the other stage and dS: the previous item's readers are done */
        if (it + 1 < pl.items) {
            issue(it + 1);
            if (tid < 2 * BM) st_next = pl.stat(p, it + 1, tid);
        }
        sf_cp_async_commit();
        sf_cp_async_wait<1>(); /* item it (and K, V) landed */
        fence_async_smem();
        __syncthreads();

        const int h = pl.head(p, it), i0 = pl.row(it);
        const int nq = min(BM, pl.lq - i0);
        const uint32_t sQ = sQ0 + (it & 1) * 2 * SM::QB, sdO = sQ + SM::QB;
        const float *sL = sStat + (it & 1) * 2 * BM, *sD = sL + BM;

        float s[NQ][4], dp[NQ][4];
        wgb::issue_sdp<T, D>(s, dp, sK, sV, sQ, sdO, wg);
        wgb::p_ds(p, s, dp, sL, sD, fa2_tile_full<BM, BN>(p, plain, i0, nq, pl.j0, pl.nk, pl.lq, pl.lk), pl.b, h, i0, nq, pl.j0, pl.nk, pl.lq, pl.lk, kr, g, t);
        uint32_t pa[BM / 16][4], ad[BM / 16][4];
        wgb::pack_a<T>(s, dp, pa, ad);
        wgb::issue_dkdv<T, D>(dk, dv, pa, ad, sQ, sdO);

        float c[8][4]; /* dQ: 64 queries x 64 columns of this warpgroup */
        wgb::store_ds(ad, sdS, wg, kr, lane);
        /* D 128: the previous item's bulk reduce has read this warpgroup's
         * dQ buffer (published to the warpgroup by the barrier below) */
        if (D == 128 && (tid & 127) == 0) sf_wg::bulk_wait_read0();
        if (D == 128) __syncthreads(); /* both warpgroups' dS */
        else sf_wg::named_sync(1 + wg, 128); /* this warpgroup's dS */
        wgb::issue_dq<T, D>(c, sdS, sK, wg);
        wg_wait<0>();
        reg_fence(dv);
        reg_fence(dk);
        reg_fence(c);
        /* dQ: the warpgroup's 64 x 64 partial (D 128: its 64 columns; D 64: all
         * columns over its own keys) to shared memory in the accumulator's
         * fragment order; at D 64 warpgroup 1 adds warpgroup 0's partial to its
         * own there.  Then one 16 KB bulk reduce-add into the accumulator tile
         * a buffer, issued by the writing warpgroup's first thread.  Rows past
         * nq hold zeros. */
        float4 *buf = pdQ0 + (D == 128 ? wg : (it & 1)) * (SM::PB / 16);
        wgb::put_partial<D>(buf, c, wg, warp, lane, 3);
        if (D == 128 || wg == 1) {
            fence_async_smem();
            sf_wg::named_sync(4 + wg, 128);
            if ((tid & 127) == 0) {
                const uint32_t sbuf = sdQ0 + (uint32_t)((buf - pdQ0) * 16);
                float *dst = p.dqacc + wg_acc_tile(p, pl.b, pl.q0, h, i0 / BM) * (BM * D) + (D == 128 ? wg * (SM::PB / 4) : 0);
                if constexpr (DET) {
                    /* this (head, query block)'s counter counts the reduces done,
                     * the key blocks in order */
                    int *sem = p.sem + ((int64_t)h * p.batch + pl.b) * p.sem_nqb + i0 / BM;
                    const int ahead = wgb::det_ahead<D>(p, i0, pl.lq, pl.lk, pl.zb);
                    while (sf_wg::ld_acquire_gpu(sem) < ahead) {
                    }
                    sf_wg::bulk_reduce_add_f32(dst, sbuf, SM::PB);
                    sf_wg::bulk_commit();
                    sf_wg::bulk_wait<0>(); /* the adds done before the next key block's turn */
                    sf_wg::red_release_add_gpu(sem, 1);
                } else {
                    sf_wg::bulk_reduce_add_f32(dst, sbuf, SM::PB);
                    sf_wg::bulk_commit();
                }
            }
        }
        if (it + 1 < pl.items && tid < 2 * BM) sStat[((it + 1) & 1) * 2 * BM + tid] = st_next;
    }
    sf_cp_async_wait<0>();
    if ((tid & 127) == 0) sf_wg::bulk_wait<0>(); /* the last reduce has read its source */
    fa2_store_dkdv<T, ND>(p, dk, dv, pl.b, pl.kvh, pl.k0, pl.j0, pl.nk, kr, g, t);
#else
    (void)p;
#endif
}

/* The wg rows' postprocess: the accumulator (wg_acc_tile's fragment order)
 * to dq.  A block per (query block, sequence, head); per 64-column part,
 * the 16 KB read coalesced into a row-major shared tile (rows padded to 72
 * floats: the fragment's float2 stores meet no bank twice a half-warp), then
 * 8 elements of a row a thread (16-byte stores when V16). */
template <typename T, int D, bool V16>
__global__ void __launch_bounds__(256) attn_bwd_wg_dq_out(const BwdParams p) {
    constexpr int LD = 72;
    __shared__ float4 tile4[64 * LD / 4];
    float *tile = reinterpret_cast<float *>(tile4);
    const int qb = blockIdx.x, b = blockIdx.y, h = blockIdx.z;
    int64_t q0, k0;
    int lq, lk;
    bwd_seq(p, b, q0, lq, k0, lk);
    const int i0 = qb * 64;
    if (i0 >= lq) return;
    const int nq = min(64, lq - i0);
    const float4 *src = reinterpret_cast<const float4 *>(p.dqacc + wg_acc_tile(p, b, q0, h, qb) * (64 * D));
    for (int part = 0; part * 64 < p.d && part < D / 64; part++) {
        __syncthreads(); /* the previous part's readers are done */
        for (int x = threadIdx.x; x < 1024; x += 256) {
            /* float4 x: n-tile n of warp w, lane (g, t): rows 16 w + g (xy) and + 8 (zw), columns 8 n + 2 t */
            const float4 v = src[part * 1024 + x];
            const int w = x >> 8, n = (x >> 5) & 7, lane = x & 31, r = 16 * w + (lane >> 2), c = 8 * n + 2 * (lane & 3);
            *reinterpret_cast<float2 *>(&tile[r * LD + c]) = make_float2(v.x, v.y);
            *reinterpret_cast<float2 *>(&tile[(r + 8) * LD + c]) = make_float2(v.z, v.w);
        }
        __syncthreads();
        for (int x = threadIdx.x; x < 64 * 8; x += 256) {
            const int r = x >> 3, c = 8 * (x & 7);
            if (r >= nq || part * 64 + c >= p.d) continue; /* d % 8 == 0: the 8 are in */
            const float4 u = *reinterpret_cast<const float4 *>(&tile[r * LD + c]);
            const float4 v = *reinterpret_cast<const float4 *>(&tile[r * LD + c + 4]);
            T *out = (T *)p.dq + (int64_t)b * p.dq_sb + (q0 + i0 + r) * p.dq_sr + (int64_t)h * p.dq_sh + part * 64 + c;
            if constexpr (V16) {
                uint4 o;
                o.x = sf_mma16<T>::pack(u.x, u.y);
                o.y = sf_mma16<T>::pack(u.z, u.w);
                o.z = sf_mma16<T>::pack(v.x, v.y);
                o.w = sf_mma16<T>::pack(v.z, v.w);
                *reinterpret_cast<uint4 *>(out) = o;
            } else {
                const float e[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
#pragma unroll
                for (int k = 0; k < 8; k++) out[k] = sf_elem<T>::from_f(e[k]);
            }
        }
    }
}

} /* namespace sf_attn */

#endif
