/* bwd.cu - the attention backward on the GPU (sf_attn_bwd): the launcher.
 *
 * Three launches per call.  The ws and wg rows (sm_90a, 16-bit operands,
 * d <= 256 with 16-byte rows) run the FA2 rows' preprocess, the main
 * kernel - attn_bwd_ws (bwd_ws.cuh: warp-specialised, TMA loads; dense
 * batches) or attn_bwd_wg (bwd_wg.cuh: the same products, cp.async loads
 * by the computing warps; also packed batches), the dQ partials added by
 * bulk reduce-adds into an accumulator of 64-row tiles; at d > 128
 * attn_bwd_wg256 (bwd_wg256.cuh: 64-key blocks, the partials added by
 * red.global.add.v4) - and
 * attn_bwd_wg_dq_out, in both modes (deterministic: the partials added in
 * key-block order, counted on a counter per (head, query block);
 * accumulator and counters zeroed by one memset).  attn_bwd_ws falls back
 * to attn_bwd_wg where the driver refuses a tensor map.  The FA2 rows (16-bit operands, d <= 128:
 * bwd_fa2.cuh) run attn_bwd_fa2_pre (D = rowsum(dO * O) into the
 * workspace, and the fast mode's f32 dQ accumulator zeroed in the same
 * pass) when o and dq rows are 16-byte aligned, attn_bwd_fa2 (dK/dV, and
 * in the fast mode the dQ partials added to the accumulator), then
 * attn_bwd_fa2_dq_out (fast: the accumulator converted to dq) or the
 * deterministic mode's attn_bwd_fa2_dq (bwd_fa2_dq.cuh: dQ recomputed per
 * query block in a fixed key order, no atomics, bit-identical from run to
 * run; it recomputes S and dP once more, the price of the fixed order).
 * The simt rows (f32, and d up to 256: bwd_simt.cuh) do the same on f32
 * FMAs with attn_bwd_pre, attn_bwd_dkdv and attn_bwd_dq_out / attn_bwd_dq.
 * The configuration is the first row of the table that supports the call,
 * or the one SF_AUTOTUNE_FORCE=attn_bwd:<name> names.
 * Workspace from the context's arena: D (H x rows f32) and, in the fast
 * mode, the dQ accumulator (rows x H x d f32; wg rows, both modes: H x
 * acc_nb tiles of 64 x D f32); the wg rows' deterministic counters (H x
 * batch x 64-row query blocks, int32).
 */
#include "common/cuda_common.h"
#include "attn/bwd_configs.h"
#include "attn/bwd_fa2.cuh"
#include "attn/bwd_fa2_dq.cuh"
#include "attn/bwd_simt.cuh"
#include "attn/bwd_wg.cuh"
#include "attn/bwd_wg256.cuh"
#include "attn/bwd_ws.cuh"
#include "attn_bwd.h"
#include "autotune.h"
#include "common/tmap.h"

#include <string.h>

#include <algorithm>
#include <initializer_list>
#include <type_traits>

using namespace sf_attn;

namespace {

/* d a multiple of 8 and every tensor's data 16-byte aligned with row,
 * head and batch strides multiples of 8 elements: 16-byte rows */
bool rows16(int d, std::initializer_list<const sf_tensor *> ts) {
    bool ok = d % 8 == 0;
    for (const sf_tensor *x : ts) {
        ok = ok && (uintptr_t)x->data % 16 == 0;
        for (int i = 0; i < x->rank - 1; i++) ok = ok && x->stride[i] % 8 == 0;
    }
    return ok;
}

void strides3(const sf_tensor *t, int varlen, int64_t &sb, int64_t &sr, int64_t &sh) {
    if (varlen) {
        sb = 0;
        sr = t->stride[0];
        sh = t->stride[1];
    } else {
        sb = t->stride[0];
        sr = t->stride[1];
        sh = t->stride[2];
    }
}

/* The FA2-scheme configurations: D, the dK/dV kernel attn_bwd_fa2 with the
 * dQ partials in the fast mode, then the accumulator's conversion (fast) or
 * attn_bwd_fa2_dq's dQ pass (deterministic); q_rows: the longest sequence's
 * query rows.  WG: attn_bwd_wg in place of attn_bwd_fa2, the dQ partials
 * in both modes (the deterministic one adds them in key-block order), then
 * the conversion. */
template <typename T, int DM, int BM, int MB, bool WG = false, bool WS = false>
sf_status launch_fa2(sf_ctx *ctx, const BwdParams &p, int det, int64_t max_lk, int64_t q_rows, bool aux16) {
    constexpr int NW = 8, G = DM / 8; /* G: lanes a row in attn_bwd_fa2_pre; 16 NW keys a block (both kernels) */
    cudaStream_t st = sf_cuda_stream(ctx);
    const bool acc = !det || WG; /* dQ through the f32 accumulator */
    if (p.rows_q > 0 && aux16) {
        const int64_t blocks = (p.rows_q * p.nheads * G + 255) / 256;
        /* the wg rows' accumulator is zeroed by a memset (its own layout) */
        if (!acc || WG) attn_bwd_fa2_pre<T, G, false><<<(unsigned)blocks, 256, 0, st>>>(p);
        else attn_bwd_fa2_pre<T, G, true><<<(unsigned)blocks, 256, 0, st>>>(p);
        SF_CUDA_CHECK_LAUNCH(ctx);
    } else if (p.rows_q > 0) {
        const int64_t warps = p.rows_q * p.nheads;
        attn_bwd_pre<T><<<(unsigned)((warps + 7) / 8), 256, 0, st>>>(p);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    constexpr int KBN = bwd_keys(WS ? BwdKernel::ws : WG ? BwdKernel::wg : BwdKernel::fa2, DM);
    static_assert(KBN == (DM > 128 ? Wg256Smem::BN : 16 * NW), "the kernels' key blocks");
    static_assert(DM <= 128 || (WG && !WS), "head dim 256: the wg256 kernel only");
    const int64_t kb = (max_lk + KBN - 1) / KBN;
    if (kb > 65535) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_bwd: CUDA backend: %lld keys (at most %d)",
                                   (long long)max_lk, 65535 * KBN);
    bool ws = WS; /* the ws kernel when the driver takes its tensor maps (else the wg one, same workspace) */
    CUtensorMap mq, mk, mv, mdo;
    if (kb > 0 && ws) {
        const bool bf = std::is_same<T, __nv_bfloat16>::value;
        const int64_t hkv = p.nheads / p.heads_per_kv;
        ws = make_tmap(&mq, bf, p.q, p.d, p.lq, p.nheads, p.batch, p.q_sr, p.q_sh, p.q_sb, 64) &&
             make_tmap(&mk, bf, p.k, p.d, p.lk, hkv, p.batch, p.k_sr, p.k_sh, p.k_sb, 128) &&
             make_tmap(&mv, bf, p.v, p.d, p.lk, hkv, p.batch, p.v_sr, p.v_sh, p.v_sb, 128) &&
             make_tmap(&mdo, bf, p.dout, p.d, p.lq, p.nheads, p.batch, p.do_sr, p.do_sh, p.do_sb, 64);
    }
    /* the wg and ws kernels' 1-D grid: see wgb::block_of */
    const int64_t ngroups = (kb + p.zgroup - 1) / p.zgroup;
    if (WG && (double)ngroups * p.zgroup * (p.nheads / p.heads_per_kv) * p.batch > 2147483647.0)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_bwd: CUDA backend: %lld key blocks x %d kv heads x %d sequences "
                       "(at most 2^31 - 1)", (long long)kb, p.nheads / p.heads_per_kv, p.batch);
    const dim3 wgrid((unsigned)(ngroups * p.zgroup * (p.nheads / p.heads_per_kv) * p.batch));
    if constexpr (WS) {
        if (kb > 0 && ws) {
            typedef WsBwdSmem<DM, 2> SM;
            auto kern = det ? attn_bwd_ws<T, DM, 2, true> : attn_bwd_ws<T, DM, 2, false>;
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)SM::bytes));
            kern<<<wgrid, SM::NT, SM::bytes, st>>>(p, mq, mk, mv, mdo);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
    }
    if constexpr (WG && DM > 128) {
        if (kb > 0) {
            const size_t ms = Wg256Smem::bytes;
            auto kern = det ? attn_bwd_wg256<T, true> : attn_bwd_wg256<T, false>;
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ms));
            kern<<<wgrid, Wg256Smem::NT, ms, st>>>(p);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
    } else if constexpr (WG) {
        if (kb > 0 && !ws) {
            const size_t ms = WgBwdSmem<DM>::bytes;
            auto kern = det ? attn_bwd_wg<T, DM, true> : attn_bwd_wg<T, DM, false>;
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ms));
            kern<<<wgrid, WgBwdSmem<DM>::NT, ms, st>>>(p);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
    } else if (kb > 0) {
        const dim3 grid((unsigned)(p.nheads / p.heads_per_kv), (unsigned)p.batch, (unsigned)kb);
        if (det) {
            const size_t ms = Fa2Smem<DM, NW, BM, false>::bytes;
            auto kern = attn_bwd_fa2<T, DM, NW, BM, MB, false>;
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ms));
            kern<<<grid, NW * 32, ms, st>>>(p);
        } else {
            const size_t ms = Fa2Smem<DM, NW, BM, true>::bytes;
            auto kern = attn_bwd_fa2<T, DM, NW, BM, MB, true>;
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ms));
            kern<<<grid, NW * 32, ms, st>>>(p);
        }
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if constexpr (WG) {
        if (p.rows_q > 0) {
            const dim3 grid((unsigned)((q_rows + 63) / 64), (unsigned)p.batch, (unsigned)p.nheads);
            if (aux16) attn_bwd_wg_dq_out<T, DM, true><<<grid, 256, 0, st>>>(p);
            else attn_bwd_wg_dq_out<T, DM, false><<<grid, 256, 0, st>>>(p);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
    } else if (p.rows_q > 0 && !acc) {
        const int64_t qb = (q_rows + 16 * NW - 1) / (16 * NW);
        if (qb > 65535) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_bwd: CUDA backend: %lld query rows (at most %d)",
                                       (long long)q_rows, 65535 * 16 * NW);
        const size_t ms = Fa2DqSmem<DM, NW>::bytes;
        auto kern = attn_bwd_fa2_dq<T, DM, NW>;
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ms));
        kern<<<dim3((unsigned)p.nheads, (unsigned)p.batch, (unsigned)qb), NW * 32, ms, st>>>(p);
        SF_CUDA_CHECK_LAUNCH(ctx);
    } else if (p.rows_q > 0 && aux16) {
        const int64_t n = p.rows_q * p.nheads * (p.d / 8);
        int64_t blocks = (n + 255) / 256;
        if (blocks > 65535 * 16) blocks = 65535 * 16;
        attn_bwd_fa2_dq_out<T><<<(unsigned)blocks, 256, 0, st>>>(p);
        SF_CUDA_CHECK_LAUNCH(ctx);
    } else if (p.rows_q > 0) {
        const int64_t n = p.rows_q * p.nheads * p.d;
        int64_t blocks = (n + 255) / 256;
        if (blocks > 65535 * 16) blocks = 65535 * 16;
        attn_bwd_dq_out<T><<<(unsigned)blocks, 256, 0, st>>>(p);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

/* The simt configurations: D, the dK/dV kernel attn_bwd_dkdv (with the dQ
 * partials in the fast mode), then the accumulator's conversion (fast) or
 * attn_bwd_dq's dQ pass (deterministic). */
template <typename T, int DM>
sf_status launch_simt(sf_ctx *ctx, const BwdParams &p, int det, int64_t max_lk, int64_t q_tiles) {
    cudaStream_t st = sf_cuda_stream(ctx);
    const size_t smem = BwdSmem<DM>::bytes;
    const int64_t kv_tiles = (max_lk + BWD_T - 1) / BWD_T;
    if (p.rows_q > 0) {
        const int64_t warps = p.rows_q * p.nheads;
        attn_bwd_pre<T><<<(unsigned)((warps + 7) / 8), 256, 0, st>>>(p);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (kv_tiles > 0) {
        const dim3 grid((unsigned)kv_tiles, (unsigned)(p.nheads / p.heads_per_kv), (unsigned)p.batch);
        if (det) {
            auto kern = attn_bwd_dkdv<T, DM, false>;
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)smem));
            kern<<<grid, BWD_NT, smem, st>>>(p);
        } else {
            auto kern = attn_bwd_dkdv<T, DM, true>;
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)smem));
            kern<<<grid, BWD_NT, smem, st>>>(p);
        }
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (p.rows_q > 0 && det && q_tiles > 0) {
        auto kern = attn_bwd_dq<T, DM>;
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)smem));
        kern<<<dim3((unsigned)q_tiles, (unsigned)p.nheads, (unsigned)p.batch), BWD_NT, smem, st>>>(p);
        SF_CUDA_CHECK_LAUNCH(ctx);
    } else if (p.rows_q > 0 && !det) {
        const int64_t n = p.rows_q * p.nheads * p.d;
        int64_t blocks = (n + 255) / 256;
        if (blocks > 65535 * 16) blocks = 65535 * 16;
        attn_bwd_dq_out<T><<<(unsigned)blocks, 256, 0, st>>>(p);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

/* The instances: wg and FA2 rows for 16-bit T only (bwd_config_supports
 * keeps f32 off them). */
template <typename T>
sf_status dispatch_d(sf_ctx *ctx, const BwdConfig &c, const BwdParams &p, int det, int64_t lk, int64_t qt,
                     bool aux16) {
    if constexpr (!std::is_same<T, float>::value) {
        if (c.kernel == BwdKernel::ws)
            return c.dmax == 64 ? launch_fa2<T, 64, 64, 1, true, true>(ctx, p, det, lk, p.lq, aux16)
                                : launch_fa2<T, 128, 64, 1, true, true>(ctx, p, det, lk, p.lq, aux16);
        if (c.kernel == BwdKernel::wg)
            return c.dmax == 64    ? launch_fa2<T, 64, 64, 1, true>(ctx, p, det, lk, p.lq, aux16)
                   : c.dmax == 128 ? launch_fa2<T, 128, 64, 1, true>(ctx, p, det, lk, p.lq, aux16)
                                   : launch_fa2<T, 256, 64, 1, true>(ctx, p, det, lk, p.lq, aux16);
        if (c.kernel == BwdKernel::fa2)
            return c.dmax == 64 ? (c.qrows == 32 ? launch_fa2<T, 64, 32, 2>(ctx, p, det, lk, p.lq, aux16)
                                                 : launch_fa2<T, 64, 64, 1>(ctx, p, det, lk, p.lq, aux16))
                                : launch_fa2<T, 128, 64, 1>(ctx, p, det, lk, p.lq, aux16);
    }
    switch (c.dmax) {
    case 64: return launch_simt<T, 64>(ctx, p, det, lk, qt);
    case 128: return launch_simt<T, 128>(ctx, p, det, lk, qt);
    default: return launch_simt<T, 256>(ctx, p, det, lk, qt);
    }
}

} /* namespace */

extern "C" sf_status sf_cuda_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_problem *bp) {
    static const char *op = "sf_attn_bwd";
    const sf_attn_problem *pr = &bp->f;
    const sf_attn_fwd_params *f = pr->p;
    const sf_attn_bwd_params *a = bp->p;
    const sf_dtype dt = f->q.dtype;
    if (dt != SF_F32 && dt != SF_F16 && dt != SF_BF16)
        return sf_fail(ctx, SF_ERR_DTYPE, "%s: CUDA backend: dtype %s not supported", op, sf_dtype_name(dt));
    const int d = (int)pr->headdim;
    /* 16-byte loads of q, k, v and dout rows (the FA2 and wg kernels) */
    const bool vec16 = rows16(d, {&f->q, &f->k, &f->v, &a->dout});
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    static const bool wg_code = sf_cuda_sm90a_code((const void *)attn_bwd_wg<__nv_bfloat16, 128, true>);
    const bool sm90a = cs && cs->sm_major == 9 && wg_code;
    const BwdConfig *cfg = nullptr;
    char forced[64];
    if (sf_autotune_forced_name("attn_bwd", forced, sizeof forced)) {
        for (const BwdConfig &c : bwd_configs)
            if (!strcmp(c.name, forced)) cfg = &c;
        if (!cfg)
            return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: SF_AUTOTUNE_FORCE names configuration %s, which "
                           "attn_bwd does not have", op, forced);
        const char *why = bwd_config_supports(*cfg, d, dt, vec16, sm90a, pr->varlen);
        if (why) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: configuration %s: %s", op, cfg->name, why);
    } else {
        for (const BwdConfig &c : bwd_configs)
            if (!bwd_config_supports(c, d, dt, vec16, sm90a, pr->varlen)) {
                cfg = &c;
                break;
            }
    }
    if (!cfg) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: CUDA backend: head dim %d (at most 256)", op, d);
    if (pr->batch > 65535 || pr->nheads > 65535)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: CUDA backend: %lld sequences x %lld heads (at most 65535 each)",
                       op, (long long)pr->batch, (long long)pr->nheads);

    BwdParams p;
    memset(&p, 0, sizeof p);
    const int vl = pr->varlen;
    p.q = f->q.data, p.k = f->k.data, p.v = f->v.data, p.o = f->out.data, p.dout = a->dout.data;
    p.dq = a->dq.data, p.dk = a->dk.data, p.dv = a->dv.data;
    p.lse = (const float *)f->lse.data;
    strides3(&f->q, vl, p.q_sb, p.q_sr, p.q_sh);
    strides3(&f->k, vl, p.k_sb, p.k_sr, p.k_sh);
    strides3(&f->v, vl, p.v_sb, p.v_sr, p.v_sh);
    strides3(&f->out, vl, p.o_sb, p.o_sr, p.o_sh);
    strides3(&a->dout, vl, p.do_sb, p.do_sr, p.do_sh);
    strides3(&a->dq, vl, p.dq_sb, p.dq_sr, p.dq_sh);
    strides3(&a->dk, vl, p.dk_sb, p.dk_sr, p.dk_sh);
    strides3(&a->dv, vl, p.dv_sb, p.dv_sr, p.dv_sh);
    if (vl) {
        p.l_sb = 0, p.l_sh = f->lse.stride[0], p.l_sr = f->lse.stride[1];
        p.cu_q = f->cu_seqlens_q.data, p.cu_k = f->cu_seqlens_k.data;
        p.cu_q_s = f->cu_seqlens_q.stride[0], p.cu_k_s = f->cu_seqlens_k.stride[0];
        p.cu_i64 = f->cu_seqlens_q.dtype == SF_I64;
        p.rows_q = f->q.shape[0];
        if (f->cu_seqlens_k.dtype != f->cu_seqlens_q.dtype)
            return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: CUDA backend: cu_seqlens_q and cu_seqlens_k of one dtype", op);
    } else {
        p.l_sb = f->lse.stride[0], p.l_sh = f->lse.stride[1], p.l_sr = f->lse.stride[2];
        p.rows_q = pr->batch * pr->max_lq;
    }
    p.varlen = vl;
    p.vec16 = vec16;
    p.dkv16 = rows16(d, {&a->dk, &a->dv});
    p.batch = (int)pr->batch;
    p.nheads = (int)pr->nheads;
    p.heads_per_kv = (int)(pr->nheads / pr->nheads_kv);
    p.d = d;
    p.lq = (int)pr->max_lq;
    p.lk = (int)pr->max_lk;
    /* the wg / ws rows' grid order (wgb::block_of, wgb::item_row): the fast
     * mode runs a head's key blocks together, each from its own query block
     * (d 128 L 1024: +44% over kv heads first).  The deterministic mode walks
     * in order; without a mask a head's key blocks run together too, their
     * turns coming one after another on the same blocks; with one their
     * ranges differ (a key block would wait for the previous one to reach
     * its blocks), so a key block's CTAs run before the next's. */
    {
        const int bn = bwd_keys(cfg->kernel, cfg->dmax);
        const int all = (int)std::max<int64_t>(1, (pr->max_lk + bn - 1) / bn);
        const bool unmasked = pr->wl < 0 && pr->wr < 0;
        p.zgroup = !bp->deterministic || unmasked ? all : 1;
        p.zrot = bp->deterministic ? 0 : 1;
    }
    p.wl = (int)pr->wl;
    p.wr = (int)pr->wr;
    p.scale = pr->scale;
    p.softcap = pr->softcap;
    p.alibi = pr->alibi;
    p.alibi_sb = pr->alibi_sb;
    p.alibi_sh = pr->alibi_sh;

    /* workspace: D, then the dQ accumulator (fast mode; wg rows in both, in
     * tiles of 64 query rows: per sequence its query blocks, at most
     * rows / 64 + sequences tiles a head with packed sequences, since
     * sequence b's first tile is q0 / 64 + b and floor(q0 / 64) +
     * ceil(lq / 64) <= floor((q0 + lq) / 64) + 1), then the wg rows'
     * deterministic counts (H x batch x query blocks) */
    const int det = bp->deterministic;
    const bool wg = cfg->kernel == BwdKernel::wg || cfg->kernel == BwdKernel::ws;
    p.sem_nqb = (int)((pr->max_lq + WgBwdSmem<64>::BM - 1) / WgBwdSmem<64>::BM);
    p.acc_nb = vl ? p.rows_q / 64 + pr->batch : pr->batch * p.sem_nqb;
    const double nD = (double)p.rows_q * p.nheads;
    const double nA = wg ? (double)p.nheads * p.acc_nb * 64 * cfg->dmax : det ? 0.0 : nD * d;
    const double nS = det && wg ? (double)p.nheads * p.batch * p.sem_nqb : 0.0;
    if (4.0 * (nD + nA + nS) + 512.0 > (double)(SIZE_MAX / 2))
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: the workspace (%.3g bytes) is too large", op,
                       4.0 * (nD + nA + nS));
    const size_t dbytes = ((size_t)nD * 4 + 255) / 256 * 256, abytes = ((size_t)nA * 4 + 255) / 256 * 256;
    const size_t sbytes = (size_t)nS * 4;
    char *ws = (char *)sf_ws_get(ctx, dbytes + abytes + sbytes + 4);
    if (!ws) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
    p.dsum = (float *)ws;
    p.dqacc = nA > 0.0 ? (float *)(ws + dbytes) : nullptr;
    p.sem = nS > 0.0 ? (int *)(ws + dbytes + abytes) : nullptr;
    if (wg && abytes + sbytes)
        SF_CUDA_CHECK(ctx, cudaMemsetAsync(p.dqacc, 0, abytes + sbytes, sf_cuda_stream(ctx)));
    /* the FA2 rows' 16-byte pre/postprocess (o and dq rows too): the
     * preprocess zeroes the accumulator itself */
    const bool aux16 = cfg->kernel != BwdKernel::simt && p.vec16 && rows16(d, {&f->out, &a->dq});
    if (abytes && !aux16 && !wg) SF_CUDA_CHECK(ctx, cudaMemsetAsync(p.dqacc, 0, abytes, sf_cuda_stream(ctx)));

    const int64_t q_tiles = (pr->max_lq + BWD_T - 1) / BWD_T;
    switch (dt) {
    case SF_F32: return dispatch_d<float>(ctx, *cfg, p, det, pr->max_lk, q_tiles, aux16);
    case SF_F16: return dispatch_d<__half>(ctx, *cfg, p, det, pr->max_lk, q_tiles, aux16);
    default: return dispatch_d<__nv_bfloat16>(ctx, *cfg, p, det, pr->max_lk, q_tiles, aux16);
    }
}
