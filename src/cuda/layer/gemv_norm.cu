/* gemv_norm.cu - res += x W^T, out = RMSNorm(res) * nw for 1-8 rows in one
 * launch (gemv_norm.h).
 *
 * A warp per output feature n, eight a block: the warp streams W's row n
 * (16-byte loads that skip L1, two passes of 8 a lane in flight: 8 KB a
 * warp) and multiplies it with the M rows of x (read through L1: every
 * warp of the block reads the same x), one f32 partial a row in
 * registers, then a shuffle sum.  Lane 0 adds the product to res and the block writes its
 * rows' sums of squares to the scratch.  The last block to finish (a
 * counter in the scratch, after a fence) sums the partial squares in a
 * fixed order (the result does not depend on which block came last),
 * normalises the M rows and zeroes the counter for the next call.  At 2048
 * features that is 256 blocks of 256 threads, one wave on 132 SMs with
 * ~120 KB of W in flight an SM. */
#include "common/cuda_common.h"
#include "layer/gemv_norm.h"

#include <stdint.h>

namespace {

constexpr int GN_WARPS = 8;   /* output features a block  */
constexpr int GN_U = 8;       /* 16-byte W loads in flight a lane */

__device__ __forceinline__ uint4 ld_stream(const void *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

/* sum over the 16 bytes of two vectors of T, products in f32 */
template <typename T> __device__ __forceinline__ float dot16(uint4 a, uint4 b);
template <> __device__ __forceinline__ float dot16<float>(uint4 a, uint4 b) {
    return __uint_as_float(a.x) * __uint_as_float(b.x) + __uint_as_float(a.y) * __uint_as_float(b.y) +
           __uint_as_float(a.z) * __uint_as_float(b.z) + __uint_as_float(a.w) * __uint_as_float(b.w);
}
template <typename H2> __device__ __forceinline__ float2 h2f(unsigned u);
template <> __device__ __forceinline__ float2 h2f<__half2>(unsigned u) {
    return __half22float2(*reinterpret_cast<const __half2 *>(&u));
}
template <> __device__ __forceinline__ float2 h2f<__nv_bfloat162>(unsigned u) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u));
}
template <typename H2> __device__ __forceinline__ float dot16h(uint4 a, uint4 b) {
    const unsigned ua[4] = {a.x, a.y, a.z, a.w}, ub[4] = {b.x, b.y, b.z, b.w};
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 fa = h2f<H2>(ua[i]), fb = h2f<H2>(ub[i]);
        s = fmaf(fa.x, fb.x, s);
        s = fmaf(fa.y, fb.y, s);
    }
    return s;
}
template <> __device__ __forceinline__ float dot16<__half>(uint4 a, uint4 b) { return dot16h<__half2>(a, b); }
template <> __device__ __forceinline__ float dot16<__nv_bfloat16>(uint4 a, uint4 b) {
    return dot16h<__nv_bfloat162>(a, b);
}

/* the scratch: the counter, then (MAX_ROWS, blocks) partial sums of squares */
struct Scratch {
    unsigned count;
    unsigned pad[3];
};

template <typename T, int MT>
__global__ void __launch_bounds__(GN_WARPS * 32) gemv_add_rmsnorm(const sf_gemv_norm_args a) {
    constexpr int E = 16 / (int)sizeof(T);
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int n = (int)blockIdx.x * GN_WARPS + warp;
    const int M = a.M;
    __shared__ float ssq[GN_WARPS][MT];
    __shared__ float rstd[MT];
    __shared__ int last;
    float acc[MT], r0[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) acc[m] = 0.0f, r0[m] = 0.0f;
    /* the residual's old values, loaded before the stream so that their
     * latency hides behind it */
    if (lane == 0 && n < a.N)
#pragma unroll
        for (int m = 0; m < MT; m++)
            if (m < M) r0[m] = a.res[(int64_t)m * a.ldr + n];
    if (n < a.N) {
        const uint4 *wr = reinterpret_cast<const uint4 *>(static_cast<const T *>(a.w) + (int64_t)n * a.ldw);
        const uint4 *xr = reinterpret_cast<const uint4 *>(a.x);
        const int64_t xs = a.ldx / E; /* x's row stride in vectors */
        const int nv = a.K / E;
        constexpr int PASS = 32 * GN_U; /* vectors a warp's pass loads */
        /* passes of GN_U predicated loads a lane, two passes in flight: the
         * next pass's loads go out before this one's products.  Warp n takes
         * its row's passes from pass n % npass on, so that the warps in
         * flight read all parts of their rows at once rather than the same
         * offset of rows a fixed stride apart (which can load a few memory
         * channels only). */
        const int npass = (nv + PASS - 1) / PASS;
        const int rot = n % npass;
        auto base = [&](int p) { return ((p + rot) % npass) * PASS + lane; };
        uint4 wa[GN_U], wb[GN_U];
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
        auto load = [&](uint4 (&w)[GN_U], int b) {
#pragma unroll
            for (int u = 0; u < GN_U; u++) w[u] = b + 32 * u < nv ? ld_stream(wr + b + 32 * u) : z;
        };
        auto products = [&](const uint4 (&w)[GN_U], int b) {
#pragma unroll
            for (int u = 0; u < GN_U; u++) {
                const int i = b + 32 * u;
                if (i < nv)
#pragma unroll
                    for (int m = 0; m < MT; m++)
                        if (MT == 1 || m < M) acc[m] += dot16<T>(w[u], __ldg(xr + m * xs + i));
            }
        };
        load(wa, base(0));
        for (int p = 0; p < npass; p += 2) {
            const int b0 = base(p), b1 = base(p + 1), b2 = base(p + 2);
            if (p + 1 < npass) load(wb, b1);
            products(wa, b0);
            if (p + 1 >= npass) break;
            if (p + 2 < npass) load(wa, b2);
            products(wb, b1);
        }
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], off);
    }
    if (lane == 0) {
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float r = 0.0f;
            if (m < M && n < a.N) {
                r = r0[m] + acc[m];
                a.res[(int64_t)m * a.ldr + n] = r;
            }
            ssq[warp][m] = r * r;
        }
    }
    __syncthreads();
    Scratch *sc = static_cast<Scratch *>(a.scratch);
    float *part = reinterpret_cast<float *>(sc + 1);
    const int G = (int)gridDim.x;
    if ((int)threadIdx.x < M) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < GN_WARPS; w++) s += ssq[w][threadIdx.x];
        part[threadIdx.x * G + blockIdx.x] = s;
    }
    /* the block's writes are released by thread 0's count after the barrier
     * (release is cumulative over what the barrier ordered before it, as in
     * CUTLASS's semaphores), and the last block acquires them all: no
     * sequentially consistent fence (MEMBAR.SC) anywhere */
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned old;
        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], 1;" : "=r"(old) : "l"(&sc->count) : "memory");
        last = old == (unsigned)(G - 1);
        if (last) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
    if (!last) return;
    /* the last block: each row's sum of squares, in one order whatever block
     * came last; every load of a pass issued before the first use (the
     * block's passes are L2 round trips, the kernel's critical tail) */
    constexpr int UN = 8; /* elements a thread a pass of the normalisation */
    const int64_t total = (int64_t)M * a.N;
    /* the first pass's residual and weight go out with the partial squares */
    float r[UN], w[UN];
#pragma unroll
    for (int u = 0; u < UN; u++) {
        const int64_t i = threadIdx.x + (int64_t)u * blockDim.x;
        const int m = (int)(i / a.N), j = (int)(i - (int64_t)m * a.N);
        r[u] = i < total ? __ldcg(a.res + (int64_t)m * a.ldr + j) : 0.0f;
        w[u] = i < total ? a.nw[j] : 0.0f;
    }
    float s[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) s[m] = 0.0f;
    for (int b = (int)threadIdx.x; b < G; b += (int)blockDim.x)
#pragma unroll
        for (int m = 0; m < MT; m++)
            if (m < M) s[m] += __ldcg(part + m * G + b);
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s[m] += __shfl_xor_sync(0xffffffffu, s[m], off);
        if (lane == 0) ssq[warp][m] = s[m];
    }
    __syncthreads();
    if ((int)threadIdx.x < M) {
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < GN_WARPS; w++) t += ssq[w][threadIdx.x];
        rstd[threadIdx.x] = rsqrtf(t / (float)a.N + a.eps);
    }
    __syncthreads();
    for (int64_t i0 = threadIdx.x; i0 < total; i0 += (int64_t)UN * blockDim.x) {
        if (i0 != threadIdx.x)
#pragma unroll
            for (int u = 0; u < UN; u++) {
                const int64_t i = i0 + (int64_t)u * blockDim.x;
                const int m = (int)(i / a.N), j = (int)(i - (int64_t)m * a.N);
                r[u] = i < total ? __ldcg(a.res + (int64_t)m * a.ldr + j) : 0.0f;
                w[u] = i < total ? a.nw[j] : 0.0f;
            }
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int64_t i = i0 + (int64_t)u * blockDim.x;
            const int m = (int)(i / a.N), j = (int)(i - (int64_t)m * a.N);
            if (i < total) static_cast<T *>(a.out)[(int64_t)m * a.ldo + j] = sf_elem<T>::from_f(r[u] * rstd[m] * w[u]);
        }
    }
    if (threadIdx.x == 0) sc->count = 0u;
}

template <typename T> sf_status launch(sf_ctx *ctx, const sf_gemv_norm_args *a) {
    const unsigned blocks = (unsigned)((a->N + GN_WARPS - 1) / GN_WARPS);
    cudaStream_t s = sf_cuda_stream(ctx);
    if (a->M == 1) gemv_add_rmsnorm<T, 1><<<blocks, GN_WARPS * 32, 0, s>>>(*a);
    else if (a->M == 2) gemv_add_rmsnorm<T, 2><<<blocks, GN_WARPS * 32, 0, s>>>(*a);
    else if (a->M <= 4) gemv_add_rmsnorm<T, 4><<<blocks, GN_WARPS * 32, 0, s>>>(*a);
    else gemv_add_rmsnorm<T, 8><<<blocks, GN_WARPS * 32, 0, s>>>(*a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

} // namespace

extern "C" size_t sf_gemv_norm_scratch_bytes(int N) {
    const size_t blocks = (size_t)(N > 0 ? (N + GN_WARPS - 1) / GN_WARPS : 0);
    return sizeof(Scratch) + sizeof(float) * SF_GEMV_NORM_MAX_ROWS * blocks;
}

extern "C" const char *sf_gemv_norm_supports(const sf_gemv_norm_args *a) {
    if (a->dt != SF_F32 && a->dt != SF_F16 && a->dt != SF_BF16) return "x is not f32, f16 or bf16";
    if (a->M < 1 || a->M > SF_GEMV_NORM_MAX_ROWS) return "rows outside 1..8";
    if (a->N < 1 || a->K < 1) return "an empty product";
    const int64_t E = 16 / (int64_t)sf_dtype_size(a->dt);
    if (a->K % E || a->ldx % E || a->ldw % E) return "K or a row stride of x or W is not a whole number of 16 bytes";
    if (((uintptr_t)a->x | (uintptr_t)a->w) % 16) return "x or W is not 16-byte aligned";
    if (a->ldx < a->K || a->ldw < a->K || a->ldr < a->N || a->ldo < a->N) return "a row stride shorter than its row";
    if (!a->res || !a->nw || !a->out || !a->scratch) return "a buffer is missing";
    return nullptr;
}

extern "C" sf_status sf_cuda_gemv_add_rmsnorm(sf_ctx *ctx, const sf_gemv_norm_args *a) {
    const char *why = sf_gemv_norm_supports(a);
    if (why) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "decode product + RMSNorm: %s", why);
    switch (a->dt) {
    case SF_F32: return launch<float>(ctx, a);
    case SF_F16: return launch<__half>(ctx, a);
    default: return launch<__nv_bfloat16>(ctx, a);
    }
}
