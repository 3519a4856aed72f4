// cuda_common.h (emulation) - what src/cuda/common/cuda_common.h gives the
// launchers (SSD, attention backward, gemm_wq, paged), on the host: no-op CUDA calls, a
// two-SM sm_90 device with sm_90a code.
#pragma once
#include "emu_rt.h"
#include "internal.h"
typedef void *cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaFuncAttributeMaxDynamicSharedMemorySize = 0 };
inline int cudaGetLastError() { return 0; }
inline int cudaGetDevice(int *d) { *d = 0; return 0; }
inline const char *cudaGetErrorString(int) { return "emulated"; }
template <class K> inline int cudaFuncSetAttribute(K, int, int) { return 0; }
inline int cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { memset(p, v, n); return 0; }
inline int cudaMemcpyAsync(void *d, const void *s, size_t n, int, cudaStream_t) { memcpy(d, s, n); return 0; }
// launches with attributes (sf_gemm_wq's stream rows): run as plain ones;
// clusters are not emulated, so a launch of more than one CTA a cluster
// aborts (the launchers use none where sm_major < 9: see emu_cs)
enum { cudaLaunchAttributeClusterDimension = 4 };
struct cudaLaunchAttributeValue { struct { unsigned x, y, z; } clusterDim; };
struct cudaLaunchAttribute { int id; cudaLaunchAttributeValue val; };
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned numAttrs;
};
template <class K, class... A> inline int cudaLaunchKernelEx(const cudaLaunchConfig_t *c, K kern, const A &...a) {
    for (unsigned i = 0; i < c->numAttrs; i++) {
        const auto &d = c->attrs[i].val.clusterDim;
        if (c->attrs[i].id == cudaLaunchAttributeClusterDimension && d.x * d.y * d.z > 1) {
            fprintf(stderr, "EMU: a launch in clusters of %u CTAs (not emulated)\n", d.x * d.y * d.z);
            abort();
        }
    }
    emu_launch(kern, c->gridDim, c->blockDim, c->dynamicSmemBytes, a...);
    return 0;
}
#define SF_CUDA_CHECK(ctx, call) do { (void)(call); } while (0)
#define SF_CUDA_CHECK_LAUNCH(ctx) do {} while (0)
static inline void sf_cuda_copy_strides(int64_t *d, const sf_tensor *t, int n) {
    for (int i = 0; i < n; i++) d[i] = t->data ? t->stride[i] : 0;
}
typedef struct sf_cuda_state {
    int sm_count;
    int sm_major, sm_minor;
    size_t smem_optin;
    size_t l2_bytes;
    unsigned int *tile_ctr;    // the paged decode's split counters (set by a test), or NULL
    unsigned int *paged_err_d; // the paged kernels' error word (set by a test), or NULL
} sf_cuda_state;
// resident blocks an SM: as many as the shared memory allows, at most 3
template <class K> inline int cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K, int, size_t smem) {
    const size_t per = smem + 1024;
    const int by_smem = (int)(233472 / (per ? per : 1));
    *n = by_smem < 1 ? 1 : by_smem > 3 ? 3 : by_smem;
    return 0;
}
// EMU_SMEM_OPTIN (bytes) shrinks the shared memory a CTA may have, to
// exercise the paths that size themselves by it
#include <cstdlib>
inline sf_cuda_state emu_cs = {2, 9, 0, getenv("EMU_SMEM_OPTIN") ? (size_t)atol(getenv("EMU_SMEM_OPTIN")) : 232448,
                               50u << 20};
static inline sf_cuda_state *sf_cuda_st(sf_ctx *) { return &emu_cs; }
static inline cudaStream_t sf_cuda_stream(sf_ctx *) { return nullptr; }
static inline bool sf_cuda_sm90a_code(const void *) { return true; }
static inline int sf_cuda_capturing(sf_ctx *) { return 0; }
template <typename T> struct sf_elem;
template <> struct sf_elem<float> {
    static inline float to_f(float v) { return v; }
    static inline float from_f(float v) { return v; }
};
template <> struct sf_elem<__half> {
    static inline float to_f(__half v) { return __half2float(v); }
    static inline __half from_f(float v) { return __float2half_rn(v); }
};
template <> struct sf_elem<__nv_bfloat16> {
    static inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
    static inline __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
};
