/* cuda_common.h - shared by the CUDA kernel files: the error-checking
 * macro, bf16/f16 element traits, and the per-context CUDA state. */
#ifndef SF_CUDA_COMMON_H
#define SF_CUDA_COMMON_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "internal.h"

/* Checks a CUDA runtime call; on failure records "file:line: call: error"
 * on the context and returns SF_ERR_CUDA from the enclosing function. */
#define SF_CUDA_CHECK(ctx, call)                                                   \
    do {                                                                           \
        cudaError_t sf_e_ = (call);                                                \
        if (sf_e_ != cudaSuccess)                                                  \
            return sf_fail((ctx), SF_ERR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__, \
                           #call, cudaGetErrorString(sf_e_));                      \
    } while (0)

/* After a launch: the launch error, if any (no synchronisation). */
#define SF_CUDA_CHECK_LAUNCH(ctx) SF_CUDA_CHECK((ctx), cudaGetLastError())

/* Per-context CUDA state (ctx->cuda_state). */
typedef struct sf_cuda_state {
    int sm_count;
    int sm_major, sm_minor;
    size_t smem_optin;     /* max dynamic shared memory per block (bytes) */
    size_t l2_bytes;
    char name[128];
} sf_cuda_state;

static inline sf_cuda_state *sf_cuda_st(sf_ctx *ctx) { return (sf_cuda_state *)ctx->cuda_state; }
static inline cudaStream_t sf_cuda_stream(sf_ctx *ctx) { return (cudaStream_t)ctx->stream; }

/* Element type of a dtype, for kernel templates. */
template <typename T> struct sf_elem;
template <> struct sf_elem<float> {
    static __device__ __forceinline__ float to_f(float v) { return v; }
    static __device__ __forceinline__ float from_f(float v) { return v; }
};
template <> struct sf_elem<__half> {
    static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
};
template <> struct sf_elem<__nv_bfloat16> {
    static __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
};

#endif
