/* launch_ws.cuh - host launchers of the TMA kernels (sm_90a): attn_fwd_ws
 * (one CTA per query tile) and attn_fwd_wsp (persistent: one CTA per SM over
 * a tile schedule, scheduler.h), the tensor maps they take, and the
 * schedule's section sizes.  Included by fwd.cu only.
 */
#ifndef SF_ATTN_LAUNCH_WS_CUH
#define SF_ATTN_LAUNCH_WS_CUH

#include "attn/fwd_ws.cuh"
#include "attn/fwd_wsp.cuh"
#include "attn/scheduler.h"
#include "common/tmap.h"

#include <type_traits>

namespace {

using sf_attn::FwdParams;
using sf_attn::has_score_mod;

/* The Q, K and V maps of the ws kernels: boxes of 64 columns x bm (Q) or
 * bn (K, V) rows. */
bool make_tmaps_qkv(CUtensorMap *mq, CUtensorMap *mk, CUtensorMap *mv, bool bf16, const FwdParams &p,
                    int bm, int bn) {
    const int64_t hkv = p.nheads / p.heads_per_kv;
    return make_tmap(mq, bf16, p.q, p.d, p.lq, p.nheads, p.batch, p.q_sr, p.q_sh, p.q_sb, bm) &&
           make_tmap(mk, bf16, p.k, p.d, p.lk, hkv, p.batch, p.k_sr, p.k_sh, p.k_sb, bn) &&
           make_tmap(mv, bf16, p.v, p.d, p.lk, hkv, p.batch, p.v_sr, p.v_sh, p.v_sb, bn);
}

template <typename T, int D, int BM, int NST, int BN> bool ws_available() {
    static const bool avail = sf_cuda_sm90a_code((const void *)sf_attn::attn_fwd_ws<T, D, BM, NST, BN>);
    return avail;
}

/* Launches attn_fwd_ws (status in *st) and returns NULL, or returns why it
 * cannot (no sm_90a code, too little shared memory, too large a grid, a
 * tensor map the driver refuses) having launched nothing.  With st NULL it
 * only checks what it can without the tensors' addresses. */
template <typename T, int D, int BM, int NST, int BN = sf_attn::WsBn<D>::value>
const char *launch_ws(sf_ctx *ctx, FwdParams p, int64_t smem_optin, sf_status *st) {
    typedef sf_attn::WsTraits<D, BM, NST, BN> Tr;
    if ((int64_t)Tr::SMEM > smem_optin) return "the GPU has too little shared memory per block";
    if (!ws_available<T, D, BM, NST, BN>()) return "this build has no sm_90a code (SF_CUDA_ARCHS without 90a)";
    p.n_mtiles = (p.lq + BM - 1) / BM;
    const int64_t nx = (int64_t)p.batch * p.n_mtiles;
    if (nx > 0x7fffffffLL || p.nheads > 65535) return "the grid exceeds CUDA's";
    if (!st) return nullptr;
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    CUtensorMap mq, mk, mv;
    if (!make_tmaps_qkv(&mq, &mk, &mv, bf, p, BM, Tr::BN)) return "a TMA tensor map cannot describe q, k or v";
    void (*kern)(const FwdParams, const CUtensorMap, const CUtensorMap, const CUtensorMap) =
        sf_attn::attn_fwd_ws<T, D, BM, NST, BN>;
    *st = SF_OK;
    cudaError_t e = cudaFuncSetAttribute((const void *)kern,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tr::SMEM);
    if (e != cudaSuccess) {
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_attn_fwd: cudaFuncSetAttribute: %s", cudaGetErrorString(e));
        return nullptr;
    }
    kern<<<dim3((unsigned)nx, (unsigned)p.nheads, 1), Tr::NT, Tr::SMEM, sf_cuda_stream(ctx)>>>(p, mq, mk, mv);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_attn_fwd: attn_fwd_ws launch: %s", cudaGetErrorString(e));
    return nullptr;
}

/* What attn_fwd_ws and its persistent twin take, or why not: dense batches
 * (TMA would read the next sequence's rows past a varlen sequence's end),
 * d exactly 64, 128, 192 or 256 (the tensor maps and the epilogue span D
 * columns: no padding), 16-byte aligned rows and a positive scale (the
 * softmax folds it into one FFMA), no score modifier, on sm_90. */
const char *ws_shape_refusal(const FwdParams &p, const sf_cuda_state *cs) {
    if (!cs || cs->sm_major != 9) return "it needs an sm_90 GPU";
    if (p.varlen) return "it takes dense batches (no cu_seqlens)";
    if (!p.aligned) return "it needs 16-byte aligned rows";
    if (!(p.scale_log2 > 0.f)) return "it needs a positive softmax scale";
    if (has_score_mod(p)) return "softcap and ALiBi are served by the mma kernel";
    if (p.d != 64 && p.d != 128 && p.d != 192 && p.d != 256) return "it takes head dim 64, 128, 192 or 256";
    return nullptr;
}

/* attn_fwd_ws with `bm` query rows (0: 192 at d 64 once sequences are long
 * enough that the last tile's padding does not matter, else 128): launched
 * (status in *st) and NULL, or why not (st NULL: only checked). */
template <typename T>
const char *ws_run(sf_ctx *ctx, const FwdParams &p, const sf_cuda_state *cs, sf_status *st, int bm) {
    if (const char *why = ws_shape_refusal(p, cs)) return why;
    const int64_t optin = (int64_t)cs->smem_optin;
    if (bm == 192 && p.d != 64) return "192-row tiles take head dim 64";
    if (p.d == 256) return launch_ws<T, 256, 128, 2>(ctx, p, optin, st);
    if (p.d == 192) return launch_ws<T, 192, 128, 2>(ctx, p, optin, st);
    if (p.d == 128) return launch_ws<T, 128, 128, 2>(ctx, p, optin, st);
    if (bm == 0) bm = p.lq >= (p.wr >= 0 ? 1024 : 512) ? 192 : 128;
    if (bm == 192) return launch_ws<T, 64, 192, 3>(ctx, p, optin, st);
    return launch_ws<T, 64, 128, 3>(ctx, p, optin, st);
}

template <typename T, int D, int BM, int NST, int BN, int CL> bool wsp_available() {
    static const bool avail = sf_cuda_sm90a_code((const void *)sf_attn::attn_fwd_wsp<T, D, BM, NST, BN, CL>);
    return avail;
}

/* As launch_ws; the grid is min(tiles, SMs x resident CTAs per SM) and the
 * schedule's L2 sections hold about half of L2 of K and V (FlashAttention-3
 * sizes its swizzle the same way).  CL 2: clusters of two CTAs sharing each
 * K/V stage by multicast (attn_fwd_wsp's MC), for full attention with an
 * even number of query tiles; 0 (not served) otherwise. */
template <typename T, int D, int BM, int NST, int BN = sf_attn::WsBn<D>::value, int CL = 1>
const char *launch_wsp(sf_ctx *ctx, FwdParams p, const sf_cuda_state *cs, sf_status *st) {
    typedef sf_attn::WspTraits<D, BM, NST, BN> Tr;
    if ((int64_t)Tr::SMEM > (int64_t)cs->smem_optin) return "the GPU has too little shared memory per block";
    if (!wsp_available<T, D, BM, NST, BN, CL>()) return "this build has no sm_90a code (SF_CUDA_ARCHS without 90a)";
    p.n_mtiles = (p.lq + BM - 1) / BM;
    if (CL > 1 && (p.wl >= 0 || p.wr >= 0)) return "clusters take full attention (no causal mask or window)";
    if (CL > 1 && p.n_mtiles % CL != 0) return "clusters of two take an even number of query tiles";
    const int64_t bh = (int64_t)p.batch * p.nheads;
    const int64_t ntiles = bh * p.n_mtiles;
    /* tile indices t + grid must not overflow an int in the kernel's loop */
    if (ntiles > 0x7fff0000LL) return "too many tiles for the persistent schedule";
    if (!st) return nullptr;
    if (ntiles <= 0) {
        *st = SF_OK;
        return nullptr;
    }
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    /* O: the consumers store their 16-row slices by TMA */
    CUtensorMap mq, mk, mv, mo;
    if (!make_tmaps_qkv(&mq, &mk, &mv, bf, p, Tr::QROWS, Tr::BN) ||
        !make_tmap(&mo, bf, p.o, p.d, p.lq, p.nheads, p.batch, p.o_sr, p.o_sh, p.o_sb, 16))
        return "a TMA tensor map cannot describe q, k, v or out";
    void (*kern)(const FwdParams, const sf_attn::WspSched, const CUtensorMap, const CUtensorMap,
                 const CUtensorMap, const CUtensorMap) = sf_attn::attn_fwd_wsp<T, D, BM, NST, BN, CL>;
    *st = SF_OK;
    cudaError_t e = cudaFuncSetAttribute((const void *)kern,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tr::SMEM);
    if (e != cudaSuccess) {
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_attn_fwd: cudaFuncSetAttribute: %s", cudaGetErrorString(e));
        return nullptr;
    }
    /* resident CTAs per SM (1 for every instantiation today: the consumers
     * take 240 or 160 registers of the 64K); asked once, after the shared
     * memory attribute is set */
    static const int per_sm = [kern] {
        int nb = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, (const void *)kern, Tr::NT, Tr::SMEM) !=
            cudaSuccess)
            nb = 1;
        (void)cudaGetLastError();
        return nb < 1 ? 1 : nb;
    }();
    const int64_t sms = cs->sm_count > 0 ? cs->sm_count : 132;
    /* CL > 1: launched with a cluster attribute; as many clusters as fit at
     * once (a cluster's CTAs share a GPC; H200: 66 of two, all 132 SMs),
     * asked once.  The plain kernel builds no launch configuration. */
    cudaLaunchAttribute cl_at;
    cudaLaunchConfig_t cfg;
    int64_t slots = sms * per_sm;
    if constexpr (CL > 1) {
        memset(&cl_at, 0, sizeof cl_at);
        cl_at.id = cudaLaunchAttributeClusterDimension;
        cl_at.val.clusterDim.x = CL;
        cl_at.val.clusterDim.y = 1;
        cl_at.val.clusterDim.z = 1;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDim = dim3((unsigned)sms);
        cfg.blockDim = dim3(Tr::NT);
        cfg.dynamicSmemBytes = Tr::SMEM;
        cfg.stream = sf_cuda_stream(ctx);
        cfg.attrs = &cl_at;
        cfg.numAttrs = 1;
        static const int clusters = [kern, &cfg] {
            int nc = 0;
            if (cudaOccupancyMaxActiveClusters(&nc, (const void *)kern, &cfg) != cudaSuccess) nc = 0;
            (void)cudaGetLastError();
            return nc;
        }();
        if (clusters < 1) return "no cluster of two fits on this GPU";
        slots = (int64_t)clusters * CL;
    }
    /* a multiple of CL (ntiles is, with CL > 1) */
    const int64_t grid = ntiles < slots ? ntiles : slots;
    /* (batch, head) pairs per section: K and V of one pair are lk x d x 2
     * tensors of 2-byte elements; half of L2 (25 MB on H200) for a section */
    const int64_t l2 = cs->l2_bytes > 0 ? (int64_t)cs->l2_bytes : 50LL << 20;
    const int64_t kv_pair = (int64_t)(p.lk > 0 ? p.lk : 1) * p.d * 4;
    int64_t grp = (l2 / 2) / kv_pair;
    /* Full attention (no causal mask, no window): every query tile of a pair
     * has the same work, so there is nothing to gain from ordering the
     * longest tiles first across many pairs, and two pairs a section put the
     * query tiles of a pair on neighbouring CTAs, which read its K and V
     * from L2 at the same time (d 128 L 512: 427 -> 449-460 TFLOP/s; the
     * L2-sized sections read K and V from HBM more than once). */
    if (p.wl < 0 && p.wr < 0 && grp > 2) grp = 2;
    /* MC: one pair a section, so that tiles 2i and 2i + 1 (the CTAs of a
     * cluster) are neighbouring query tiles of one pair */
    if (CL > 1) grp = 1;
    /* Masked problems (causal, windows) with 16 or more key tiles, and the
     * shorter ones whose round robin would not balance (below): tiles of
     * unequal work, handed out by the counter in the schedule's order (list
     * scheduling).  A model of the static round robin put the most loaded CTA
     * 6-16% over the mean at causal L 512-4096, the counter's order 1-3.5%
     * (notes/attn_persist.md); measured, the counter gains 2-13% at causal L
     * 2048-4096 and loses 1-2% on short tiles (L 512), where it costs more
     * than it balances.  Full attention keeps the static schedule (equal
     * tiles). */
    const bool masked = p.wl >= 0 || p.wr >= 0;
    const int ctr_tiles = D == 64 ? 8 : 16;
    const bool use_ctr = masked && ntiles > grid &&
                         ((p.lk + BN - 1) / BN >= ctr_tiles || !sf_attn::wsp_static_walks(grid, p.n_mtiles, 4));
    /* Masked sections, smaller than the L2 rule:
     *  - the counter: about one grid of tiles a section (grid / query tiles
     *    pairs, rounded up, then to an even divisor: wsp_even_group), so
     *    that the longest tiles of the CTAs' current section start first.
     *    The L2 rule's sections at d 256 (24 MB of K and V) read them from
     *    HBM 1.3 times (d 256 L 2048-4096: +4-12% against them).
     *  - the static round robin: sections of 4 pairs.  CTA x takes tiles x,
     *    x + grid, ...; with G = 4 and 132 CTAs (4 x 33) each step of a CTA
     *    moves one query-tile level on (33 mod n_mtiles = 1 for 4, 8, 16 or
     *    32 levels), so every CTA takes every level alike (2 and 8 pairs
     *    measured slower).  Where 4-pair sections would not walk
     *    a CTA through every level (wsp_static_walks: e.g. 3 or 6 query
     *    tiles on 132 CTAs), the counter takes the tiles instead: its cost
     *    at short tiles (1-2%) is less than such a round robin's imbalance
     *    (32-pair sections, which leave the same CTAs on the longest tiles:
     *    d 256 L 512 245 against 325 TFLOP/s). */
    if (masked) {
        const int64_t g = use_ctr ? sf_attn::wsp_even_group(bh, (grid + p.n_mtiles - 1) / p.n_mtiles) : 4;
        if (grp > g) grp = g;
    }
    if (grp < 1) grp = 1;
    if (grp > bh) grp = bh;
    sf_attn::WspSched sc;
    sc.ntiles = (int)ntiles;
    sc.group = (int)grp;
    sc.d_per = sf_attn::FastDiv::make((uint32_t)(grp * p.n_mtiles));
    sc.d_group = sf_attn::FastDiv::make((uint32_t)grp);
    sc.d_heads = sf_attn::FastDiv::make((uint32_t)p.nheads);
    sc.d_hkv = sf_attn::FastDiv::make((uint32_t)p.heads_per_kv);
    sc.ctr = use_ctr ? cs->tile_ctr : NULL;
    if constexpr (CL > 1) {
        cfg.gridDim = dim3((unsigned)grid);
        e = cudaLaunchKernelEx(&cfg, kern, p, sc, mq, mk, mv, mo);
    } else {
        kern<<<dim3((unsigned)grid, 1, 1), Tr::NT, Tr::SMEM, sf_cuda_stream(ctx)>>>(p, sc, mq, mk, mv, mo);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess)
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_attn_fwd: attn_fwd_wsp launch: %s", cudaGetErrorString(e));
    return nullptr;
}

/* attn_fwd_wsp with `bm` query rows, `bn` keys a tile (0: the head dim's
 * default) and clusters of `cl`: launched (status in *st) and NULL, or why
 * not (st NULL: only checked).  The problems of ws_run but d 192: its
 * consumers would spill (240 registers hold O 96 + S 56 + P 28 and the
 * per-tile kernel's loop state, not the persistent loop's). */
template <typename T>
const char *wsp_run(sf_ctx *ctx, const FwdParams &p, const sf_cuda_state *cs, sf_status *st, int bm, int bn,
                    int cl) {
    if (const char *why = ws_shape_refusal(p, cs)) return why;
    if (p.d == 192) return "it takes head dim 64, 128 or 256";
    if (cl == 2) {
        if (p.d != 128) return "clusters of two take head dim 128";
        /* an odd number of query tiles (another length in the autotuner's
         * bucket) takes the plain kernel */
        const char *why = launch_wsp<T, 128, 128, 2, 128, 2>(ctx, p, cs, nullptr);
        if (!why) return launch_wsp<T, 128, 128, 2, 128, 2>(ctx, p, cs, st);
        if (p.wl >= 0 || p.wr >= 0) return why;
        return launch_wsp<T, 128, 128, 2>(ctx, p, cs, st);
    }
    /* d 64 with 112-key tiles: short sequences pad less (ViT: 196 keys in
     * 224 instead of 256) */
    if (bn == 112) return p.d == 64 ? launch_wsp<T, 64, 128, 3, 112>(ctx, p, cs, st) : "112-key tiles take head dim 64";
    /* d 256 with 64-key tiles: no padding where L is a multiple of 64 (80-key
     * tiles compute 528 keys for 512; L 512: 523 against 497 TFLOP/s), more
     * turns a key at longer L: the autotuner chooses */
    if (bn == 64) return p.d == 256 ? launch_wsp<T, 256, 128, 2, 64>(ctx, p, cs, st) : "64-key tiles take head dim 256";
    if (bm == 192) return p.d == 64 ? launch_wsp<T, 64, 192, 3>(ctx, p, cs, st) : "192-row tiles take head dim 64";
    if (p.d == 64) return launch_wsp<T, 64, 128, 3>(ctx, p, cs, st);
    if (p.d == 128) return launch_wsp<T, 128, 128, 2>(ctx, p, cs, st);
    return launch_wsp<T, 256, 128, 2>(ctx, p, cs, st);
}

} /* namespace */

#endif
