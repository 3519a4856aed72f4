/* device.cu - CUDA device plumbing for the context: device count, names,
 * allocation, per-context properties. */
#include "common/cuda_common.h"
#include "gemm.h"
#include "paged/counters.h"

#include <stdio.h>
#include <stdlib.h>

extern "C" int sf_cuda_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

extern "C" sf_status sf_cuda_ctx_init(sf_ctx *ctx) {
    sf_cuda_state *st = (sf_cuda_state *)calloc(1, sizeof *st);
    if (!st) return SF_ERR_OUT_OF_MEMORY;
    ctx->cuda_state = st;
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, ctx->device);
    if (e != cudaSuccess) {
        free(st);
        ctx->cuda_state = NULL;
        return SF_ERR_NO_DEVICE;
    }
    st->sm_count = prop.multiProcessorCount;
    st->sm_major = prop.major;
    st->sm_minor = prop.minor;
    st->smem_optin = prop.sharedMemPerBlockOptin;
    st->l2_bytes = (size_t)prop.l2CacheSize;
    snprintf(st->name, sizeof st->name, "%s", prop.name);
    /* attention's tile counter (cuda_common.h), then the paged decode's
     * split counters (paged/counters.h), zeroed before any stream of the
     * context can launch on them: the memset runs on the legacy stream,
     * which a non-blocking stream does not wait for */
    const size_t nctr = (2 + SF_PAGED_CTRS) * sizeof(unsigned);
    if (cudaSetDevice(ctx->device) != cudaSuccess || cudaMalloc((void **)&st->tile_ctr, nctr) != cudaSuccess ||
        cudaMemset(st->tile_ctr, 0, nctr) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        (void)cudaGetLastError();
        if (st->tile_ctr) cudaFree(st->tile_ctr);
        st->tile_ctr = NULL;
    }
    if (cudaHostAlloc((void **)&st->paged_err_h, sizeof(unsigned), cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&st->paged_err_d, st->paged_err_h, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        if (st->paged_err_h) cudaFreeHost(st->paged_err_h);
        st->paged_err_h = st->paged_err_d = NULL;
    } else {
        *st->paged_err_h = 0;
    }
    return SF_OK;
}

extern "C" void sf_cuda_ctx_free(sf_ctx *ctx) {
    sf_cuda_state *st = sf_cuda_st(ctx);
    if (st) sf_cuda_board_close(st);
    sf_cuda_gemm_free(ctx);
    if (st && st->tile_ctr) {
        cudaSetDevice(ctx->device);
        cudaFree(st->tile_ctr);
    }
    if (st && st->paged_err_h) cudaFreeHost(st->paged_err_h);
    free(ctx->cuda_state);
    ctx->cuda_state = NULL;
}

extern "C" sf_status sf_cuda_alloc(sf_ctx *ctx, void **p, size_t bytes) {
    SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return sf_fail(ctx, e == cudaErrorMemoryAllocation ? SF_ERR_OUT_OF_MEMORY : SF_ERR_CUDA,
                       "cudaMalloc(%zu bytes) on device %d: %s", bytes, ctx->device,
                       cudaGetErrorString(e));
    }
    return SF_OK;
}

extern "C" void sf_cuda_free(sf_ctx *ctx, void *p) {
    if (!p) return;
    cudaSetDevice(ctx->device);
    cudaFree(p);
}

extern "C" int sf_cuda_stream_capturing(sf_ctx *ctx) { return sf_cuda_capturing(ctx); }

extern "C" sf_status sf_cuda_name(int device, char *buf, size_t len) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return SF_ERR_NO_DEVICE;
    snprintf(buf, len, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    return SF_OK;
}

extern "C" sf_status sf_cuda_memcpy(sf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
    /* Unified addressing tells host from device pointers. */
    SF_CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, sf_cuda_stream(ctx)));
    SF_CUDA_CHECK(ctx, cudaStreamSynchronize(sf_cuda_stream(ctx)));
    return SF_OK;
}

extern "C" sf_status sf_cuda_activate(sf_ctx *ctx) {
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != ctx->device)
        SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
    return SF_OK;
}

extern "C" sf_status sf_cuda_sync(sf_ctx *ctx) {
    SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
    SF_CUDA_CHECK(ctx, cudaStreamSynchronize(sf_cuda_stream(ctx)));
    sf_cuda_state *st = sf_cuda_st(ctx);
    if (st && st->paged_err_h) {
        const unsigned v = *(volatile unsigned *)st->paged_err_h;
        if (v) {
            *(volatile unsigned *)st->paged_err_h = 0;
            return sf_fail(ctx, SF_ERR_INDEX, "a paged-cache call met sequence %u with a length or block-table "
                           "entry out of range (it was neither read nor written past the check)", v - 1);
        }
    }
    return SF_OK;
}
