/* dec_gemv.cu - the engine's decode-step products with the norm before and
 * the residual add or SwiGLU after (dec_gemv.h), on gs_dec_kernel
 * (gemm_swiglu/decode.cuh): what a call supports, the row it runs
 * (dec_gemv_configs.h) and the launch. */
#include "autotune.h"
#include "common/cuda_common.h"
#include "common/config_table.h"
#include "common/launch.cuh"
#include "gemm_swiglu/decode.cuh"
#include "layer/dec_gemv.h"
#include "layer/dec_gemv_configs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

using namespace sf_gs;

static bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* [p, p + bytes) and [q, q + qbytes) share a byte */
static bool overlap(const void *p, size_t bytes, const void *q, size_t qbytes) {
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return p && q && bytes && qbytes && a < b + qbytes && b < a + bytes;
}
static size_t span(int64_t rows, int64_t ld, int64_t cols, size_t es) {
    return rows > 0 && cols > 0 ? ((size_t)(rows - 1) * (size_t)ld + (size_t)cols) * es : 0;
}

static size_t norm_smem(const sf_dec_gemv_args *a) { return (size_t)a->M * (size_t)(a->K + 8) * 2; }

template <typename T, int WK, int MINB, DecOut OUT, bool NORM>
sf_status launch(sf_ctx *ctx, const GsArgsX &g, unsigned blocks, size_t smem, bool pdl) {
    void (*kern)(const GsArgsX) = gs_dec_kernel<T, WK, 8, true, MINB, true, true, OUT, NORM, GsArgsX>;
    if (smem > 48 * 1024) {
        /* raised once per kernel and device to the largest a call has asked for */
        static size_t granted[64];
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0, granted[0] = 0;
        if (smem > granted[dev]) {
            const cudaError_t e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            if (e != cudaSuccess) return sf_fail(ctx, SF_ERR_CUDA, "decode product: cudaFuncSetAttribute: %s", cudaGetErrorString(e));
            granted[dev] = smem;
        }
    }
    const cudaError_t e = sf_launch_ex(kern, dim3(blocks), dim3(WK * 32), smem, sf_cuda_stream(ctx), pdl, 1u, g);
    return e == cudaSuccess ? SF_OK : sf_fail(ctx, SF_ERR_CUDA, "decode product: launch: %s", cudaGetErrorString(e));
}

template <typename T, int WK, int MINB> sf_status launch_mode(sf_ctx *ctx, const sf_dec_gemv_args *a, const GsArgsX &g) {
    const bool norm = a->x == nullptr;
    const size_t smem = norm ? norm_smem(a) : 0;
    const int nb = a->out == SF_DEC_SWIGLU ? 8 : 16;
    const unsigned blocks = (unsigned)((a->N + nb - 1) / nb);
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    const bool pdl = a->pdl && cs && cs->sm_major >= 9;
    switch (a->out) {
    case SF_DEC_SWIGLU:
        return norm ? launch<T, WK, MINB, DecOut::swiglu, true>(ctx, g, blocks, smem, pdl)
                    : launch<T, WK, MINB, DecOut::swiglu, false>(ctx, g, blocks, smem, pdl);
    case SF_DEC_PLAIN:
        return norm ? launch<T, WK, MINB, DecOut::plain, true>(ctx, g, blocks, smem, pdl)
                    : launch<T, WK, MINB, DecOut::plain, false>(ctx, g, blocks, smem, pdl);
    case SF_DEC_QKV:
        return norm ? launch<T, WK, MINB, DecOut::qkv, true>(ctx, g, blocks, smem, pdl)
                    : launch<T, WK, MINB, DecOut::qkv, false>(ctx, g, blocks, smem, pdl);
    default: return launch<T, WK, MINB, DecOut::res, false>(ctx, g, blocks, smem, pdl);
    }
}

static int row_named(const char *name) {
    for (int i = 1; i < DG_NCONFIG; i++)
        if (strcmp(dg_configs[i].name, name) == 0) return i;
    return -1;
}

/* the row a call runs: its own, the pinned one, or the heuristic's (w8;
 * swiglu: w4, dec4's shape) */
static int pick(const sf_dec_gemv_args *a) {
    if (a->config > 0) return a->config;
    /* a pin applies to the plain and res products */
    if (a->out == SF_DEC_SWIGLU) return row_named("w4");
    char buf[64];
    if (const char *pin = sf_autotune_forced_name("dec_gemv", buf, sizeof buf)) {
        const int i = row_named(pin);
        if (i > 0) return i;
    }
    return row_named("w8");
}

/* the kernel instantiation of a row's warps and register cap */
template <typename T> sf_status run_row(sf_ctx *ctx, const DgConfig &c, const sf_dec_gemv_args *a, const GsArgsX &g) {
    if (c.wk == 8 && c.minb == 2) return launch_mode<T, 8, 2>(ctx, a, g);
    if (c.wk == 4 && c.minb == 4) return launch_mode<T, 4, 4>(ctx, a, g);
    return sf_fail(ctx, SF_ERR_INTERNAL, "decode product: row %s (%d warps, %d blocks an SM) has no kernel", c.name, c.wk, c.minb);
}

static size_t x_span(const sf_dec_gemv_args *a) { return a->x ? span(a->M, a->ldx, a->K, 2) : 0; }

/* the qkv output's own checks (after the common ones) */
static const char *qkv_supports(const sf_dec_gemv_args *a) {
    const sf_dec_rope *r = &a->rope;
    if (a->y || a->res) return "y or a residual output with the qkv output (q, k and v go to rope.q and the cache)";
    if (r->hd < 2 || r->hd % 2) return "the head dim is not even";
    if (r->R < 0 || r->R % 2 || r->R > r->hd) return "the rotary dim is not even, or exceeds the head dim";
    if (r->qd < r->hd || r->qd % r->hd || r->kd < r->hd || r->kd % r->hd) return "q or k is not a whole number of heads";
    if ((int64_t)a->N != (int64_t)r->qd + 2 * (int64_t)r->kd) return "N is not qd + 2 kd";
    if (!r->q || !r->k_cache || !r->v_cache || !r->pos || !r->lens || !r->block_table || (r->R && !r->turns))
        return "a qkv tensor (q, caches, positions, lengths, block table or frequencies) is missing";
    if (((uintptr_t)r->q | (uintptr_t)r->k_cache | (uintptr_t)r->v_cache) & 3) return "q or a cache is not 4-byte aligned";
    if (r->page_size < 1 || (r->page_size & (r->page_size - 1)) || r->page_size > (1 << 20)) return "the page size is not a power of two";
    if (r->num_pages < 1 || r->max_pages < 1 || r->bt_stride < r->max_pages) return "no pages, or block-table rows shorter than max_pages";
    if (r->cache_row_stride < r->kd || r->cache_row_stride % 2) return "the cache's row stride is odd or shorter than kd";
    if (r->cache_page_stride < (int64_t)r->page_size * r->cache_row_stride || r->cache_page_stride % 2)
        return "the cache's page stride is odd or shorter than its rows";
    const size_t qb = span(a->M, r->qd, r->qd, 2);
    const size_t cb = span((int64_t)r->num_pages, r->cache_page_stride, (int64_t)r->page_size * r->cache_row_stride, 2);
    const void *outs[3] = {r->q, r->k_cache, r->v_cache};
    const size_t ob[3] = {qb, cb, cb};
    for (int i = 0; i < 3; i++) {
        for (int j = i + 1; j < 3; j++)
            if (overlap(outs[i], ob[i], outs[j], ob[j])) return "q, the K cache and the V cache overlap";
        if (overlap(outs[i], ob[i], a->x, x_span(a)) || overlap(outs[i], ob[i], a->w, span(a->N, a->ldw, a->K, 2)) ||
            overlap(outs[i], ob[i], a->bias, (size_t)a->N * 2) ||
            (!a->x && overlap(outs[i], ob[i], a->nres, span(a->M, a->ldn, a->K, 4))) ||
            (!a->x && overlap(outs[i], ob[i], a->nw, (size_t)a->K * 4)) ||
            overlap(outs[i], ob[i], r->pos, (size_t)a->M * 4) || overlap(outs[i], ob[i], r->lens, (size_t)a->M * 4) ||
            overlap(outs[i], ob[i], r->block_table, span(a->M, r->bt_stride, r->max_pages, 4)) ||
            overlap(outs[i], ob[i], r->turns, (size_t)(r->R / 2) * 8))
            return "an output (q or a cache) overlaps an input";
    }
    return nullptr;
}

} // namespace

extern "C" int sf_dec_gemv_nconfig(void) { return DG_NCONFIG; }
extern "C" const char *sf_dec_gemv_config_name(int i) { return i >= 0 && i < DG_NCONFIG ? dg_configs[i].name : nullptr; }

extern "C" const char *sf_dec_gemv_supports(const sf_dec_gemv_args *a) {
    if (a->dt != SF_F16 && a->dt != SF_BF16) return "x is not f16 or bf16";
    if (a->out != SF_DEC_PLAIN && a->out != SF_DEC_RES && a->out != SF_DEC_SWIGLU && a->out != SF_DEC_QKV)
        return "no such output mode";
    if (a->config < 0 || a->config >= DG_NCONFIG) return "no such configuration row";
    if (a->M < 1 || a->N < 1 || a->K < 1) return "an empty product";
    if (a->K % 8) return "K is not a multiple of 8";
    if (a->N > 0x7ffffff0) return "N exceeds the grid";
    const bool norm = a->x == nullptr;
    if (!a->w || (a->out == SF_DEC_SWIGLU && !a->w_up)) return "a weight is missing";
    if (!al16(a->w) || a->ldw % 8 || a->ldw < a->K) return "W's rows are not 16-byte aligned (or shorter than K)";
    if (a->out == SF_DEC_SWIGLU && (!al16(a->w_up) || a->ldu % 8 || a->ldu < a->K))
        return "W_up's rows are not 16-byte aligned (or shorter than K)";
    if (norm) {
        if (a->M > SF_DEC_NORM_MAX_ROWS) return "more than 4 rows with the norm";
        if (a->dt != SF_BF16) return "the norm takes bf16 (r * nw is rounded before the 1 / rms scaling: f16 could overflow)";
        if (norm_smem(a) > 96 * 1024) return "the norm's rows do not fit in 96 KB of shared memory";
        if (!a->nres || !a->nw) return "neither x nor the norm's input";
        if (!al16(a->nres) || !al16(a->nw) || a->ldn % 4 || a->ldn < a->K) return "the norm's rows are not 16-byte aligned";
        if (a->out == SF_DEC_RES) return "the norm's input with the residual output (one would race the other)";
        if (!(a->eps >= 0.0f)) return "eps is negative or NaN";
    } else if (!al16(a->x) || (a->ldx % 8 && a->M > 1) || a->ldx < a->K) {
        return "x's rows are not 16-byte aligned (or shorter than K)";
    }
    const size_t es = 2;
    if (a->out == SF_DEC_QKV) return qkv_supports(a);
    if (a->out == SF_DEC_RES) {
        if (!a->res || a->ldr < a->N) return "the residual output is missing (or its rows are short)";
        if (a->bias) return "a bias with the residual output";
    } else {
        if (!a->y || a->ldy < a->N) return "y is missing (or its rows are short)";
        if (a->bias && a->out != SF_DEC_PLAIN) return "a bias with the SwiGLU output";
    }
    const void *o = a->out == SF_DEC_RES ? (const void *)a->res : a->y;
    const size_t ob = a->out == SF_DEC_RES ? span(a->M, a->ldr, a->N, 4) : span(a->M, a->ldy, a->N, es);
    if (overlap(o, ob, a->x, span(a->M, a->ldx, a->K, es)) || overlap(o, ob, a->w, span(a->N, a->ldw, a->K, es)) ||
        (a->out == SF_DEC_SWIGLU && overlap(o, ob, a->w_up, span(a->N, a->ldu, a->K, es))) ||
        (norm && overlap(o, ob, a->nres, span(a->M, a->ldn, a->K, 4))) || (norm && overlap(o, ob, a->nw, (size_t)a->K * 4)) ||
        overlap(o, ob, a->bias, (size_t)a->N * es))
        return "the output overlaps an input";
    return nullptr;
}

extern "C" sf_status sf_cuda_dec_gemv(sf_ctx *ctx, const sf_dec_gemv_args *a) {
    if (const char *why = sf_dec_gemv_supports(a)) return sf_fail(ctx, SF_ERR_INVALID_ARG, "decode product: %s", why);
    GsArgsX g;
    memset(&g, 0, sizeof g);
    g.x = a->x, g.x_rs = a->ldx;
    g.wg = a->w, g.wg_rs = a->ldw;
    g.wu = a->out == SF_DEC_SWIGLU ? a->w_up : a->w, g.wu_rs = a->out == SF_DEC_SWIGLU ? a->ldu : a->ldw;
    g.y = a->y, g.y_rs = a->ldy;
    g.M = a->M, g.I = a->N, g.K = a->K;
    g.nres = a->nres, g.nw = a->nw, g.nres_rs = a->ldn, g.eps = a->eps;
    g.bias = a->bias;
    g.res = a->res, g.res_rs = a->ldr;
    if (a->out == SF_DEC_QKV) {
        const sf_dec_rope *r = &a->rope;
        GsRope &o = g.rope;
        o.q = r->q, o.kc = r->k_cache, o.vc = r->v_cache;
        o.c_sp = r->cache_page_stride, o.c_sr = r->cache_row_stride;
        o.pos = r->pos, o.lens = r->lens, o.bt = r->block_table, o.bt_rs = r->bt_stride;
        o.turns = r->turns;
        const sf_cuda_state *cs = sf_cuda_st(ctx);
        o.err = cs ? cs->paged_err_d : nullptr;
        o.qd = r->qd, o.kd = r->kd, o.hd = r->hd, o.R = r->R;
        o.page_shift = 0;
        while ((1 << o.page_shift) < r->page_size) o.page_shift++;
        o.max_pages = r->max_pages, o.num_pages = r->num_pages;
    }
    const int row = pick(a);
    if (row < 1) return sf_fail(ctx, SF_ERR_INTERNAL, "decode product: the configuration table lacks w8 or w4");
    return a->dt == SF_F16 ? run_row<__half>(ctx, dg_configs[row], a, g) : run_row<__nv_bfloat16>(ctx, dg_configs[row], a, g);
}
