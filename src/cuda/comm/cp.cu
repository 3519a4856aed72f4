/* cp.cu - CUDA kernels of the context-parallel pieces: slice log-decay and
 * running decay g, the entering-state correction of the SSD output, the
 * combine over ranks, the lse merge of partial attention, and the K/V
 * pack of the ring driver.
 *
 * All but the correction are memory-bound one-pass kernels; element
 * dtypes are switched at run time inside them (a branch per load costs
 * nothing next to the memory traffic and keeps one instantiation each, so
 * this file compiles in seconds).  The correction is an (L x N) by
 * (N x P) product per head, the size of the carried-state term inside
 * the SSD output kernel; it runs on the FP32 pipes from shared-memory
 * tiles (64 tokens x 64 channels per block, 4 x 4 per thread).  Ranks see
 * it once per call and the tensor cores would need the state in TF32 or
 * bf16 (a second rounding of h_in), so it stays SIMT: at the 2.7B shape
 * (H 80, P 64, N 128) it is 2 L H P N = 1.3 MFLOP per token.
 * The decay scan keeps its running sum in double: g_t spans the whole
 * slice (10^5 tokens), where an f32 running sum drifts by far more than
 * the f32 rounding of the result. */
#include "common/cuda_common.h"
#include "cp.h"

/* ------------------------------------------------------------------ */
/* Element access by run-time dtype                                     */
/* ------------------------------------------------------------------ */

__device__ __forceinline__ float cp_ld(const void *p, int dt, int64_t off) {
    if (dt == SF_F32) return ((const float *)p)[off];
    if (dt == SF_F16) return __half2float(((const __half *)p)[off]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[off]);
}

__device__ __forceinline__ void cp_st(void *p, int dt, int64_t off, float v) {
    if (dt == SF_F32) ((float *)p)[off] = v;
    else if (dt == SF_F16) ((__half *)p)[off] = __float2half_rn(v);
    else ((__nv_bfloat16 *)p)[off] = __float2bfloat16_rn(v);
}

/* ------------------------------------------------------------------ */
/* SSD pieces                                                           */
/* ------------------------------------------------------------------ */

struct cp_ssd_args {
    const void *dt, *C, *z;
    void *out;
    const float *A, *bias, *hin, *st;
    float *fin, *ld, *g;
    int64_t dts[3], Cs[4], zs[4], os[4], hs[4], sts[4], fs[4], lds[2];
    int64_t As, biass;
    int64_t b, L, H, P, N, hpg;
    int dtype, softplus, has_z;
    float dmin, dmax;
};

/* min(dt A, 0) with dt processed exactly as ssd_chunk_cumsum does. */
__device__ __forceinline__ float cp_decay(const cp_ssd_args &a, float raw, float A, float bias) {
    const float d = sf_dt_process(raw + bias, a.softplus, a.dmin, a.dmax);
    return fminf(d * A, 0.0f);
}

/* One block per (row, head); thread i walks tokens [i per, (i+1) per):
 * its partial sum, a block-wide exclusive scan of the partials, then (for
 * g) a second walk writing the inclusive running sum.  Writes the slice
 * total to ld when given. */
__global__ void __launch_bounds__(256) cp_decay_scan(const cp_ssd_args a) {
    __shared__ double wsum[8];
    const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float A = a.A[h * a.As], bias = a.bias ? a.bias[h * a.biass] : 0.0f;
    const int64_t per = (a.L + 255) / 256;
    const int64_t t0 = min((int64_t)tid * per, a.L), t1 = min(t0 + per, a.L);
    const int64_t base = b * a.dts[0] + h * a.dts[2];
    double s = 0.0;
    for (int64_t t = t0; t < t1; t++) s += cp_decay(a, cp_ld(a.dt, a.dtype, base + t * a.dts[1]), A, bias);
    double incl = s;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) wsum[warp] = incl;
    double run = __shfl_up_sync(0xffffffffu, incl, 1); /* exclusive within the warp */
    if (lane == 0) run = 0.0;
    __syncthreads();
    for (int w = 0; w < warp; w++) run += wsum[w];
    if (a.g) {
        float *g = a.g + bh * a.L;
        for (int64_t t = t0; t < t1; t++) {
            run += cp_decay(a, cp_ld(a.dt, a.dtype, base + t * a.dts[1]), A, bias);
            g[t] = (float)run;
        }
    }
    if (a.ld && tid == 255) {
        double tot = 0.0;
        for (int w = 0; w < 8; w++) tot += wsum[w];
        a.ld[b * a.lds[0] + h * a.lds[1]] = (float)tot;
    }
}

/* out[b, t, h, p] += silu(z) exp(g_t) sum_n C[b, t, grp, n] h_in[b, h, p, n].
 * Grid (flattened): 64-token tile fastest, then 64-channel tile, then
 * (row, head); block 256 = 16 x 16 threads, each 4 tokens (ty + 16 i) by
 * 4 adjacent channels (4 tx + j, one float4 of the state tile); N in
 * steps of 32 through shared memory. */
constexpr int CT_T = 64, CT_P = 64, CT_N = 32;
__global__ void __launch_bounds__(256) cp_correct_kernel(const cp_ssd_args a) {
    __shared__ float cs[CT_T][CT_N + 1];
    __shared__ __align__(16) float hsm[CT_N][CT_P + 4];
    const int64_t ntt = (a.L + CT_T - 1) / CT_T, npt = (a.P + CT_P - 1) / CT_P;
    int64_t id = blockIdx.x;
    const int64_t t0 = (id % ntt) * CT_T;
    id /= ntt;
    const int64_t p0 = (id % npt) * CT_P;
    const int64_t bh = id / npt, b = bh / a.H, h = bh % a.H, grp = h / a.hpg;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t n0 = 0; n0 < a.N; n0 += CT_N) {
        for (int k = tid; k < CT_T * CT_N; k += 256) {
            const int t = k / CT_N, n = k % CT_N;
            const int64_t T = t0 + t, nn = n0 + n;
            cs[t][n] = (T < a.L && nn < a.N)
                           ? cp_ld(a.C, a.dtype, b * a.Cs[0] + T * a.Cs[1] + grp * a.Cs[2] + nn * a.Cs[3])
                           : 0.0f;
        }
        for (int k = tid; k < CT_P * CT_N; k += 256) {
            const int p = k / CT_N, n = k % CT_N;
            const int64_t pp = p0 + p, nn = n0 + n;
            hsm[n][p] = (pp < a.P && nn < a.N)
                            ? a.hin[b * a.hs[0] + h * a.hs[1] + pp * a.hs[2] + nn * a.hs[3]]
                            : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int n = 0; n < CT_N; n++) {
            const float4 hv = *reinterpret_cast<const float4 *>(&hsm[n][tx * 4]);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float c = cs[ty + 16 * i][n];
                acc[i][0] += c * hv.x;
                acc[i][1] += c * hv.y;
                acc[i][2] += c * hv.z;
                acc[i][3] += c * hv.w;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t T = t0 + ty + 16 * i;
        if (T >= a.L) continue;
        const float e = expf(a.g[bh * a.L + T]);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t pp = p0 + tx * 4 + j;
            if (pp >= a.P) continue;
            float y = e * acc[i][j];
            if (a.has_z) {
                const float zv = cp_ld(a.z, a.dtype, b * a.zs[0] + T * a.zs[1] + h * a.zs[2] + pp * a.zs[3]);
                y *= zv / (1.0f + expf(-zv));
            }
            const int64_t o = b * a.os[0] + T * a.os[1] + h * a.os[2] + pp * a.os[3];
            cp_st(a.out, a.dtype, o, cp_ld(a.out, a.dtype, o) + y);
        }
    }
}

/* final = exp(ld) h_in + state_local, one thread per element. */
__global__ void __launch_bounds__(256) cp_final_kernel(const cp_ssd_args a) {
    const int64_t id = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (id >= a.b * a.H * a.P * a.N) return;
    const int64_t n = id % a.N, p = (id / a.N) % a.P, h = (id / (a.N * a.P)) % a.H;
    const int64_t b = id / (a.N * a.P * a.H);
    const float w = expf(a.ld[b * a.lds[0] + h * a.lds[1]]);
    a.fin[b * a.fs[0] + h * a.fs[1] + p * a.fs[2] + n * a.fs[3]] =
        w * a.hin[b * a.hs[0] + h * a.hs[1] + p * a.hs[2] + n * a.hs[3]] +
        a.st[b * a.sts[0] + h * a.sts[1] + p * a.sts[2] + n * a.sts[3]];
}

static cp_ssd_args cp_ssd_fill(const sf_cp_ssd_problem *pr) {
    const sf_ssd_fwd_params *p = pr->p;
    cp_ssd_args a;
    memset(&a, 0, sizeof a);
    a.dt = p->dt.data; a.C = p->C.data; a.z = p->z.data; a.out = p->out.data;
    a.A = (const float *)p->A.data; a.bias = (const float *)p->dt_bias.data;
    a.hin = (const float *)pr->h_in.data; a.st = (const float *)pr->state_local.data;
    a.fin = (float *)p->final_states.data; a.ld = (float *)pr->logdecay.data;
    sf_cuda_copy_strides(a.dts, &p->dt, 3);
    sf_cuda_copy_strides(a.Cs, &p->C, 4);
    sf_cuda_copy_strides(a.zs, &p->z, 4);
    sf_cuda_copy_strides(a.os, &p->out, 4);
    sf_cuda_copy_strides(a.hs, &pr->h_in, 4);
    sf_cuda_copy_strides(a.sts, &pr->state_local, 4);
    sf_cuda_copy_strides(a.fs, &p->final_states, 4);
    sf_cuda_copy_strides(a.lds, &pr->logdecay, 2);
    a.As = p->A.stride[0];
    a.biass = p->dt_bias.data ? p->dt_bias.stride[0] : 0;
    a.b = pr->batch; a.L = pr->seqlen; a.H = pr->nheads; a.P = pr->headdim; a.N = pr->dstate;
    a.hpg = pr->heads_per_group;
    a.dtype = (int)p->x.dtype; a.softplus = p->dt_softplus; a.has_z = pr->has_z;
    a.dmin = p->dt_min; a.dmax = p->dt_max;
    return a;
}

/* Blocks of `per` items for n items; 0 (and the error recorded) past the
 * grid limit, which the callers turn into SF_ERR_TOO_LARGE. */
static unsigned cp_blocks(sf_ctx *ctx, int64_t n, int per) {
    const int64_t g = (n + per - 1) / per;
    if (g > INT32_MAX) {
        sf_fail(ctx, SF_ERR_TOO_LARGE, "context-parallel kernel: %lld blocks exceed one launch",
                (long long)g);
        return 0;
    }
    return (unsigned)g;
}
#define CP_GRID(var, ctx, n, per)                         \
    const unsigned var = cp_blocks((ctx), (n), (per));     \
    if (var == 0) return SF_ERR_TOO_LARGE

extern "C" sf_status sf_cuda_cp_logdecay(sf_ctx *ctx, const sf_cp_ssd_problem *pr) {
    cp_ssd_args a = cp_ssd_fill(pr);
    a.g = nullptr;
    const int64_t nbh = pr->batch * pr->nheads;
    if (nbh > INT32_MAX) return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_cp_local: batch x heads too large");
    cp_decay_scan<<<(unsigned)nbh, 256, 0, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

extern "C" sf_status sf_cuda_cp_correct(sf_ctx *ctx, const sf_cp_ssd_problem *pr) {
    cp_ssd_args a = cp_ssd_fill(pr);
    const int64_t nbh = pr->batch * pr->nheads;
    const int64_t tiles = ((pr->seqlen + CT_T - 1) / CT_T) * ((pr->headdim + CT_P - 1) / CT_P) * nbh;
    if (tiles > INT32_MAX || nbh > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_cp_correct: problem too large for one launch");
    a.g = (float *)sf_ws_get(ctx, (size_t)(nbh * pr->seqlen) * sizeof(float));
    if (!a.g) return SF_ERR_OUT_OF_MEMORY;
    float *ld = a.ld;
    a.ld = nullptr; /* the scan only writes g here; ld is this rank's input */
    cudaStream_t s = sf_cuda_stream(ctx);
    cp_decay_scan<<<(unsigned)nbh, 256, 0, s>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    cp_correct_kernel<<<(unsigned)tiles, 256, 0, s>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    if (pr->has_final) {
        a.ld = ld;
        CP_GRID(g, ctx, nbh * pr->headdim * pr->dstate, 256);
        cp_final_kernel<<<g, 256, 0, s>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

/* ------------------------------------------------------------------ */
/* Combine                                                              */
/* ------------------------------------------------------------------ */

struct cp_combine_args {
    const float *S, *ld;
    float *hin;
    int64_t ss[5], ls[3], hs[4];
    int64_t b, H, P, N;
    int rank;
};

/* One thread per state element: h <- exp(ld_q) h + S_q for q < rank. */
__global__ void __launch_bounds__(256) cp_combine_kernel(const cp_combine_args a) {
    const int64_t id = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (id >= a.b * a.H * a.P * a.N) return;
    const int64_t n = id % a.N, p = (id / a.N) % a.P, h = (id / (a.N * a.P)) % a.H;
    const int64_t b = id / (a.N * a.P * a.H);
    const int64_t so = b * a.ss[1] + h * a.ss[2] + p * a.ss[3] + n * a.ss[4];
    const int64_t lo = b * a.ls[1] + h * a.ls[2];
    float v = 0.0f;
    for (int q = 0; q < a.rank; q++) v = expf(a.ld[q * a.ls[0] + lo]) * v + a.S[q * a.ss[0] + so];
    a.hin[b * a.hs[0] + h * a.hs[1] + p * a.hs[2] + n * a.hs[3]] = v;
}

extern "C" sf_status sf_cuda_cp_combine(sf_ctx *ctx, const sf_cp_combine_problem *pr) {
    cp_combine_args a;
    a.S = (const float *)pr->states_all.data;
    a.ld = (const float *)pr->logdecay_all.data;
    a.hin = (float *)pr->h_in.data;
    sf_cuda_copy_strides(a.ss, &pr->states_all, 5);
    sf_cuda_copy_strides(a.ls, &pr->logdecay_all, 3);
    sf_cuda_copy_strides(a.hs, &pr->h_in, 4);
    a.b = pr->batch; a.H = pr->nheads; a.P = pr->headdim; a.N = pr->dstate; a.rank = pr->rank;
    CP_GRID(g, ctx, a.b * a.H * a.P * a.N, 256);
    cp_combine_kernel<<<g, 256, 0, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* ------------------------------------------------------------------ */
/* Merge by lse                                                         */
/* ------------------------------------------------------------------ */

struct cp_merge_args {
    const void *ao, *bo;
    const float *al, *bl;
    void *dout;
    float *dl;
    int64_t aos[4], bos[4], dos[4], als[3], bls[3], dls[3];
    int64_t b, L, H, d;
    int adt, bdt, ddt;
};

/* One warp per (row, position, head): every lane reads the two lse first,
 * then lane 0 writes the merged one, so the in-place update of lse_acc
 * cannot race with a lane still reading it. */
__global__ void __launch_bounds__(256) cp_merge_kernel(const cp_merge_args a) {
    const int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= a.b * a.L * a.H) return;
    const int64_t h = row % a.H, l = (row / a.H) % a.L, b = row / (a.H * a.L);
    const float la = a.al[b * a.als[0] + h * a.als[1] + l * a.als[2]];
    const float lb = a.bo ? a.bl[b * a.bls[0] + h * a.bls[1] + l * a.bls[2]] : -INFINITY;
    const float m = fmaxf(la, lb);
    float wa = 0.0f, wb = 0.0f, lse = -INFINITY;
    if (m > -INFINITY) {
        wa = la > -INFINITY ? expf(la - m) : 0.0f;
        wb = lb > -INFINITY ? expf(lb - m) : 0.0f;
        lse = m + logf(wa + wb);
    }
    const float inv = wa + wb > 0.0f ? 1.0f / (wa + wb) : 0.0f;
    const int64_t oa = b * a.aos[0] + l * a.aos[1] + h * a.aos[2];
    const int64_t ob = b * a.bos[0] + l * a.bos[1] + h * a.bos[2];
    const int64_t od = b * a.dos[0] + l * a.dos[1] + h * a.dos[2];
    for (int64_t e = lane; e < a.d; e += 32) {
        float v = 0.0f;
        if (wa > 0.0f) v += wa * cp_ld(a.ao, a.adt, oa + e);
        if (wb > 0.0f) v += wb * cp_ld(a.bo, a.bdt, ob + e);
        cp_st(a.dout, a.ddt, od + e, v * inv);
    }
    __syncwarp();
    if (lane == 0) a.dl[b * a.dls[0] + h * a.dls[1] + l * a.dls[2]] = lse;
}

extern "C" sf_status sf_cuda_cp_merge(sf_ctx *ctx, const sf_cp_merge_problem *pr) {
    cp_merge_args a;
    a.ao = pr->a_out.data; a.bo = pr->b_out.data; a.dout = pr->dst_out.data;
    a.al = (const float *)pr->a_lse.data; a.bl = (const float *)pr->b_lse.data;
    a.dl = (float *)pr->dst_lse.data;
    sf_cuda_copy_strides(a.aos, &pr->a_out, 4);
    sf_cuda_copy_strides(a.bos, &pr->b_out, 4);
    sf_cuda_copy_strides(a.dos, &pr->dst_out, 4);
    sf_cuda_copy_strides(a.als, &pr->a_lse, 3);
    sf_cuda_copy_strides(a.bls, &pr->b_lse, 3);
    sf_cuda_copy_strides(a.dls, &pr->dst_lse, 3);
    a.b = pr->batch; a.L = pr->seqlen; a.H = pr->nheads; a.d = pr->headdim;
    a.adt = (int)pr->a_out.dtype; a.bdt = pr->b_out.data ? (int)pr->b_out.dtype : 0;
    a.ddt = (int)pr->dst_out.dtype;
    CP_GRID(g, ctx, a.b * a.L * a.H, 8);
    cp_merge_kernel<<<g, 256, 0, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* ------------------------------------------------------------------ */
/* Pack a strided (b, L, Hkv, d) tensor into a contiguous block          */
/* ------------------------------------------------------------------ */

template <typename E>
__global__ void __launch_bounds__(256) cp_pack_kernel(E *dst, const E *src, int64_t L, int64_t Hk,
                                                      int64_t d, int64_t s0, int64_t s1, int64_t s2,
                                                      int64_t n) {
    const int64_t id = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (id >= n) return;
    const int64_t e = id % d, h = (id / d) % Hk, l = (id / (d * Hk)) % L, b = id / (d * Hk * L);
    dst[id] = src[b * s0 + l * s1 + h * s2 + e];
}

extern "C" sf_status sf_cuda_cp_pack(sf_ctx *ctx, void *dst, const sf_tensor *src) {
    const int64_t n = src->shape[0] * src->shape[1] * src->shape[2] * src->shape[3];
    if (n == 0) return SF_OK;
    CP_GRID(g, ctx, n, 256);
    cudaStream_t s = sf_cuda_stream(ctx);
    if (sf_dtype_size(src->dtype) == 4)
        cp_pack_kernel<uint32_t><<<g, 256, 0, s>>>((uint32_t *)dst, (const uint32_t *)src->data,
                                                   src->shape[1], src->shape[2], src->shape[3],
                                                   src->stride[0], src->stride[1], src->stride[2], n);
    else
        cp_pack_kernel<uint16_t><<<g, 256, 0, s>>>((uint16_t *)dst, (const uint16_t *)src->data,
                                                   src->shape[1], src->shape[2], src->shape[3],
                                                   src->stride[0], src->stride[1], src->stride[2], n);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}
