// cuda_common.h (emulation) - what src/cuda/common/cuda_common.h gives the
// SSD backward's launcher, on the host: no-op CUDA calls, a two-SM device.
#pragma once
#include "emu_rt.h"
#include "internal.h"
typedef void *cudaStream_t;
enum { cudaSuccess = 0, cudaFuncAttributeMaxDynamicSharedMemorySize = 0 };
inline int cudaGetLastError() { return 0; }
template <class K> inline int cudaFuncSetAttribute(K, int, int) { return 0; }
#define SF_CUDA_CHECK(ctx, call) do { (void)(call); } while (0)
#define SF_CUDA_CHECK_LAUNCH(ctx) do {} while (0)
static inline void sf_cuda_copy_strides(int64_t *d, const sf_tensor *t, int n) {
    for (int i = 0; i < n; i++) d[i] = t->data ? t->stride[i] : 0;
}
typedef struct sf_cuda_state { int sm_count; size_t smem_optin; } sf_cuda_state;
// EMU_SMEM_OPTIN (bytes) shrinks the shared memory a CTA may have, to
// exercise the paths that size themselves by it
#include <cstdlib>
inline sf_cuda_state emu_cs = {2, getenv("EMU_SMEM_OPTIN") ? (size_t)atol(getenv("EMU_SMEM_OPTIN")) : 232448};
static inline sf_cuda_state *sf_cuda_st(sf_ctx *) { return &emu_cs; }
static inline cudaStream_t sf_cuda_stream(sf_ctx *) { return nullptr; }
