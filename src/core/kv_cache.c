/* kv_cache.c - sf_kv_cache: a paged KV cache owned by the library.  The
 * pools (and for FP8 caches the per-(token, kv head) scale pools) and the
 * device copies of the tables are allocated once, at creation; page bookkeeping (a stack of free page numbers, each slot's
 * pages and length) lives on the host and reaches the context's memory at
 * sf_kv_cache_tables. */
#include "check.h"

#include <stdlib.h>

struct sf_kv_cache {
    sf_ctx *ctx;
    sf_kv_cache_desc d;
    size_t pool_bytes;        /* one pool (K or V of one layer) */
    void **pools;             /* 2 * num_layers: K of layer l at 2l, V at 2l + 1 */
    void **scales;            /* FP8: (num_pages, page_size, Hkv) f32, laid out as pools */
    int32_t *free_pages;      /* stack of free page numbers */
    int64_t nfree;
    int32_t *table;           /* host (max_seqs, max_pages_per_seq), -1 unused */
    int32_t *lens;            /* host (max_seqs) */
    void *table_dev, *lens_dev; /* the context's copies */
};

static int mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

void sf_kv_cache_destroy(sf_kv_cache *c) {
    if (!c) return;
    if (c->pools)
        for (int i = 0; i < 2 * c->d.num_layers; i++) sf_free(c->ctx, c->pools[i]);
    if (c->scales)
        for (int i = 0; i < 2 * c->d.num_layers; i++) sf_free(c->ctx, c->scales[i]);
    free(c->scales);
    sf_free(c->ctx, c->table_dev);
    sf_free(c->ctx, c->lens_dev);
    free(c->pools);
    free(c->free_pages);
    free(c->table);
    free(c->lens);
    free(c);
}

sf_status sf_kv_cache_create(sf_ctx *ctx, const sf_kv_cache_desc *dp, sf_kv_cache **out) {
    static const char *op = "sf_kv_cache_create";
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (!dp || !out) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: desc or out is NULL", op);
    *out = NULL;
    sf_kv_cache_desc d = *dp;
    if (d.page_size == 0) d.page_size = 16;
    if (d.page_size < 1 || d.page_size > 256 || (d.page_size & (d.page_size - 1)) != 0)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: page_size %d; a power of two from 1 to 256", op, d.page_size);
    if (d.num_pages < 1 || d.num_pages > INT32_MAX)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: num_pages %lld; 1 to 2^31 - 1", op, (long long)d.num_pages);
    if (d.nheads_kv < 1 || d.head_dim < 1 || d.head_dim > 256)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: nheads_kv %d, head_dim %d; nheads_kv >= 1, head_dim 1 to 256",
                       op, d.nheads_kv, d.head_dim);
    if (d.num_layers < 1 || d.max_seqs < 1 || d.max_pages_per_seq < 1)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: num_layers %d, max_seqs %d, max_pages_per_seq %d; each >= 1",
                       op, d.num_layers, d.max_seqs, d.max_pages_per_seq);
    if (d.dtype != SF_F16 && d.dtype != SF_BF16 && d.dtype != SF_F8E4M3 &&
        !(d.dtype == SF_F32 && ctx->device < 0))
        return sf_fail(ctx, SF_ERR_DTYPE, "%s: dtype %s; f16, bf16 or f8e4m3 (f32 on a CPU context)",
                       op, sf_dtype_name(d.dtype));
    const int fp8 = d.dtype == SF_F8E4M3;
    size_t row, pool, tab, spool = 0;
    if (!mul_ok((size_t)d.nheads_kv * (size_t)d.head_dim, sf_dtype_size(d.dtype), &row) ||
        !mul_ok(row, (size_t)d.page_size, &pool) || !mul_ok(pool, (size_t)d.num_pages, &pool) ||
        !mul_ok((size_t)d.nheads_kv * sizeof(float), (size_t)d.page_size, &spool) ||
        !mul_ok(spool, (size_t)d.num_pages, &spool) ||
        !mul_ok((size_t)d.max_seqs, (size_t)d.max_pages_per_seq, &tab) || tab > (size_t)INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: the pools or the block table are too large", op);

    sf_kv_cache *c = (sf_kv_cache *)calloc(1, sizeof *c);
    if (!c) return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    c->ctx = ctx;
    c->d = d;
    c->pool_bytes = pool;
    c->pools = (void **)calloc((size_t)2 * (size_t)d.num_layers, sizeof(void *));
    c->free_pages = (int32_t *)malloc((size_t)d.num_pages * sizeof(int32_t));
    c->table = (int32_t *)malloc(tab * sizeof(int32_t));
    c->lens = (int32_t *)calloc((size_t)d.max_seqs, sizeof(int32_t));
    if (fp8) c->scales = (void **)calloc((size_t)2 * (size_t)d.num_layers, sizeof(void *));
    if (!c->pools || !c->free_pages || !c->table || !c->lens || (fp8 && !c->scales)) {
        sf_kv_cache_destroy(c);
        return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    sf_status s = SF_OK;
    for (int i = 0; i < 2 * d.num_layers && s == SF_OK; i++) s = sf_malloc(ctx, &c->pools[i], pool);
    if (fp8 && s == SF_OK) { /* scale pools, zero: a page never written reads as 0 */
        void *zero = calloc(1, spool);
        if (!zero) s = sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        for (int i = 0; i < 2 * d.num_layers && s == SF_OK; i++) {
            s = sf_malloc(ctx, &c->scales[i], spool);
            if (s == SF_OK) s = sf_memcpy(ctx, c->scales[i], zero, spool);
        }
        free(zero);
    }
    if (s == SF_OK) s = sf_malloc(ctx, &c->table_dev, tab * sizeof(int32_t));
    if (s == SF_OK) s = sf_malloc(ctx, &c->lens_dev, (size_t)d.max_seqs * sizeof(int32_t));
    if (s != SF_OK) {
        sf_kv_cache_destroy(c);
        return s; /* sf_malloc set the detail */
    }
    /* page 0 on top: pages are handed out in order until some come back */
    c->nfree = d.num_pages;
    for (int64_t i = 0; i < d.num_pages; i++) c->free_pages[i] = (int32_t)(d.num_pages - 1 - i);
    for (size_t i = 0; i < tab; i++) c->table[i] = -1;
    *out = c;
    return SF_OK;
}

sf_status sf_kv_cache_pools(const sf_kv_cache *c, int layer, sf_tensor *k_cache, sf_tensor *v_cache) {
    if (!c) return SF_ERR_NULL_POINTER;
    if (!k_cache || !v_cache) return sf_fail(c->ctx, SF_ERR_NULL_POINTER, "sf_kv_cache_pools: an output is NULL");
    if (layer < 0 || layer >= c->d.num_layers)
        return sf_fail(c->ctx, SF_ERR_INDEX, "sf_kv_cache_pools: layer %d of %d", layer, c->d.num_layers);
    const int64_t shape[4] = {c->d.num_pages, c->d.page_size, c->d.nheads_kv, c->d.head_dim};
    const int dev = c->ctx->device;
    *k_cache = sf_tensor_contiguous(c->pools[2 * layer], c->d.dtype, dev, 4, shape);
    *v_cache = sf_tensor_contiguous(c->pools[2 * layer + 1], c->d.dtype, dev, 4, shape);
    return SF_OK;
}

sf_status sf_kv_cache_scales(const sf_kv_cache *c, int layer, sf_tensor *k_scale, sf_tensor *v_scale) {
    if (!c) return SF_ERR_NULL_POINTER;
    if (!k_scale || !v_scale)
        return sf_fail(c->ctx, SF_ERR_NULL_POINTER, "sf_kv_cache_scales: an output is NULL");
    if (!c->scales)
        return sf_fail(c->ctx, SF_ERR_INVALID_ARG, "sf_kv_cache_scales: the cache is %s; scale pools go "
                       "with f8e4m3 caches", sf_dtype_name(c->d.dtype));
    if (layer < 0 || layer >= c->d.num_layers)
        return sf_fail(c->ctx, SF_ERR_INDEX, "sf_kv_cache_scales: layer %d of %d", layer, c->d.num_layers);
    const int64_t shape[3] = {c->d.num_pages, c->d.page_size, c->d.nheads_kv};
    const int dev = c->ctx->device;
    *k_scale = sf_tensor_contiguous(c->scales[2 * layer], SF_F32, dev, 3, shape);
    *v_scale = sf_tensor_contiguous(c->scales[2 * layer + 1], SF_F32, dev, 3, shape);
    return SF_OK;
}

int64_t sf_kv_cache_length(const sf_kv_cache *c, int seq) {
    if (!c || seq < 0 || seq >= c->d.max_seqs) return -1;
    return c->lens[seq];
}

int64_t sf_kv_cache_free_pages(const sf_kv_cache *c) { return c ? c->nfree : 0; }

sf_status sf_kv_cache_resize(sf_kv_cache *c, int seq, int64_t len) {
    static const char *op = "sf_kv_cache_resize";
    if (!c) return SF_ERR_NULL_POINTER;
    if (seq < 0 || seq >= c->d.max_seqs)
        return sf_fail(c->ctx, SF_ERR_INDEX, "%s: slot %d of %d", op, seq, c->d.max_seqs);
    const int64_t ps = c->d.page_size, cap = (int64_t)c->d.max_pages_per_seq * ps;
    if (len < 0 || len > cap)
        return sf_fail(c->ctx, SF_ERR_INVALID_ARG, "%s: length %lld for slot %d; 0 to %lld (%d pages of %lld)", op,
                       (long long)len, seq, (long long)cap, c->d.max_pages_per_seq, (long long)ps);
    int32_t *row = c->table + (int64_t)seq * c->d.max_pages_per_seq;
    const int64_t have = (c->lens[seq] + ps - 1) / ps, need = (len + ps - 1) / ps;
    if (need - have > c->nfree)
        return sf_fail(c->ctx, SF_ERR_OUT_OF_MEMORY, "%s: slot %d needs %lld more pages, %lld are free", op, seq,
                       (long long)(need - have), (long long)c->nfree);
    for (int64_t p = have; p < need; p++) row[p] = c->free_pages[--c->nfree];
    for (int64_t p = have - 1; p >= need; p--) { /* the last pages back first */
        c->free_pages[c->nfree++] = row[p];
        row[p] = -1;
    }
    c->lens[seq] = (int32_t)len;
    return SF_OK;
}

sf_status sf_kv_cache_tables(sf_kv_cache *c, sf_tensor *block_table, sf_tensor *seqlens) {
    if (!c) return SF_ERR_NULL_POINTER;
    if (!block_table || !seqlens)
        return sf_fail(c->ctx, SF_ERR_NULL_POINTER, "sf_kv_cache_tables: an output is NULL");
    const size_t tab = (size_t)c->d.max_seqs * (size_t)c->d.max_pages_per_seq;
    CHK(sf_memcpy(c->ctx, c->table_dev, c->table, tab * sizeof(int32_t)));
    CHK(sf_memcpy(c->ctx, c->lens_dev, c->lens, (size_t)c->d.max_seqs * sizeof(int32_t)));
    const int dev = c->ctx->device;
    *block_table = sf_tensor_contiguous(c->table_dev, SF_I32, dev, 2,
                                        (int64_t[]){c->d.max_seqs, c->d.max_pages_per_seq});
    *seqlens = sf_tensor_contiguous(c->lens_dev, SF_I32, dev, 1, (int64_t[]){c->d.max_seqs});
    return SF_OK;
}
