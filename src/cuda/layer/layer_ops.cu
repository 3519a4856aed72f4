/* layer_ops.cu - CUDA kernels of the layer ops around SSD: causal
 * depthwise conv1d (prefill and decode update) and gated RMSNorm.
 *
 * All of them are memory-bound (a handful of flops per element), so the
 * goal is one pass over HBM with 16-byte accesses:
 *  - conv1d prefill, channels-last: layer/conv1d_fwd.cuh.
 *  - conv1d update: one thread per (sequence, channel); the W-1 state
 *    floats of adjacent channels are adjacent, so a warp reads one
 *    contiguous stretch of the state.
 *  - gated RMSNorm: one unit per (row, group).  Groups of up to 2048
 *    vectors stay in registers (one read of x and z, one write of out):
 *    small groups get a power-of-two slice of a warp (shuffle reduction
 *    within the slice), larger ones a block of up to 512 threads (warp
 *    shuffles, then one shared-memory step).  Larger groups stream twice
 *    (the second read mostly hits L2).
 * Misaligned or padded-to-odd layouts fall back to scalar accesses (V = 1)
 * in the same kernels.
 *
 * Measured on the H200 (copy ceiling ~4.3 TB/s), bytes that must move / time:
 *   conv1d_fwd 8 x 4096 x 5376 W4 SiLU     f32 3.8 TB/s   bf16 1.5 TB/s (the
 *     previous kernel: 8 x 16-bit channels per thread, see CONV_U)
 *   conv1d_update 256 x 5376 W4            f32 4.3 TB/s   bf16 3.8 TB/s (10 us)
 *   rmsnorm_gated 32768 x 5120, z          f32 3.6 TB/s   bf16 2.9 TB/s
 * An IEEE division in SiLU and a bank-conflicted weight layout had the
 * 16-bit kernels at half these rates; the bf16 conv was element-bound and
 * is restructured for fewer instructions per element (see CONV_U). */
#include "layer/conv1d_fwd.cuh"
#include "layer_ops.h"

#include <stdint.h>

static bool lo_aligned(const void *p, int64_t bytes) { return ((uintptr_t)p % (uintptr_t)bytes) == 0; }

/* 16-bit inputs take the L2 prefetch of each run's first rows (PF): H100,
 * 8 x 4096 x 5376 W 4 SiLU, bf16 2.62 -> 2.87 TB/s (the copy's rate); f32
 * 2.84 -> 2.81, so not there (bench/harness/conv1d.cu). */
template <typename T, int W>
static sf_status conv_fwd_launch_w(sf_ctx *ctx, const conv_fwd_args &a, bool vec, int64_t blocks) {
    const dim3 block(32, 4);
    cudaStream_t st = sf_cuda_stream(ctx);
    constexpr bool PF = sizeof(T) == 2;
    if (vec && a.silu) conv1d_fwd_kernel<T, W, CONV_V, true, PF><<<(unsigned)blocks, block, 0, st>>>(a);
    else if (vec) conv1d_fwd_kernel<T, W, CONV_V, false, PF><<<(unsigned)blocks, block, 0, st>>>(a);
    else if (a.silu) conv1d_fwd_kernel<T, W, 1, true><<<(unsigned)blocks, block, 0, st>>>(a);
    else conv1d_fwd_kernel<T, W, 1, false><<<(unsigned)blocks, block, 0, st>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

template <typename T>
static sf_status conv_fwd_launch(sf_ctx *ctx, conv_fwd_args &a, bool vec, bool has_final) {
    const int V = vec ? CONV_V : 1;
    if (a.L > 0 && a.dim > 0 && a.batch > 0) {
        a.ctiles = (int)((a.dim + 32 * V - 1) / (32 * V));
        /* runs of 32 tokens amortise the W-1 halo (<10% extra reads, L2
         * hits); shorter runs when that would leave the GPU short of blocks */
        int64_t blocks = 0;
        for (a.tl = 32;; a.tl /= 2) {
            a.ttiles = (int)((a.L + 4 * a.tl - 1) / (4 * a.tl));
            blocks = (int64_t)a.ctiles * a.ttiles * a.batch;
            if (a.tl <= 4 || blocks >= 2048) break;
        }
        if (blocks > INT32_MAX)
            return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_conv1d_fwd: %lld thread blocks, past the grid limit",
                           (long long)blocks);
        sf_status s;
        switch (a.width) {
        case 2: s = conv_fwd_launch_w<T, 2>(ctx, a, vec, blocks); break;
        case 3: s = conv_fwd_launch_w<T, 3>(ctx, a, vec, blocks); break;
        default: s = conv_fwd_launch_w<T, 4>(ctx, a, vec, blocks); break;
        }
        if (s != SF_OK) return s;
    }
    if (has_final && a.nseq > 0 && a.dim > 0) {
        const int64_t nthr = (int64_t)a.nseq * a.dim, nblk = (nthr + 255) / 256;
        if (nblk > INT32_MAX)
            return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_conv1d_fwd: final state grid too large");
        conv1d_final_kernel<T><<<(unsigned)nblk, 256, 0, sf_cuda_stream(ctx)>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

extern "C" sf_status sf_cuda_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_problem *pr) {
    const sf_conv1d_params *p = pr->p;
    conv_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.x = p->x.data;
    a.out = p->out.data;
    a.w = (const float *)p->weight.data;
    a.bias = (const float *)p->bias.data;
    a.init = (const float *)p->initial_state.data;
    a.fin = (float *)p->final_state.data;
    a.cu = p->cu_seqlens.data;
    a.xs[0] = p->x.stride[0], a.xs[1] = p->x.stride[1];
    a.os[0] = p->out.stride[0], a.os[1] = p->out.stride[1];
    a.wsd[0] = p->weight.stride[0], a.wsd[1] = p->weight.stride[1];
    a.bs = pr->has_bias ? p->bias.stride[0] : 0;
    for (int i = 0; i < 3; i++) {
        a.ins[i] = pr->has_init ? p->initial_state.stride[i] : 0;
        a.fs[i] = pr->has_final ? p->final_state.stride[i] : 0;
    }
    a.cus = pr->varlen ? p->cu_seqlens.stride[0] : 0;
    a.cu64 = pr->varlen && p->cu_seqlens.dtype == SF_I64;
    a.L = pr->seqlen;
    a.batch = (int)pr->batch, a.dim = (int)pr->dim, a.nseq = (int)pr->nseq;
    a.width = pr->width;
    a.has_bias = pr->has_bias, a.has_init = pr->has_init, a.silu = pr->silu, a.varlen = pr->varlen;
    const size_t es = sf_dtype_size(p->x.dtype);
    const int64_t V = CONV_V; /* 16 bytes of f32, 8 of f16/bf16 */
    const bool vec = lo_aligned(p->x.data, V * es) && lo_aligned(p->out.data, V * es) && a.xs[0] % V == 0 &&
                     a.xs[1] % V == 0 && a.os[0] % V == 0 && a.os[1] % V == 0;
    switch (p->x.dtype) {
    case SF_F32: return conv_fwd_launch<float>(ctx, a, vec, pr->has_final);
    case SF_F16: return conv_fwd_launch<__half>(ctx, a, vec, pr->has_final);
    case SF_BF16: return conv_fwd_launch<__nv_bfloat16>(ctx, a, vec, pr->has_final);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_conv1d_fwd: x must be f32, f16 or bf16");
    }
}

/* ------------------------------------------------------------------ */
/* conv1d decode update                                                 */
/* ------------------------------------------------------------------ */

struct conv_upd_args {
    float *state;
    const void *x;
    void *out;
    const float *w, *bias;
    const int *idx;
    int64_t ss[3], xs[2], os[2], wsd[2], bs, idxs;
    int batch, dim, nslots, cblocks;
    int has_bias, has_idx, silu;
};

/* grid: one thread per (sequence, channel), 128 channels per block. */
template <typename T, int W>
__global__ void __launch_bounds__(128) conv1d_update_kernel(const conv_upd_args a) {
    const int i = (int)(blockIdx.x / a.cblocks);
    const int c = (int)(blockIdx.x % a.cblocks) * 128 + (int)threadIdx.x;
    if (c >= a.dim) return;
    T *o = (T *)a.out + (int64_t)i * a.os[0] + (int64_t)c * a.os[1];
    const int64_t s = a.has_idx ? (int64_t)a.idx[(int64_t)i * a.idxs] : i;
    if (s < 0 || s >= a.nslots) { /* padding or out of range: zero output, state untouched */
        *o = sf_elem<T>::from_f(0.0f);
        return;
    }
    float *sp = a.state + s * a.ss[0] + (int64_t)c * a.ss[1];
    float win[W];
#pragma unroll
    for (int k = 0; k < W - 1; k++) win[k] = sp[k * a.ss[2]];
    win[W - 1] = sf_elem<T>::to_f(((const T *)a.x)[(int64_t)i * a.xs[0] + (int64_t)c * a.xs[1]]);
    float acc = a.has_bias ? a.bias[(int64_t)c * a.bs] : 0.0f;
#pragma unroll
    for (int k = 0; k < W; k++) acc = fmaf(a.w[(int64_t)c * a.wsd[0] + k * a.wsd[1]], win[k], acc);
    *o = sf_elem<T>::from_f(a.silu ? lo_silu(acc) : acc);
#pragma unroll
    for (int k = 0; k < W - 1; k++) sp[k * a.ss[2]] = win[k + 1];
}

template <typename T>
static sf_status conv_upd_launch(sf_ctx *ctx, const conv_upd_args &a, int W) {
    const int64_t blocks = (int64_t)a.batch * a.cblocks;
    if (blocks > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_conv1d_update: batch x channel blocks too large");
    cudaStream_t st = sf_cuda_stream(ctx);
    switch (W) {
    case 2: conv1d_update_kernel<T, 2><<<(unsigned)blocks, 128, 0, st>>>(a); break;
    case 3: conv1d_update_kernel<T, 3><<<(unsigned)blocks, 128, 0, st>>>(a); break;
    default: conv1d_update_kernel<T, 4><<<(unsigned)blocks, 128, 0, st>>>(a); break;
    }
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

extern "C" sf_status sf_cuda_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_problem *pr) {
    const sf_conv1d_update_params *p = pr->p;
    if (pr->batch == 0 || pr->dim == 0) return SF_OK;
    conv_upd_args a;
    memset(&a, 0, sizeof(a));
    a.state = (float *)p->conv_state.data;
    a.x = p->x.data;
    a.out = p->out.data;
    a.w = (const float *)p->weight.data;
    a.bias = (const float *)p->bias.data;
    a.idx = (const int *)p->state_idx.data;
    for (int i = 0; i < 3; i++) a.ss[i] = p->conv_state.stride[i];
    a.xs[0] = p->x.stride[0], a.xs[1] = p->x.stride[1];
    a.os[0] = p->out.stride[0], a.os[1] = p->out.stride[1];
    a.wsd[0] = p->weight.stride[0], a.wsd[1] = p->weight.stride[1];
    a.bs = pr->has_bias ? p->bias.stride[0] : 0;
    a.idxs = pr->has_idx ? p->state_idx.stride[0] : 0;
    a.batch = (int)pr->batch, a.dim = (int)pr->dim, a.nslots = (int)pr->nslots;
    a.cblocks = (a.dim + 127) / 128;
    a.has_bias = pr->has_bias, a.has_idx = pr->has_idx, a.silu = pr->silu;
    switch (p->x.dtype) {
    case SF_F32: return conv_upd_launch<float>(ctx, a, pr->width);
    case SF_F16: return conv_upd_launch<__half>(ctx, a, pr->width);
    case SF_BF16: return conv_upd_launch<__nv_bfloat16>(ctx, a, pr->width);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_conv1d_update: x must be f32, f16 or bf16");
    }
}

/* ------------------------------------------------------------------ */
/* gated RMSNorm                                                        */
/* ------------------------------------------------------------------ */

struct rms_args {
    const void *x, *z;
    void *out;
    const float *w;
    int64_t xs, zs, os, wsd, units;
    int gs, ngroups, tpu;
    int has_z, nbg, wvec;
    float eps, inv_gs;
};

template <int V>
static __device__ __forceinline__ void rms_weight(const rms_args &a, int64_t col, float (&w)[V]) {
    if constexpr (V % 4 == 0) {
        if (a.wvec) {
#pragma unroll
            for (int q = 0; q < V / 4; q++) {
                const float4 f = *reinterpret_cast<const float4 *>(a.w + col + 4 * q);
                w[4 * q] = f.x, w[4 * q + 1] = f.y, w[4 * q + 2] = f.z, w[4 * q + 3] = f.w;
            }
            return;
        }
    }
#pragma unroll
    for (int v = 0; v < V; v++) w[v] = a.w[(col + v) * a.wsd];
}

/* x (and z) of one vector -> h = the normalised quantity, gz = silu(z). */
template <typename T, int V>
static __device__ __forceinline__ void rms_load(const rms_args &a, int64_t row, int64_t col,
                                                float (&h)[V], float (&gz)[V]) {
    ld_vec<T, V>((const T *)a.x + row * a.xs + col, V, h);
    if (a.has_z) {
        ld_vec<T, V>((const T *)a.z + row * a.zs + col, V, gz);
#pragma unroll
        for (int v = 0; v < V; v++) {
            gz[v] = lo_silu(gz[v]);
            if (!a.nbg) h[v] *= gz[v];
        }
    }
}

template <typename T, int V>
static __device__ __forceinline__ void rms_store(const rms_args &a, int64_t row, int64_t col,
                                                 float rs, float (&h)[V], const float (&gz)[V]) {
    float w[V];
    rms_weight<V>(a, col, w);
#pragma unroll
    for (int v = 0; v < V; v++) {
        h[v] = h[v] * rs * w[v];
        if (a.has_z && a.nbg) h[v] *= gz[v];
    }
    st_vec<T, V>((T *)a.out + row * a.os + col, V, h);
}

/* Sum over the tpu threads of a unit: xor shuffles inside a warp (tpu a
 * power of two when <= 32), then shared memory across the block's warps. */
static __device__ __forceinline__ float rms_reduce(float ss, int tpu, float *red) {
    const int width = tpu < 32 ? tpu : 32;
    for (int off = width >> 1; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (tpu > 32) {
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
        __syncthreads();
        ss = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) ss += red[w];
    }
    return ss;
}

/* grid: units (row, group) spread tpu threads each: 128 / tpu units per
 * block when tpu <= 32, else one unit per block of tpu threads.  Each
 * thread keeps NV vectors of the group in registers. */
template <typename T, int V, int NV>
__global__ void __launch_bounds__(512) rms_regs_kernel(const rms_args a) {
    __shared__ float red[16];
    const int tpu = a.tpu;
    const int upb = tpu >= (int)blockDim.x ? 1 : (int)blockDim.x / tpu;
    const int lt = (int)threadIdx.x % tpu;
    const int64_t u = (int64_t)blockIdx.x * upb + (int)threadIdx.x / tpu;
    const bool active = u < a.units;
    const int64_t row = active ? u / a.ngroups : 0;
    const int64_t col0 = active ? (u % a.ngroups) * a.gs : 0;
    const int nvec = a.gs / V;
    float h[NV][V], gz[NV][V];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int vi = lt + j * tpu;
        if (active && vi < nvec) {
            rms_load<T, V>(a, row, col0 + (int64_t)vi * V, h[j], gz[j]);
        } else {
#pragma unroll
            for (int v = 0; v < V; v++) h[j][v] = gz[j][v] = 0.0f;
        }
#pragma unroll
        for (int v = 0; v < V; v++) ss = fmaf(h[j][v], h[j][v], ss);
    }
    ss = rms_reduce(ss, tpu, red);
    const float rs = rsqrtf(ss * a.inv_gs + a.eps);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int vi = lt + j * tpu;
        if (active && vi < nvec) rms_store<T, V>(a, row, col0 + (int64_t)vi * V, rs, h[j], gz[j]);
    }
}

/* grid: one block of 256 threads per unit, for groups too long for
 * registers: pass 1 sums the squares, pass 2 reloads and writes. */
template <typename T, int V>
__global__ void __launch_bounds__(256) rms_stream_kernel(const rms_args a) {
    __shared__ float red[8];
    const int64_t u = blockIdx.x;
    const int64_t row = u / a.ngroups, col0 = (u % a.ngroups) * a.gs;
    const int nvec = a.gs / V;
    float ss = 0.0f;
    for (int vi = threadIdx.x; vi < nvec; vi += 256) {
        float h[V], gz[V];
        rms_load<T, V>(a, row, col0 + (int64_t)vi * V, h, gz);
#pragma unroll
        for (int v = 0; v < V; v++) ss = fmaf(h[v], h[v], ss);
    }
    ss = rms_reduce(ss, 256, red);
    const float rs = rsqrtf(ss * a.inv_gs + a.eps);
    for (int vi = threadIdx.x; vi < nvec; vi += 256) {
        float h[V], gz[V];
        rms_load<T, V>(a, row, col0 + (int64_t)vi * V, h, gz);
        rms_store<T, V>(a, row, col0 + (int64_t)vi * V, rs, h, gz);
    }
}

template <typename T, int V>
static sf_status rms_launch_v(sf_ctx *ctx, rms_args &a) {
    cudaStream_t st = sf_cuda_stream(ctx);
    const int64_t nvec = a.gs / V;
    int64_t blocks;
    if (nvec <= 32) { /* a power-of-two slice of a warp per unit */
        int tpu = 1;
        while (tpu < nvec) tpu <<= 1;
        a.tpu = tpu;
        blocks = (a.units + 128 / tpu - 1) / (128 / tpu);
        if (blocks > INT32_MAX) goto too_large;
        rms_regs_kernel<T, V, 1><<<(unsigned)blocks, 128, 0, st>>>(a);
    } else if (nvec <= 2048) { /* a block of <= 512 threads per unit, NV vectors each */
        const int nv = nvec <= 512 ? 1 : nvec <= 1024 ? 2 : 4;
        a.tpu = (int)(((nvec + nv - 1) / nv + 31) / 32 * 32);
        blocks = a.units;
        if (blocks > INT32_MAX) goto too_large;
        if (nv == 1) rms_regs_kernel<T, V, 1><<<(unsigned)blocks, a.tpu, 0, st>>>(a);
        else if (nv == 2) rms_regs_kernel<T, V, 2><<<(unsigned)blocks, a.tpu, 0, st>>>(a);
        else rms_regs_kernel<T, V, 4><<<(unsigned)blocks, a.tpu, 0, st>>>(a);
    } else {
        a.tpu = 256;
        blocks = a.units;
        if (blocks > INT32_MAX) goto too_large;
        rms_stream_kernel<T, V><<<(unsigned)blocks, 256, 0, st>>>(a);
    }
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
too_large:
    return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_rmsnorm_gated: %lld (row, group) units, past the grid limit",
                   (long long)a.units);
}

template <typename T>
static sf_status rms_launch(sf_ctx *ctx, rms_args &a, bool vec) {
    constexpr int VV = 16 / (int)sizeof(T);
    return vec ? rms_launch_v<T, VV>(ctx, a) : rms_launch_v<T, 1>(ctx, a);
}

extern "C" sf_status sf_cuda_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_problem *pr) {
    const sf_rmsnorm_gated_params *p = pr->p;
    if (pr->rows == 0) return SF_OK;
    rms_args a;
    memset(&a, 0, sizeof(a));
    a.x = p->x.data;
    a.z = p->z.data;
    a.out = p->out.data;
    a.w = (const float *)p->weight.data;
    a.xs = p->x.stride[0], a.os = p->out.stride[0];
    a.zs = pr->has_z ? p->z.stride[0] : 0;
    a.wsd = p->weight.stride[0];
    a.gs = (int)pr->group;
    a.ngroups = (int)(pr->dim / pr->group);
    a.units = pr->rows * a.ngroups;
    a.has_z = pr->has_z, a.nbg = pr->norm_before_gate;
    a.eps = pr->eps;
    a.inv_gs = 1.0f / (float)pr->group;
    a.wvec = a.wsd == 1 && lo_aligned(p->weight.data, 16);
    const int64_t V = 16 / (int64_t)sf_dtype_size(p->x.dtype);
    /* every vector inside one group, and 16-byte aligned in every row */
    const bool vec = pr->group % V == 0 && lo_aligned(a.x, 16) && lo_aligned(a.out, 16) &&
                     a.xs % V == 0 && a.os % V == 0 &&
                     (!pr->has_z || (lo_aligned(a.z, 16) && a.zs % V == 0));
    switch (p->x.dtype) {
    case SF_F32: return rms_launch<float>(ctx, a, vec);
    case SF_F16: return rms_launch<__half>(ctx, a, vec);
    case SF_BF16: return rms_launch<__nv_bfloat16>(ctx, a, vec);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_rmsnorm_gated: x must be f32, f16 or bf16");
    }
}

