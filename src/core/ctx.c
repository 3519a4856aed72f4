/* ctx.c - the context: device, stream, threads, workspace arenas, errors. */
#include "autotune.h"

#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

sf_status sf_ctx_create(sf_ctx **out, int device) {
    if (!out) return SF_ERR_NULL_POINTER;
    *out = NULL;
    if (device < SF_DEVICE_CPU) return SF_ERR_INVALID_ARG;
    if (device >= 0 && device >= sf_cuda_count()) return SF_ERR_NO_DEVICE;
    sf_ctx *ctx = (sf_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) return SF_ERR_OUT_OF_MEMORY;
    ctx->device = device;
#ifdef _OPENMP
    ctx->nthreads = omp_get_max_threads();
#else
    ctx->nthreads = 1;
#endif
    if (ctx->nthreads < 1) ctx->nthreads = 1;
    ctx->backend = SF_BACKEND_AUTO;
    ctx->last_backend = SF_BACKEND_AUTO;
    if (device >= 0) {
        sf_status s = sf_cuda_ctx_init(ctx);
        if (s != SF_OK) {
            free(ctx);
            return s;
        }
    }
    *out = ctx;
    return SF_OK;
}

void sf_ctx_destroy(sf_ctx *ctx) {
    if (!ctx) return;
    if (ctx->ws.base) {
        if (ctx->device >= 0)
            sf_cuda_free(ctx, ctx->ws.base);
        else
            free(ctx->ws.base);
    }
    for (int i = 0; i < ctx->ws.nretired; i++) sf_cuda_free(ctx, ctx->ws.retired[i]);
    free(ctx->ws.retired);
    free(ctx->host.base);
    sf_tune_table_free(ctx->tune);
    free(ctx->tune);
    if (ctx->device >= 0) sf_cuda_ctx_free(ctx);
    free(ctx);
}

int sf_ctx_device(const sf_ctx *ctx) { return ctx ? ctx->device : SF_DEVICE_CPU; }

sf_status sf_ctx_set_threads(sf_ctx *ctx, int nthreads) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (nthreads < 1) return sf_fail(ctx, SF_ERR_INVALID_ARG, "thread count %d: must be >= 1", nthreads);
    /* the OpenMP runtime exits the process when it cannot create a thread:
     * refuse counts far past the machine instead */
    if (nthreads > SF_MAX_THREADS)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "thread count %d: at most %d", nthreads, SF_MAX_THREADS);
    ctx->nthreads = nthreads;
    return SF_OK;
}

int sf_ctx_threads(const sf_ctx *ctx) { return ctx ? ctx->nthreads : 1; }

sf_status sf_ctx_set_backend(sf_ctx *ctx, sf_backend backend) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (backend < SF_BACKEND_AUTO || backend > SF_BACKEND_CUDA)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "unknown backend %d", (int)backend);
    ctx->backend = backend;
    return SF_OK;
}

sf_status sf_ctx_set_stream(sf_ctx *ctx, void *cuda_stream) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (ctx->device < 0)
        return sf_fail(ctx, SF_ERR_DEVICE, "sf_ctx_set_stream: a CPU context has no CUDA stream");
    ctx->stream = cuda_stream;
    return SF_OK;
}

void *sf_ctx_stream(const sf_ctx *ctx) { return ctx ? ctx->stream : NULL; }

/* Grows an arena to `bytes`; the old contents are not kept (workspace is
 * never live across calls). */
static sf_status arena_grow(sf_ctx *ctx, sf_arena *a, size_t bytes, int on_device) {
    if (bytes <= a->size) return SF_OK;
    if (bytes > SIZE_MAX / 4) /* no machine has it; keeps the arithmetic below exact */
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "workspace: %zu bytes requested", bytes);
    /* cudaMalloc and cudaFree are not allowed while the stream is captured
     * (they would invalidate the capture): the arena must be big enough
     * before the capture starts. */
    if (on_device && sf_cuda_stream_capturing(ctx))
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY,
                       "workspace: this call needs %zu bytes while the stream is being captured into a CUDA "
                       "graph, and the context holds %zu; run the call once on this context before "
                       "capturing, or size it with sf_ctx_reserve_workspace", bytes, a->size);
    /* a block a captured graph points to outlives the growth */
    if (on_device && a->base && a->captured) {
        void **r = (void **)realloc(a->retired, (size_t)(a->nretired + 1) * sizeof(void *));
        if (!r) return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "workspace: cannot record a retired block");
        a->retired = r;
        a->retired[a->nretired++] = a->base;
        a->base = NULL;
        a->size = 0;
        a->captured = 0;
    }
    size_t want = bytes + bytes / 8; /* a little slack: fewer regrowths */
    if (sf_alloc_should_fail(ctx)) {
        if (on_device)
            sf_cuda_free(ctx, a->base);
        else
            free(a->base);
        a->base = NULL;
        a->size = 0;
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "workspace: cannot allocate %zu bytes (injected)",
                       want);
    }
    if (on_device) {
        if (a->base) sf_cuda_free(ctx, a->base);
        a->base = NULL;
        a->size = 0;
        sf_status s = sf_cuda_alloc(ctx, &a->base, want);
        if (s != SF_OK) return s;
    } else {
        free(a->base);
        a->size = 0;
        /* 64-byte aligned: the CPU kernels use aligned vector loads. */
        a->base = aligned_alloc(64, (want + 63) & ~(size_t)63);
        if (!a->base)
            return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "workspace: cannot allocate %zu bytes", want);
    }
    a->size = want;
    return SF_OK;
}

void *sf_ws_get(sf_ctx *ctx, size_t bytes) {
    if (bytes > ctx->ws.peak) ctx->ws.peak = bytes;
    if (bytes == 0) return ctx->ws.base;
    if (arena_grow(ctx, &ctx->ws, bytes, ctx->device >= 0) != SF_OK) return NULL;
    if (ctx->device >= 0 && !ctx->ws.captured && sf_cuda_stream_capturing(ctx)) ctx->ws.captured = 1;
    return ctx->ws.base;
}

void *sf_host_scratch(sf_ctx *ctx, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (arena_grow(ctx, &ctx->host, bytes, 0) != SF_OK) return NULL;
    return ctx->host.base;
}

sf_status sf_ctx_reserve_workspace(sf_ctx *ctx, size_t bytes) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    return arena_grow(ctx, &ctx->ws, bytes, ctx->device >= 0);
}

size_t sf_ctx_workspace_size(const sf_ctx *ctx) { return ctx ? ctx->ws.size : 0; }
size_t sf_ctx_workspace_peak(const sf_ctx *ctx) { return ctx ? ctx->ws.peak : 0; }
void sf_ctx_reset_workspace_peak(sf_ctx *ctx) {
    if (ctx) ctx->ws.peak = 0;
}

const char *sf_ctx_last_error(const sf_ctx *ctx) { return ctx ? ctx->err : ""; }
sf_backend sf_ctx_last_backend(const sf_ctx *ctx) { return ctx ? ctx->last_backend : SF_BACKEND_AUTO; }

int sf_cuda_device_count(void) { return sf_cuda_count(); }

sf_status sf_cuda_device_name(int device, char *buf, size_t len) {
    if (!buf || len == 0) return SF_ERR_NULL_POINTER;
    buf[0] = 0;
    if (device < 0 || device >= sf_cuda_count()) return SF_ERR_NO_DEVICE;
    return sf_cuda_name(device, buf, len);
}

sf_status sf_malloc(sf_ctx *ctx, void **p, size_t bytes) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (!p) return sf_fail(ctx, SF_ERR_NULL_POINTER, "sf_malloc: p is NULL");
    *p = NULL;
    if (sf_alloc_should_fail(ctx))
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "sf_malloc: cannot allocate %zu bytes (injected)",
                       bytes);
    if (bytes > SIZE_MAX - 255) /* the round-up to 256 bytes would wrap */
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "sf_malloc: cannot allocate %zu bytes", bytes);
    if (ctx->device >= 0) return sf_cuda_alloc(ctx, p, bytes ? bytes : 1);
    *p = aligned_alloc(256, ((bytes ? bytes : 1) + 255) & ~(size_t)255);
    if (!*p) return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "sf_malloc: cannot allocate %zu bytes", bytes);
    return SF_OK;
}

sf_status sf_free(sf_ctx *ctx, void *p) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (ctx->device >= 0)
        sf_cuda_free(ctx, p);
    else
        free(p);
    return SF_OK;
}

sf_status sf_memcpy(sf_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (bytes == 0) return SF_OK;
    if (!dst || !src) return sf_fail(ctx, SF_ERR_NULL_POINTER, "sf_memcpy: NULL pointer");
    if (ctx->device >= 0) return sf_cuda_memcpy(ctx, dst, src, bytes);
    memmove(dst, src, bytes);
    return SF_OK;
}

sf_status sf_ctx_synchronize(sf_ctx *ctx) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    return ctx->device >= 0 ? sf_cuda_sync(ctx) : SF_OK;
}

void sf_ctx_debug_fail_alloc(sf_ctx *ctx, long n) {
    if (ctx) ctx->fail_alloc_in = n > 0 ? n : 0;
}
