/* swiglu.cu - CUDA SwiGLU: out = silu(gate) * up (sf_swiglu), the three
 * layouts.
 *
 * Element-wise and memory-bound: 2 reads and 1 write per output.  A thread
 * owns U vectors of V outputs (16 bytes of out: 8 x f16/bf16, 4 x f32) of
 * one row, all their loads issued before any math; U = 4 when the problem
 * fills the GPU (64 bytes of loads in flight per thread, 128 KB per SM at
 * full occupancy), 1 for small (decode) problems so they spread over more
 * SMs.  A block is 256 threads: threadIdx.x over a row's vectors (a power
 * of two up to 256), threadIdx.y over rows, so short rows still fill
 * blocks; blockIdx.y strides over rows past the grid limit.
 *  - SEPARATE: gate and up, same row;  CONCAT: up = gate + n in the same
 *    row (the launcher turns it into SEPARATE with up's base moved);
 *  - INTERLEAVED: 2V consecutive inputs (g0 u0 g1 u1 ...) per V outputs:
 *    one 32-byte (f16/bf16) load, split in registers.
 * silu in f32 with __expf and an approximate reciprocal (vec.cuh); the
 * CPU backend's tolerance covers it.  Misaligned views and widths n that
 * are not a whole number of vectors take V = 1 with element accesses.
 * No workspace, no synchronisation (CUDA-graph capturable). */
#include "fused/vec.cuh"
#include "fused_ops.h"

struct swiglu_args {
    const void *g, *u;
    void *o;
    int64_t gs, us, os; /* row strides (elements) */
    int64_t rows, n, nvec;
};

template <typename T, int V, bool VEC, bool INTER, int U>
__global__ void __launch_bounds__(256) swiglu_kernel(const swiglu_args a) {
    const int64_t v0 = (int64_t)blockIdx.x * blockDim.x * U + threadIdx.x;
    for (int64_t row = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; row < a.rows;
         row += (int64_t)gridDim.y * blockDim.y) {
        const T *gp = (const T *)a.g + row * a.gs;
        const T *up = (const T *)a.u + row * a.us;
        T *op = (T *)a.o + row * a.os;
        int n[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t vi = v0 + (int64_t)u * blockDim.x;
            n[u] = vi < a.nvec ? (int)min((int64_t)V, a.n - vi * V) : 0;
        }
        float y[U][V];
        if constexpr (INTER) {
            fz_raw<T, 2 * V> r[U];
#pragma unroll
            for (int u = 0; u < U; u++) fz_ld<T, 2 * V, VEC>(gp + 2 * (v0 + (int64_t)u * blockDim.x) * V, 2 * n[u], r[u]);
#pragma unroll
            for (int u = 0; u < U; u++) {
                float f[2 * V];
                fz_to_f<T, 2 * V>(r[u], f);
#pragma unroll
                for (int v = 0; v < V; v++) y[u][v] = fz_silu(f[2 * v]) * f[2 * v + 1];
            }
        } else {
            fz_raw<T, V> rg[U], ru[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t c = (v0 + (int64_t)u * blockDim.x) * V;
                fz_ld<T, V, VEC>(gp + c, n[u], rg[u]);
                fz_ld<T, V, VEC>(up + c, n[u], ru[u]);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                float fg[V], fu[V];
                fz_to_f<T, V>(rg[u], fg);
                fz_to_f<T, V>(ru[u], fu);
#pragma unroll
                for (int v = 0; v < V; v++) y[u][v] = fz_silu(fg[v]) * fu[v];
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            if (n[u] > 0) fz_stf<T, V, VEC>(op + (v0 + (int64_t)u * blockDim.x) * V, n[u], y[u]);
    }
}

template <typename T, int V, bool VEC, bool INTER, int U>
static sf_status swiglu_go(sf_ctx *ctx, const swiglu_args &a) {
    /* threads over a row's vectors: a power of two covering nvec / U, 32..256 */
    int bx = 32;
    while (bx < 256 && (int64_t)bx * U < a.nvec) bx <<= 1;
    const int by = 256 / bx;
    const int64_t gx = (a.nvec + (int64_t)bx * U - 1) / ((int64_t)bx * U);
    int64_t gy = (a.rows + by - 1) / by;
    if (gy > 65535) gy = 65535; /* the kernel strides over the rest */
    if (gx > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_swiglu: rows of %lld outputs are past the grid limit",
                       (long long)a.n);
    swiglu_kernel<T, V, VEC, INTER, U><<<dim3((unsigned)gx, (unsigned)gy), dim3(bx, by), 0, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

template <typename T, int V, bool VEC, bool INTER>
static sf_status swiglu_u(sf_ctx *ctx, swiglu_args &a) {
    a.nvec = (a.n + V - 1) / V;
    /* U = 4 once the threads of U = 1 would be four waves of full SMs */
    const int64_t full = (int64_t)(sf_cuda_st(ctx) ? sf_cuda_st(ctx)->sm_count : 132) * 2048 * 4;
    return a.rows * a.nvec >= full ? swiglu_go<T, V, VEC, INTER, 4>(ctx, a)
                                   : swiglu_go<T, V, VEC, INTER, 1>(ctx, a);
}

template <typename T>
static sf_status swiglu_dispatch(sf_ctx *ctx, swiglu_args &a, bool vec, bool inter) {
    constexpr int VV = 16 / (int)sizeof(T);
    if (inter) return vec ? swiglu_u<T, VV, true, true>(ctx, a) : swiglu_u<T, 1, false, true>(ctx, a);
    return vec ? swiglu_u<T, VV, true, false>(ctx, a) : swiglu_u<T, 1, false, false>(ctx, a);
}

extern "C" sf_status sf_cuda_swiglu(sf_ctx *ctx, const sf_swiglu_problem *pr) {
    const sf_swiglu_params *p = pr->p;
    if (pr->rows == 0) return SF_OK;
    const sf_dtype dt = p->gate.dtype;
    const size_t es = sf_dtype_size(dt);
    swiglu_args a;
    memset(&a, 0, sizeof a);
    a.g = p->gate.data, a.o = p->out.data;
    a.gs = p->gate.stride[0], a.os = p->out.stride[0];
    a.rows = pr->rows, a.n = pr->n;
    if (pr->layout == SF_SWIGLU_SEPARATE) {
        a.u = p->up.data, a.us = p->up.stride[0];
    } else { /* CONCAT: up is the second half of gate's row; INTERLEAVED reads gate only */
        a.u = (const char *)p->gate.data + (pr->layout == SF_SWIGLU_CONCAT ? pr->n * (int64_t)es : 0);
        a.us = a.gs;
    }
    const bool inter = pr->layout == SF_SWIGLU_INTERLEAVED;
    const bool vec = pr->n % (int64_t)(16 / es) == 0 && fz_rows_aligned(a.g, a.gs, es) && fz_rows_aligned(a.o, a.os, es) &&
                     (inter || fz_rows_aligned(a.u, a.us, es));
    switch (dt) {
    case SF_F32: return swiglu_dispatch<float>(ctx, a, vec, inter);
    case SF_F16: return swiglu_dispatch<__half>(ctx, a, vec, inter);
    case SF_BF16: return swiglu_dispatch<__nv_bfloat16>(ctx, a, vec, inter);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_swiglu: gate must be f32, f16 or bf16");
    }
}
