/* gemm.cu - the CUDA backend of sf_gemm: cuBLAS's cublasGemmEx.
 *
 * Row-major y (M, N) is column-major y^T (N, M) = W x^T: W (N, K) row-major
 * is column-major (K, N), taken transposed; x (M, K) row-major is
 * column-major (K, M), taken as is.  f32 compute without TF32 for every
 * dtype (CUBLAS_COMPUTE_32F).  Without a bias cuBLAS writes y (and adds
 * beta y) itself; with one, a 16-bit y would be rounded twice (product,
 * then the bias: a sum that cancels keeps the first rounding's error), so
 * the product goes to an f32 buffer in the workspace and one kernel writes
 * y = acc + bias + beta y_old, rounded once.
 * The handle is made on the context's first call and kept in its CUDA
 * state; every call sets the stream and points cuBLAS at the context's
 * arena for workspace, so that a captured call allocates nothing.
 */
#include "common/cuda_common.h"
#include "gemm.h"

#include <cublas_v2.h>


namespace {

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* y[i, n] = acc[i, n] + bias[n] + beta y[i, n] (y read only when beta != 0),
 * rounded once; acc is (M, N) f32 contiguous.  One thread an element,
 * grid-stride. */
template <typename T>
__global__ void add_bias(T *y, int64_t y_rs, const float *acc, const void *bias, int64_t b_s, int bias_f32,
                         float beta, int64_t M, int64_t N) {
    const int64_t total = M * N;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / N, n = e % N;
        const float b = bias_f32 ? ((const float *)bias)[n * b_s] : to_f<T>(((const T *)bias)[n * b_s]);
        T *p = y + i * y_rs + n;
        float v = acc[e] + b;
        if (beta != 0.0f) v += beta * to_f<T>(*p);
        *p = from_f<T>(v);
    }
}

cudaDataType_t cuda_type(sf_dtype dt) {
    return dt == SF_F32 ? CUDA_R_32F : dt == SF_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

} // namespace

extern "C" void sf_cuda_gemm_free(sf_ctx *ctx) {
    sf_cuda_state *st = sf_cuda_st(ctx);
    if (st && st->blas) {
        cudaSetDevice(ctx->device);
        cublasDestroy((cublasHandle_t)st->blas);
        st->blas = NULL;
    }
}

#define SF_CUBLAS_CHECK(ctx, call)                                                          \
    do {                                                                                    \
        cublasStatus_t b_ = (call);                                                         \
        if (b_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return sf_fail((ctx), SF_ERR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
                           cublasGetStatusString(b_));                                      \
    } while (0)

extern "C" sf_status sf_cuda_blas(sf_ctx *ctx, const char *op, void *ws, size_t ws_bytes, void **handle) {
    sf_cuda_state *st = sf_cuda_st(ctx);
    if (!st->blas) {
        if (sf_cuda_capturing(ctx))
            return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                           "%s: the context's first cuBLAS call makes its handle and cannot be captured into "
                           "a graph: call it once before capturing",
                           op);
        cublasHandle_t h = NULL;
        SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
        SF_CUBLAS_CHECK(ctx, cublasCreate(&h));
        st->blas = h;
    }
    cublasHandle_t h = (cublasHandle_t)st->blas;
    SF_CUBLAS_CHECK(ctx, cublasSetStream(h, sf_cuda_stream(ctx)));
    SF_CUBLAS_CHECK(ctx, cublasSetWorkspace(h, ws, ws_bytes));
    SF_CUBLAS_CHECK(ctx, cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    *handle = h;
    return SF_OK;
}

extern "C" sf_status sf_cuda_gemm(sf_ctx *ctx, const sf_gemm_problem *pr) {
    const sf_gemm_params *p = pr->p;
    /* the f32 product buffer behind cuBLAS's workspace when a bias is added */
    size_t acc_bytes = 0;
    if (pr->has_bias) {
        if ((uint64_t)pr->M > (SIZE_MAX / 4 - SF_CUBLAS_WS_BYTES) / (uint64_t)pr->N)
            return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_gemm: an f32 buffer of %lld x %lld is past the address space",
                           (long long)pr->M, (long long)pr->N);
        acc_bytes = (size_t)pr->M * (size_t)pr->N * 4u;
    }
    void *ws = sf_ws_get(ctx, SF_CUBLAS_WS_BYTES + acc_bytes);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    float *acc = pr->has_bias ? (float *)((char *)ws + SF_CUBLAS_WS_BYTES) : NULL;
    void *hv = NULL;
    const sf_status hs = sf_cuda_blas(ctx, "sf_gemm", ws, SF_CUBLAS_WS_BYTES, &hv);
    if (hs != SF_OK) return hs;
    cublasHandle_t h = (cublasHandle_t)hv;
    const cudaDataType_t t = cuda_type(p->x.dtype);
    /* leading dimensions: any value >= the row length serves a single row */
    const int64_t ldx = pr->M == 1 ? pr->K : p->x.stride[0];
    const int64_t ldw = pr->N == 1 ? pr->K : p->w.stride[0];
    const int64_t ldy = pr->M == 1 ? pr->N : p->y.stride[0];
    if (ldx < pr->K || ldw < pr->K || ldy < pr->N || ldx > INT32_MAX || ldw > INT32_MAX || ldy > INT32_MAX)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_gemm: the CUDA backend needs row strides between the row length and 2^31 "
                       "(x %lld, w %lld, y %lld)",
                       (long long)p->x.stride[0], (long long)p->w.stride[0], (long long)p->y.stride[0]);
    const float alpha = 1.0f, beta = p->beta, zero = 0.0f;
    if (!pr->has_bias) {
        SF_CUBLAS_CHECK(ctx, cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)pr->N, (int)pr->M, (int)pr->K, &alpha,
                                          p->w.data, t, (int)ldw, p->x.data, t, (int)ldx, &beta, p->y.data, t,
                                          (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        if (pr->N > INT32_MAX)
            return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_gemm: N = %lld is past the CUDA backend's 2^31", (long long)pr->N);
        SF_CUBLAS_CHECK(ctx, cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)pr->N, (int)pr->M, (int)pr->K, &alpha,
                                          p->w.data, t, (int)ldw, p->x.data, t, (int)ldx, &zero, acc, CUDA_R_32F,
                                          (int)pr->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        const int64_t total = pr->M * pr->N;
        const int threads = 256;
        const int64_t want = (total + threads - 1) / threads;
        const int blocks = (int)(want < 65535 ? want : 65535);
        const int bf32 = p->bias.dtype == SF_F32;
        cudaStream_t s = sf_cuda_stream(ctx);
        if (p->y.dtype == SF_F32)
            add_bias<float><<<blocks, threads, 0, s>>>((float *)p->y.data, ldy, acc, p->bias.data, p->bias.stride[0], 1, beta, pr->M, pr->N);
        else if (p->y.dtype == SF_F16)
            add_bias<__half><<<blocks, threads, 0, s>>>((__half *)p->y.data, ldy, acc, p->bias.data, p->bias.stride[0], bf32, beta, pr->M, pr->N);
        else
            add_bias<__nv_bfloat16><<<blocks, threads, 0, s>>>((__nv_bfloat16 *)p->y.data, ldy, acc, p->bias.data, p->bias.stride[0], bf32, beta, pr->M, pr->N);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}
