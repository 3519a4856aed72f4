/* gemm_swiglu.cu - CUDA backend of sf_gemm_swiglu: the configuration rows
 * of configs.h, what each supports, and the autotuned launch.  Kernels:
 * ws.cuh (TMA + wgmma, M > 16) and decode.cuh (weight streaming, any
 * shape). */
#include "autotune.h"
#include "common/cuda_common.h"
#include "common/tmap.h"
#include "gemm_swiglu.h"
#include "gemm_swiglu/configs.h"
#include "gemm_swiglu/decode.cuh"
#include "gemm_swiglu/ws.cuh"

#include <stdio.h>
#include <string.h>
#include <type_traits>

namespace {

using namespace sf_gs;

struct GsTune {
    GsArgs a;
    bool tma_ok; /* x and both weights 16-byte aligned, row strides multiples of 8 */
    bool vec_ok; /* the same, and K a multiple of 8: the decode kernel's 16-byte loads */
    cudaEvent_t ev[2];
};

static bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T, int BN, int NST, int GM, int CL> bool ws_available() {
    static const bool avail = sf_cuda_sm90a_code((const void *)gs_ws_kernel<T, BN, NST, GM, CL>);
    return avail;
}

/* Launches gs_ws_kernel (status in *st) and returns NULL, or returns why it
 * cannot, having launched nothing; with st NULL it only checks. */
template <typename T, int BN, int NST, int GM, int CL> const char *run_ws(sf_ctx *ctx, const GsTune &t, sf_status *st) {
    typedef WsTraits<BN, NST> Tr;
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    if (!t.tma_ok) return "TMA needs x, w_gate and w_up 16-byte aligned with row strides that are multiples of 8 elements";
    if (cs && Tr::SMEM > cs->smem_optin) return "the GPU has too little shared memory per block";
    if (!ws_available<T, BN, NST, GM, CL>()) return "this build has no sm_90a code (SF_CUDA_ARCHS without 90a)";
    const GsArgs &a = t.a;
    const int64_t ntiles = (int64_t)((a.M + Tr::BM * CL - 1) / (Tr::BM * CL)) * CL * ((a.I + BN - 1) / BN);
    if (ntiles > 0x7fffffffLL) return "more than 2^31 tiles";
    if (!st) return nullptr;
    const bool bf = std::is_same<T, __nv_bfloat16>::value;
    CUtensorMap mx, mg, mu;
    if (!make_tmap(&mx, bf, a.x, a.K, a.M, 1, 1, a.x_rs, 0, 0, Tr::BM) ||
        !make_tmap(&mg, bf, a.wg, a.K, a.I, 1, 1, a.wg_rs, 0, 0, BN) ||
        !make_tmap(&mu, bf, a.wu, a.K, a.I, 1, 1, a.wu_rs, 0, 0, BN))
        return "a TMA tensor map cannot describe x, w_gate or w_up";
    void (*kern)(const GsArgs, const CUtensorMap, const CUtensorMap, const CUtensorMap) =
        gs_ws_kernel<T, BN, NST, GM, CL>;
    *st = SF_OK;
    cudaError_t e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tr::SMEM);
    if (e != cudaSuccess) {
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_gemm_swiglu: cudaFuncSetAttribute: %s", cudaGetErrorString(e));
        return nullptr;
    }
    /* persistent: one CTA per SM at most, the tiles (CL 2: pairs of row
     * tiles) spread over them */
    const int64_t units = ntiles / CL;
    const int sms = cs && cs->sm_count > 0 ? cs->sm_count : 132;
    if constexpr (CL == 1) {
        const int grid = (int)(units < sms ? units : sms);
        kern<<<grid, 384, Tr::SMEM, sf_cuda_stream(ctx)>>>(a, mx, mg, mu);
        e = cudaGetLastError();
    } else {
        /* as many clusters as fit at once (a cluster's CTAs share a GPC),
         * asked once */
        cudaLaunchAttribute cl_at;
        memset(&cl_at, 0, sizeof cl_at);
        cl_at.id = cudaLaunchAttributeClusterDimension;
        cl_at.val.clusterDim.x = CL;
        cl_at.val.clusterDim.y = 1;
        cl_at.val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDim = dim3((unsigned)(sms / CL * CL));
        cfg.blockDim = dim3(384);
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
        if (clusters < 1) {
            *st = SF_OK;
            return "no cluster of two fits on this GPU";
        }
        const int64_t nc = units < clusters ? units : clusters;
        cfg.gridDim = dim3((unsigned)(nc * CL));
        e = cudaLaunchKernelEx(&cfg, kern, a, mx, mg, mu);
    }
    if (e != cudaSuccess) *st = sf_fail(ctx, SF_ERR_CUDA, "sf_gemm_swiglu: ws launch: %s", cudaGetErrorString(e));
    return nullptr;
}

template <typename T, int WK, int U, int MINB, bool PF, bool CC> const char *run_dec(sf_ctx *ctx, const GsTune &t, sf_status *st) {
    const int64_t nb = ((int64_t)t.a.I + 7) / 8;
    if (nb > 0x7fffffffLL) return "the grid exceeds CUDA's";
    if (!st) return nullptr;
    /* the element-wise fallback keeps the uncapped registers (no spills) */
    if (t.vec_ok)
        gs_dec_kernel<T, WK, U, true, MINB, PF, CC><<<(unsigned)nb, WK * 32, 0, sf_cuda_stream(ctx)>>>(t.a);
    else
        gs_dec_kernel<T, WK, 4, false><<<(unsigned)nb, WK * 32, 0, sf_cuda_stream(ctx)>>>(t.a);
    const cudaError_t e = cudaGetLastError();
    *st = e == cudaSuccess ? SF_OK : sf_fail(ctx, SF_ERR_CUDA, "sf_gemm_swiglu: decode launch: %s", cudaGetErrorString(e));
    return nullptr;
}

/* The instantiations of the rows of configs.h (checked by rows_match). */
template <typename T> const char *run_row(sf_ctx *ctx, int row, const GsTune &t, sf_status *st) {
    switch (row) {
    case 1: return run_dec<T, 4, 8, 4, true, true>(ctx, t, st);
    case 2: return run_ws<T, 128, 4, 16, 1>(ctx, t, st);
    case 3: return run_ws<T, 64, 6, 8, 1>(ctx, t, st);
    case 4: return run_ws<T, 128, 4, 8, 2>(ctx, t, st);
    default: return "no such row";
    }
}
static bool rows_match() {
    static const int want[][10] = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 1},     {2, 0, 0, 0, 4, 8, 4, 1, 1, 1},
                                   {1, 128, 4, 16, 0, 0, 0, 0, 0, 1}, {1, 64, 6, 8, 0, 0, 0, 0, 0, 1},
                                   {1, 128, 4, 8, 0, 0, 0, 0, 0, 2}};
    if ((int)(sizeof want / sizeof want[0]) != GS_NCONFIG) return false;
    for (int i = 0; i < GS_NCONFIG; i++) {
        const GsConfig &c = gs_configs[i];
        const int got[10] = {(int)c.kernel, c.bn, c.stages, c.gm, c.wk, c.u, c.minb, c.pf, c.contig, c.cluster};
        for (int f = 0; f < 10; f++)
            if (got[f] != want[i][f]) return false;
    }
    return true;
}

/* Runs configuration row `i` (or only checks it, st NULL): NULL, or why it
 * cannot serve the problem.  The heuristic falls through to the first row
 * of its preference that serves (dec4 to M 16, ws128 from M 17); dec4
 * serves everything. */
template <typename T> const char *gs_config_run(sf_ctx *ctx, int i, const GsTune &t, sf_status *st) {
    if (gs_configs[i].kernel != GsKernel::heuristic) return run_row<T>(ctx, i, t, st);
    const int64_t M = t.a.M;
    const int pref = M <= 16 ? 1 : M <= 256 ? 2 : M < 1024 ? 3 : 4;
    if (pref == 4 && !run_row<T>(ctx, 4, t, nullptr)) return run_row<T>(ctx, 4, t, st);
    if (pref >= 2 && !run_row<T>(ctx, pref == 4 ? 2 : pref, t, nullptr)) return run_row<T>(ctx, pref == 4 ? 2 : pref, t, st);
    return run_row<T>(ctx, 1, t, st);
}

template <typename T> sf_status gs_run_config(sf_ctx *ctx, GsTune *t, int i) {
    sf_status st = SF_OK;
    if (const char *why = gs_config_run<T>(ctx, i, *t, &st))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_gemm_swiglu: configuration %s: %s", gs_configs[i].name, why);
    return st;
}

template <typename T> sf_status gs_tune_run(sf_ctx *ctx, int cand, void *arg, double *ms) {
    GsTune *t = (GsTune *)arg;
    return sf_cuda_run_timed(ctx, t->ev, ms, [&] { return gs_run_config<T>(ctx, t, cand); });
}

/* The tuner's sustained runs (autotune.h): at M 4096 the board runs at its
 * power limit, where short timings misrank ws128 and ws64 */
template <typename T>
sf_status gs_tune_sustain(sf_ctx *ctx, int cand, void *arg, double *ms, double *watts, double *limit_w) {
    GsTune *t = (GsTune *)arg;
    return sf_cuda_sustain(ctx, 300.0, ms, watts, limit_w, [&] { return gs_run_config<T>(ctx, t, cand); });
}

int64_t pow2_at_least(int64_t v) {
    int64_t r = 1;
    while (r < v) r <<= 1;
    return r;
}

/* Autotuned launch: bucket = M, I and K rounded up to powers of two, and
 * whether TMA can map the tensors. */
template <typename T> sf_status gs_launch(sf_ctx *ctx, GsTune &t, sf_dtype dt) {
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    char bucket[96];
    snprintf(bucket, sizeof bucket, "M%lld_I%lld_K%lld%s", (long long)pow2_at_least(t.a.M),
             (long long)pow2_at_least(t.a.I), (long long)pow2_at_least(t.a.K), t.tma_ok ? "" : "_unaligned");
    sf_tune_request rq;
    memset(&rq, 0, sizeof rq);
    rq.device = cs ? cs->name : "cuda";
    rq.op = "gemm_swiglu";
    rq.dtype = dt;
    rq.bucket = bucket;
    rq.ncand = GS_NCONFIG;
    rq.names = sf_config_names(gs_configs);
    rq.run = gs_tune_run<T>;
    rq.sustain = gs_tune_sustain<T>;
    rq.arg = &t;
    rq.reps = 5;
    rq.no_timing = sf_cuda_capturing(ctx);
    int choice = 0, ran = 0;
    sf_status st = sf_autotune(ctx, &rq, &choice, &ran);
    sf_cuda_events_free(t.ev);
    if (st != SF_OK || ran) return st;
    /* a cached choice this problem cannot take (another alignment in the
     * bucket) gives way to the heuristic, which serves everything */
    if (gs_config_run<T>(ctx, choice, t, nullptr)) choice = 0;
    st = gs_run_config<T>(ctx, &t, choice);
    /* a refusal only the launch finds (a tensor map the driver refuses),
     * before anything ran: the decode kernel */
    if (st == SF_ERR_UNSUPPORTED && !sf_autotune_forced("gemm_swiglu")) {
        st = gs_run_config<T>(ctx, &t, 1);
        if (st == SF_OK) ctx->err[0] = 0;
    }
    return st;
}

} // namespace

extern "C" sf_status sf_cuda_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_problem *pr) {
    static const char *op = "sf_gemm_swiglu";
    const sf_gemm_swiglu_params *p = pr->p;
    const sf_dtype dt = p->x.dtype;
    if (dt != SF_F16 && dt != SF_BF16)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "%s: the CUDA backend takes f16 or bf16 tensors, not %s (f32 runs on the host backends)", op,
                       sf_dtype_name(dt));
    if (!rows_match()) return sf_fail(ctx, SF_ERR_INTERNAL, "%s: configs.h and the kernel instantiations disagree", op);
    GsTune t;
    memset(&t, 0, sizeof t);
    GsArgs &a = t.a;
    a.x = p->x.data;
    a.wg = p->w_gate.data;
    a.wu = p->w_up.data;
    a.y = p->y.data;
    a.x_rs = p->x.stride[0];
    a.wg_rs = p->w_gate.stride[0];
    a.wu_rs = p->w_up.stride[0];
    a.y_rs = p->y.stride[0];
    a.M = (int)pr->M;
    a.I = (int)pr->I;
    a.K = (int)pr->K;
    a.y_pair = ((uintptr_t)a.y & 3) == 0 && (a.y_rs % 2 == 0 || pr->M == 1);
    t.tma_ok = al16(a.x) && al16(a.wg) && al16(a.wu) && a.x_rs % 8 == 0 && a.wg_rs % 8 == 0 && a.wu_rs % 8 == 0;
    /* a single row's stride is never stepped: any value serves the loads */
    t.vec_ok = al16(a.x) && al16(a.wg) && al16(a.wu) && a.K % 8 == 0 && (a.x_rs % 8 == 0 || pr->M == 1) &&
               (a.wg_rs % 8 == 0 || pr->I == 1) && (a.wu_rs % 8 == 0 || pr->I == 1);
    return dt == SF_F16 ? gs_launch<__half>(ctx, t, dt) : gs_launch<__nv_bfloat16>(ctx, t, dt);
}
