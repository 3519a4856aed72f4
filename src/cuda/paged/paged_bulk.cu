/* paged_bulk.cu - launches of the bulk paged-decode kernel
 * (decode_bulk.cuh): its instances, their occupancy and split count, the
 * workspace of split partials and the split counters. */
#include "paged/bulk.h"
#include "paged/decode_bulk.cuh"

#include <atomic>
#include <stdint.h>

namespace {

using sf_paged::BulkTraits;
using sf_paged::PagedParams;

/* The counters: PAGED_CTR of them, allocated (and zeroed on the stream)
 * by the first call outside graph capture and kept to the context's end,
 * never reallocated, since a captured graph holds their address.  A
 * problem with more groups, or a capture before any eager call, takes them
 * from the workspace, zeroed by a memset on the stream (a graph node). */
constexpr size_t PAGED_CTR = 65536;

sf_status counters(sf_ctx *ctx, size_t n, unsigned int *ws_spare, unsigned int **out) {
    sf_cuda_state *st = sf_cuda_st(ctx);
    cudaStream_t s = sf_cuda_stream(ctx);
    if (st && !st->paged_ctr && !sf_cuda_capturing(ctx)) {
        unsigned int *c = nullptr;
        if (cudaMalloc((void **)&c, PAGED_CTR * sizeof *c) == cudaSuccess) {
            SF_CUDA_CHECK(ctx, cudaMemsetAsync(c, 0, PAGED_CTR * sizeof *c, s));
            st->paged_ctr = c, st->paged_ctr_n = PAGED_CTR;
        } else {
            (void)cudaGetLastError();
        }
    }
    if (st && st->paged_ctr && st->paged_ctr_n >= n) {
        *out = st->paged_ctr;
        return SF_OK;
    }
    SF_CUDA_CHECK(ctx, cudaMemsetAsync(ws_spare, 0, n * sizeof *ws_spare, s));
    *out = ws_spare;
    return SF_OK;
}

size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

/* One instance: with st NULL only why it cannot run (or NULL); else runs. */
template <typename T, int D, int KEYS, int ST, int MOD>
const char *inst(sf_ctx *ctx, PagedParams p, sf_status *st) {
    typedef BulkTraits<D, KEYS, ST> Tr;
    void (*kern)(const PagedParams) = sf_paged::paged_attn_bulk<T, D, KEYS, ST, MOD>;
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    if (!cs || cs->sm_major != 9) return "needs an sm_90 GPU (the bulk copy engine and mbarrier transactions)";
    if (Tr::SMEM > cs->smem_optin) return "needs more shared memory per block than this GPU allows";
    /* resident blocks per SM, asked once (0: no sm_90a code in the build) */
    static std::atomic<int> per_sm_cache{-1};
    int per_sm = per_sm_cache.load(std::memory_order_relaxed);
    if (per_sm < 0) {
        int n = 0;
        if (sf_cuda_sm90a_code((const void *)kern) &&
            cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tr::SMEM) ==
                cudaSuccess &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, Tr::THREADS, Tr::SMEM) == cudaSuccess && n > 0)
            per_sm = n;
        else
            per_sm = 0;
        (void)cudaGetLastError();
        per_sm_cache.store(per_sm, std::memory_order_relaxed);
    }
    if (per_sm == 0) return "the build holds no sm_90a code for it (SF_CUDA_ARCHS without 90a)";
    if (!st) return nullptr;

    const int64_t nsm = sf_paged::split_count(p, cs->sm_count > 0 ? cs->sm_count : 132, per_sm);
    p.nsplit_max = (int)nsm;
    const size_t groups = (size_t)p.batch * p.nkv * p.mtiles;
    /* partials (groups x splits x 16 rows: lse, then O), spare counters */
    const size_t n_lse = nsm > 1 ? align256(groups * nsm * 16 * sizeof(float)) : 0;
    const size_t n_o = nsm > 1 ? align256(groups * nsm * 16 * D * sizeof(float)) : 0;
    const size_t n_c = nsm > 1 ? align256(groups * sizeof(unsigned int)) : 0;
    unsigned char *ws = nsm > 1 ? (unsigned char *)sf_ws_get(ctx, n_lse + n_o + n_c) : nullptr;
    if (nsm > 1 && !ws) {
        *st = SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
        return nullptr;
    }
    p.lse_part = nsm > 1 ? (float *)ws : nullptr;
    p.o_part = nsm > 1 ? (float *)(ws + n_lse) : nullptr;
    p.seq_ok = nullptr;
    p.ctr = nullptr;
    if (nsm > 1) {
        *st = counters(ctx, groups, (unsigned int *)(ws + n_lse + n_o), &p.ctr);
        if (*st != SF_OK) return nullptr;
    }
    cudaStream_t s = sf_cuda_stream(ctx);
    if (cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tr::SMEM) !=
        cudaSuccess) {
        *st = sf_fail(ctx, SF_ERR_CUDA, "sf_attn_paged: bulk kernel: %s", cudaGetErrorString(cudaGetLastError()));
        return nullptr;
    }
    kern<<<dim3((unsigned)nsm, (unsigned)(p.nkv * p.mtiles), (unsigned)p.batch), Tr::THREADS, Tr::SMEM, s>>>(p);
    const cudaError_t e = cudaGetLastError();
    *st = e == cudaSuccess ? SF_OK
                           : sf_fail(ctx, SF_ERR_CUDA, "sf_attn_paged: bulk kernel launch: %s", cudaGetErrorString(e));
    return nullptr;
}

template <typename T, int D, int KEYS, int ST>
const char *by_mod(sf_ctx *ctx, const PagedParams &p, sf_status *st) {
    if (p.alibi) return inst<T, D, KEYS, ST, sf_paged::MOD_ALIBI>(ctx, p, st);
    return p.cap2 > 0.f ? inst<T, D, KEYS, ST, sf_paged::MOD_CAP>(ctx, p, st)
                        : inst<T, D, KEYS, ST, sf_paged::MOD_NONE>(ctx, p, st);
}

template <typename T, int KEYS, int ST>
const char *by_dim(sf_ctx *ctx, const PagedParams &p, int dpad, sf_status *st) {
    if (dpad == 64) return by_mod<T, 64, KEYS, ST>(ctx, p, st);
    if (dpad == 128) return by_mod<T, 128, KEYS, ST>(ctx, p, st);
    return by_mod<T, 256, KEYS, ST>(ctx, p, st);
}

template <typename T>
const char *by_tile(sf_ctx *ctx, const PagedParams &p, int dpad, int keys, int stages, sf_status *st) {
    if (keys == 64 && stages == 3) return by_dim<T, 64, 3>(ctx, p, dpad, st);
    if (keys == 32 && stages == 4) return by_dim<T, 32, 4>(ctx, p, dpad, st);
    return "no instance of this tile and stage count";
}

const char *dispatch(sf_ctx *ctx, const PagedParams &p, bool fp8, sf_dtype dt, int dpad, int keys, int stages,
                     sf_status *st) {
    if (fp8) return "FP8 pools are served by the mma configuration";
    if (dt == SF_BF16) return by_tile<__nv_bfloat16>(ctx, p, dpad, keys, stages, st);
    if (dt == SF_F16) return by_tile<__half>(ctx, p, dpad, keys, stages, st);
    return "takes f16 or bf16";
}

} /* namespace */

const char *sf_paged_bulk_refusal(sf_ctx *ctx, const PagedParams &p, bool fp8, sf_dtype dt, int dpad, int keys,
                                  int stages) {
    return dispatch(ctx, p, fp8, dt, dpad, keys, stages, nullptr);
}

sf_status sf_paged_bulk_run(sf_ctx *ctx, PagedParams p, sf_dtype dt, int dpad, int keys, int stages) {
    sf_status st = SF_OK;
    if (const char *why = dispatch(ctx, p, false, dt, dpad, keys, stages, &st))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_attn_paged: %s", why);
    return st;
}
