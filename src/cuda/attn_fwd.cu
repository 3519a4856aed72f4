/* attn_fwd.cu - attention forward on the GPU: the launcher of sf_attn_fwd.
 *
 * Variants:
 *   attn_fwd_mma    (attn_fwd_mma.cuh) FlashAttention-2 structure on
 *                   mma.sync m16n8k16 + ldmatrix, 2-stage cp.async K/V
 *                   pipeline; sm_80 and sm_90a; every head dim that is a
 *                   multiple of 8 up to 256 (zero-padded in shared memory to
 *                   the buckets 64/96/128/192/256); any strides (a slow
 *                   element-wise load path when rows are not 16-byte aligned).
 *                   Q tile 64 or 128 rows per shape (pick_bm).
 *   attn_fwd_wgmma  (attn_fwd_wgmma.cuh) sm_90a: S and O on wgmma (K, V
 *                   from 128B-swizzled shared memory, P from registers),
 *                   same cp.async pipeline, 128 x 128 tiles; d <= 128 with
 *                   16-byte aligned rows.  Used on sm_90 whenever it applies,
 *                   except d <= 64 with sequences under 1024 (use_wgmma).
 * Measured on H200 (bf16, batch*L = 16384, hidden 2048, TFLOP/s, median of
 * 25; mma / wgmma / torch SDPA flash / cuDNN):
 *   d128 L512 218/281/263/411, L2048 259/344/321/555, L16384 274/378/347/643;
 *   causal L2048 228/295/269/459, L16384 276/379/285/605;
 *   d64 L2048 236/266/276/405, L16384 248/288/300/463; causal L512
 *   155/142/133/205; ViT (b256 N196 h12 d64) 105/95/109/142.
 * Not done: TMA + warp-specialised producer/consumer pipeline (what cuDNN
 * and FlashAttention-3 do), wgmma for d > 128.
 *
 * f32 inputs are refused (SF_ERR_UNSUPPORTED): f32 attention is served by
 * the CPU backend on host memory.
 */
#include "cuda_common.h"

#include "attn_fwd_mma.cuh"
#include "attn_fwd_wgmma.cuh"

#include <stdint.h>

using sf_attn::FwdParams;
using sf_attn::FwdTraits;

#ifdef SF_ATTN_TUNING
/* Scratch benchmarks only: force the Q tile (64 or 128; 0 = heuristic). */
int sf_attn_tuning_force_bm = 0;
/* and the 2-CTA register cap (MINB 2) for the d<=64, 128-row tile (0: off). */
int sf_attn_tuning_minb2 = 1;
/* kernel: 0 heuristic, 1 attn_fwd_mma, 2 attn_fwd_wgmma */
int sf_attn_tuning_path = 0;
#endif

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
    static int avail = -1;
    if (avail < 0) {
        cudaFuncAttributes fa;
        avail = cudaFuncGetAttributes(&fa, (const void *)sf_attn::attn_fwd_wgmma<T, D>) ==
                            cudaSuccess &&
                        fa.binaryVersion >= 90 && fa.numRegs >= 64
                    ? 1
                    : 0;
        (void)cudaGetLastError();
    }
    return avail == 1;
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

/* attn_fwd_wgmma serves d <= 128 on sm_90 with 16-byte aligned rows when
 * its machine code is present; returns 1 if it launched (status in *st). */
template <typename T>
int try_wgmma(sf_ctx *ctx, const FwdParams &p, int nheads, const sf_cuda_state *cs, sf_status *st) {
    int path = 0;
#ifdef SF_ATTN_TUNING
    path = sf_attn_tuning_path;
#endif
    if (path == 1) return 0;
    if (!cs || cs->sm_major != 9 || !p.aligned || p.d > 128) return 0;
    /* d <= 64 on short sequences: the 128 x 128 tiles pad and balance worse
     * than the 64-row mma tiles (H200: causal L512 142 vs 155 TFLOP/s, ViT
     * L196 95 vs 106); from L2048 on wgmma wins (266 vs 236). */
    const int64_t avg_len = p.varlen ? p.lq / (p.batch > 0 ? p.batch : 1) : p.lq;
    if (path == 0 && p.d <= 64 && avg_len < 1024) return 0;
    if ((int64_t)(p.d <= 64 ? sf_attn::WgTraits<64>::SMEM : sf_attn::WgTraits<128>::SMEM) >
        (int64_t)cs->smem_optin)
        return 0;
    const int64_t nx = count_tiles(p, 128);
    if (nx <= 0) { *st = SF_OK; return 1; }
    if (nx > 0x7fffffffLL || nheads > 65535) return 0;
    if (p.d <= 64) {
        if (!wgmma_available<T, 64>()) return 0;
        *st = launch_wgmma<T, 64>(ctx, p, nheads, nx);
    } else {
        if (!wgmma_available<T, 128>()) return 0;
        *st = launch_wgmma<T, 128>(ctx, p, nheads, nx);
    }
    return 1;
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
    sf_status wst = SF_OK;
    if (dt == SF_BF16 ? try_wgmma<__nv_bfloat16>(ctx, p, p.nheads, st, &wst)
                      : try_wgmma<__half>(ctx, p, p.nheads, st, &wst))
        return wst;
    if (dt == SF_BF16) return dispatch<__nv_bfloat16>(ctx, p, dpad, bm, p.nheads);
    return dispatch<__half>(ctx, p, dpad, bm, p.nheads);
}
