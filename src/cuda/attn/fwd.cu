/* fwd.cu - the attention forward on the GPU (sf_attn_fwd): the launcher.
 *
 * A kernel is a mainloop x epilogue x tile scheduler, one header each role:
 *   params.h        FwdParams, the mask's key ranges, the epilogue's row
 *                   statistics (finish_rows), shared by every kernel
 *   fwd_ws.cuh      attn_fwd_ws (sm_90a): TMA tensor maps, a producer
 *                   warpgroup and 2 or 3 consumer warpgroups in pingpong,
 *                   K/V ring on mbarriers, S_{j+1} issued before the softmax
 *                   of S_j; one CTA per query tile
 *   fwd_wsp.cuh     attn_fwd_wsp: the same roles, persistent over the tile
 *                   schedule of scheduler.h (L2-sized sections, longest
 *                   causal tiles first, a tile counter for masked problems),
 *                   the next tile's Q and K/V loaded during this tile's last
 *                   P V and epilogue; optionally in clusters of two CTAs that
 *                   multicast each K/V stage.  The per-tile kernel is kept
 *                   beside it because each wins somewhere (d 256 at L >=
 *                   1024, d 64 at L >= 8192 go to ws) and the persistent
 *                   loop's state does not fit the d 192 register budget.
 *   fwd_wgmma.cuh   attn_fwd_wgmma (sm_90a): wgmma with a cp.async double
 *                   buffer, no warp specialisation: varlen on Hopper
 *   fwd_mma.cuh     attn_fwd_mma (sm_80+): FlashAttention-2 on mma.sync,
 *                   every head dim that is a multiple of 8 up to 256
 *   launch_ws.cuh, launch_mma.cuh   their host launchers
 *   configs.h       the configurations, as data
 * The configuration is chosen per shape bucket by the autotuner
 * (src/core/autotune.h) among the rows attn_config_supports() accepts.
 *
 * f32 inputs are refused (SF_ERR_UNSUPPORTED): f32 attention is served by
 * the CPU backend on host memory.
 */
#include "common/cuda_common.h"
#include "attn/configs.h"
#include "attn/launch_mma.cuh"
#include "attn/launch_ws.cuh"
#include "autotune.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

struct AttnTune {
    const FwdParams *p;
    int dpad, bm;
    cudaEvent_t ev[2];
};

/* Runs the problem on configuration `c` and returns NULL (status in *st),
 * or returns why `c` cannot serve it, having launched nothing.  With st NULL
 * it only answers: attn_config_supports. */
template <typename T>
const char *attn_config_run(sf_ctx *ctx, const AttnConfig &c, const AttnTune &t, sf_status *st) {
    const FwdParams &p = *t.p;
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    switch (c.kernel) {
    case AttnKernel::heuristic:
        if (!ws_run<T>(ctx, p, cs, st, 0)) return nullptr;
        if (!wgmma_refusal<T>(p, cs, false)) {
            if (st) *st = run_wgmma<T>(ctx, p);
            return nullptr;
        }
        if (st) *st = dispatch_mma<T>(ctx, p, t.dpad, t.bm);
        return nullptr;
    case AttnKernel::ws: return ws_run<T>(ctx, p, cs, st, c.bm);
    case AttnKernel::wsp: return wsp_run<T>(ctx, p, cs, st, c.bm, c.bn, c.cluster);
    case AttnKernel::wgmma:
        if (const char *why = wgmma_refusal<T>(p, cs, true)) return why;
        if (st) *st = run_wgmma<T>(ctx, p);
        return nullptr;
    case AttnKernel::mma:
        if (st) *st = dispatch_mma<T>(ctx, p, t.dpad, t.bm);
        return nullptr;
    }
    return "unknown kernel";
}

/* NULL when configuration `c` can serve the problem, else why not: the one
 * place that answers (the launch below asks the same function). */
template <typename T> const char *attn_config_supports(sf_ctx *ctx, const AttnConfig &c, const AttnTune &t) {
    return attn_config_run<T>(ctx, c, t, nullptr);
}

/* Runs configuration row `i` (SF_ERR_UNSUPPORTED with the reason when it
 * cannot serve the problem). */
template <typename T> sf_status attn_run_config(sf_ctx *ctx, AttnTune *t, int i) {
    sf_status st = SF_OK;
    if (const char *why = attn_config_run<T>(ctx, attn_configs[i], *t, &st))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_fwd: configuration %s: %s", attn_configs[i].name, why);
    return st;
}

template <typename T> sf_status attn_tune_run(sf_ctx *ctx, int cand, void *arg, double *ms) {
    AttnTune *t = (AttnTune *)arg;
    return sf_cuda_run_timed(ctx, t->ev, ms, [&] { return attn_run_config<T>(ctx, t, cand); });
}

/* The tuner's sustained runs (autotune.h): 300 ms between two steps of the
 * board's energy counter */
template <typename T>
sf_status attn_tune_sustain(sf_ctx *ctx, int cand, void *arg, double *ms, double *watts, double *limit_w) {
    AttnTune *t = (AttnTune *)arg;
    return sf_cuda_sustain(ctx, 300.0, ms, watts, limit_w, [&] { return attn_run_config<T>(ctx, t, cand); });
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
    snprintf(bucket, sizeof bucket, "d%d_wl%d_wr%d_%s_lq%lld_lk%lld_bh%lld%s%s", dpad, p.wl < 0 ? -1 : p.wl > 0,
             p.wr < 0 ? -1 : p.wr > 0, p.varlen ? "varlen" : "dense", (long long)pow2_at_least(lq),
             (long long)pow2_at_least(lk), (long long)pow2_at_least((int64_t)p.batch * p.nheads),
             p.aligned ? "" : "_unaligned", has_score_mod(p) ? "_mod" : "");
    sf_tune_request rq;
    memset(&rq, 0, sizeof rq);
    rq.device = cs ? cs->name : "cuda";
    rq.op = "attn_fwd";
    rq.dtype = dt;
    rq.bucket = bucket;
    rq.ncand = ATTN_NCONFIG;
    rq.names = sf_config_names(attn_configs);
    rq.run = attn_tune_run<T>;
    rq.sustain = attn_tune_sustain<T>;
    rq.arg = &t;
    rq.reps = 5;
    rq.no_timing = sf_cuda_capturing(ctx);
    int choice = 0, ran = 0;
    sf_status st = sf_autotune(ctx, &rq, &choice, &ran);
    sf_cuda_events_free(t.ev);
    if (st != SF_OK || ran) return st;
    /* the cached or default choice (tuning off, or capturing a graph); one
     * this problem cannot take (another alignment or scale in the same
     * bucket) gives way to the first row that serves (the heuristic) */
    if (attn_config_supports<T>(ctx, attn_configs[choice], t)) choice = 0;
    st = attn_run_config<T>(ctx, &t, choice);
    /* a refusal only the launch finds (a tensor map the driver refuses),
     * before anything ran: the heuristic */
    if (st == SF_ERR_UNSUPPORTED && choice != 0 && !sf_autotune_forced("attn_fwd")) {
        st = attn_run_config<T>(ctx, &t, 0);
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
    if (d < 1 || d > 256)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_attn_fwd: the CUDA backend takes head dims 1 to 256 (got %lld)", (long long)d);
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
    p.softcap_log2 = pr->softcap * 1.4426950408889634f;
    p.alibi = pr->alibi;
    p.alibi_sb = pr->alibi_sb;
    p.alibi_sh = pr->alibi_sh;

    const sf_tensor *q = &a->q, *k = &a->k, *v = &a->v, *o = &a->out;
    /* "aligned": every row starts on 16 bytes and spans whole 16-byte
     * chunks (d a multiple of 8); otherwise the mma kernel's element loads */
    int aligned = d % 8 == 0 && aligned16(q->data) && aligned16(k->data) && aligned16(v->data) &&
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
