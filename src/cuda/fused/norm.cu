/* norm.cu - CUDA residual add + RMSNorm / LayerNorm (sf_add_rmsnorm,
 * sf_add_layernorm, sf_rmsnorm, sf_layernorm).
 *
 * Memory-bound: per row one read of x and the residual, one write of y
 * and of h = x + residual.  The numerics are the CPU backend's
 * (src/cpu/fused_cpu.c): h in f32 from the inputs, written out rounded to
 * residual_out's dtype, statistics in f32 from the unrounded h (LayerNorm
 * two-pass: the mean, then the squares of h - mean), y = (h - mean) * rs *
 * weight + bias rounded once.
 *
 * Rows in registers (norm_regs_kernel): a row is cut in vectors of V
 * elements (16 bytes of x: 8 x f16/bf16, 4 x f32); a thread holds NV of
 * them.  Short rows (<= 32 vectors, e.g. D <= 256 in bf16) get a
 * power-of-two slice of a warp and 128 / slice rows share a block
 * (shuffle reductions only); longer rows get a block of up to 512 threads
 * (shuffles, then one shared-memory step), NV chosen from the kernels'
 * occupancy (norm_pick): 16384 x 8192 bf16 runs 512 threads x 2 vectors,
 * 2 blocks per SM, 64 KB of loads in flight per SM.
 * Every load of a row is issued before the first store (a store may not
 * pass a load the compiler cannot prove disjoint), which also makes an
 * in-place residual_out (= residual) safe: each element is read and then
 * written by the same thread.  Weight and bias are read per row at the
 * store (L1/L2 hits after the first rows on an SM).
 * Rows too long for registers (past 512 threads x 8 vectors: D > 32768
 * bf16, > 16384 f32; 8192 on the element path) stream in a block per row: a pass per statistic and one to write,
 * the re-reads mostly L2 hits; h is written only in the last pass, so an
 * in-place residual is still intact for the earlier ones.
 * Misaligned or odd-strided rows (any of x, residual, out, residual_out)
 * and rows that are not a whole number of vectors take the same kernels
 * with V = 1 and element accesses.
 *
 * No workspace, no synchronisation: one launch per call (CUDA-graph
 * capturable). */
#include "fused/vec.cuh"
#include "fused_ops.h"

struct norm_args {
    const void *x, *res, *w, *b;
    void *out, *hout;
    int64_t xs, rs, os, hs, wst, bst; /* row strides; weight / bias element strides */
    int64_t rows;
    int D, nvec, tpr;                 /* row length, vectors per row, threads per row */
    int has_res, has_h, has_b, layer;
    int res32, h32, w32, b32;         /* residual / residual_out / weight / bias in f32 */
    int wvec;                         /* weight and bias: unit stride, 16-byte aligned */
    float eps, inv_d;
};

/* Sum over the tpr threads of a row: xor shuffles within a power-of-two
 * slice of a warp, or (tpr = blockDim.x > 32) across the warp and then the
 * block's warps through red (every thread adds the partial sums in one
 * order, so all get the same value). */
static __device__ __forceinline__ float norm_sum(float s, int tpr, float *red) {
    const int width = tpr < 32 ? tpr : 32;
    for (int off = width >> 1; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (tpr > 32) {
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
        __syncthreads();
        s = 0.0f;
        const int nw = (int)(blockDim.x >> 5);
        for (int w = 0; w < nw; w++) s += red[w];
    }
    return s;
}

/* V elements of weight or bias from column col (n valid): f32 or T, one
 * or two 16-byte loads when unit-strided and aligned. */
template <typename T, int V, bool VEC>
static __device__ __forceinline__ void norm_param(const void *p, int is32, int64_t st, int vec,
                                                  int64_t col, int n, float (&f)[V]) {
    if constexpr (VEC) {
        if (vec && n == V) {
            if (is32) fz_ldf<float, V, true>((const float *)p + col, V, f);
            else fz_ldf<T, V, true>((const T *)p + col, V, f);
            return;
        }
    }
#pragma unroll
    for (int v = 0; v < V; v++) {
        const int64_t o = (col + v) * st;
        f[v] = v >= n ? 0.0f : is32 ? ((const float *)p)[o] : sf_elem<T>::to_f(((const T *)p)[o]);
    }
}

/* h of NV vectors of a row (n[j] valid elements of vector j, at column
 * col[j]; zeros past them): x + residual in f32.  Every load is issued
 * before any conversion. */
template <typename T, typename TR, int V, int NV, bool VEC>
static __device__ __forceinline__ void norm_load_res(const norm_args &a, int64_t row, const int64_t (&col)[NV],
                                                     const int (&n)[NV], const fz_raw<T, V> (&xr)[NV],
                                                     float (&h)[NV][V]) {
    fz_raw<TR, V> rr[NV];
    const TR *rp = (const TR *)a.res + row * a.rs;
#pragma unroll
    for (int j = 0; j < NV; j++) fz_ld<TR, V, VEC>(rp + col[j], n[j], rr[j]);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        float xf[V], rf[V];
        fz_to_f<T, V>(xr[j], xf);
        fz_to_f<TR, V>(rr[j], rf);
#pragma unroll
        for (int v = 0; v < V; v++) h[j][v] = xf[v] + rf[v];
    }
}

template <typename T, int V, int NV, bool VEC>
static __device__ __forceinline__ void norm_load(const norm_args &a, int64_t row, const int64_t (&col)[NV],
                                                 const int (&n)[NV], float (&h)[NV][V]) {
    fz_raw<T, V> xr[NV];
    const T *xp = (const T *)a.x + row * a.xs;
#pragma unroll
    for (int j = 0; j < NV; j++) fz_ld<T, V, VEC>(xp + col[j], n[j], xr[j]);
    if (!a.has_res) {
#pragma unroll
        for (int j = 0; j < NV; j++) fz_to_f<T, V>(xr[j], h[j]);
    } else if (a.res32) {
        norm_load_res<T, float, V, NV, VEC>(a, row, col, n, xr, h);
    } else {
        norm_load_res<T, T, V, NV, VEC>(a, row, col, n, xr, h);
    }
}

/* residual_out = h, rounded to its dtype */
template <typename T, int V, int NV, bool VEC>
static __device__ __forceinline__ void norm_store_h(const norm_args &a, int64_t row, const int64_t (&col)[NV],
                                                   const int (&n)[NV], const float (&h)[NV][V]) {
    if (a.h32) {
        float *hp = (float *)a.hout + row * a.hs;
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (n[j] > 0) fz_stf<float, V, VEC>(hp + col[j], n[j], h[j]);
    } else {
        T *hp = (T *)a.hout + row * a.hs;
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (n[j] > 0) fz_stf<T, V, VEC>(hp + col[j], n[j], h[j]);
    }
}

/* y of one vector: (h - m) * rs * w (+ b), rounded once.  wp and bp are
 * a.w and a.b made opaque once per row (asm barrier): the weight addresses
 * do not depend on the row, and hoisted out of the row loop they held 64
 * registers per thread (8 strided elements x f32 or T x weight and bias). */
template <typename T, int V, bool VEC>
static __device__ __forceinline__ void norm_store_y(const norm_args &a, const void *wp, const void *bp,
                                                   int64_t row, int64_t col, int n, float m, float rs,
                                                   const float (&h)[V]) {
    float w[V], y[V];
    norm_param<T, V, VEC>(wp, a.w32, a.wst, a.wvec, col, n, w);
#pragma unroll
    for (int v = 0; v < V; v++) y[v] = (h[v] - m) * rs * w[v];
    if (a.has_b) {
        float b[V];
        norm_param<T, V, VEC>(bp, a.b32, a.bst, a.wvec, col, n, b);
#pragma unroll
        for (int v = 0; v < V; v++) y[v] += b[v];
    }
    fz_stf<T, V, VEC>((T *)a.out + row * a.os + col, n, y);
}

/* grid: groups of rows (128 / tpr rows per block when tpr <= 32, else one
 * row per block of tpr threads), grid-stride. */
template <typename T, int V, int NV, bool VEC>
__global__ void __launch_bounds__(512) norm_regs_kernel(const norm_args a) {
    __shared__ float red[2][16];
    const int tpr = a.tpr;
    const int lt = (int)threadIdx.x % tpr;
    const int rpb = (int)blockDim.x / tpr;
    int par = 0; /* red buffer of the next reduction: alternating, so a fast warp never
                    overwrites partial sums a slow one has still to read */
    for (int64_t r0 = (int64_t)blockIdx.x * rpb; r0 < a.rows; r0 += (int64_t)gridDim.x * rpb) {
        const int64_t row = r0 + (int)threadIdx.x / tpr;
        const bool act = row < a.rows;
        /* the columns, recomputed per row: kept across rows they were more
         * registers than they save instructions */
        int ltv = lt;
        asm volatile("" : "+r"(ltv));
        int64_t col[NV];
        int n[NV];
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int vi = ltv + j * tpr;
            col[j] = (int64_t)vi * V;
            n[j] = act && vi < a.nvec ? min(V, a.D - vi * V) : 0;
        }
        float h[NV][V];
        norm_load<T, V, NV, VEC>(a, act ? row : 0, col, n, h);
        if (a.has_h && act) norm_store_h<T, V, NV, VEC>(a, row, col, n, h);
        float m = 0.0f;
        if (a.layer) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < NV; j++)
#pragma unroll
                for (int v = 0; v < V; v++) s += h[j][v]; /* zero past the row */
            s = norm_sum(s, tpr, red[par]);
            par ^= 1;
            m = s * a.inv_d;
        }
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < NV; j++)
#pragma unroll
            for (int v = 0; v < V; v++) {
                const float d = v < n[j] ? h[j][v] - m : 0.0f;
                q = fmaf(d, d, q);
            }
        q = norm_sum(q, tpr, red[par]);
        par ^= 1;
        const float rs = rsqrtf(q * a.inv_d + a.eps);
        const void *wp = a.w, *bp = a.b;
        asm volatile("" : "+l"(wp), "+l"(bp));
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (n[j] > 0) norm_store_y<T, V, VEC>(a, wp, bp, row, col[j], n[j], m, rs, h[j]);
    }
}

/* h of one vector for the streaming kernel */
template <typename T, int V, bool VEC>
static __device__ __forceinline__ void norm_h1(const norm_args &a, int64_t row, int64_t col, int n, float (&h)[V]) {
    const int64_t c1[1] = {col};
    const int n1[1] = {n};
    float h1[1][V];
    norm_load<T, V, 1, VEC>(a, row, c1, n1, h1);
#pragma unroll
    for (int v = 0; v < V; v++) h[v] = h1[0][v];
}

/* grid: one block of 512 threads per row, grid-stride; rows too long for
 * registers. */
template <typename T, int V, bool VEC>
__global__ void __launch_bounds__(512) norm_stream_kernel(const norm_args a) {
    __shared__ float red[2][16];
    const int nt = (int)blockDim.x;
    int par = 0;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        float m = 0.0f;
        if (a.layer) {
            float s = 0.0f;
            for (int vi = (int)threadIdx.x; vi < a.nvec; vi += nt) {
                float h[V];
                norm_h1<T, V, VEC>(a, row, (int64_t)vi * V, min(V, a.D - vi * V), h);
#pragma unroll
                for (int v = 0; v < V; v++) s += h[v];
            }
            s = norm_sum(s, nt, red[par]);
            par ^= 1;
            m = s * a.inv_d;
        }
        float q = 0.0f;
        for (int vi = (int)threadIdx.x; vi < a.nvec; vi += nt) {
            float h[V];
            const int n = min(V, a.D - vi * V);
            norm_h1<T, V, VEC>(a, row, (int64_t)vi * V, n, h);
#pragma unroll
            for (int v = 0; v < V; v++) {
                const float d = v < n ? h[v] - m : 0.0f;
                q = fmaf(d, d, q);
            }
        }
        q = norm_sum(q, nt, red[par]);
        par ^= 1;
        const float rs = rsqrtf(q * a.inv_d + a.eps);
        for (int vi = (int)threadIdx.x; vi < a.nvec; vi += nt) {
            const int64_t c1[1] = {(int64_t)vi * V};
            const int n1[1] = {min(V, a.D - vi * V)};
            float h1[1][V];
            norm_load<T, V, 1, VEC>(a, row, c1, n1, h1);
            if (a.has_h) norm_store_h<T, V, 1, VEC>(a, row, c1, n1, h1);
            norm_store_y<T, V, VEC>(a, a.w, a.b, row, c1[0], n1[0], m, rs, h1[0]);
        }
    }
}

/* Blocks for `units` groups of rows, capped (the kernels loop). */
static unsigned norm_grid(int64_t units) {
    const int64_t cap = INT64_C(1) << 24;
    return (unsigned)(units < cap ? units : cap);
}

/* One candidate shape of the register kernel for long rows: NV vectors per
 * thread, tpr threads (one row per block). */
struct norm_cand {
    int nv, tpr, occ;   /* occ: resident blocks per SM */
    bool spills;
};

/* Occupancy of norm_regs_kernel<T, V, NV, VEC> at tpr threads, asked once
 * per (kernel, tpr) and cached: host-side queries, no stream work, so a
 * call stays capturable. */
template <typename T, int V, int NV, bool VEC>
static norm_cand norm_probe(int tpr) {
    static int occ_cache[17], spill_cache = -1; /* tpr / 32 <= 16 */
    const void *k = (const void *)norm_regs_kernel<T, V, NV, VEC>;
    if (spill_cache < 0) {
        cudaFuncAttributes fa;
        spill_cache = cudaFuncGetAttributes(&fa, k) == cudaSuccess && fa.localSizeBytes > 0;
        (void)cudaGetLastError();
    }
    int &occ = occ_cache[tpr / 32];
    if (occ == 0) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, tpr, 0) != cudaSuccess) b = 1;
        (void)cudaGetLastError();
        occ = b > 0 ? b : 1;
    }
    return norm_cand{NV, tpr, occ, spill_cache > 0};
}

template <typename T, int V, int NV, bool VEC>
static void norm_go(const norm_args &a, int threads, int64_t units, cudaStream_t st) {
    norm_regs_kernel<T, V, NV, VEC><<<norm_grid(units), threads, 0, st>>>(a);
}

/* Long rows: the register kernel whose resident threads hold the most
 * vectors per SM (loads in flight), counted up to 2048 vectors (64 KB of x
 * and a 16-bit residual: past that HBM is covered), without spills, ties
 * to the fewer vectors per thread (more warps to hide the reductions).
 * E.g. 8192 bf16: 2 x 512 threads x 2 vectors (58 registers) against 2 x
 * 256 x 4 (87): a tie, NV 2 wins.  Rows past 512 threads x the largest NV
 * stream (nv = 0). */
template <typename T, int V, bool VEC>
static norm_cand norm_pick(int nvec) {
    norm_cand c[4];
    int nc = 0;
    auto add = [&](int nv, norm_cand (*probe)(int)) {
        const int tpr = ((nvec + nv - 1) / nv + 31) / 32 * 32;
        if (tpr <= 512) c[nc++] = probe(tpr);
    };
    if constexpr (VEC) {
        add(1, norm_probe<T, V, 1, VEC>);
        add(2, norm_probe<T, V, 2, VEC>);
        add(4, norm_probe<T, V, 4, VEC>);
        add(8, norm_probe<T, V, 8, VEC>);
    } else {
        add(1, norm_probe<T, V, 1, VEC>);
        add(4, norm_probe<T, V, 4, VEC>);
        add(16, norm_probe<T, V, 16, VEC>);
    }
    norm_cand best{0, 0, 0, true};
    long best_score = -1;
    for (int i = 0; i < nc; i++) {
        long score = (long)c[i].occ * c[i].tpr * c[i].nv;
        if (score > 2048) score = 2048;
        if (c[i].spills) score -= 4096; /* only when nothing else fits */
        if (score > best_score) best = c[i], best_score = score;
    }
    return best;
}

template <typename T, int V, bool VEC>
static sf_status norm_launch(sf_ctx *ctx, norm_args &a) {
    cudaStream_t st = sf_cuda_stream(ctx);
    a.nvec = (a.D + V - 1) / V;
    if (a.nvec <= 32) {
        int tpr = 1;
        while (tpr < a.nvec) tpr <<= 1;
        a.tpr = tpr;
        norm_go<T, V, 1, VEC>(a, 128, (a.rows + 128 / tpr - 1) / (128 / tpr), st);
    } else {
        const norm_cand c = norm_pick<T, V, VEC>(a.nvec);
        a.tpr = c.nv ? c.tpr : 512;
        switch (c.nv) {
        case 0: norm_stream_kernel<T, V, VEC><<<norm_grid(a.rows), 512, 0, st>>>(a); break;
        case 1: norm_go<T, V, 1, VEC>(a, a.tpr, a.rows, st); break;
        case 2: if constexpr (VEC) norm_go<T, V, 2, VEC>(a, a.tpr, a.rows, st); break;
        case 4: norm_go<T, V, 4, VEC>(a, a.tpr, a.rows, st); break;
        case 8: if constexpr (VEC) norm_go<T, V, 8, VEC>(a, a.tpr, a.rows, st); break;
        default: if constexpr (!VEC) norm_go<T, V, 16, VEC>(a, a.tpr, a.rows, st); break;
        }
    }
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

template <typename T>
static sf_status norm_dispatch(sf_ctx *ctx, norm_args &a, bool vec) {
    constexpr int VV = 16 / (int)sizeof(T);
    return vec ? norm_launch<T, VV, true>(ctx, a) : norm_launch<T, 1, false>(ctx, a);
}

extern "C" sf_status sf_cuda_add_norm(sf_ctx *ctx, const sf_norm_problem *pr) {
    const sf_norm_params *p = pr->p;
    if (pr->rows == 0) return SF_OK;
    if (pr->dim > INT32_MAX / 2)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: rows of %lld elements are past the CUDA kernels' limit (2^30)",
                       pr->op, (long long)pr->dim);
    norm_args a;
    memset(&a, 0, sizeof a);
    a.x = p->x.data, a.res = p->residual.data, a.w = p->weight.data, a.b = p->bias.data;
    a.out = p->out.data, a.hout = p->residual_out.data;
    a.xs = p->x.stride[0], a.os = p->out.stride[0];
    a.rs = pr->has_res ? p->residual.stride[0] : 0;
    a.hs = pr->has_hout ? p->residual_out.stride[0] : 0;
    a.wst = p->weight.stride[0];
    a.bst = pr->has_bias ? p->bias.stride[0] : 0;
    a.rows = pr->rows;
    a.D = (int)pr->dim;
    a.has_res = pr->has_res, a.has_h = pr->has_hout, a.has_b = pr->has_bias, a.layer = pr->layer;
    a.res32 = pr->has_res && p->residual.dtype == SF_F32;
    a.h32 = pr->has_hout && p->residual_out.dtype == SF_F32;
    a.w32 = p->weight.dtype == SF_F32;
    a.b32 = pr->has_bias && p->bias.dtype == SF_F32;
    a.eps = pr->eps;
    a.inv_d = 1.0f / (float)pr->dim; /* the CPU backend's invD */
    const sf_dtype dt = p->x.dtype;
    const size_t es = sf_dtype_size(dt);
    a.wvec = a.wst == 1 && ((uintptr_t)a.w % 16u) == 0 &&
             (!pr->has_bias || (a.bst == 1 && ((uintptr_t)a.b % 16u) == 0));
    /* 16-byte vectors when every row start of every row tensor is aligned
     * and a row is whole vectors */
    const bool vec = pr->dim % (int64_t)(16 / es) == 0 && fz_rows_aligned(a.x, a.xs, es) && fz_rows_aligned(a.out, a.os, es) &&
                     (!pr->has_res || fz_rows_aligned(a.res, a.rs, a.res32 ? 4 : es)) &&
                     (!pr->has_hout || fz_rows_aligned(a.hout, a.hs, a.h32 ? 4 : es));
    switch (dt) {
    case SF_F32: return norm_dispatch<float>(ctx, a, vec);
    case SF_F16: return norm_dispatch<__half>(ctx, a, vec);
    case SF_BF16: return norm_dispatch<__nv_bfloat16>(ctx, a, vec);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "%s: x must be f32, f16 or bf16", pr->op);
    }
}
