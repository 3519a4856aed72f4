/* attn_fwd.cu - attention forward on the GPU: the launcher of sf_attn_fwd.
 *
 * Kernels, in the order the launcher tries them:
 *   attn_fwd_ws     (attn_fwd_ws.cuh) sm_90a, FlashAttention-3 structure:
 *                   TMA tensor maps, producer warpgroup + 2 or 3 consumer
 *                   warpgroups (setmaxnreg 24/240 or 32/160), K/V ring on
 *                   mbarriers, S_{j+1} issued before the softmax of S_j,
 *                   pingpong on named barriers.  Dense batches, d = 64,
 *                   128, 192 or 256, 16-byte aligned rows, scale > 0.
 *                   d = 128: 128 x 128 tiles, 2 stages; d = 64: 3 stages,
 *                   192 query rows (3 consumers) from L 512 (causal 1024),
 *                   else 128; d = 256: 128 x 80 tiles, 2 stages (224 KiB of
 *                   shared memory); d = 192: 128 x 112, 2 stages.
 *   attn_fwd_wgmma  (attn_fwd_wgmma.cuh) sm_90a: wgmma with a cp.async
 *                   double buffer, no warp specialisation, 128 x 128 tiles;
 *                   d <= 128 with 16-byte aligned rows.  Serves what ws does
 *                   not: varlen (cp.async zero-fills rows past a sequence;
 *                   TMA would read the next sequence's rows), other head dims,
 *                   negative scales; skipped for d <= 64 under L 1024.
 *   attn_fwd_mma    (attn_fwd_mma.cuh) FlashAttention-2 structure on
 *                   mma.sync m16n8k16 + ldmatrix, 2-stage cp.async K/V
 *                   pipeline; sm_80 and sm_90a; every head dim that is a
 *                   multiple of 8 up to 256 (zero-padded in shared memory to
 *                   the buckets 64/96/128/192/256); any strides (a slow
 *                   element-wise load path when rows are not 16-byte aligned).
 *                   Q tile 64 or 128 rows per shape (pick_bm).
 *
 * Measured on H200 (bf16, batch*L = 16384, hidden 2048, TFLOP/s, median of
 * 25, scratch harness; cuDNN = torch SDPA cuDNN backend in the same run;
 * the same code moves by up to 5% between runs, cuDNN by up to 10%):
 *                       L 512    2048    8192   16384
 *   d128  wgmma           286     354     374     377
 *         ws              430     627     697     649   (run 1: 415 619 680 687)
 *         cuDNN           437     626     672     659   (run 1: 387 558 631 631)
 *   d128 causal wgmma     186     297     350     383
 *         ws              263     497     635     697
 *         cuDNN           296     485     599     622
 *   d64   wgmma           211     269     283     287
 *         ws              309     476     513     515   (192-row tiles)
 *         cuDNN           359     451     486     465
 *   d64 causal wgmma      141     230     274     290
 *         ws              181     350     485     486   (L512: 128 rows)
 *         cuDNN           236     378     452     448   (run 1: 193 326 421 448)
 *   ViT b256 N196 h12 d64: mma 105, ws 119, cuDNN 167.
 * attn_fwd_ws variants tried (same runs; d64 / d128 at L16384 unless noted):
 *   no pingpong (intra-warpgroup overlap only): 393 / 622;
 *   3 K/V stages at d128: 625 (2 stages: 687) - 225 KiB of shared memory;
 *   2 stages at d64: 436 (3 stages: 438, L8192 431 vs 449);
 *   128 x 176 tiles (FA3's d128 choice): d128 641 (687), d64 456 (438) but
 *     L8192 443 (449), causal L512 151 (177);
 *   a quarter of the exponentials on the FMA pipes (cubic 2^x): slower
 *     everywhere (d64 420 vs 452, d128 567 vs 649);
 *   pairwise max / sum reductions in the softmax: no gain (457 / 613);
 *   192-row tiles + pairwise reductions at d64: 488 (515).
 *   d256  wgmma (64-key tiles)  L 1024 377, 4096 421, 16384 428; causal 276 356 427
 *         mma                        243       239        242;        192 226 245
 *         cuDNN                      626       676        661;        445 557 602
 *   ws at d 256 / 192 (bench/gpu_attn.py, forced ws128, one run; cuDNN and
 *   FA2 = torch SDPA backends in the same run):
 *                       L 1024    4096   16384   causal 1024  4096  16384
 *   d256  ws (128 x 80)    607     650     674           403   555    664
 *         cuDNN            607     675     669           453   577    596
 *         FA2              306     316     323           248   282    291
 *   d192  ws (128 x 112)   525     649     674           373   557    659
 *         cuDNN            594     661     649           440   551    609
 *         FA2              289     315     325           227   274    293
 *   (autotuned, same run, d256: 606 635 676, causal 399 553 672; cuDNN 609
 *   652 676, causal 450 563 645.)  d256 with 64-key tiles (192 KiB, same
 *   run, two repeats each): 546/542 621/618 631/637, causal 403/403
 *   526/507 620/630, against 80 keys 604/563 715/652 661/604, causal
 *   396/403 555/535 636/658: 80 kept.  d192 with 96-key tiles (another
 *   run, L 1024 2048 4096 16384, two repeats): 534/525 574/576 619/563
 *   642/650, causal 381/376 462/445 526/522 606/609, against 112 keys
 *   555/525 608/588 635/605 655/662, causal 362/368 464/473 534/532
 *   621/621: 112 kept.
 *   attn_fwd_wsp    (attn_fwd_wsp.cuh) attn_fwd_ws made persistent: one CTA
 *                   per SM loops over the work tiles (longest causal tiles
 *                   first, heads inner within L2-sized sections) and loads
 *                   the next tile's Q and K/V during the current tile's last
 *                   P V and epilogue.  Only the autotuner's wsp*
 *                   configurations launch it (wsp128c2: d 128 full
 *                   attention in clusters of two CTAs that multicast each
 *                   K/V stage to both).  H200, autotuned sweep
 *                   with it among the candidates (bench/RESULTS.md, stop 8):
 *                   ViT 119 -> 138, d 64 L 512 309 -> 360, causal 181 ->
 *                   207 TFLOP/s; long sequences unchanged.
 * Not done: varlen through TMA.
 *
 * f32 inputs are refused (SF_ERR_UNSUPPORTED): f32 attention is served by
 * the CPU backend on host memory.
 */
#include "common/cuda_common.h"

#include "attn/fwd_mma.cuh"
#include "attn/fwd_wgmma.cuh"
#include "attn/fwd_ws.cuh"
#include "attn/fwd_wsp.cuh"
#include "autotune.h"
#include "common/tmap.h"
#include "attn/scheduler.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

using sf_attn::FwdParams;
using sf_attn::FwdTraits;

#ifdef SF_ATTN_TUNING
/* Scratch benchmarks only: force the Q tile (64 or 128; 0 = heuristic). */
int sf_attn_tuning_force_bm = 0;
/* and the 2-CTA register cap (MINB 2) for the d<=64, 128-row tile (0: off). */
int sf_attn_tuning_minb2 = 1;
/* and the key tile of attn_fwd_ws at d 256 (64; 0 = the default 80) or
 * d 192 (96; 0 = 112), or env SF_ATTN_TUNING_WS_BN; exported so a scratch
 * script can set it through ctypes. */
__attribute__((visibility("default"))) int sf_attn_tuning_ws_bn = 0;
#endif
/* The kernel (and the ws tile rows) is chosen per shape bucket by the
 * autotuner (src/core/autotune.h): SF_AUTOTUNE_FORCE=attn_fwd:NAME pins one
 * of auto, ws128, ws192, wgmma, mma, wsp128, wsp192, wsp128k112 (d 64,
 * 112-key tiles), wsp128k64 (d 256, 64-key tiles), wsp128c2 (d 128 full
 * attention in clusters of two CTAs that multicast K and V). */

namespace {

/* CTAs per SM promised to ptxas (__launch_bounds__), i.e. the register cap.
 * d=64 with 128-row tiles: 2 x 256 threads caps it at 128 registers (150
 * uncapped, one CTA per SM); ptxas spills 60 bytes outside the main loop
 * and it ran 16% faster on H200 (L16384: 251 vs 213 TFLOP/s). */
template <int D, int BM> struct MinBlocks { static constexpr int value = (D <= 64 && BM == 128) ? 2 : 1; };

template <typename T, int D, int BM, int BN>
sf_status launch_mma(sf_ctx *ctx, const FwdParams &p, dim3 grid) {
    void (*kern)(const FwdParams) = sf_attn::attn_fwd_mma<T, D, BM, BN, MinBlocks<D, BM>::value>;
#ifdef SF_ATTN_TUNING
    if constexpr (D <= 64 && BM == 128) {
        if (!sf_attn_tuning_minb2) kern = sf_attn::attn_fwd_mma<T, D, BM, BN, 1>;
    }
#endif
    const size_t smem = FwdTraits<D, BM, BN>::SMEM;
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<grid, FwdTraits<D, BM, BN>::NT, smem, sf_cuda_stream(ctx)>>>(p);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* The sm_90a machine code of attn_fwd_wgmma exists only when the library
 * was built for 90a; a plain sm_90 or sm_80 pass compiles its body away.
 * The compiled register count tells them apart (an empty body uses a
 * handful), checked once per instantiation. */
template <typename T, int D> bool wgmma_available() {
    /* a function-local static initialiser runs once, thread-safely (C++11) */
    static const bool avail = sf_cuda_sm90a_code((const void *)sf_attn::attn_fwd_wgmma<T, D>);
    return avail;
}

template <typename T, int D>
sf_status launch_wgmma(sf_ctx *ctx, FwdParams p, int nheads, int64_t nx) {
    void (*kern)(const FwdParams) = sf_attn::attn_fwd_wgmma<T, D>;
    const size_t smem = sf_attn::WgTraits<D>::SMEM;
    if (!p.varlen) p.n_mtiles = (p.lq + 127) / 128;
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<dim3((unsigned)nx, (unsigned)nheads, 1), 256, smem, sf_cuda_stream(ctx)>>>(p);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* Number of CTAs along x: dense, batch * ceil(Lq / BM); varlen, an upper
 * bound of sum ceil(lq_b / BM) computed from the total token count (the
 * kernel resolves its tile from the device cu_seqlens; extra CTAs exit). */
int64_t count_tiles(const FwdParams &p, int bm) {
    if (!p.varlen) return (int64_t)p.batch * ((p.lq + bm - 1) / bm);
    return ((int64_t)p.lq + (int64_t)p.batch * (bm - 1)) / bm;
}

/* Key-tile width per head-dim bucket: 64 keys up to d 128, 32 above, so the
 * S fragment plus the O accumulator (D/2 floats a thread) fit in registers. */
template <int D> struct BnOf { static constexpr int value = D <= 128 ? 64 : 32; };

template <typename T, int D>
sf_status launch_bucket(sf_ctx *ctx, FwdParams p, int bm, int nheads) {
    constexpr int BN = BnOf<D>::value;
    const int64_t nx = count_tiles(p, bm);
    if (nx <= 0) return SF_OK;
    if (nx > 0x7fffffffLL || nheads > 65535)
        return sf_fail(ctx, SF_ERR_TOO_LARGE,
                       "sf_attn_fwd: grid of %lld tiles x %d heads exceeds the CUDA grid",
                       (long long)nx, nheads);
    if (!p.varlen) p.n_mtiles = (p.lq + bm - 1) / bm;
    dim3 grid((unsigned)nx, (unsigned)nheads, 1);
    if (bm == 128) return launch_mma<T, D, 128, BN>(ctx, p, grid);
    return launch_mma<T, D, 64, BN>(ctx, p, grid);
}

int64_t max_smem_needed(int dpad, int bm) {
    const int bn = dpad <= 128 ? 64 : 32;
    return (int64_t)(bm + 4 * bn) * (dpad + 8) * 2;
}

/* 128-row tiles do less K/V traffic per output row; 64-row tiles make twice
 * the CTAs, balance causal work better and waste fewer padded rows.  H200,
 * bf16, batch*L = 16384 (run 1, TFLOP/s 64-row / 128-row): d64 L512
 * 205/210, L2048 234/236, L16384 235/251 (128 with the 2-CTA cap); causal
 * L2048 210/205, L16384 239/241; d128 L512 217/216, L16384 264/272; causal
 * L2048 228/219.  So 128 rows only for long sequences (>= 2048, causal
 * >= 8192) that still give two CTAs per SM. */
int pick_bm(const FwdParams &p, int nheads, int sm_count) {
#ifdef SF_ATTN_TUNING
    if (sf_attn_tuning_force_bm) return sf_attn_tuning_force_bm;
#endif
    const int64_t ctas128 = count_tiles(p, 128) * nheads;
    const int64_t avg_len = p.varlen ? p.lq / (p.batch > 0 ? p.batch : 1) : p.lq;
    const int64_t need = p.wr >= 0 ? 8192 : 2048;
    if (ctas128 < 2LL * sm_count || avg_len < need) return 64;
    return 128;
}

bool aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }

/* attn_fwd_wgmma serves d <= 256 on sm_90 with 16-byte aligned rows when
 * its machine code is present; returns 1 if it launched (status in *st). */
template <typename T>
int try_wgmma(sf_ctx *ctx, const FwdParams &p, int nheads, const sf_cuda_state *cs, sf_status *st,
              bool forced) {
    if (!cs || cs->sm_major != 9 || !p.aligned || p.d > 256) return 0;
    /* d > 128 takes 64-key tiles and P V in two n128 halves: H200, d 256,
     * 420-428 TFLOP/s non-causal against 239-243 for the mma kernel (commit
     * 9f7b076, bench/RESULTS.md), so it is the default there too */
    /* d <= 64 on short sequences: the 128 x 128 tiles pad and balance worse
     * than the 64-row mma tiles (H200: causal L512 142 vs 155 TFLOP/s, ViT
     * L196 95 vs 106); from L2048 on wgmma wins (266 vs 236).  The
     * autotuner may still pick it (forced). */
    const int64_t avg_len = p.varlen ? p.lq / (p.batch > 0 ? p.batch : 1) : p.lq;
    if (!forced && p.d <= 64 && avg_len < 1024) return 0;
    const int64_t need = p.d <= 64 ? (int64_t)sf_attn::WgTraits<64>::SMEM
                         : p.d <= 128 ? (int64_t)sf_attn::WgTraits<128>::SMEM
                                      : (int64_t)sf_attn::WgTraits<256>::SMEM;
    if (need > (int64_t)cs->smem_optin) return 0;
    const int64_t nx = count_tiles(p, 128);
    if (nx <= 0) { *st = SF_OK; return 1; }
    if (nx > 0x7fffffffLL || nheads > 65535) return 0;
    if (p.d <= 64) {
        if (!wgmma_available<T, 64>()) return 0;
        *st = launch_wgmma<T, 64>(ctx, p, nheads, nx);
    } else if (p.d <= 128) {
        if (!wgmma_available<T, 128>()) return 0;
        *st = launch_wgmma<T, 128>(ctx, p, nheads, nx);
    } else {
        if (!wgmma_available<T, 256>()) return 0;
        *st = launch_wgmma<T, 256>(ctx, p, nheads, nx);
    }
    return 1;
}

/* ---- attn_fwd_ws: TMA tensor maps + warp-specialised kernel ---- */

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

/* 1: launched (status in *st); 0: not available (no sm_90a code, too
 * little shared memory, a tensor map the driver refuses): use another
 * kernel. */
template <typename T, int D, int BM, int NST, int BN = sf_attn::WsBn<D>::value>
int launch_ws(sf_ctx *ctx, FwdParams p, int64_t smem_optin, sf_status *st) {
    typedef sf_attn::WsTraits<D, BM, NST, BN> Tr;
    if ((int64_t)Tr::SMEM > smem_optin || !ws_available<T, D, BM, NST, BN>()) return 0;
    p.n_mtiles = (p.lq + BM - 1) / BM;
    const int64_t nx = (int64_t)p.batch * p.n_mtiles;
    if (nx > 0x7fffffffLL || p.nheads > 65535) return 0;
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    CUtensorMap mq, mk, mv;
    if (!make_tmaps_qkv(&mq, &mk, &mv, bf, p, BM, Tr::BN)) return 0;
    void (*kern)(const FwdParams, const CUtensorMap, const CUtensorMap, const CUtensorMap) =
        sf_attn::attn_fwd_ws<T, D, BM, NST, BN>;
    *st = SF_OK;
    cudaError_t e = cudaFuncSetAttribute((const void *)kern,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tr::SMEM);
    if (e != cudaSuccess) {
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_attn_fwd: cudaFuncSetAttribute: %s", cudaGetErrorString(e));
        return 1;
    }
    kern<<<dim3((unsigned)nx, (unsigned)p.nheads, 1), Tr::NT, Tr::SMEM, sf_cuda_stream(ctx)>>>(p, mq, mk, mv);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_attn_fwd: attn_fwd_ws launch: %s", cudaGetErrorString(e));
    return 1;
}

/* attn_fwd_ws serves dense batches with d = 64, 128, 192 or 256 exactly
 * (the tensor maps and the epilogue span D columns: no padding), 16-byte
 * aligned rows and a positive scale on sm_90 (see attn_fwd_ws.cuh for
 * why). */
template <typename T>
int try_ws(sf_ctx *ctx, const FwdParams &p, const sf_cuda_state *cs, sf_status *st, int force_bm) {
    if (!cs || cs->sm_major != 9 || !p.aligned || p.varlen ||
        (p.d != 64 && p.d != 128 && p.d != 192 && p.d != 256) || !(p.scale_log2 > 0.f))
        return 0;
    const int64_t optin = (int64_t)cs->smem_optin;
#ifdef SF_ATTN_TUNING
    {
        const char *e = getenv("SF_ATTN_TUNING_WS_BN");
        const int bn = e ? atoi(e) : sf_attn_tuning_ws_bn;
        if (p.d == 256 && bn == 64)
            return force_bm == 192 ? 0 : launch_ws<T, 256, 128, 2, 64>(ctx, p, optin, st);
        if (p.d == 192 && bn == 96)
            return force_bm == 192 ? 0 : launch_ws<T, 192, 128, 2, 96>(ctx, p, optin, st);
    }
#endif
    if (p.d == 256) return force_bm == 192 ? 0 : launch_ws<T, 256, 128, 2>(ctx, p, optin, st);
    if (p.d == 192) return force_bm == 192 ? 0 : launch_ws<T, 192, 128, 2>(ctx, p, optin, st);
    if (p.d == 128) return force_bm == 192 ? 0 : launch_ws<T, 128, 128, 2>(ctx, p, optin, st);
    /* d = 64: 3 consumers on 192-row tiles once sequences are long enough
     * that the padding of the last tile does not matter (H200, bf16,
     * TFLOP/s 128 / 192 rows: L512 293/309, L2048 412/476, L16384 452/515;
     * causal L512 181/166, L2048 334/350, L16384 456/486; ViT L196
     * 119/97). */
    const int64_t avg_len = p.lq;
    int bm = avg_len >= (p.wr >= 0 ? 1024 : 512) ? 192 : 128;
    if (force_bm) bm = force_bm;
    if (bm == 192) return launch_ws<T, 64, 192, 3>(ctx, p, optin, st);
    return launch_ws<T, 64, 128, 3>(ctx, p, optin, st);
}

/* ---- attn_fwd_wsp: the persistent variant ---- */

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
int launch_wsp(sf_ctx *ctx, FwdParams p, const sf_cuda_state *cs, sf_status *st) {
    typedef sf_attn::WspTraits<D, BM, NST, BN> Tr;
    if ((int64_t)Tr::SMEM > (int64_t)cs->smem_optin || !wsp_available<T, D, BM, NST, BN, CL>()) return 0;
    p.n_mtiles = (p.lq + BM - 1) / BM;
    if (CL > 1 && (p.wl >= 0 || p.wr >= 0 || p.n_mtiles % CL != 0)) return 0;
    const int64_t bh = (int64_t)p.batch * p.nheads;
    const int64_t ntiles = bh * p.n_mtiles;
    if (ntiles <= 0) { *st = SF_OK; return 1; }
    /* tile indices t + grid must not overflow an int in the kernel's loop */
    if (ntiles > 0x7fff0000LL) return 0;
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    /* O: the consumers store their 16-row slices by TMA */
    CUtensorMap mq, mk, mv, mo;
    if (!make_tmaps_qkv(&mq, &mk, &mv, bf, p, Tr::QROWS, Tr::BN) ||
        !make_tmap(&mo, bf, p.o, p.d, p.lq, p.nheads, p.batch, p.o_sr, p.o_sh, p.o_sb, 16))
        return 0;
    void (*kern)(const FwdParams, const sf_attn::WspSched, const CUtensorMap, const CUtensorMap,
                 const CUtensorMap, const CUtensorMap) = sf_attn::attn_fwd_wsp<T, D, BM, NST, BN, CL>;
    *st = SF_OK;
    cudaError_t e = cudaFuncSetAttribute((const void *)kern,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tr::SMEM);
    if (e != cudaSuccess) {
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_attn_fwd: cudaFuncSetAttribute: %s", cudaGetErrorString(e));
        return 1;
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
        if (clusters < 1) return 0;
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
     * from L2 at the same time.  H200, session 15 (bench/RESULTS.md): d 128
     * L 512 427 -> 449-460 TFLOP/s, d 64 L 1024-2048 +2-5%; ncu had the L2-sized
     * sections at 48% of DRAM throughput over 153 µs against cuDNN's 41%
     * over 130 µs (K and V read from HBM more than once). */
    if (p.wl < 0 && p.wr < 0 && grp > 2) grp = 2;
    /* MC: one pair a section, so that tiles 2i and 2i + 1 (the CTAs of a
     * cluster) are neighbouring query tiles of one pair */
    if (CL > 1) grp = 1;
    /* Masked problems (causal, windows) with 16 or more key tiles, and the
     * shorter ones whose round robin would not balance (below): tiles of
     * unequal work, handed out by the counter in the schedule's order (list
     * scheduling).  A model of the static round robin put the most loaded CTA
     * 6-16% over the mean at causal L 512-4096, the counter's order 1-3.5%
     * (notes/attn_persist.md, stop 17).  Measured on the H200 (session 18,
     * against the static schedule): causal L 2048-4096 +2-4% (wsp128, d 64 and
     * 128) and +10-13% (wsp192), L 1024 -1.5-+1%, L 512 -1-2%: short tiles
     * gain less than the counter costs.  At d 64 from 8 key tiles: with the
     * sections of stop 20 (pinned, three rounds in each of two runs,
     * bench/RESULTS.md "Stop 22"), causal L 1024 wsp128 +0.5-2%, L 1536
     * wsp192 +4.5%; at L 512 the counter loses 0-2.5% (any section size),
     * at d 128 L 512 1.5%, at d 128 L 1024 it is within noise.  Full
     * attention keeps the static schedule (equal tiles). */
    const bool masked = p.wl >= 0 || p.wr >= 0;
    const int ctr_tiles = D == 64 ? 8 : 16;
    const bool use_ctr = masked && ntiles > grid &&
                         ((p.lk + BN - 1) / BN >= ctr_tiles || !sf_attn::wsp_static_walks(grid, p.n_mtiles, 4));
    /* Masked sections, smaller than the L2 rule (H200, session 20, causal,
     * pinned wsp128 / wsp192, bench/RESULTS.md "Stop 20"):
     *  - the counter: about one grid of tiles a section (grid / query tiles
     *    pairs, rounded up, then to an even divisor: wsp_even_group), so
     *    that the longest tiles of the CTAs' current section start first.
     *    Pinned, against the L2 rule: d 256 L 2048-4096 +4-12%, d 128 L 4096
     *    and 16384 +2-3%, d 64 (wsp192) within 2%.  The L2 rule's sections
     *    at d 256 (24 MB of K and V) read them from HBM 1.3 times (ncu).
     *  - the static round robin: sections of 4 pairs.  CTA x takes tiles x,
     *    x + grid, ...; with G = 4 and 132 CTAs (4 x 33) each step of a CTA
     *    moves one query-tile level on (33 mod n_mtiles = 1 for 4, 8, 16 or
     *    32 levels), so every CTA takes every level alike; against the L2
     *    rule d 128 L 512-1024 +2-4%, d 256 (wsp128) +9-10%, d 64 +0.5%; 2
     *    and 8 pairs measured slower.  Where 4-pair sections would not walk
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
    return 1;
}

/* The problems of try_ws but d 192: bm 128 (d 64, 128, 256) or 192 (d 64).
 * d 192 is left out: its consumers spill two registers a tile (stored at
 * the tile start, reloaded in the epilogue; 240 registers hold O 96 + S 56
 * + P 28 and the loop state of attn_fwd_ws, not the persistent loop's). */
template <typename T>
int try_wsp(sf_ctx *ctx, const FwdParams &p, const sf_cuda_state *cs, sf_status *st, int bm,
            int bn = 0, int cl = 1) {
    if (!cs || cs->sm_major != 9 || !p.aligned || p.varlen ||
        (p.d != 64 && p.d != 128 && p.d != 256) || !(p.scale_log2 > 0.f))
        return 0;
    /* clusters of two (wsp128c2): d 128 full attention; an odd number of
     * query tiles (another length in the autotuner's bucket) takes the
     * plain kernel */
    if (cl == 2) {
        if (p.d != 128 || bm != 128 || bn != 0 || p.wl >= 0 || p.wr >= 0) return 0;
        return launch_wsp<T, 128, 128, 2, 128, 2>(ctx, p, cs, st) || launch_wsp<T, 128, 128, 2>(ctx, p, cs, st);
    }
    /* d 64 with 112-key tiles: short sequences pad less (ViT: 196 keys in
     * 224 instead of 256) */
    if (bn == 112) return p.d == 64 && bm == 128 ? launch_wsp<T, 64, 128, 3, 112>(ctx, p, cs, st) : 0;
    /* d 256 with 64-key tiles: no padding where L is a multiple of 64 (80-key
     * tiles compute 528 keys for 512); 192 KiB of shared memory.  H200,
     * pinned, three rounds (bench/RESULTS.md "Stop 22"): L 512 523-526
     * against 497-499 (wsp128) and 504-508 (ws128) TFLOP/s, causal L 512
     * 337-338 against 324-326 / 321-322; L 1024 and longer slower (more
     * turns a key), so the autotuner chooses. */
    if (bn == 64) return p.d == 256 && bm == 128 ? launch_wsp<T, 256, 128, 2, 64>(ctx, p, cs, st) : 0;
    if (bm == 192) return p.d == 64 ? launch_wsp<T, 64, 192, 3>(ctx, p, cs, st) : 0;
    if (p.d == 64) return launch_wsp<T, 64, 128, 3>(ctx, p, cs, st);
    if (p.d == 128) return launch_wsp<T, 128, 128, 2>(ctx, p, cs, st);
    return launch_wsp<T, 256, 128, 2>(ctx, p, cs, st);
}

template <typename T>
sf_status dispatch(sf_ctx *ctx, const FwdParams &p, int dpad, int bm, int nheads) {
    switch (dpad) {
    case 64: return launch_bucket<T, 64>(ctx, p, bm, nheads);
    case 96: return launch_bucket<T, 96>(ctx, p, bm, nheads);
    case 128: return launch_bucket<T, 128>(ctx, p, bm, nheads);
    case 192: return launch_bucket<T, 192>(ctx, p, bm, nheads);
    default: return launch_bucket<T, 256>(ctx, p, bm, nheads);
    }
}

/* ---- configurations for the autotuner ---- */

/* Candidate 0 is the heuristic chain (ws, else wgmma, else mma) and the
 * default without tuning; the others pin one kernel (and ws tile rows). */
const char *const attn_cand_names[] = {"auto",   "ws128",  "ws192",      "wgmma",     "mma",
                                       "wsp128", "wsp192", "wsp128k112", "wsp128k64", "wsp128c2"};
const int attn_ncand = (int)(sizeof attn_cand_names / sizeof attn_cand_names[0]);

struct AttnTune {
    const FwdParams *p;
    int dpad, bm;
    cudaEvent_t ev[2];
};

template <typename T> sf_status attn_run_cand(sf_ctx *ctx, AttnTune *t, int cand) {
    const FwdParams &p = *t->p;
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    sf_status st = SF_OK;
    switch (cand) {
    case 0:
        if (try_ws<T>(ctx, p, cs, &st, 0)) return st;
        if (try_wgmma<T>(ctx, p, p.nheads, cs, &st, false)) return st;
        return dispatch<T>(ctx, p, t->dpad, t->bm, p.nheads);
    case 1:
    case 2:
        if (try_ws<T>(ctx, p, cs, &st, cand == 1 ? 128 : 192)) return st;
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: configuration %s needs sm_90a code, a dense batch, d 64 (or "
                       "128, 192, 256 for ws128), 16-byte aligned rows and a positive scale",
                       attn_cand_names[cand]);
    case 3:
        if (try_wgmma<T>(ctx, p, p.nheads, cs, &st, true)) return st;
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: configuration wgmma needs sm_90a code, d <= 256 and 16-byte "
                       "aligned rows");
    case 5:
    case 6:
        if (try_wsp<T>(ctx, p, cs, &st, cand == 5 ? 128 : 192)) return st;
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: configuration %s needs sm_90a code, a dense batch, d 64 (or "
                       "128, 256 for wsp128), 16-byte aligned rows and a positive scale",
                       attn_cand_names[cand]);
    case 7:
    case 8:
        if (try_wsp<T>(ctx, p, cs, &st, 128, cand == 7 ? 112 : 64)) return st;
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: configuration %s needs sm_90a code, a dense batch, "
                       "d %d, 16-byte aligned rows and a positive scale",
                       attn_cand_names[cand], cand == 7 ? 64 : 256);
    case 9:
        if (try_wsp<T>(ctx, p, cs, &st, 128, 0, 2)) return st;
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: configuration wsp128c2 needs sm_90a code, a dense batch, d 128, "
                       "full attention (no causal mask or window), 16-byte aligned rows and a positive "
                       "scale");
    default: return dispatch<T>(ctx, p, t->dpad, t->bm, p.nheads);
    }
}

template <typename T> sf_status attn_tune_run(sf_ctx *ctx, int cand, void *arg, double *ms) {
    AttnTune *t = (AttnTune *)arg;
    return sf_cuda_run_timed(ctx, t->ev, ms, [&] { return attn_run_cand<T>(ctx, t, cand); });
}

/* The tuner's sustained runs (autotune.h): 300 ms between two steps of the
 * board's energy counter */
template <typename T>
sf_status attn_tune_sustain(sf_ctx *ctx, int cand, void *arg, double *ms, double *watts, double *limit_w) {
    AttnTune *t = (AttnTune *)arg;
    return sf_cuda_sustain(ctx, 300.0, ms, watts, limit_w, [&] { return attn_run_cand<T>(ctx, t, cand); });
}

int64_t pow2_at_least(int64_t v) {
    int64_t r = 1;
    while (r < v) r <<= 1;
    return r;
}

/* Autotuned launch: bucket = head-dim bucket, mask kind, dense / varlen,
 * query and key lengths and batch x heads rounded up to powers of two. */
template <typename T> sf_status attn_launch(sf_ctx *ctx, const FwdParams &p, int dpad, int bm, sf_dtype dt) {
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    AttnTune t;
    memset(&t, 0, sizeof t);
    t.p = &p;
    t.dpad = dpad;
    t.bm = bm;
    const int64_t lq = p.varlen ? p.lq / (p.batch > 0 ? p.batch : 1) : p.lq;
    const int64_t lk = p.varlen ? p.lk / (p.batch > 0 ? p.batch : 1) : p.lk;
    char bucket[128];
    snprintf(bucket, sizeof bucket, "d%d_wl%d_wr%d_%s_lq%lld_lk%lld_bh%lld%s", dpad, p.wl < 0 ? -1 : p.wl > 0,
             p.wr < 0 ? -1 : p.wr > 0, p.varlen ? "varlen" : "dense", (long long)pow2_at_least(lq),
             (long long)pow2_at_least(lk), (long long)pow2_at_least((int64_t)p.batch * p.nheads),
             p.aligned ? "" : "_unaligned");
    sf_tune_request rq;
    memset(&rq, 0, sizeof rq);
    rq.device = cs ? cs->name : "cuda";
    rq.op = "attn_fwd";
    rq.dtype = dt;
    rq.bucket = bucket;
    rq.ncand = attn_ncand;
    rq.names = attn_cand_names;
    rq.run = attn_tune_run<T>;
    rq.sustain = attn_tune_sustain<T>;
    rq.arg = &t;
    rq.reps = 5;
    rq.no_timing = sf_cuda_capturing(ctx);
    int choice = 0, ran = 0;
    sf_status st = sf_autotune(ctx, &rq, &choice, &ran);
    sf_cuda_events_free(t.ev);
    if (st != SF_OK || ran) return st;
    st = attn_run_cand<T>(ctx, &t, choice);
    /* a cached choice that this problem cannot take (another alignment or
     * scale in the same bucket): the heuristic chain */
    if (st == SF_ERR_UNSUPPORTED && choice != 0) {
        st = attn_run_cand<T>(ctx, &t, 0);
        if (st == SF_OK) ctx->err[0] = 0;
    }
    return st;
}

} /* namespace */

extern "C" sf_status sf_cuda_attn_fwd(sf_ctx *ctx, const sf_attn_problem *pr) {
    const sf_attn_fwd_params *a = pr->p;
    const sf_dtype dt = a->q.dtype;
    if (dt == SF_F32)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: the CUDA backend takes f16/bf16 tensors; f32 attention is "
                       "served by the CPU backend (SF_BACKEND_CPU) on host memory");
    if (dt != SF_F16 && dt != SF_BF16)
        return sf_fail(ctx, SF_ERR_DTYPE, "sf_attn_fwd: CUDA backend: dtype %s not supported",
                       sf_dtype_name(dt));
    const int64_t d = pr->headdim;
    if (d % 8 != 0 || d > 256)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: the CUDA backend needs a head dim that is a multiple of 8 "
                       "and at most 256 (got %lld)",
                       (long long)d);
    const int dpad = d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256;

    FwdParams p;
    memset(&p, 0, sizeof p);
    p.q = a->q.data;
    p.k = a->k.data;
    p.v = a->v.data;
    p.o = a->out.data;
    p.lse = pr->has_lse ? (float *)a->lse.data : NULL;
    p.varlen = pr->varlen;
    p.nheads = (int)pr->nheads;
    p.heads_per_kv = (int)(pr->nheads / pr->nheads_kv);
    p.d = (int)d;
    p.wl = (int)pr->wl;
    p.wr = (int)pr->wr;
    /* softmax scale in log2 units: exp(x*scale) = 2^(x*scale*log2 e) */
    p.scale_log2 = pr->scale * 1.4426950408889634f;
    p.batch = (int)pr->batch;

    const sf_tensor *q = &a->q, *k = &a->k, *v = &a->v, *o = &a->out;
    int aligned = aligned16(q->data) && aligned16(k->data) && aligned16(v->data) &&
                  aligned16(o->data);
    if (!pr->varlen) {
        p.q_sb = q->stride[0]; p.q_sr = q->stride[1]; p.q_sh = q->stride[2];
        p.k_sb = k->stride[0]; p.k_sr = k->stride[1]; p.k_sh = k->stride[2];
        p.v_sb = v->stride[0]; p.v_sr = v->stride[1]; p.v_sh = v->stride[2];
        p.o_sb = o->stride[0]; p.o_sr = o->stride[1]; p.o_sh = o->stride[2];
        if (p.lse) { p.l_sb = a->lse.stride[0]; p.l_sh = a->lse.stride[1]; p.l_sr = a->lse.stride[2]; }
        p.lq = (int)pr->max_lq;
        p.lk = (int)pr->max_lk;
        for (int i = 0; i < 3; i++)
            aligned = aligned && q->stride[i] % 8 == 0 && k->stride[i] % 8 == 0 &&
                      v->stride[i] % 8 == 0 && o->stride[i] % 8 == 0;
        if (p.batch == 0 || p.lq == 0 || p.nheads == 0) return SF_OK;
    } else {
        /* cu_seqlens live on the device: the kernel reads them; lq/lk carry
         * the total token counts (bounds for clamping bad offsets). */
        p.q_sr = q->stride[0]; p.q_sh = q->stride[1];
        p.k_sr = k->stride[0]; p.k_sh = k->stride[1];
        p.v_sr = v->stride[0]; p.v_sh = v->stride[1];
        p.o_sr = o->stride[0]; p.o_sh = o->stride[1];
        if (p.lse) { p.l_sh = a->lse.stride[0]; p.l_sr = a->lse.stride[1]; }
        p.lq = (int)q->shape[0];
        p.lk = (int)k->shape[0];
        p.cu_q = a->cu_seqlens_q.data;
        p.cu_k = a->cu_seqlens_k.data;
        p.cu_q_s = a->cu_seqlens_q.stride[0];
        p.cu_k_s = a->cu_seqlens_k.stride[0];
        p.cu_i64 = a->cu_seqlens_q.dtype == SF_I64;
        if (a->cu_seqlens_k.dtype != a->cu_seqlens_q.dtype)
            return sf_fail(ctx, SF_ERR_DTYPE,
                           "sf_attn_fwd: cu_seqlens_q and cu_seqlens_k must share a dtype");
        for (int i = 0; i < 2; i++)
            aligned = aligned && q->stride[i] % 8 == 0 && k->stride[i] % 8 == 0 &&
                      v->stride[i] % 8 == 0 && o->stride[i] % 8 == 0;
        if (p.batch == 0 || p.lq == 0 || p.nheads == 0) return SF_OK;
    }
    p.aligned = aligned;

    sf_cuda_state *st = sf_cuda_st(ctx);
    int sm_count = st ? st->sm_count : 132;
    int64_t smem_optin = st ? (int64_t)st->smem_optin : 227 * 1024;
    if (sm_count <= 0) sm_count = 132;
    int bm = pick_bm(p, p.nheads, sm_count);
    if (max_smem_needed(dpad, bm) > smem_optin) bm = 64;
    if (max_smem_needed(dpad, bm) > smem_optin)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: head dim %lld needs %lld bytes of shared memory per block; "
                       "this GPU allows %lld",
                       (long long)d, (long long)max_smem_needed(dpad, bm), (long long)smem_optin);
    if (dt == SF_BF16) return attn_launch<__nv_bfloat16>(ctx, p, dpad, bm, dt);
    return attn_launch<__half>(ctx, p, dpad, bm, dt);
}
