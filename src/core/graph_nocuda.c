/* graph_nocuda.c - the CUDA side of graph.h in a build without CUDA: no
 * CUDA context can exist there, so these only answer that. */
#include "graph.h"

#define SF_NO_CUDA_MSG "seqfuse was built without CUDA (no nvcc found at configure time)"

sf_status sf_cuda_host_alloc(sf_ctx *ctx, void **p, size_t bytes) {
    (void)p;
    (void)bytes;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_malloc_host: " SF_NO_CUDA_MSG);
}
void sf_cuda_host_free(sf_ctx *ctx, void *p) {
    (void)ctx;
    (void)p;
}
sf_status sf_cuda_memcpy_async(sf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)dst;
    (void)src;
    (void)bytes;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_memcpy_async: " SF_NO_CUDA_MSG);
}
sf_status sf_cuda_graph_begin(sf_ctx *ctx) { return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_graph_begin: " SF_NO_CUDA_MSG); }
sf_status sf_cuda_graph_end(sf_ctx *ctx, sf_graph **g, int abandon) {
    (void)g;
    (void)abandon;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_graph_end: " SF_NO_CUDA_MSG);
}
sf_status sf_cuda_graph_launch(sf_ctx *ctx, sf_graph *g) {
    (void)g;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_graph_launch: " SF_NO_CUDA_MSG);
}
void sf_cuda_graph_destroy(sf_graph *g) { (void)g; }
sf_status sf_cuda_stream_new(sf_ctx *ctx, void **stream) {
    *stream = NULL;
    return sf_fail(ctx, SF_ERR_UNSUPPORTED, "a CUDA stream: " SF_NO_CUDA_MSG);
}
void sf_cuda_stream_delete(void *stream) { (void)stream; }
