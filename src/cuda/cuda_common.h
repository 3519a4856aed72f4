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

/* One timed run for the autotuner: fn() (returning sf_status) between two
 * events on the context's stream, which are made on first use; ms, or -1
 * when fn fails or a CUDA call does.  Free the events with
 * sf_cuda_events_free once tuning is over. */
template <typename F> double sf_cuda_time_ms(sf_ctx *ctx, cudaEvent_t ev[2], F &&fn) {
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    if (!ev[0] && (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess))
        return -1.0;
    if (cudaEventRecord(ev[0], stream) != cudaSuccess) return -1.0;
    if (fn() != SF_OK) return -1.0;
    float ms = 0.0f;
    if (cudaEventRecord(ev[1], stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, ev[0], ev[1]) != cudaSuccess)
        return -1.0;
    return ms;
}
static inline void sf_cuda_events_free(cudaEvent_t ev[2]) {
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    ev[0] = ev[1] = nullptr;
}

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
