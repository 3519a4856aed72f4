/* graph.h - the CUDA side of pinned host memory, asynchronous copies and
 * CUDA graphs (src/cuda/common/graph.cu; src/core/graph_nocuda.c in a build
 * without CUDA).  The public front ends with their checks are in
 * src/core/graph.c.  Not installed. */
#ifndef SF_CORE_GRAPH_H
#define SF_CORE_GRAPH_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

sf_status sf_cuda_host_alloc(sf_ctx *ctx, void **p, size_t bytes);
void sf_cuda_host_free(sf_ctx *ctx, void *p);
/* On the context's stream; while it is captured, a host side must be
 * page-locked (SF_ERR_INVALID_ARG otherwise, before anything is recorded). */
sf_status sf_cuda_memcpy_async(sf_ctx *ctx, void *dst, const void *src, size_t bytes);
/* Starts capturing the context's stream (thread-local capture mode). */
sf_status sf_cuda_graph_begin(sf_ctx *ctx);
/* Ends the capture; abandon != 0 discards what was recorded (*g untouched,
 * SF_OK unless ending the capture itself fails), else instantiates it. */
sf_status sf_cuda_graph_end(sf_ctx *ctx, sf_graph **g, int abandon);
sf_status sf_cuda_graph_launch(sf_ctx *ctx, sf_graph *g);
void sf_cuda_graph_destroy(sf_graph *g);
/* A non-blocking stream on the context's device (for sf_ctx_set_stream: a
 * capture needs a stream other than the legacy one), and its release. */
sf_status sf_cuda_stream_new(sf_ctx *ctx, void **stream);
void sf_cuda_stream_delete(void *stream);

#ifdef __cplusplus
}
#endif
#endif
