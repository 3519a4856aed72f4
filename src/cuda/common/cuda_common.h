/* cuda_common.h - shared by the CUDA kernel files: the error-checking
 * macro, bf16/f16 element traits, and the per-context CUDA state. */
#ifndef SF_CUDA_COMMON_H
#define SF_CUDA_COMMON_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <time.h>

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

/* The first n strides of t into d (zeros for an absent tensor), for the
 * argument blocks of the kernels. */
static inline void sf_cuda_copy_strides(int64_t *d, const sf_tensor *t, int n) {
    for (int i = 0; i < n; i++) d[i] = t->data ? t->stride[i] : 0;
}

/* Per-context CUDA state (ctx->cuda_state). */
typedef struct sf_cuda_state {
    int sm_count;
    int sm_major, sm_minor;
    size_t smem_optin;     /* max dynamic shared memory per block (bytes) */
    size_t l2_bytes;
    char name[128];
    /* two device words, zero between launches: attn_fwd_wsp's dynamic tile
     * counter and the count of CTAs done with it (the last one resets
     * both); NULL when the allocation failed (static schedule then) */
    unsigned int *tile_ctr;
    /* the paged calls' error word (paged/decode.cuh): 0, or 1 + the first
     * sequence found with a bad length or block-table entry; host memory
     * mapped into the device (paged_err_d), read and cleared by
     * sf_cuda_sync; NULL when the allocation failed (nothing recorded) */
    unsigned int *paged_err_h, *paged_err_d;
    /* NVML for the autotuner's sustained runs (board_power.cu): asked on
     * first use, closed with the context */
    int power_tried;
    void *power;
    /* sf_gemm's cuBLAS handle, made on its first call (gemm/gemm.cu) */
    void *blas;
} sf_cuda_state;

/* board_power.cu: the board's energy counter (mJ since the driver loaded)
 * and, unless limit_w is NULL, its enforced power limit (W);
 * SF_ERR_UNSUPPORTED without NVML or a counter.  sf_cuda_board_close: at context teardown. */
extern "C" sf_status sf_cuda_board_energy(sf_ctx *ctx, unsigned long long *mj, double *limit_w);
extern "C" void sf_cuda_board_close(sf_cuda_state *st);

static inline sf_cuda_state *sf_cuda_st(sf_ctx *ctx) { return (sf_cuda_state *)ctx->cuda_state; }
static inline cudaStream_t sf_cuda_stream(sf_ctx *ctx) { return (cudaStream_t)ctx->stream; }

/* One run for the autotuner (sf_tune_run_fn): fn() (returning sf_status);
 * with ms != NULL timed between two events on the context's stream, made on
 * first use.  fn's status is returned as it is (SF_ERR_UNSUPPORTED: cannot
 * serve); a failing event call, or a kernel fault that surfaces at the
 * synchronisation, is SF_ERR_CUDA.  Free the events with
 * sf_cuda_events_free once tuning is over. */
template <typename F> sf_status sf_cuda_run_timed(sf_ctx *ctx, cudaEvent_t ev[2], double *ms, F &&fn) {
    if (!ms) return fn();
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    if (!ev[0]) {
        SF_CUDA_CHECK(ctx, cudaEventCreate(&ev[0]));
        SF_CUDA_CHECK(ctx, cudaEventCreate(&ev[1]));
    }
    SF_CUDA_CHECK(ctx, cudaEventRecord(ev[0], stream));
    const sf_status st = fn();
    if (st != SF_OK) return st;
    float t = 0.0f;
    SF_CUDA_CHECK(ctx, cudaEventRecord(ev[1], stream));
    SF_CUDA_CHECK(ctx, cudaEventSynchronize(ev[1]));
    SF_CUDA_CHECK(ctx, cudaEventElapsedTime(&t, ev[0], ev[1]));
    *ms = t;
    return SF_OK;
}
/* Whether the context's stream is being captured into a CUDA graph (then
 * nothing may synchronise: the autotuner only uses cached choices). */
static inline int sf_cuda_capturing(sf_ctx *ctx) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)ctx->stream, &cs) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return cs != cudaStreamCaptureStatusNone;
}
/* Whether kernel `kern` holds sm_90a machine code (a plain sm_80 / sm_90
 * pass compiles the wgmma kernels' bodies away: a handful of registers).
 * Callers cache the answer per kernel in a function-local static. */
static inline bool sf_cuda_sm90a_code(const void *kern) {
    cudaFuncAttributes fa;
    const bool ok = cudaFuncGetAttributes(&fa, kern) == cudaSuccess && fa.binaryVersion >= 90 &&
                    fa.numRegs >= 64;
    (void)cudaGetLastError();
    return ok;
}

/* The autotuner's sustained runs (sf_tune_sustain_fn): fn() (one call,
 * returning sf_status) back to back on the context's stream, twelve calls in
 * flight, while the board's energy counter is polled.  The counter moves in
 * steps (about every 100 ms on an H200, NVML), so the power is taken between
 * two of its steps: the first after a 40 ms warm-up, the last after
 * window_ms more; *watts = energy / host time between them, *ms = GPU time
 * per call of the calls issued in between (events), *limit_w the board's
 * limit.  SF_ERR_UNSUPPORTED without a counter, or when it does not move
 * within 3 s.  Tuning only: it creates and frees its events. */
template <typename F>
sf_status sf_cuda_sustain(sf_ctx *ctx, double window_ms, double *ms, double *watts, double *limit_w, F &&fn) {
    unsigned long long e_last = 0, e1 = 0, e2 = 0;
    double lim = 0;
    sf_status st = sf_cuda_board_energy(ctx, &e_last, &lim);
    if (st != SF_OK) return st;
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    /* enough calls queued that the GPU never waits for the host, which may
     * spend milliseconds in an NVML query (H200: 3 in flight left gaps) */
    enum { NE = 16, INFLIGHT = 12 };
    cudaEvent_t ring[NE] = {}, g0 = nullptr, g1 = nullptr;
    cudaError_t ce = cudaEventCreate(&g0);
    if (ce == cudaSuccess) ce = cudaEventCreate(&g1);
    for (int i = 0; ce == cudaSuccess && i < NE; i++) ce = cudaEventCreateWithFlags(&ring[i], cudaEventDisableTiming);
    auto now_ms = [] {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    };
    const double t_start = now_ms();
    double t1 = 0, t2 = 0;
    long n = 0, n1 = -1, n2 = -1; /* calls issued; at the first and the last step */
    cudaError_t rec = cudaSuccess; /* the window's event records */
    /* a step of the counter: the first after the warm-up opens the window,
     * the first after window_ms closes it */
    double t_prev = now_ms(); /* start of the previous query, which saw e_last */
    auto poll = [&]() -> sf_status {
        unsigned long long e = 0;
        const double t_q = now_ms();
        const sf_status ps = sf_cuda_board_energy(ctx, &e, NULL); /* the limit was read once */
        const double t_prev_q = t_prev;
        t_prev = t_q;
        if (ps != SF_OK || e == e_last) return ps;
        e_last = e;
        /* the step fell between the previous query's start and this one's end */
        const double t = 0.5 * (t_prev_q + now_ms());
        if (n1 < 0 && t - t_start >= 40.0) {
            e1 = e, t1 = t, n1 = n;
            rec = cudaEventRecord(g0, stream);
        } else if (n1 >= 0 && t - t1 >= window_ms) {
            e2 = e, t2 = t, n2 = n;
            rec = cudaEventRecord(g1, stream);
        }
        return SF_OK;
    };
    while (st == SF_OK && ce == cudaSuccess && rec == cudaSuccess && n2 < 0) {
        if (now_ms() - t_start > 3000.0) {
            st = sf_fail(ctx, SF_ERR_UNSUPPORTED, "board power: the energy counter did not move in 3 s");
            break;
        }
        /* at most INFLIGHT calls queued: wait for the oldest, polling */
        if (n >= INFLIGHT) {
            while ((ce = cudaEventQuery(ring[(n - INFLIGHT) % NE])) == cudaErrorNotReady) {
                if ((st = poll()) != SF_OK || rec != cudaSuccess || n2 >= 0) break;
            }
            if (ce == cudaErrorNotReady) ce = cudaSuccess;
            if (st != SF_OK || ce != cudaSuccess || rec != cudaSuccess || n2 >= 0) break;
        }
        if ((st = fn()) != SF_OK) break;
        ce = cudaEventRecord(ring[n % NE], stream);
        n++;
    }
    if (ce == cudaSuccess) ce = rec;
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(stream);
    float gpu_ms = 0;
    if (st == SF_OK && ce == cudaSuccess && n2 > n1) ce = cudaEventElapsedTime(&gpu_ms, g0, g1);
    for (int i = 0; i < NE; i++)
        if (ring[i]) cudaEventDestroy(ring[i]);
    if (g0) cudaEventDestroy(g0);
    if (g1) cudaEventDestroy(g1);
    if (ce != cudaSuccess)
        return sf_fail(ctx, SF_ERR_CUDA, "autotune sustained runs: %s", cudaGetErrorString(ce));
    if (st != SF_OK) return st;
    if (n2 <= n1 || !(t2 > t1))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "board power: no calls between two counter steps");
    *ms = gpu_ms / (double)(n2 - n1);
    *watts = (double)(e2 - e1) / (t2 - t1);
    *limit_w = lim;
    return SF_OK;
}

static inline void sf_cuda_events_free(cudaEvent_t ev[2]) {
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    ev[0] = ev[1] = nullptr;
}

/* Processed dt as every SSD kernel takes it (dt_bias already added):
 * softplus when asked (the identity above 20, where log1p(exp) equals it in
 * f32), then clamped to [lo, hi]. */
static __device__ __forceinline__ float sf_dt_process(float d, int softplus, float lo, float hi) {
    if (softplus) d = d > 20.0f ? d : log1pf(expf(d));
    return fminf(fmaxf(d, lo), hi);
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
