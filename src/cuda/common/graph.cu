/* graph.cu - the CUDA side of pinned host memory, asynchronous copies and
 * CUDA graphs (src/core/graph.h): the context's stream captured in
 * thread-local mode, instantiated into an executable graph. */
#include "common/cuda_common.h"
#include "graph.h"

#include <stdlib.h>

struct sf_graph {
    cudaGraphExec_t exec;
    int device;
};

extern "C" sf_status sf_cuda_host_alloc(sf_ctx *ctx, void **p, size_t bytes) {
    if (sf_cuda_capturing(ctx))
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "sf_malloc_host: the context's stream is being captured into a graph, where "
                       "allocating is not allowed");
    SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
    const cudaError_t e = cudaHostAlloc(p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        *p = NULL;
        (void)cudaGetLastError();
        return sf_fail(ctx, e == cudaErrorMemoryAllocation ? SF_ERR_OUT_OF_MEMORY : SF_ERR_CUDA,
                       "sf_malloc_host: cudaHostAlloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    }
    return SF_OK;
}

extern "C" void sf_cuda_host_free(sf_ctx *ctx, void *p) {
    (void)ctx;
    if (p) cudaFreeHost(p);
}

/* Whether p is host memory that is not page-locked (a capture of a copy
 * from it would be invalid). */
static int pageable(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return a.type == cudaMemoryTypeUnregistered;
}

extern "C" sf_status sf_cuda_memcpy_async(sf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    const sf_status st = sf_cuda_activate(ctx);
    if (st != SF_OK) return st;
    if (sf_cuda_capturing(ctx) && (pageable(dst) || pageable(src)))
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "sf_memcpy_async: %s is pageable host memory, which a graph capture cannot copy "
                       "(allocate it with sf_malloc_host)", pageable(dst) ? "dst" : "src");
    /* unified addressing tells host from device pointers */
    SF_CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, sf_cuda_stream(ctx)));
    return SF_OK;
}

extern "C" sf_status sf_cuda_graph_begin(sf_ctx *ctx) {
    if (!ctx->stream)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_graph_begin: the context runs on the legacy default stream, which cannot be "
                       "captured; give it a stream with sf_ctx_set_stream");
    if (sf_cuda_capturing(ctx))
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "sf_graph_begin: the context's stream is already being captured");
    SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
    SF_CUDA_CHECK(ctx, cudaStreamBeginCapture(sf_cuda_stream(ctx), cudaStreamCaptureModeThreadLocal));
    return SF_OK;
}

extern "C" sf_status sf_cuda_graph_end(sf_ctx *ctx, sf_graph **g, int abandon) {
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(sf_cuda_stream(ctx), &graph);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (graph) cudaGraphDestroy(graph);
        if (abandon) return SF_OK;
        return sf_fail(ctx, SF_ERR_CUDA,
                       "sf_graph_end: the capture was invalidated (%s): a call inside it synchronised, "
                       "allocated or used another stream", cudaGetErrorString(e));
    }
    if (abandon) {
        if (graph) cudaGraphDestroy(graph);
        return SF_OK;
    }
    sf_graph *out = (sf_graph *)calloc(1, sizeof *out);
    if (!out) {
        cudaGraphDestroy(graph);
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "sf_graph_end: out of host memory");
    }
    const cudaError_t ie = cudaGraphInstantiate(&out->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (ie != cudaSuccess) {
        (void)cudaGetLastError();
        free(out);
        return sf_fail(ctx, SF_ERR_CUDA, "sf_graph_end: cudaGraphInstantiate: %s", cudaGetErrorString(ie));
    }
    out->device = ctx->device;
    *g = out;
    return SF_OK;
}

extern "C" sf_status sf_cuda_graph_launch(sf_ctx *ctx, sf_graph *g) {
    if (g->device != ctx->device)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "sf_graph_launch: the graph was captured on device %d, the context is on %d",
                       g->device, ctx->device);
    SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
    SF_CUDA_CHECK(ctx, cudaGraphLaunch(g->exec, sf_cuda_stream(ctx)));
    return SF_OK;
}

extern "C" void sf_cuda_graph_destroy(sf_graph *g) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != g->device) cudaSetDevice(g->device);
    cudaGraphExecDestroy(g->exec);
    if (cur >= 0 && cur != g->device) cudaSetDevice(cur);
    free(g);
}

extern "C" sf_status sf_cuda_stream_new(sf_ctx *ctx, void **stream) {
    *stream = NULL;
    SF_CUDA_CHECK(ctx, cudaSetDevice(ctx->device));
    cudaStream_t s = NULL;
    SF_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = (void *)s;
    return SF_OK;
}

extern "C" void sf_cuda_stream_delete(void *stream) {
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}
