/* fwd_ws.cuh - Hopper (sm_90a) attention forward, warp-specialised
 * (the FlashAttention-3 structure), dense batches with d = 64, 128, 192
 * or 256.
 *
 * CTA = 1 + NC warpgroups, one per (BM = 64 * NC query rows, head):
 *   WG0  producer: drops to 24 (NC 2) or 32 (NC 3) registers
 *        (setmaxnreg.dec); one thread issues TMA tile loads
 *        (cp.async.bulk.tensor.4d, 128-byte swizzle, the tensor maps built
 *        on the host and passed as __grid_constant__) for Q once and for K
 *        and V into an NST-stage ring, each load completing on its own
 *        "full" mbarrier; it refills a stage once every consumer warp has
 *        released it ("empty" mbarrier, 4 * NC warp arrivals).
 *   WG1..WGNC  consumers (setmaxnreg.inc 240 or 160): 64 query rows each.
 *        S = Q K^T : wgmma m64n{BN}k16, Q and K from shared memory;
 *        O += P V  : wgmma m64n{D}k16, P from registers, V MN-major.
 * Intra-warpgroup overlap: the wgmma for S_j is issued before O += P_{j-1}
 * V_{j-1}; the softmax of S_j runs while P V is in flight (wait_group 1),
 * and O is rescaled by the previous alpha before the P V issue, so nothing
 * waits on the P V result except the next iteration's rescale.
 * Pingpong: named barriers 1..NC make the consumers take turns (in a
 * cycle) issuing their GEMM blocks, so one warpgroup's softmax overlaps
 * the others' tensor-core work (without it: 393 vs 438 TFLOP/s at d64,
 * 622 vs 687 at d128, H200 L16384).
 * Tiles: BN = 128 keys.  d128: BM 128 (O 64 + S 64 + P 32 registers fit
 * 240), 2 stages (3 stages, 225 KiB of shared memory, measured slower);
 * d64: 3 stages, BM 128 or 192 (the launcher picks; 192 fits 160 registers
 * with no spill and measured +14% from L 2048).  d256: BM 128, BN 80,
 * 2 stages (O 128 + S 40 + P 20 registers; Q 64 KiB + 4 x 40 KiB of K/V);
 * d192: BM 128, BN 112, 2 stages (O 96 + S 56 + P 28; 48 + 4 x 42 KiB).
 * Each row tile is D / 64 TMA boxes of 64 columns (the 128-byte swizzle
 * takes 64 16-bit elements per row).
 *
 * TMA zero-fills rows past the tensor (dims are the dense lq / lk), so
 * padded K and V rows are 0, never garbage; varlen batches (rows of the
 * next sequence follow in memory and could be anything past cu_seqlens)
 * stay on attn_fwd_wgmma, which zero-fills with cp.async.
 * The mask sets raw scores to -inf and the softmax folds the scale into one
 * FFMA per element (sf_ex2(s * scale - m)): valid for scale > 0 only, so the
 * launcher sends negative scales elsewhere.
 * Epilogue: each consumer stages its 64 x D output rows in its own (no
 * longer read) slice of the swizzled Q tile for 16-byte coalesced stores.
 */
#ifndef SF_ATTN_FWD_WS_CUH
#define SF_ATTN_FWD_WS_CUH

#include "attn/fwd_wgmma.cuh"

#include <cuda.h> /* CUtensorMap (a type only: nothing links libcuda) */

namespace sf_attn {

/* keys per K/V tile: 128 up to d 128; d 192 and 256 take 112 and 80 so
 * that O (D/2 registers) + S (BN/2) + P (BN/4) fit under 240 and Q + 2
 * stages of K and V fit the 227 KiB of shared memory (d 256: 64 + 4 x 40 =
 * 224 KiB; d 192: 48 + 4 x 42 = 216 KiB) */
template <int D> struct WsBn { static constexpr int value = D <= 128 ? 128 : D == 192 ? 112 : 80; };

template <int D, int BM_, int NST, int BN_ = WsBn<D>::value> struct WsTraits {
    static constexpr int BN = BN_;
    static constexpr int BM = BM_, NC = BM_ / 64, NT = 128 * (NC + 1);
    /* registers: 64K per SM shared by the producer and NC consumers */
    static constexpr int REG_P = NC == 2 ? 24 : 32, REG_C = NC == 2 ? 240 : 160;
    static constexpr int QBYTES = BM * D * 2, KVBYTES = BN * D * 2;
    /* lazy rescaling of O (ws_softmax): up to 12% faster at d 128 / 256 from
     * L 4096, but 3-7% slower for 128-row d 64 tiles, which keep the eager
     * form */
    static constexpr bool LAZY = !(D == 64 && BM == 128);
    static constexpr int BAR_OFF = QBYTES + 2 * NST * KVBYTES;
    /* tiles, 1 + 4 * NST mbarriers, 1 KiB to align the base to 1024 */
    static constexpr size_t SMEM = (size_t)BAR_OFF + (1 + 4 * NST) * 8 + 1024;
    static_assert(D == 64 || D == 128 || D == 192 || D == 256, "ws path: head dims 64, 128, 192, 256");
    static_assert(BM == 128 || BM == 192, "2 or 3 consumer warpgroups");
    static_assert(D <= 128 || (BM == 128 && NST == 2), "d 192 / 256: 128 rows, 2 stages");
    static_assert(BN % 16 == 0 && (BN * 128) % 1024 == 0, "k-steps of 16 keys, 1 KiB-aligned blocks");
    static_assert(SMEM <= 227 * 1024, "over the opt-in shared memory of sm_90");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using sf_wg::mbar_arrive;
using sf_wg::mbar_expect_tx;
using sf_wg::mbar_init;
using sf_wg::mbar_init_fence;
using sf_wg::mbar_wait;
using sf_wg::mbar_wait_sleep;
__device__ __forceinline__ void tma_load4(uint32_t dst, const void *map, int c0, int c1, int c2,
                                          int c3, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                 "r"(bar)
                 : "memory");
}
using sf_wg::named_arrive;
using sf_wg::named_sync;

/* A K or V stage handed back to the producer: lane 0 arrives on this CTA's
 * empty barrier; with CL > 1 (attn_fwd_wsp in clusters whose CTAs each
 * load a part of every stage into all of them) lane r arrives on CTA r's
 * barrier at the same offset, which counts the warps of the whole cluster. */
template <int CL> __device__ __forceinline__ void kv_release(uint32_t bar, int lane) {
    if constexpr (CL == 1) {
        if (lane == 0) mbar_arrive(bar);
    } else {
        if (lane < CL) sf_wg::mbar_arrive_cluster(bar, (uint32_t)lane);
    }
}

/* ws_softmax's need_mask for the key tile [n0, n0 + bn) of a query tile
 * whose rows all see [full_lo, full_hi): 2 when a row's lower bound can fall
 * inside, else 1 when an upper bound can, else 0 */
__device__ __forceinline__ int mask_kind(int n0, int bn, int full_lo, int full_hi) {
    return n0 < full_lo ? 2 : (n0 + bn > full_hi ? 1 : 0);
}

/* Online softmax on a raw 16 x (8*NS) score fragment, scale > 0: mask to
 * -inf (boundary tiles only), new running max m (log2 units), s -> P,
 * partial row sums; returns the rescale factors of O in alpha, and whether
 * O needs them (false: alpha is 1, see the lazy rescaling below).  NV <= NS:
 * only the first NV column groups count (a half tile of attn_fwd_wsp); the
 * others are neither read nor written.  FIRST: the row's first key tile
 * (m -inf, l 0, O 0 before it), which needs no vote and no rescale.  (A
 * quarter of the exponentials by a cubic on the FMA pipes was tried and
 * measured slower.) */
template <int NS, int NV = NS, bool LAZY = true, bool FIRST = false>
__device__ __forceinline__ bool ws_softmax(float (&s)[NS][4], float *mrow, float *lrow,
                                           float *alpha, int n0, int need_mask, const int *rlo,
                                           const int *rhi, int tq, float scale) {
    /* need_mask: 1 the keys past a row's upper bound only (a causal
     * diagonal, no left window), 2 both bounds.  Compared relative to the
     * thread's first column, so each test is against an immediate. */
    if (need_mask) {
        int lo[2], hi[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            lo[rr] = rlo[rr] - n0 - 2 * tq;
            hi[rr] = rhi[rr] - n0 - 2 * tq;
        }
        if (need_mask == 1) {
#pragma unroll
            for (int i = 0; i < NV; i++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (i * 8 + (e & 1) >= hi[e >> 1]) s[i][e] = -INFINITY;
        } else {
#pragma unroll
            for (int i = 0; i < NV; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = i * 8 + (e & 1);
                    if (c < lo[e >> 1] || c >= hi[e >> 1]) s[i][e] = -INFINITY;
                }
        }
    }
    /* the row's new running max (log2 units): this tile's max over the
     * quad, scaled, against the old one */
    auto row_max = [&](int rr) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < NV; i++) mx = fmaxf(mx, fmaxf(s[i][2 * rr], s[i][2 * rr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        return fmaxf(mrow[rr], mx * scale);
    };
    float base[2];
    bool keep = false;
    if constexpr (FIRST) {
        /* the tile's first key tile: O is 0 and l is 0, so nothing to
         * rescale (alpha 1, returns false) and no vote; the max is the
         * tile's (-inf for a row that sees nothing: base 0, P 0).  The same
         * m, l and P as the general path, bit for bit. */
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const float mx = row_max(rr);
            base[rr] = mx == -INFINITY ? 0.f : mx;
            alpha[rr] = 1.f;
            mrow[rr] = mx;
        }
    } else if constexpr (!LAZY) {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const float mx = row_max(rr);
            /* base 0 while the row has seen nothing: exps stay 0, no NaN */
            base[rr] = mx == -INFINITY ? 0.f : mx;
            alpha[rr] = sf_ex2(mrow[rr] - base[rr]);
            mrow[rr] = mx;
        }
    } else {
        float mt[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) mt[rr] = row_max(rr);
        /* Lazy rescaling: while no row of the warp has grown past its
         * running max by more than 8 (log2 units), the warp keeps the old
         * max (P <= 2^8, harmless in fp32 sums and 16-bit P), alpha is 1 and
         * the caller skips the rescale of O; O / l and lse are the same (both
         * use the kept max).  A row that has seen nothing (max -inf) keeps
         * only while it still has nothing.  Warp-uniform, so the caller's
         * skip is a uniform branch. */
        keep = __all_sync(0xffffffffu, mt[0] <= mrow[0] + 8.f && mt[1] <= mrow[1] + 8.f);
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const float m = keep ? mrow[rr] : mt[rr];
            base[rr] = m == -INFINITY ? 0.f : m;
            alpha[rr] = keep ? 1.f : sf_ex2(mrow[rr] - base[rr]);
            mrow[rr] = m;
        }
    }
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                s[i][2 * rr + e] = sf_ex2(fmaf(s[i][2 * rr + e], scale, -base[rr]));
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < NV; i++) sum += s[i][2 * rr] + s[i][2 * rr + 1];
        lrow[rr] = FIRST ? sum : lrow[rr] * alpha[rr] + sum;
    }
    return !FIRST && !keep;
}

template <typename T, int NS, int NV = NS>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[NS / 2][4], const float (&s)[NS][4]) {
#pragma unroll
    for (int kk = 0; kk < NV / 2; kk++) {
        pa[kk][0] = sf_mma16<T>::pack(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = sf_mma16<T>::pack(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = sf_mma16<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = sf_mma16<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}
/* O *= alpha per row (fragment rows g and g + 8) */
template <int NO> __device__ __forceinline__ void scale_o(float (&o)[NO][4], const float *alpha) {
#pragma unroll
    for (int i = 0; i < NO; i++) {
        o[i][0] *= alpha[0]; o[i][1] *= alpha[0];
        o[i][2] *= alpha[1]; o[i][3] *= alpha[1];
    }
}

/* The issue half of one pingpong turn (attn_fwd_ws, attn_fwd_wsp): wait
 * for K stage st, take the turn, S = Q K^T, O rescaled when the last
 * softmax asks (resc), wait for V stage ps, P V, hand the turn on, wait for
 * S (the P V stays in flight), K's stage back to the producer (kv_release).
 * PP false: no turn is taken or handed on (a kernel without pingpong).
 * CL: CTAs per cluster, as kv_release. */
template <bool LAZY, bool PP = true, int CL = 1, int NS, int NO, typename FS, typename FPV>
__device__ __forceinline__ void ws_turn_issue(uint32_t bKf, uint32_t bKe, uint32_t bVf, int st, uint32_t ph,
                                              int ps, uint32_t pph, int my_bar, int other_bar, bool resc,
                                              float (&s)[NS][4], float (&o)[NO][4], const float *alpha, int lane,
                                              FS issue_s, FPV issue_pv) {
    mbar_wait(bKf + 8 * st, ph);
    if (PP) named_sync(my_bar, 256);
    wg_fence();
    issue_s(st);
    wg_commit();
    if (!LAZY || resc) scale_o(o, alpha);
    mbar_wait(bVf + 8 * ps, pph);
    wg_fence();
    issue_pv(ps);
    wg_commit();
    if (PP) named_arrive(other_bar, 256);
    wg_wait<1>();
    reg_fence(s);
    kv_release<CL>(bKe + 8 * st, lane);
}

/* The first turn of a tile (attn_fwd_ws, attn_fwd_wsp): wait for K stage
 * st, take the turn, S = Q K^T alone, hand the turn on, wait for S, K's
 * stage back to the producer (kv_release).  PP, CL as for ws_turn_issue. */
template <bool PP = true, int CL = 1, int NS, typename FS>
__device__ __forceinline__ void ws_turn_first_s(uint32_t bKf, uint32_t bKe, int st, uint32_t ph, int my_bar,
                                                int other_bar, float (&s)[NS][4], int lane, FS issue_s) {
    mbar_wait(bKf + 8 * st, ph);
    if (PP) named_sync(my_bar, 256);
    wg_fence();
    issue_s(st);
    wg_commit();
    if (PP) named_arrive(other_bar, 256);
    wg_wait<0>();
    reg_fence(s);
    kv_release<CL>(bKe + 8 * st, lane);
}

/* The leading key tiles that no row of this warpgroup sees (attn_fwd_ws,
 * attn_fwd_wsp: 80-key tiles, and wsp's 64-key ones at d 256), from tile
 * t_end - 1 down, js of them returned, each an empty turn (wait for its K
 * and V, which the producer loads for the other warpgroup, pass the turn,
 * hand both stages back; c0: the ring count of the tile's first key tile).
 * narrow: the first tile this warpgroup sees needs no more than its first
 * NN keys (never with NN = 0: that tile holds a key below hw; hw: the
 * warpgroup's largest key bound). */
template <int BN, int NN, int NST, int CL = 1>
__device__ __forceinline__ int ws_skip_leading(int n, int t_end, int hw, uint32_t c0, bool &narrow, uint32_t bKf,
                                               uint32_t bVf, uint32_t bKe, uint32_t bVe, int my_bar, int other_bar,
                                               int lane) {
    const int js = min(n, max(0, t_end - (hw + BN - 1) / BN));
    narrow = js < n && hw - (t_end - 1 - js) * BN <= NN;
    for (int j = 0; j < js; j++) {
        const uint32_t c = c0 + (uint32_t)j;
        const int st = (int)(c % NST);
        const uint32_t ph = (c / NST) & 1u;
        mbar_wait(bKf + 8 * st, ph);
        mbar_wait(bVf + 8 * st, ph);
        named_sync(my_bar, 256);
        named_arrive(other_bar, 256);
        kv_release<CL>(bKe + 8 * st, lane);
        kv_release<CL>(bVe + 8 * st, lane);
    }
    return js;
}

/* O (times inv per row, 16-bit) into the warp's 16 rows of a 128-byte-
 * swizzled BM-row tile at sq (the layout of the tensor maps) by stmatrix:
 * x4 k takes the 8-column blocks 2k and 2k + 1, rows 0-7 and 8-15; lane l
 * addresses row l % 8 of matrix l / 8 (matrix m: rows 8 (m % 2) + ..,
 * block 2k + m / 2).  row0: the warp's first tile row (a multiple of 16). */
template <typename T, int NO, int BM>
__device__ __forceinline__ void stage_o(uint32_t sq, const float (&o)[NO][4], const float *inv, int row0,
                                        int lane) {
    const int mi = lane >> 3, rr8 = lane & 7;
    const uint32_t lb = sq + (row0 + (mi & 1) * 8 + rr8) * 128;
#pragma unroll
    for (int k = 0; k < NO / 2; k++) {
        const int cb = 2 * k + (mi >> 1);
        const uint32_t a = lb + (cb >> 3) * (BM * 128) + (((cb & 7) ^ rr8) << 4);
        sf_wg::stmatrix_x4(a, sf_mma16<T>::pack(o[2 * k][0] * inv[0], o[2 * k][1] * inv[0]),
                           sf_mma16<T>::pack(o[2 * k][2] * inv[1], o[2 * k][3] * inv[1]),
                           sf_mma16<T>::pack(o[2 * k + 1][0] * inv[0], o[2 * k + 1][1] * inv[0]),
                           sf_mma16<T>::pack(o[2 * k + 1][2] * inv[1], o[2 * k + 1][3] * inv[1]));
    }
}
#endif

/* attn_fwd_ws: see the file comment.  tmq/tmk/tmv map (d, rows, heads,
 * batch) with 64 x 128-row boxes. */
template <typename T, int D, int BM_, int NST, int BN_ = WsBn<D>::value>
__global__ void __launch_bounds__(128 * (BM_ / 64 + 1), 1)
    attn_fwd_ws(const FwdParams p, const __grid_constant__ CUtensorMap tmq,
                const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef WsTraits<D, BM_, NST, BN_> Tr;
    constexpr int BM = Tr::BM, BN = Tr::BN, NC = Tr::NC, NS = BN / 8, NO = D / 8, CB = D / 64;
    /* narrow first tiles (below): 80-key tiles (d 256) only */
    constexpr int NN = BN == 80 ? 48 : 0;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t sbase = (sf_smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = sbase, sK = sQ + Tr::QBYTES, sV = sK + NST * Tr::KVBYTES;
    /* mbarriers: Q full, then per stage K full, V full, K empty, V empty */
    const uint32_t bQ = sbase + Tr::BAR_OFF;
    const uint32_t bKf = bQ + 8, bVf = bKf + 8 * NST, bKe = bVf + 8 * NST, bVe = bKe + 8 * NST;

    /* wg through a shuffle from lane 0: known warp-uniform, so the wgmma
     * descriptors built from it stay in uniform registers (no R2UR) */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const int h = blockIdx.y;
    const int b = blockIdx.x / p.n_mtiles;
    const int m0 = (p.n_mtiles - 1 - (int)(blockIdx.x - (unsigned)b * p.n_mtiles)) * BM;
    const int lq = p.lq, lk = p.lk;
    const int mrows = min(BM, lq - m0);
    const int hk = h / p.heads_per_kv;

    int lo_first, hi_first, lo_last, hi_last;
    key_range(m0, lq, lk, p.wl, p.wr, lo_first, hi_first);
    key_range(m0 + mrows - 1, lq, lk, p.wl, p.wr, lo_last, hi_last);
    const int t_begin = lo_first / BN;
    const int t_end = hi_last > lo_first ? (hi_last + BN - 1) / BN : t_begin;
    const int n = t_end - t_begin;
    const int full_lo = lo_last, full_hi = hi_first;

    if (tid == 0) {
        mbar_init(bQ, 1);
        for (int s = 0; s < NST; s++) {
            mbar_init(bKf + 8 * s, 1);
            mbar_init(bVf + 8 * s, 1);
            mbar_init(bKe + 8 * s, 4 * NC);
            mbar_init(bVe + 8 * s, 4 * NC);
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tr::REG_P));
        if (warp == 0 && lane == 0 && n > 0) {
            mbar_expect_tx(bQ, Tr::QBYTES);
#pragma unroll
            for (int c = 0; c < CB; c++) tma_load4(sQ + c * (BM * 128), &tmq, c * 64, m0, h, b, bQ);
            for (int j = 0; j < n; j++) {
                const int st = j % NST;
                const uint32_t ph = (uint32_t)(j / NST) & 1u;
                const int n0 = (t_end - 1 - j) * BN;
                mbar_wait_sleep(bKe + 8 * st, ph ^ 1u);
                mbar_expect_tx(bKf + 8 * st, Tr::KVBYTES);
#pragma unroll
                for (int c = 0; c < CB; c++)
                    tma_load4(sK + st * Tr::KVBYTES + c * (BN * 128), &tmk, c * 64, n0, hk, b,
                              bKf + 8 * st);
                mbar_wait_sleep(bVe + 8 * st, ph ^ 1u);
                mbar_expect_tx(bVf + 8 * st, Tr::KVBYTES);
#pragma unroll
                for (int c = 0; c < CB; c++)
                    tma_load4(sV + st * Tr::KVBYTES + c * (BN * 128), &tmv, c * 64, n0, hk, b,
                              bVf + 8 * st);
            }
        }
    } else {
        /* ---- consumers ---- */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tr::REG_C));
        const int cw = wg - 1, wq = warp & 3;
        const int g = lane >> 2, tq = lane & 3;
        const int r0 = m0 + cw * 64 + wq * 16 + g; /* sequence-relative row */
        int rlo[2], rhi[2];
        key_range(r0, lq, lk, p.wl, p.wr, rlo[0], rhi[0]);
        key_range(r0 + 8, lq, lk, p.wl, p.wr, rlo[1], rhi[1]);
        const float scale = p.scale_log2;

        float o[NO][4];
#pragma unroll
        for (int i = 0; i < NO; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
        float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f}, alpha[2] = {1.f, 1.f};
        const uint32_t vlbo = BN * 128, vsbo = 1024;

        if (n > 0) {
            float s[NS][4];
            uint32_t pa[NS / 2][4];
            /* S_j = Q K_j^T (issue only); k-step descriptors by addition
             * (sf_wg::wg_desc_add), as in attn_fwd_wsp */
            const uint64_t dq0 = wg_desc(sQ + cw * (64 * 128), 16, 1024);
            /* over the tile's first W keys: W = BN, or NN for a narrow tile */
            auto issue_s_w = [&](int st, auto w) {
                constexpr int W = decltype(w)::value;
                const uint64_t dk0 = wg_desc(sK + st * Tr::KVBYTES, 16, 1024);
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    const uint32_t off = (kk >> 2) * (BN * 128) + (kk & 3) * 32;
                    const uint32_t qoff = (kk >> 2) * (BM * 128) + (kk & 3) * 32;
                    Wg<T, W>::ss(&s[0][0], sf_wg::wg_desc_add(dq0, qoff), sf_wg::wg_desc_add(dk0, off), kk > 0);
                }
            };
            auto issue_s = [&](int st) { issue_s_w(st, std::integral_constant<int, BN>{}); };
            auto issue_s_n = [&](int st) {
                if constexpr (NN > 0) issue_s_w(st, std::integral_constant<int, NN>{});
            };
            /* O += P V over the tile's first W keys (W = BN, or NN after a
             * narrow tile, whose other P columns are 0) */
            auto issue_pv_w = [&](int st, auto w) {
                constexpr int W = decltype(w)::value;
                const uint64_t dv0 = wg_desc(sV + st * Tr::KVBYTES, vlbo, vsbo);
#pragma unroll
                for (int kk = 0; kk < W / 16; kk++) Wg<T, D>::rs(&o[0][0], pa[kk], sf_wg::wg_desc_add(dv0, kk * 2048));
            };
            typedef std::integral_constant<int, BN> FullW;
            typedef std::integral_constant<int, (NN > 0 ? NN : BN)> NarrowW;
            auto release = [&](uint32_t bar) {
                if (lane == 0) mbar_arrive(bar);
            };
            /* pingpong turn: wait for mine (barrier 1 + cw), hand the next
             * to the following consumer; the last one starts the cycle */
            const int my_bar = 1 + cw, other_bar = 1 + (cw + 1) % NC;
            if (cw == NC - 1) named_arrive(1, 256);

            mbar_wait(bQ, 0);
            /* NN (80-key tiles, d 256): the warpgroup's first js tiles (the
             * highest keys) are masked for all of its rows (hw: their largest
             * key bound) and take empty turns; its first real tile takes S
             * over its first NN keys only when no row sees past them (the
             * other columns of s keep stale values: such a tile always has
             * a mask (need_mask >= 1, as its keys pass the first row's
             * bound), which sets them to -inf for every row below lq; rows
             * past lq are not stored).  Skipped keys would give P = 0: the
             * output is the same bit for bit.  80-key tiles pad L 512 to 560
             * keys, and the first 64 rows of a causal 128-row tile see 64
             * keys fewer than the tile.  The narrow tile's softmax runs
             * over its first NN keys, its other columns are set to 0 after
             * it (P = 0 there, as the mask gave), and its P V, issued in the
             * next turn, over NN keys.  ptxas is particular here (each of
             * these serialised the wgmma pipeline "for want of registers",
             * C7511): peeling that turn off the loop, a pack of the NN
             * columns alone (the rest of P undefined), setting the stale
             * columns to -inf before the softmax, a narrow last P V. */
            int js = 0;
            bool narrow = false;
            if constexpr (NN > 0) {
                int lw, hw;
                key_range(min(m0 + cw * 64 + 63, lq - 1), lq, lk, p.wl, p.wr, lw, hw);
                js = ws_skip_leading<BN, NN, NST>(n, t_end, hw, 0u, narrow, bKf, bVf, bKe, bVe, my_bar, other_bar,
                                                  lane);
            }
            if (js < n) {
                /* first tile: S only */
                {
                    const int st = js % NST;
                    ws_turn_first_s(bKf, bKe, st, (uint32_t)(js / NST) & 1u, my_bar, other_bar, s, lane, [&](int q) {
                        if (NN > 0 && narrow)
                            issue_s_n(q);
                        else
                            issue_s(q);
                    });
                }
                bool resc; /* O needs alpha before the next P V (ws_softmax) */
                {
                    const int n0 = (t_end - 1 - js) * BN;
                    const int need_mask = mask_kind(n0, BN, full_lo, full_hi);
                    if (NN > 0 && narrow) {
                        resc = ws_softmax<NS, NarrowW::value / 8, Tr::LAZY>(s, mrow, lrow, alpha, n0, need_mask, rlo,
                                                                            rhi, tq, scale);
#pragma unroll
                        for (int i = NarrowW::value / 8; i < NS; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
                        pack_p<T, NS>(pa, s);
                    } else {
                        /* the first key tile: no vote, no rescale (FIRST; not in
                         * the 80-key kernel, where ptxas then serialised the
                         * wgmma pipeline, C7511, as in attn_fwd_wsp) */
                        resc = ws_softmax<NS, NS, Tr::LAZY, NN == 0>(s, mrow, lrow, alpha, n0, need_mask, rlo, rhi,
                                                                      tq, scale);
                        pack_p<T, NS>(pa, s);
                    }
                }

                /* one turn: S_j, P_{j-1} V_{j-1} over the first W keys, the
                 * softmax of S_j */
                auto turn = [&](int j, auto w) {
                    const int st = j % NST, ps = (j - 1) % NST;
                    const uint32_t ph = (uint32_t)(j / NST) & 1u, pph = (uint32_t)((j - 1) / NST) & 1u;
                    ws_turn_issue<Tr::LAZY>(bKf, bKe, bVf, st, ph, ps, pph, my_bar, other_bar, resc, s, o, alpha,
                                            lane, issue_s, [&](int q) { issue_pv_w(q, w); });
                    const int n0 = (t_end - 1 - j) * BN;
                    const int need_mask = mask_kind(n0, BN, full_lo, full_hi);
                    resc = ws_softmax<NS, NS, Tr::LAZY>(s, mrow, lrow, alpha, n0, need_mask, rlo, rhi, tq, scale);
                    wg_wait<0>();
                    reg_fence(o);
                    release(bVe + 8 * ps);
                    pack_p<T, NS>(pa, s);
                };
                for (int j = js + 1; j < n; j++) {
                    if (NN > 0 && narrow && j == js + 1)
                        turn(j, NarrowW{});
                    else
                        turn(j, FullW{});
                }
                /* last P V (over all BN keys: a lone narrow tile's P is 0
                 * past NN, and a branch here cost the f16 kernel its wgmma
                 * pipeline) */
                {
                    const int ps = (n - 1) % NST;
                    const uint32_t pph = (uint32_t)((n - 1) / NST) & 1u;
                    if (!Tr::LAZY || resc) scale_o(o, alpha);
                    mbar_wait(bVf + 8 * ps, pph);
                    named_sync(my_bar, 256);
                    wg_fence();
                    issue_pv_w(ps, FullW{});
                    wg_commit();
                    /* the last consumer skips its last hand-over: consumer 0 has
                     * no turn left to take (counts of barrier 1 stay balanced) */
                    if (cw != NC - 1) named_arrive(other_bar, 256);
                    wg_wait<0>();
                    reg_fence(o);
                    release(bVe + 8 * ps);
                }
            } else {
                /* every tile masked for this warpgroup: the last turn empty */
                named_sync(my_bar, 256);
                if (cw != NC - 1) named_arrive(other_bar, 256);
            }
        }

        /* ---- epilogue: normalise, lse, stage in this WG's Q slice ---- */
        float inv[2];
        finish_rows(p, lrow, mrow, inv, b, h, 0, r0, lq, tq);
        /* every wgmma of this warpgroup that read its Q slice has completed */
        named_sync(1 + NC + cw, 128);
        stage_o<T, NO, BM>(sQ, o, inv, cw * 64 + wq * 16, lane);
        named_sync(1 + NC + cw, 128);
        T *og = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)m0 * p.o_sr +
                (int64_t)h * p.o_sh;
        const int t128 = tid - 128 * wg;
#pragma unroll
        for (int it = 0; it < 64 * (D / 8) / 128; it++) {
            const int i = t128 + it * 128;
            const int r = cw * 64 + i / (D / 8), c = i % (D / 8);
            if (r < mrows) {
                const uint32_t a = sQ + (c >> 3) * (BM * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
                uint4 v;
                asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                             : "r"(a)
                             : "memory");
                *reinterpret_cast<uint4 *>(og + (int64_t)r * p.o_sr + c * 8) = v;
            }
        }
    }
#else
    (void)p;
    (void)tmq;
    (void)tmk;
    (void)tmv;
#endif
}

} /* namespace sf_attn */

#endif
