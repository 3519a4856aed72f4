/* paged.c - front ends of the paged KV cache ops, sf_kv_append and
 * sf_attn_paged: validate, check the host index tables, derive the
 * problem, dispatch. */
#include "check.h"
#include "fused_ops.h"

#include <stdlib.h>

void sf_kv_append_params_init(sf_kv_append_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->backend = SF_BACKEND_AUTO;
}

void sf_attn_paged_params_init(sf_attn_paged_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->softmax_scale = 0.0f;
    p->window_left = -1;
    p->window_right = -1;
    p->softcap = 0.0f;
    p->backend = SF_BACKEND_AUTO;
}

/* The pools: k_cache (num_pages, page_size, Hkv, d) of dtype dt, or FP8,
 * with a power-of-two page size up to 256, v_cache of the same shape and
 * dtype.  Hkv or d may be SF_ANY (taken from k_cache). */
static sf_status check_pools(sf_ctx *ctx, const char *op, const sf_tensor *kc,
                             const sf_tensor *vc, int64_t Hkv, int64_t d, int dt,
                             sf_paged_problem *pr) {
    pr->fp8 = kc->data && kc->dtype == SF_F8E4M3;
    CHK(sf_check_tensor(ctx, op, "k_cache", kc, 1, 4, (int64_t[]){SF_ANY, SF_ANY, Hkv, d},
                        pr->fp8 ? SF_F8E4M3 : dt, 1));
    CHK(sf_check_tensor(ctx, op, "v_cache", vc, 1, 4,
                        (int64_t[]){kc->shape[0], kc->shape[1], kc->shape[2], kc->shape[3]},
                        (int)kc->dtype, 1));
    const int64_t ps = kc->shape[1];
    if (ps < 1 || ps > 256 || (ps & (ps - 1)) != 0)
        return sf_fail(ctx, SF_ERR_SHAPE,
                       "%s: page_size (k_cache.shape[1]) is %lld; it must be a power of two from 1 "
                       "to 256",
                       op, (long long)ps);
    pr->num_pages = kc->shape[0];
    pr->page_size = ps;
    return SF_OK;
}

/* k_scale and v_scale: required with FP8 pools, refused otherwise; both
 * (Hkv) (per kv head) or both (num_pages, page_size, Hkv) (per token and
 * kv head), f32. */
static sf_status check_scales(sf_ctx *ctx, const char *op, const sf_tensor *kc,
                              const sf_tensor *ks, const sf_tensor *vs, sf_paged_problem *pr) {
    const struct {
        const char *name;
        const sf_tensor *t;
    } sc[] = {{"k_scale", ks}, {"v_scale", vs}};
    for (int i = 0; i < 2; i++) {
        if (!pr->fp8 && sc[i].t->data)
            return sf_fail(ctx, SF_ERR_INVALID_ARG,
                           "%s: %s is given but the pools are %s (scales go with f8e4m3 pools only)",
                           op, sc[i].name, sf_dtype_name(kc->dtype));
        if (pr->fp8 && !sc[i].t->data)
            return sf_fail(ctx, SF_ERR_INVALID_ARG,
                           "%s: %s is required with f8e4m3 pools ((Hkv) or (num_pages, page_size, "
                           "Hkv) f32)",
                           op, sc[i].name);
    }
    if (!pr->fp8) return SF_OK;
    pr->scale_per_head = ks->rank == 1;
    const int64_t Hkv = kc->shape[2];
    for (int i = 0; i < 2; i++) {
        if (pr->scale_per_head)
            CHK(sf_check_tensor(ctx, op, sc[i].name, sc[i].t, 1, 1, (int64_t[]){Hkv}, SF_F32, 0));
        else
            CHK(sf_check_tensor(ctx, op, sc[i].name, sc[i].t, 1, 3,
                                (int64_t[]){kc->shape[0], kc->shape[1], Hkv}, SF_F32, 0));
    }
    return SF_OK;
}


/* Head counts and head dim shared by both ops. */
static sf_status check_heads(sf_ctx *ctx, const char *op, int64_t H, int64_t Hkv, int64_t d) {
    if (H < 1 || Hkv < 1 || d < 1)
        return sf_fail(ctx, SF_ERR_SHAPE,
                       "%s: %lld query heads, %lld kv heads of dim %lld; each must be >= 1", op,
                       (long long)H, (long long)Hkv, (long long)d);
    if (d > 256)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: head dim %lld is not supported (at most 256)",
                       op, (long long)d);
    if (H % Hkv != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: nheads_kv %lld does not divide nheads %lld", op,
                       (long long)Hkv, (long long)H);
    return SF_OK;
}

/* Host index tables: block_table (b, max_pages) and a length per sequence,
 * each length extended by `extra` (append: the new tokens).  Checks every
 * length against the table's capacity and every entry of the pages
 * [first, last] a sequence touches against the pool:
 *   attention: the pages holding positions [0, len) (all of them read);
 *   append:    the pages holding [len, len + extra) (written). */
static sf_status check_tables(sf_ctx *ctx, const char *op, const char *len_name,
                              const sf_tensor *lens, const sf_tensor *bt, int64_t extra,
                              int append, const sf_paged_problem *pr, int64_t *max_len) {
    const int64_t cap = pr->max_pages * pr->page_size;
    *max_len = 0;
    for (int64_t b = 0; b < pr->batch; b++) {
        const int64_t len = sf_ldi(lens->data, lens->dtype, b * lens->stride[0]);
        if (len < 0)
            return sf_fail(ctx, SF_ERR_INDEX, "%s: %s[%lld] = %lld is negative", op, len_name,
                           (long long)b, (long long)len);
        if (len + extra > cap)
            return sf_fail(ctx, SF_ERR_INDEX,
                           "%s: sequence %lld needs %lld cache positions (%s[%lld] = %lld%s) but "
                           "block_table holds max_pages %lld x page_size %lld = %lld",
                           op, (long long)b, (long long)(len + extra), len_name, (long long)b,
                           (long long)len, append ? " plus the new tokens" : "",
                           (long long)pr->max_pages, (long long)pr->page_size, (long long)cap);
        const int64_t lo = append ? len : 0, hi = len + extra;
        if (hi > *max_len) *max_len = hi;
        if (hi <= lo) continue;
        for (int64_t j = lo / pr->page_size; j <= (hi - 1) / pr->page_size; j++) {
            const int64_t e = sf_ldi(bt->data, bt->dtype, sf_off2(bt, b, j));
            if (e < 0 || e >= pr->num_pages)
                return sf_fail(ctx, SF_ERR_INDEX,
                               "%s: block_table[%lld, %lld] = %lld (sequence %lld, logical page "
                               "%lld) is outside the pool of %lld pages",
                               op, (long long)b, (long long)j, (long long)e, (long long)b,
                               (long long)j, (long long)pr->num_pages);
        }
    }
    return SF_OK;
}

/* A run of rows [lo, hi) of one physical page written by one sequence. */
typedef struct slot_run {
    int64_t page, lo, hi, seq;
} slot_run;

static int cmp_run(const void *a, const void *b) {
    const slot_run *x = (const slot_run *)a, *y = (const slot_run *)b;
    if (x->page != y->page) return x->page < y->page ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Append on the host: no cache slot may be written twice in one call (two
 * sequences, or two logical pages of one sequence, mapping new tokens to
 * the same (page, row)).  On the GPU that is a race; there it is the
 * caller's duty.  Runs of rows per page, sorted: O(n log n) in the pages
 * written. */
static sf_status check_unique_slots(sf_ctx *ctx, const char *op, const sf_kv_append_params *p,
                                    const sf_paged_problem *pr) {
    const int64_t ps = pr->page_size, Ln = pr->lq;
    if (Ln == 0 || pr->batch == 0) return SF_OK;
    /* each sequence touches at most Ln / ps + 2 pages */
    const int64_t per = Ln / ps + 2;
    if (per > INT64_MAX / pr->batch || per * pr->batch > (int64_t)(SIZE_MAX / sizeof(slot_run)))
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: too many pages written to check", op);
    slot_run *runs = (slot_run *)sf_host_scratch(ctx, (size_t)(per * pr->batch) * sizeof *runs);
    if (!runs) return SF_ERR_OUT_OF_MEMORY;
    size_t n = 0;
    const sf_tensor *bt = &p->block_table, *cs = &p->cache_seqlens;
    for (int64_t b = 0; b < pr->batch; b++) {
        const int64_t start = sf_ldi(cs->data, cs->dtype, b * cs->stride[0]), end = start + Ln;
        for (int64_t pos = start; pos < end;) {
            const int64_t j = pos / ps, row = pos % ps;
            const int64_t stop = (j + 1) * ps < end ? (j + 1) * ps : end;
            runs[n].page = sf_ldi(bt->data, bt->dtype, sf_off2(bt, b, j));
            runs[n].lo = row;
            runs[n].hi = row + (stop - pos);
            runs[n].seq = b;
            n++;
            pos = stop;
        }
    }
    qsort(runs, n, sizeof *runs, cmp_run);
    for (size_t i = 1; i < n; i++)
        if (runs[i].page == runs[i - 1].page && runs[i].lo < runs[i - 1].hi)
            return sf_fail(ctx, SF_ERR_INDEX,
                           "%s: sequences %lld and %lld both write row %lld of page %lld (each "
                           "cache slot may be written once per call)",
                           op, (long long)runs[i - 1].seq, (long long)runs[i].seq,
                           (long long)runs[i].lo, (long long)runs[i].page);
    return SF_OK;
}

/* Append's rope: sf_rope's definition checks (shared), and none of the
 * tensors sf_kv_append supplies itself. */
static sf_status check_append_rope(sf_ctx *ctx, const char *op, const sf_rope_params *r, int64_t d,
                                   sf_rope_spec *s) {
    const struct {
        const char *name;
        const sf_tensor *t;
    } own[] = {{"q", &r->q},         {"k", &r->k},         {"q_out", &r->q_out},
               {"k_out", &r->k_out}, {"positions", &r->positions}};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (own[i].t->data)
            return sf_fail(ctx, SF_ERR_INVALID_ARG,
                           "%s: rope.%s must be absent (the append rotates its own k, new token j "
                           "of sequence b at position cache_seqlens[b] + j)",
                           op, own[i].name);
    return sf_rope_check(ctx, op, "rope.", r, d, s);
}

/* With tables on the host: every position written, up to
 * cache_seqlens[b] + Lnew - 1, must be a row of cos and sin. */
static sf_status check_rope_rows(sf_ctx *ctx, const char *op, const sf_kv_append_params *p,
                                 const sf_paged_problem *pr) {
    const sf_tensor *cs = &p->cache_seqlens;
    if (pr->lq == 0) return SF_OK;
    for (int64_t b = 0; b < pr->batch; b++) {
        const int64_t last = sf_ldi(cs->data, cs->dtype, b * cs->stride[0]) + pr->lq - 1;
        if (last >= pr->rope.npos)
            return sf_fail(ctx, SF_ERR_INDEX,
                           "%s: sequence %lld writes position %lld (cache_seqlens[%lld] + %lld new "
                           "tokens - 1) but rope.cos and rope.sin have %lld rows",
                           op, (long long)b, (long long)last, (long long)b, (long long)pr->lq,
                           (long long)pr->rope.npos);
    }
    return SF_OK;
}

sf_status sf_kv_append(sf_ctx *ctx, const sf_kv_append_params *p) {
    static const char *op = "sf_kv_append";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    sf_paged_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.a = p;
    CHK(sf_check_tensor(ctx, op, "k", &p->k, 1, 4, NULL, SF_DT_FLOAT, 1));
    const int dt = (int)p->k.dtype;
    const int64_t b = p->k.shape[0], Ln = p->k.shape[1], Hkv = p->k.shape[2], d = p->k.shape[3];
    CHK(sf_check_tensor(ctx, op, "v", &p->v, 1, 4, (int64_t[]){b, Ln, Hkv, d}, dt, 1));
    CHK(check_heads(ctx, op, Hkv, Hkv, d));
    CHK(check_pools(ctx, op, &p->k_cache, &p->v_cache, Hkv, d, dt, &pr));
    CHK(check_scales(ctx, op, &p->k_cache, &p->k_scale, &p->v_scale, &pr));
    CHK(sf_check_tensor(ctx, op, "block_table", &p->block_table, 1, 2, (int64_t[]){b, SF_ANY},
                        SF_I32, 0));
    CHK(sf_check_tensor(ctx, op, "cache_seqlens", &p->cache_seqlens, 1, 1, (int64_t[]){b}, SF_I32,
                        0));
    if (p->rope) CHK(check_append_rope(ctx, op, p->rope, d, &pr.rope));
    const sf_tensor none = {0};
    /* per-(token, head) scales are written with the pools; per-head ones read */
    const int sw = pr.fp8 && !pr.scale_per_head;
    const sf_named_tensor outs[] = {SF_NT("k_cache", &p->k_cache), SF_NT("v_cache", &p->v_cache),
                                    SF_NT("k_scale", sw ? &p->k_scale : &none),
                                    SF_NT("v_scale", sw ? &p->v_scale : &none)};
    const sf_named_tensor ins[] = {SF_NT("k", &p->k), SF_NT("v", &p->v),
                                   SF_NT("block_table", &p->block_table),
                                   SF_NT("cache_seqlens", &p->cache_seqlens),
                                   SF_NT("rope.cos", p->rope ? &p->rope->cos : &none),
                                   SF_NT("rope.sin", p->rope ? &p->rope->sin : &none),
                                   SF_NT("k_scale", sw ? &none : &p->k_scale),
                                   SF_NT("v_scale", sw ? &none : &p->v_scale)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    pr.batch = b;
    pr.nheads = pr.nheads_kv = Hkv;
    pr.headdim = d;
    pr.lq = Ln;
    pr.max_pages = p->block_table.shape[1];
    pr.wl = pr.wr = -1;
    if (ctx->device < 0) {
        int64_t max_len;
        CHK(check_tables(ctx, op, "cache_seqlens", &p->cache_seqlens, &p->block_table, Ln, 1, &pr,
                         &max_len));
        CHK(check_unique_slots(ctx, op, p, &pr));
        if (pr.rope.has_tab) CHK(check_rope_rows(ctx, op, p, &pr));
    }
    if (b == 0 || Ln == 0) {
        ctx->last_backend = be;
        return SF_OK;
    }

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_kv_append(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_kv_append(ctx, &pr); break;
    default: s = sf_cuda_kv_append(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

sf_status sf_attn_paged(sf_ctx *ctx, const sf_attn_paged_params *p) {
    static const char *op = "sf_attn_paged";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    sf_paged_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    CHK(sf_check_tensor(ctx, op, "q", &p->q, 1, 4, NULL, SF_DT_FLOAT, 1));
    const int dt = (int)p->q.dtype;
    const int64_t b = p->q.shape[0], Lq = p->q.shape[1], H = p->q.shape[2], d = p->q.shape[3];
    CHK(check_pools(ctx, op, &p->k_cache, &p->v_cache, SF_ANY, d, dt, &pr));
    const int64_t Hkv = p->k_cache.shape[2];
    CHK(check_heads(ctx, op, H, Hkv, d));
    CHK(check_scales(ctx, op, &p->k_cache, &p->k_scale, &p->v_scale, &pr));
    CHK(sf_check_tensor(ctx, op, "block_table", &p->block_table, 1, 2, (int64_t[]){b, SF_ANY},
                        SF_I32, 0));
    CHK(sf_check_tensor(ctx, op, "seqlens", &p->seqlens, 1, 1, (int64_t[]){b}, SF_I32, 0));
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 4, (int64_t[]){b, Lq, H, d}, dt, 1));
    CHK(sf_check_tensor(ctx, op, "lse", &p->lse, 0, 3, (int64_t[]){b, H, Lq}, SF_F32, 0));
    const sf_named_tensor outs[] = {SF_NT("out", &p->out), SF_NT("lse", &p->lse)};
    const sf_named_tensor ins[] = {SF_NT("q", &p->q), SF_NT("k_cache", &p->k_cache),
                                   SF_NT("v_cache", &p->v_cache),
                                   SF_NT("block_table", &p->block_table),
                                   SF_NT("seqlens", &p->seqlens), SF_NT("k_scale", &p->k_scale),
                                   SF_NT("v_scale", &p->v_scale),
                                   SF_NT("alibi_slopes", &p->alibi_slopes)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    const float sc = p->softmax_scale;
    if (!isfinite(sc))
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: softmax_scale %g is not finite", op, (double)sc);
    CHK(sf_check_flag(ctx, op, "causal", p->causal));
    if (!isfinite(p->softcap) || p->softcap < 0.0f)
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "%s: softcap %g; give 0 (off) or a finite positive cap", op,
                       (double)p->softcap);
    pr.batch = b;
    pr.nheads = H;
    pr.nheads_kv = Hkv;
    pr.headdim = d;
    pr.lq = Lq;
    pr.max_pages = p->block_table.shape[1];
    pr.has_lse = p->lse.data != NULL;
    pr.scale = sc == 0.0f ? 1.0f / sqrtf((float)d) : sc;
    pr.wl = p->window_left < 0 ? -1 : p->window_left;
    pr.wr = p->window_right < 0 ? -1 : p->window_right;
    if (p->causal) pr.wr = 0;
    pr.softcap = p->softcap;
    CHK(sf_check_alibi(ctx, op, &p->alibi_slopes, pr.batch, pr.nheads, &pr.alibi, &pr.alibi_sb, &pr.alibi_sh));
    if (ctx->device < 0) {
        int64_t max_len;
        CHK(check_tables(ctx, op, "seqlens", &p->seqlens, &p->block_table, 0, 0, &pr, &max_len));
    }
    if (b == 0 || Lq == 0) {
        ctx->last_backend = be;
        return SF_OK;
    }

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_attn_paged(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_attn_paged(ctx, &pr); break;
    default: s = sf_cuda_attn_paged(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
