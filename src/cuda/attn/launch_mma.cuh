/* launch_mma.cuh - host launchers of the per-tile kernels that need no
 * tensor maps: attn_fwd_mma (any GPU; head dims padded to the buckets 64,
 * 96, 128, 192, 256; 64 or 128 query rows by pick_bm) and attn_fwd_wgmma
 * (sm_90a).  Included by fwd.cu only.
 */
#ifndef SF_ATTN_LAUNCH_MMA_CUH
#define SF_ATTN_LAUNCH_MMA_CUH

#include "attn/fwd_mma.cuh"
#include "attn/fwd_wgmma.cuh"

namespace {

using sf_attn::FwdParams;
using sf_attn::FwdTraits;
using sf_attn::has_score_mod;

/* CTAs per SM promised to ptxas (__launch_bounds__), i.e. the register cap.
 * d=64 with 128-row tiles: 2 x 256 threads caps it at 128 registers (150
 * uncapped, one CTA per SM); ptxas spills 60 bytes outside the main loop
 * and it ran 16% faster on H200 (L16384: 251 vs 213 TFLOP/s). */
template <int D, int BM> struct MinBlocks { static constexpr int value = (D <= 64 && BM == 128) ? 2 : 1; };

template <typename T, int D, int BM, int BN, bool MOD>
sf_status launch_mma(sf_ctx *ctx, const FwdParams &p, dim3 grid) {
    void (*kern)(const FwdParams) = sf_attn::attn_fwd_mma<T, D, BM, BN, MinBlocks<D, BM>::value, MOD>;
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
    if (has_score_mod(p)) bm = 64; /* one instantiation per head-dim bucket: not a tuned path */
    const int64_t nx = count_tiles(p, bm);
    if (nx <= 0) return SF_OK;
    if (nx > 0x7fffffffLL || nheads > 65535)
        return sf_fail(ctx, SF_ERR_TOO_LARGE,
                       "sf_attn_fwd: grid of %lld tiles x %d heads exceeds the CUDA grid",
                       (long long)nx, nheads);
    if (!p.varlen) p.n_mtiles = (p.lq + bm - 1) / bm;
    dim3 grid((unsigned)nx, (unsigned)nheads, 1);
    if (has_score_mod(p)) return launch_mma<T, D, 64, BN, true>(ctx, p, grid);
    if (bm == 128) return launch_mma<T, D, 128, BN, false>(ctx, p, grid);
    return launch_mma<T, D, 64, BN, false>(ctx, p, grid);
}

int64_t max_smem_needed(int dpad, int bm) {
    const int bn = dpad <= 128 ? 64 : 32;
    return (int64_t)(bm + 4 * bn) * (dpad + 8) * 2;
}

/* 128-row tiles do less K/V traffic per output row; 64-row tiles make twice
 * the CTAs, balance causal work better and waste fewer padded rows: 128 rows
 * only for long sequences (>= 2048, causal >= 8192) that still give two CTAs
 * per SM (d 64 L 16384: 251 against 235 TFLOP/s). */
int pick_bm(const FwdParams &p, int nheads, int sm_count) {
    const int64_t ctas128 = count_tiles(p, 128) * nheads;
    const int64_t avg_len = p.varlen ? p.lq / (p.batch > 0 ? p.batch : 1) : p.lq;
    const int64_t need = p.wr >= 0 ? 8192 : 2048;
    if (ctas128 < 2LL * sm_count || avg_len < need) return 64;
    return 128;
}

bool aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }

/* Why attn_fwd_wgmma cannot serve the problem, or NULL.  `forced`: the
 * configuration is asked for by name (the heuristic leaves d <= 64 below L
 * 1024 to the 64-row mma tiles, which pad and balance better there). */
template <typename T>
const char *wgmma_refusal(const FwdParams &p, const sf_cuda_state *cs, bool forced) {
    if (!cs || cs->sm_major != 9) return "it needs an sm_90 GPU";
    if (!p.aligned) return "it needs 16-byte aligned rows and a head dim that is a multiple of 8";
    if (has_score_mod(p)) return "softcap and ALiBi are served by the mma kernel";
    if (p.d > 256) return "it takes head dims up to 256";
    const int64_t avg_len = p.varlen ? p.lq / (p.batch > 0 ? p.batch : 1) : p.lq;
    if (!forced && p.d <= 64 && avg_len < 1024) return "the heuristic leaves d <= 64 below L 1024 to mma";
    const int64_t need = p.d <= 64 ? (int64_t)sf_attn::WgTraits<64>::SMEM
                         : p.d <= 128 ? (int64_t)sf_attn::WgTraits<128>::SMEM
                                      : (int64_t)sf_attn::WgTraits<256>::SMEM;
    if (need > (int64_t)cs->smem_optin) return "the GPU has too little shared memory per block";
    if (count_tiles(p, 128) > 0x7fffffffLL || p.nheads > 65535) return "the grid exceeds CUDA's";
    const bool avail = p.d <= 64 ? wgmma_available<T, 64>() : p.d <= 128 ? wgmma_available<T, 128>()
                                                                         : wgmma_available<T, 256>();
    if (!avail) return "this build has no sm_90a code (SF_CUDA_ARCHS without 90a)";
    return nullptr;
}

/* attn_fwd_wgmma, once wgmma_refusal has said yes. */
template <typename T> sf_status run_wgmma(sf_ctx *ctx, const FwdParams &p) {
    const int64_t nx = count_tiles(p, 128);
    if (nx <= 0) return SF_OK;
    if (p.d <= 64) return launch_wgmma<T, 64>(ctx, p, p.nheads, nx);
    if (p.d <= 128) return launch_wgmma<T, 128>(ctx, p, p.nheads, nx);
    return launch_wgmma<T, 256>(ctx, p, p.nheads, nx);
}

template <typename T>
sf_status dispatch_mma(sf_ctx *ctx, const FwdParams &p, int dpad, int bm) {
    switch (dpad) {
    case 64: return launch_bucket<T, 64>(ctx, p, bm, p.nheads);
    case 96: return launch_bucket<T, 96>(ctx, p, bm, p.nheads);
    case 128: return launch_bucket<T, 128>(ctx, p, bm, p.nheads);
    case 192: return launch_bucket<T, 192>(ctx, p, bm, p.nheads);
    default: return launch_bucket<T, 256>(ctx, p, bm, p.nheads);
    }
}

} /* namespace */

#endif
