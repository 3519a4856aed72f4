/* naive_cuda.cu - the naive GPU baselines, in the fused run's precision
 * (bf16 or f16 in and out, f32 accumulation):
 *
 *   attention  S = scale Q K^T by cuBLAS into a (b, H, Lq, Lk) score matrix
 *              of the input dtype; a softmax kernel applies the mask and
 *              writes P over S; O = P V by cuBLAS.  The standard unfused
 *              attention: S and P each make a round trip through HBM.
 *   SSD        the sequential recurrence, one block per (batch, head)
 *              walking the tokens with its P x N f32 state in shared memory.
 *
 * Everything a call needs (cuBLAS handle, scores, pointer arrays, kernel
 * arguments) is made by sfn_cuda_prepare, before any timed call. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdint.h>

#include "seqfuse.h"
extern "C" {
#include "cases.h" /* C declarations, no guard of their own */
}
#include "naive_impl.h"

#define SFN_CU(call)                                                                               \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            snprintf(msg, msglen, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return SF_ERR_CUDA;                                                                    \
        }                                                                                          \
    } while (0)

#define SFN_BLAS(call)                                                                             \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            snprintf(msg, msglen, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
            return s_ == CUBLAS_STATUS_ALLOC_FAILED ? SF_ERR_OUT_OF_MEMORY : SF_ERR_CUDA;         \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------ */
/* element access                                                      */
/* ------------------------------------------------------------------ */

__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half(v); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The block's sum (is_max 0) or max (1) of v; red holds 32 floats. */
__device__ float block_reduce(float v, int is_max, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads(); /* red's previous use is done */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : (is_max ? -INFINITY : 0.f);
    return is_max ? warp_max(v) : warp_sum(v);
}

/* ------------------------------------------------------------------ */
/* attention: the softmax between the two products                     */
/* ------------------------------------------------------------------ */

/* One block per score row (b, h, i), rows strided over the grid: the max
 * and the sum over the visible keys, then P = exp(s - max) / sum written
 * over S (0 where masked; a row that sees no key is all 0, so O is 0). */
template <typename T>
__global__ void __launch_bounds__(128) naive_softmax(T *S, int64_t nrows, int64_t Lq, int64_t Lk,
                                                     int64_t wl, int64_t wr) {
    __shared__ float red[32];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        T *row = S + r * Lk;
        const int64_t pos = r % Lq + Lk - Lq;
        int64_t lo = wl < 0 ? 0 : pos - wl, hi = wr < 0 ? Lk : pos + wr + 1;
        lo = lo < 0 ? 0 : lo;
        hi = hi > Lk ? Lk : hi;
        float m = -INFINITY;
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) m = fmaxf(m, to_f(row[j]));
        m = block_reduce(m, 1, red);
        float l = 0.f;
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) l += expf(to_f(row[j]) - m);
        l = block_reduce(l, 0, red);
        const float inv = hi > lo ? 1.f / l : 0.f;
        for (int64_t j = threadIdx.x; j < Lk; j += blockDim.x)
            row[j] = from_f<T>(j >= lo && j < hi ? expf(to_f(row[j]) - m) * inv : 0.f);
    }
}

/* ------------------------------------------------------------------ */
/* SSD: the sequential recurrence                                      */
/* ------------------------------------------------------------------ */

struct SsdArgs {
    const void *x, *dt, *B, *C, *z;
    void *out;
    const float *A, *D, *bias, *init;
    float *fin;
    int64_t xs[3], dts[3], bs[3], cs[3], zs[3], ys[3], is[4], fs[4], Ds[2], As, biass;
    int64_t b, L, H, P, N, hpg;
    int D_rank, softplus;
    float dmin, dmax;
};

/* Block (h, b): per token, the token's x, z, B and C into shared memory,
 * then each warp updates rows p of the state (lanes over n) and reduces
 * y_p = h_p . C; D, the z gate and the store follow.  Two barriers a
 * token: the recurrence is serial in t, which is what the chunked kernels
 * remove. */
template <typename T>
__global__ void __launch_bounds__(256) naive_ssd(SsdArgs a) {
    extern __shared__ float sm[];
    const int64_t P = a.P, N = a.N, h = blockIdx.x, g = h / a.hpg;
    float *st = sm, *bt = st + P * N, *ct = bt + N, *xt = ct + N, *zt = xt + P;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const T *x = (const T *)a.x, *dtp = (const T *)a.dt, *B = (const T *)a.B, *C = (const T *)a.C;
    const T *z = (const T *)a.z;
    T *out = (T *)a.out;
    const float Ah = a.A[h * a.As], bias = a.bias ? a.bias[h * a.biass] : 0.f;
    for (int64_t bi = blockIdx.y; bi < a.b; bi += gridDim.y) {
        for (int64_t e = threadIdx.x; e < P * N; e += blockDim.x) {
            const int64_t i = e / N, n = e % N;
            st[e] = a.init ? a.init[bi * a.is[0] + h * a.is[1] + i * a.is[2] + n * a.is[3]] : 0.f;
        }
        for (int64_t t = 0; t < a.L; t++) {
            const int64_t xo = bi * a.xs[0] + t * a.xs[1] + h * a.xs[2];
            for (int64_t e = threadIdx.x; e < P; e += blockDim.x) {
                xt[e] = to_f(x[xo + e]);
                if (z) zt[e] = to_f(z[bi * a.zs[0] + t * a.zs[1] + h * a.zs[2] + e]);
            }
            for (int64_t e = threadIdx.x; e < N; e += blockDim.x) {
                bt[e] = to_f(B[bi * a.bs[0] + t * a.bs[1] + g * a.bs[2] + e]);
                ct[e] = to_f(C[bi * a.cs[0] + t * a.cs[1] + g * a.cs[2] + e]);
            }
            /* dt as the library processes it: + dt_bias, softplus, clamp */
            float dt = to_f(dtp[bi * a.dts[0] + t * a.dts[1] + h * a.dts[2]]) + bias;
            if (a.softplus) dt = dt > 20.f ? dt : log1pf(expf(dt));
            dt = fminf(fmaxf(dt, a.dmin), a.dmax);
            const float dA = expf(fminf(dt * Ah, 0.f)); /* decay <= 1 */
            __syncthreads();
            T *yo = out + bi * a.ys[0] + t * a.ys[1] + h * a.ys[2];
            for (int64_t p = warp; p < P; p += nw) {
                const float dx = dt * xt[p];
                float *row = st + p * N, y = 0.f;
                for (int64_t n = lane; n < N; n += 32) {
                    const float s = dA * row[n] + dx * bt[n];
                    row[n] = s;
                    y += s * ct[n];
                }
                y = warp_sum(y);
                if (lane == 0) {
                    if (a.D_rank == 1) y += a.D[h * a.Ds[0]] * xt[p];
                    if (a.D_rank == 2) y += a.D[h * a.Ds[0] + p * a.Ds[1]] * xt[p];
                    if (z) y *= zt[p] / (1.f + expf(-zt[p]));
                    yo[p] = from_f<T>(y);
                }
            }
            __syncthreads(); /* the next token overwrites xt, zt, bt, ct */
        }
        if (a.fin)
            for (int64_t e = threadIdx.x; e < P * N; e += blockDim.x) {
                const int64_t i = e / N, n = e % N;
                a.fin[bi * a.fs[0] + h * a.fs[1] + i * a.fs[2] + n * a.fs[3]] = st[e];
            }
        __syncthreads(); /* the next batch row re-initialises st */
    }
}

/* ------------------------------------------------------------------ */
/* plans                                                               */
/* ------------------------------------------------------------------ */

struct sfn_cuda {
    int device;
    cudaStream_t stream;
    sfc_op op;
    sf_dtype dtype;
    /* attention */
    sfn_attn_shape as;
    cublasHandle_t blas;
    void *S;                /* scores, then probabilities: (b, H, Lq, Lk) */
    const void **ptr;       /* device: K, Q, S, V, O pointer per (b, h), nbh each */
    int64_t nbh;
    int ldq, ldk, ldv, ldo;
    /* SSD */
    SsdArgs sa;
    size_t smem;
};

void sfn_cuda_release(sfn_cuda *pl) {
    if (!pl) return;
    cudaSetDevice(pl->device);
    if (pl->blas) cublasDestroy(pl->blas);
    cudaFree(pl->S);
    cudaFree(pl->ptr);
    free(pl);
}

static int fits_int(int64_t v) { return v >= 0 && v <= 0x7fffffff; }

static sf_status attn_prepare(sfn_cuda *pl, const sf_attn_fwd_params *p, char *msg, size_t msglen) {
    sfn_attn_shape *s = &pl->as;
    sf_status st = sfn_attn_shape_of(p, s, msg, msglen);
    if (st != SF_OK) return st;
    if (s->Lk <= 0 || s->d <= 0) {
        snprintf(msg, msglen, "naive GPU attention needs at least one key and d > 0");
        return SF_ERR_UNSUPPORTED;
    }
    if (!fits_int(s->Lq) || !fits_int(s->Lk) || !fits_int(s->d) || !fits_int(s->b * s->H) ||
        !fits_int(p->q.stride[1]) || !fits_int(p->k.stride[1]) || !fits_int(p->v.stride[1]) ||
        !fits_int(p->out.stride[1])) {
        snprintf(msg, msglen, "naive GPU attention: a cuBLAS dimension or leading dimension past int32");
        return SF_ERR_TOO_LARGE;
    }
    const size_t es = sf_dtype_size(s->dtype);
    size_t sbytes;
    if (!sfn_size(&sbytes, es, s->b, s->H, s->Lq, s->Lk)) {
        snprintf(msg, msglen, "the naive score matrix (%lld x %lld per head) does not fit in memory",
                 (long long)s->Lq, (long long)s->Lk);
        return SF_ERR_TOO_LARGE;
    }
    pl->nbh = s->b * s->H;
    pl->ldq = (int)p->q.stride[1], pl->ldk = (int)p->k.stride[1];
    pl->ldv = (int)p->v.stride[1], pl->ldo = (int)p->out.stride[1];
    if (pl->nbh == 0 || s->Lq == 0) return SF_OK; /* nothing to compute */
    if (cudaMalloc(&pl->S, sbytes) != cudaSuccess) {
        cudaGetLastError();
        snprintf(msg, msglen, "cannot allocate %.3g GB of device memory for the naive score matrix",
                 (double)sbytes * 1e-9);
        return SF_ERR_OUT_OF_MEMORY;
    }
    const size_t nptr = 5 * (size_t)pl->nbh;
    const void **hp = (const void **)malloc(nptr * sizeof(void *));
    if (!hp) {
        snprintf(msg, msglen, "cannot allocate the naive attention's pointer arrays");
        return SF_ERR_OUT_OF_MEMORY;
    }
    const int64_t grp = s->H / s->Hkv;
    for (int64_t bh = 0; bh < pl->nbh; bh++) {
        const int64_t bi = bh / s->H, h = bh % s->H, kh = h / grp;
        hp[bh] = (const char *)p->k.data + (bi * p->k.stride[0] + kh * p->k.stride[2]) * (int64_t)es;
        hp[pl->nbh + bh] = (const char *)p->q.data + (bi * p->q.stride[0] + h * p->q.stride[2]) * (int64_t)es;
        hp[2 * pl->nbh + bh] = (const char *)pl->S + bh * s->Lq * s->Lk * (int64_t)es;
        hp[3 * pl->nbh + bh] = (const char *)p->v.data + (bi * p->v.stride[0] + kh * p->v.stride[2]) * (int64_t)es;
        hp[4 * pl->nbh + bh] = (const char *)p->out.data + (bi * p->out.stride[0] + h * p->out.stride[2]) * (int64_t)es;
    }
    cudaError_t e = cudaMalloc((void **)&pl->ptr, nptr * sizeof(void *));
    if (e == cudaSuccess) e = cudaMemcpy(pl->ptr, hp, nptr * sizeof(void *), cudaMemcpyHostToDevice);
    free(hp);
    SFN_CU(e);
    SFN_BLAS(cublasCreate(&pl->blas));
    SFN_BLAS(cublasSetStream(pl->blas, pl->stream));
    return SF_OK;
}

template <typename T>
static sf_status attn_run(sfn_cuda *pl, cudaDataType_t ty, char *msg, size_t msglen) {
    const sfn_attn_shape *s = &pl->as;
    if (pl->nbh == 0 || s->Lq == 0) return SF_OK;
    const int64_t n = pl->nbh;
    const void *const *K = pl->ptr, *const *Q = pl->ptr + n, *const *Sc = pl->ptr + 2 * n;
    const void *const *V = pl->ptr + 3 * n;
    void *const *Sw = (void *const *)(pl->ptr + 2 * n), *const *O = (void *const *)(pl->ptr + 4 * n);
    const float scale = s->scale, one = 1.f, zero = 0.f;
    /* column-major view of row-major matrices: S^T (Lk x Lq) = K (Lk x d) Q^T */
    SFN_BLAS(cublasGemmBatchedEx(pl->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)s->Lk, (int)s->Lq, (int)s->d, &scale,
                                 K, ty, pl->ldk, Q, ty, pl->ldq, &zero, Sw, ty, (int)s->Lk, (int)n,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    const int64_t nrows = n * s->Lq;
    const unsigned grid = (unsigned)(nrows < (1 << 30) ? nrows : (1 << 30));
    naive_softmax<T><<<grid, 128, 0, pl->stream>>>((T *)pl->S, nrows, s->Lq, s->Lk, s->wl, s->wr);
    SFN_CU(cudaGetLastError());
    /* O^T (d x Lq) = V^T (d x Lk) P^T (Lk x Lq) */
    SFN_BLAS(cublasGemmBatchedEx(pl->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)s->d, (int)s->Lq, (int)s->Lk, &one, V,
                                 ty, pl->ldv, Sc, ty, (int)s->Lk, &zero, O, ty, pl->ldo, (int)n,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return SF_OK;
}

static void copy3(int64_t *dst, const sf_tensor *t) {
    for (int i = 0; i < 3; i++) dst[i] = t->data ? t->stride[i] : 0;
}

static sf_status ssd_prepare(sfn_cuda *pl, const sf_ssd_fwd_params *p, char *msg, size_t msglen) {
    sfn_ssd_shape s;
    sf_status st = sfn_ssd_shape_of(p, &s, msg, msglen);
    if (st != SF_OK) return st;
    SsdArgs *a = &pl->sa;
    memset(a, 0, sizeof *a);
    a->x = p->x.data, a->dt = p->dt.data, a->B = p->B.data, a->C = p->C.data, a->z = p->z.data;
    a->out = p->out.data;
    a->A = (const float *)p->A.data, a->D = (const float *)p->D.data;
    a->bias = (const float *)p->dt_bias.data, a->init = (const float *)p->initial_states.data;
    a->fin = (float *)p->final_states.data;
    copy3(a->xs, &p->x), copy3(a->dts, &p->dt), copy3(a->bs, &p->B), copy3(a->cs, &p->C);
    copy3(a->zs, &p->z), copy3(a->ys, &p->out);
    for (int i = 0; i < 4; i++) {
        a->is[i] = s.has_init ? p->initial_states.stride[i] : 0;
        a->fs[i] = s.has_final ? p->final_states.stride[i] : 0;
    }
    a->Ds[0] = s.D_rank >= 1 ? p->D.stride[0] : 0;
    a->Ds[1] = s.D_rank == 2 ? p->D.stride[1] : 0;
    a->As = p->A.stride[0];
    a->biass = s.has_bias ? p->dt_bias.stride[0] : 0;
    a->b = s.b, a->L = s.L, a->H = s.H, a->P = s.P, a->N = s.N, a->hpg = s.H / s.G;
    a->D_rank = s.D_rank, a->softplus = p->dt_softplus;
    a->dmin = p->dt_min, a->dmax = p->dt_max;
    size_t smem;
    if (!sfn_size(&smem, sizeof(float), 1, 1, 1, s.P * s.N + 2 * s.N + 2 * s.P)) smem = SIZE_MAX;
    int optin = 0;
    SFN_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, pl->device));
    if (smem > (size_t)optin) {
        snprintf(msg, msglen, "naive GPU SSD: a %lld x %lld f32 state does not fit in shared memory (%d bytes)",
                 (long long)s.P, (long long)s.N, optin);
        return SF_ERR_UNSUPPORTED;
    }
    if (s.H > 0x7fffffff) {
        snprintf(msg, msglen, "naive GPU SSD: %lld heads past the grid", (long long)s.H);
        return SF_ERR_TOO_LARGE;
    }
    pl->smem = smem;
    if (pl->dtype == SF_BF16)
        SFN_CU(cudaFuncSetAttribute(naive_ssd<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    else
        SFN_CU(cudaFuncSetAttribute(naive_ssd<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return SF_OK;
}

template <typename T>
static sf_status ssd_run(sfn_cuda *pl, char *msg, size_t msglen) {
    const SsdArgs *a = &pl->sa;
    if (a->b == 0 || a->H == 0) return SF_OK;
    const dim3 grid((unsigned)a->H, (unsigned)(a->b < 65535 ? a->b : 65535));
    naive_ssd<T><<<grid, 256, pl->smem, pl->stream>>>(*a);
    SFN_CU(cudaGetLastError());
    return SF_OK;
}

extern "C" sf_status sfn_cuda_prepare(sfn_cuda **plan, int device, void *stream, sfc_op op,
                                      const void *params, char *msg, size_t msglen) {
    *plan = NULL;
    sfn_cuda *pl = (sfn_cuda *)calloc(1, sizeof *pl);
    if (!pl) {
        snprintf(msg, msglen, "cannot allocate the naive GPU plan");
        return SF_ERR_OUT_OF_MEMORY;
    }
    *plan = pl; /* released by the caller, also after a failure here */
    pl->device = device;
    pl->stream = (cudaStream_t)stream;
    pl->op = op;
    SFN_CU(cudaSetDevice(device));
    pl->dtype = op == SFC_ATTN_FWD ? ((const sf_attn_fwd_params *)params)->q.dtype
                                   : ((const sf_ssd_fwd_params *)params)->x.dtype;
    if (pl->dtype != SF_BF16 && pl->dtype != SF_F16) {
        snprintf(msg, msglen, "the naive GPU baseline serves bf16 and f16 (got %s)", sf_dtype_name(pl->dtype));
        return SF_ERR_UNSUPPORTED;
    }
    if (op == SFC_ATTN_FWD) return attn_prepare(pl, (const sf_attn_fwd_params *)params, msg, msglen);
    return ssd_prepare(pl, (const sf_ssd_fwd_params *)params, msg, msglen);
}

extern "C" sf_status sfn_cuda_run(sfn_cuda *pl, sfc_op op, const void *params, char *msg, size_t msglen) {
    (void)params; /* prepare captured the pointers and strides */
    if (!pl || pl->op != op) {
        snprintf(msg, msglen, "the naive GPU baseline ran without a plan for %s", sfc_op_name(op));
        return SF_ERR_INTERNAL;
    }
    SFN_CU(cudaSetDevice(pl->device));
    const int bf = pl->dtype == SF_BF16;
    sf_status st;
    if (op == SFC_ATTN_FWD)
        st = bf ? attn_run<__nv_bfloat16>(pl, CUDA_R_16BF, msg, msglen) : attn_run<__half>(pl, CUDA_R_16F, msg, msglen);
    else
        st = bf ? ssd_run<__nv_bfloat16>(pl, msg, msglen) : ssd_run<__half>(pl, msg, msglen);
    if (st != SF_OK) return st;
    SFN_CU(cudaStreamSynchronize(pl->stream));
    return SF_OK;
}
