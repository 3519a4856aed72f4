/* graph.c - pinned host memory, asynchronous copies and CUDA graphs of a
 * sequence of calls (seqfuse.h): the argument checks and the CPU paths; the
 * CUDA side is src/cuda/common/graph.cu.
 *
 * A captured call that fails records its status and sentence through
 * sf_fail (ctx->graph_status, see status.c); sf_graph_end reports it and
 * discards the capture.  Internal declines that a call forgives (an
 * autotuner candidate that cannot serve, followed by one that can) clear
 * the context's sentence, so a recorded failure stands only if its sentence
 * is still there when the next call begins (sf_graph_settle, from
 * SF_OP_BEGIN) or when the capture ends; the first that stands is reported,
 * whatever the calls after it do. */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>

sf_status sf_malloc_host(sf_ctx *ctx, void **p, size_t bytes) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (!p) return sf_fail(ctx, SF_ERR_NULL_POINTER, "sf_malloc_host: p is NULL");
    *p = NULL;
    if (sf_alloc_should_fail(ctx))
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "sf_malloc_host: cannot allocate %zu bytes (injected)", bytes);
    if (bytes > SIZE_MAX - 255) /* the round-up to 256 bytes would wrap */
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "sf_malloc_host: cannot allocate %zu bytes", bytes);
    if (!bytes) bytes = 1;
    if (ctx->device >= 0) return sf_cuda_host_alloc(ctx, p, bytes);
    *p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    if (!*p) return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "sf_malloc_host: cannot allocate %zu bytes", bytes);
    return SF_OK;
}

sf_status sf_free_host(sf_ctx *ctx, void *p) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (!p) return SF_OK;
    if (ctx->device >= 0)
        sf_cuda_host_free(ctx, p);
    else
        free(p);
    return SF_OK;
}

sf_status sf_memcpy_async(sf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (bytes == 0) return SF_OK;
    if (!dst || !src) return sf_fail(ctx, SF_ERR_NULL_POINTER, "sf_memcpy_async: %s is NULL", dst ? "src" : "dst");
    if (ctx->device >= 0) return sf_cuda_memcpy_async(ctx, dst, src, bytes);
    memmove(dst, src, bytes);
    return SF_OK;
}

/* A misuse of the graph API during a capture (a second begin, a launch) is
 * reported to its caller but leaves the capture as it was: nothing was
 * enqueued, so it is not recorded as a captured call's failure. */
static sf_status capture_misuse(sf_ctx *ctx, const char *sentence) {
    snprintf(ctx->err, sizeof ctx->err, "%s", sentence);
    return SF_ERR_INVALID_ARG;
}

void sf_graph_settle(sf_ctx *ctx) {
    if (ctx->graph_active == 1 && ctx->graph_status != SF_OK && ctx->err[0] != 0) ctx->graph_active = 2;
}

sf_status sf_graph_begin(sf_ctx *ctx) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (ctx->device < 0)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_graph_begin: a CPU context has no CUDA stream to capture");
    if (ctx->graph_active)
        return capture_misuse(ctx, "sf_graph_begin: the context is already capturing (call sf_graph_end first)");
    sf_status s = sf_cuda_graph_begin(ctx);
    if (s != SF_OK) return s;
    ctx->graph_active = 1;
    ctx->graph_status = SF_OK;
    ctx->graph_err[0] = 0;
    ctx->err[0] = 0; /* a sentence left from before is no failure of the capture */
    return SF_OK;
}

sf_status sf_graph_end(sf_ctx *ctx, sf_graph **g) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (ctx->device < 0)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_graph_end: a CPU context has no CUDA graphs");
    if (!ctx->graph_active)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "sf_graph_end: the context is not capturing (no sf_graph_begin)");
    if (g) *g = NULL;
    /* the capture ends here whatever else is wrong: the stream must not stay captured */
    sf_graph_settle(ctx);
    const int failed = ctx->graph_active == 2;
    const sf_status fst = ctx->graph_status;
    ctx->graph_active = 0;
    ctx->graph_status = SF_OK;
    sf_status s = sf_cuda_graph_end(ctx, g, failed || !g);
    if (failed) {
        memcpy(ctx->err, ctx->graph_err, sizeof ctx->err);
        return fst;
    }
    if (!g) return sf_fail(ctx, SF_ERR_NULL_POINTER, "sf_graph_end: g is NULL (the capture was discarded)");
    return s;
}

sf_status sf_graph_launch(sf_ctx *ctx, sf_graph *g) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (ctx->device < 0)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_graph_launch: a CPU context has no CUDA graphs");
    if (!g) return sf_fail(ctx, SF_ERR_NULL_POINTER, "sf_graph_launch: g is NULL");
    if (ctx->graph_active)
        return capture_misuse(ctx, "sf_graph_launch: the context is capturing a graph (call sf_graph_end first)");
    return sf_cuda_graph_launch(ctx, g);
}

void sf_graph_destroy(sf_graph *g) {
    if (g) sf_cuda_graph_destroy(g);
}
