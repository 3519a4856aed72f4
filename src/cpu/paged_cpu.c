/* paged_cpu.c - paged KV cache ops on the CPU.
 *
 * Append: one memcpy per (token, kv head) row, OpenMP over the new tokens
 * of all sequences (the front end has checked that no slot is written
 * twice, so the copies are independent).  With rope, K rows go through
 * f32: the token's cos and sin once for all its heads (angles in double,
 * fused_cpu.c's helpers), rotated, converted back; V is still copied.
 * FP8 pools: both rows through f32, quantised (fp8.h) with their scale.
 *
 * Attention: OpenMP over tasks (sequence, kv head, tile of query tokens),
 * dynamic schedule.  A task holds every query head of its kv group for up
 * to QT tokens (QT = max(1, 128 / group): rows = group x QT), so each key
 * and value row fetched through the block table is converted to f32 once
 * for the whole group.  Keys are streamed in blocks of BC = 64 positions
 * (the union of the rows' visible ranges only): gather and convert K and V
 * of the block, scores S = Q K^T for every row, then the online softmax
 * per row (m' = max(m, rowmax S); O = exp(m - m') O + exp(S - m') V;
 * l likewise), O / l and lse = m + log l at the end.  FP8 keys and values
 * are dequantised (code * scale) as they are gathered; ALiBi's bias is
 * added to each score after the softcap.  f32 throughout; the
 * inner loops are plain C for the compiler to vectorise.  Decode (Lq = 1)
 * parallelises over (sequence, kv head) only: enough on a host, where
 * batch x Hkv is already at least the core count in serving.
 */
#include "cpu_common.h"
#include "fused_ops.h"

#define BC 64          /* key positions per block                      */
#define ROWS_MAX 128   /* query rows per task (group x tokens), target */

/* Converts n elements of a 16-bit, f32 or FP8 row to f32 (FP8: code times
 * scale s). */
static void row_to_f32s(float *dst, const uint8_t *src, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) dst[i] = sf_e4m3_to_f32(src[i]) * s;
}

/* Converts n elements of a 16-bit or f32 row to f32. */
static void row_to_f32(float *dst, const void *src, sf_dtype dt, int64_t n) {
    if (dt == SF_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dt == SF_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = sf_f16_to_f32(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = sf_bf16_to_f32(s[i]);
    }
}

static sf_status kv_append_rows(sf_ctx *ctx, const sf_paged_problem *pr);

sf_status sf_cpu_kv_append(sf_ctx *ctx, const sf_paged_problem *pr) {
    if (pr->rope.p || pr->fp8) return kv_append_rows(ctx, pr);
    const sf_kv_append_params *p = pr->a;
    const sf_tensor *cs = &p->cache_seqlens, *bt = &p->block_table;
    const sf_tensor *k = &p->k, *v = &p->v, *kc = &p->k_cache, *vc = &p->v_cache;
    const int64_t Ln = pr->lq, Hkv = pr->nheads_kv, ps = pr->page_size;
    const size_t es = sf_dtype_size(k->dtype), rb = (size_t)pr->headdim * es;
    const int64_t ntok = pr->batch * Ln;
    char *kcd = (char *)kc->data, *vcd = (char *)vc->data;
    const char *kd = (const char *)k->data, *vd = (const char *)v->data;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(sf_cpu_threads(ctx)) if (ntok * Hkv > 64)
#endif
    for (int64_t t = 0; t < ntok; t++) {
        const int64_t b = t / Ln, j = t % Ln;
        const int64_t pos = sf_ldi(cs->data, cs->dtype, b * cs->stride[0]) + j;
        const int64_t page = sf_ldi(bt->data, bt->dtype, sf_off2(bt, b, pos / ps)), row = pos % ps;
        for (int64_t h = 0; h < Hkv; h++) {
            memcpy(kcd + (size_t)sf_off4(kc, page, row, h, 0) * es,
                   kd + (size_t)sf_off4(k, b, j, h, 0) * es, rb);
            memcpy(vcd + (size_t)sf_off4(vc, page, row, h, 0) * es,
                   vd + (size_t)sf_off4(v, b, j, h, 0) * es, rb);
        }
    }
    return SF_OK;
}

/* FP8 pools: the f32 row quantised at element o of pool pc with scale s
 * (per head), or amax / 448 written to *ws (per token and head); the
 * reference's definition (paged_ref.c), fp8.h's encoder. */
static void quant_row(const float *row, int64_t d, uint8_t *dst, float s, float *ws) {
    if (ws) {
        float amax = 0.0f;
        for (int64_t c = 0; c < d; c++) amax = fmaxf(amax, fabsf(row[c]));
        s = amax / 448.0f;
        *ws = s;
    }
    if (s == 0.0f) {
        memset(dst, 0, (size_t)d);
        return;
    }
    for (int64_t c = 0; c < d; c++) dst[c] = sf_f32_to_e4m3(row[c] / s);
}

/* Append through f32 rows: K rotated (pr->rope) and/or both quantised to
 * FP8 (pr->fp8); per thread the R/2 cos and sin of a token and one f32
 * head row; the frequencies (doubles) once per call.  16-bit V rows are
 * still copied. */
static sf_status kv_append_rows(sf_ctx *ctx, const sf_paged_problem *pr) {
    const sf_kv_append_params *p = pr->a;
    const sf_rope_spec *rs = &pr->rope;
    const sf_tensor *cs = &p->cache_seqlens, *bt = &p->block_table;
    const sf_tensor *k = &p->k, *v = &p->v, *kc = &p->k_cache, *vc = &p->v_cache;
    const sf_tensor *ksc = &p->k_scale, *vsc = &p->v_scale;
    const int64_t Ln = pr->lq, Hkv = pr->nheads_kv, ps = pr->page_size, d = pr->headdim;
    const int64_t half = rs->p ? rs->R / 2 : 0, ntok = pr->batch * Ln;
    const size_t es = sf_dtype_size(k->dtype), rb = (size_t)d * es;
    const int nt = sf_cpu_threads(ctx);
    const int64_t HP = sf_cpu_rup(half, 16), per = 2 * HP + sf_cpu_rup(d, 16); /* floats */
    const size_t bytes = (size_t)HP * sizeof(double) + (size_t)nt * (size_t)per * sizeof(float) + 128;
    void *ws = sf_ws_get(ctx, bytes);
    if (!ws) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */
    double *freq = (double *)(void *)sf_cpu_align64(ws);
    float *bufs = (float *)(freq + HP);
    if (rs->p && !rs->has_tab)
        for (int64_t i = 0; i < half; i++) freq[i] = sf_rope_freq(rs->p, rs->R, i);
    char *vcd = (char *)vc->data;
    const char *vd = (const char *)v->data;
    const int fp8 = pr->fp8, per_head = pr->scale_per_head;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (ntok * Hkv > 16)
#endif
    for (int64_t t = 0; t < ntok; t++) {
        float *c = bufs + (size_t)sf_cpu_tid() * (size_t)per, *sn = c + HP, *row = sn + HP;
        const int64_t b = t / Ln, j = t % Ln;
        const int64_t pos = sf_ldi(cs->data, cs->dtype, b * cs->stride[0]) + j;
        const int64_t page = sf_ldi(bt->data, bt->dtype, sf_off2(bt, b, pos / ps)), r = pos % ps;
        if (rs->p) sf_cpu_rope_cs(rs, rs->has_tab ? NULL : freq, pos, c, sn);
        for (int64_t h = 0; h < Hkv; h++) {
            sf_cpu_row_in(k->data, k->dtype, sf_off4(k, b, j, h, 0), d, row);
            if (rs->p) sf_cpu_rope_row(rs, row, c, sn);
            if (!fp8) {
                sf_cpu_row_out(kc->data, kc->dtype, sf_off4(kc, page, r, h, 0), d, row);
                memcpy(vcd + (size_t)sf_off4(vc, page, r, h, 0) * es,
                       vd + (size_t)sf_off4(v, b, j, h, 0) * es, rb);
                continue;
            }
            const float ks = per_head ? ((const float *)ksc->data)[h * ksc->stride[0]] : 0.0f;
            const float vs = per_head ? ((const float *)vsc->data)[h * vsc->stride[0]] : 0.0f;
            quant_row(row, d, (uint8_t *)kc->data + sf_off4(kc, page, r, h, 0), ks,
                      per_head ? NULL : (float *)ksc->data + sf_off3(ksc, page, r, h));
            sf_cpu_row_in(v->data, v->dtype, sf_off4(v, b, j, h, 0), d, row);
            quant_row(row, d, (uint8_t *)vc->data + sf_off4(vc, page, r, h, 0), vs,
                      per_head ? NULL : (float *)vsc->data + sf_off3(vsc, page, r, h));
        }
    }
    return SF_OK;
}

/* One task's scratch, carved from a per-thread slab of the workspace. */
typedef struct slab {
    float *Q, *O, *S, *K, *V, *m, *l;
    int64_t *lo, *hi;
} slab;

static void carve(float *base, int64_t rows, int64_t d, slab *w) {
    const int64_t dp = sf_cpu_rup(d, 16);
    w->Q = base;
    w->O = w->Q + rows * dp;
    w->S = w->O + rows * dp;
    w->K = w->S + rows * BC;
    w->V = w->K + BC * dp;
    w->m = w->V + BC * dp;
    w->l = w->m + sf_cpu_rup(rows, 16);
    w->lo = (int64_t *)(void *)(w->l + sf_cpu_rup(rows, 16));
    w->hi = w->lo + rows;
}

static size_t slab_floats(int64_t rows, int64_t d) {
    const int64_t dp = sf_cpu_rup(d, 16);
    /* Q, O, S, K, V, m, l, then lo and hi as int64 (2 floats each) */
    return (size_t)(2 * rows * dp + rows * BC + 2 * BC * dp + 2 * sf_cpu_rup(rows, 16) + 4 * rows + 16);
}

/* sum_c a[c] b[c] in 16 independent f32 lanes (the compiler vectorises
 * them; one serial chain of d dependent adds made the scores of a long
 * cache the slowest part of a decode step), tail on lane 0, then a tree. */
static float dot_lanes(const float *a, const float *b, int64_t d) {
    float acc[16] = {0};
    int64_t c = 0;
    for (; c + 16 <= d; c += 16)
        for (int u = 0; u < 16; u++) acc[u] += a[c + u] * b[c + u];
    for (; c < d; c++) acc[0] += a[c] * b[c];
    for (int w = 8; w >= 1; w /= 2)
        for (int u = 0; u < w; u++) acc[u] += acc[u + w];
    return acc[0];
}

/* Task body: sequence b, kv head g, query tokens [t0, t1). */
static void paged_task(const sf_paged_problem *pr, const sf_attn_problem *ap, int64_t b,
                       int64_t g, int64_t t0, int64_t t1, const slab *w) {
    const sf_attn_paged_params *p = pr->p;
    const sf_tensor *q = &p->q, *kc = &p->k_cache, *vc = &p->v_cache, *o = &p->out;
    const sf_tensor *bt = &p->block_table, *sl = &p->seqlens;
    const int64_t d = pr->headdim, dp = sf_cpu_rup(d, 16), lq = pr->lq, ps = pr->page_size;
    const int64_t group = pr->nheads / pr->nheads_kv;
    const int64_t rows = (t1 - t0) * group;
    const int64_t lk = sf_ldi(sl->data, sl->dtype, b * sl->stride[0]);
    const size_t es = sf_dtype_size(q->dtype);
    const float scale = pr->scale, cap = pr->softcap;

    /* rows r = (token t0 + r / group, head g * group + r % group) */
    int64_t ulo = lk, uhi = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = t0 + r / group, h = g * group + r % group;
        row_to_f32(w->Q + r * dp, (const char *)q->data + (size_t)sf_off4(q, b, i, h, 0) * es,
                   q->dtype, d);
        for (int64_t c = 0; c < d; c++) w->Q[r * dp + c] *= scale;
        for (int64_t c = 0; c < d; c++) w->O[r * dp + c] = 0.0f;
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
        sf_attn_key_range(ap, i, lq, lk, &w->lo[r], &w->hi[r]);
        if (w->lo[r] < w->hi[r]) {
            if (w->lo[r] < ulo) ulo = w->lo[r];
            if (w->hi[r] > uhi) uhi = w->hi[r];
        }
    }

    for (int64_t j0 = ulo; j0 < uhi; j0 += BC) {
        const int64_t nb = uhi - j0 < BC ? uhi - j0 : BC;
        /* gather the block's keys and values through the block table */
        for (int64_t jj = 0; jj < nb; jj++) {
            const int64_t pos = j0 + jj;
            const int64_t page = sf_ldi(bt->data, bt->dtype, sf_off2(bt, b, pos / ps));
            if (pr->fp8) {
                const float ks = sf_paged_scale(pr, &p->k_scale, page, pos % ps, g);
                const float vs = sf_paged_scale(pr, &p->v_scale, page, pos % ps, g);
                row_to_f32s(w->K + jj * dp, (const uint8_t *)kc->data + sf_off4(kc, page, pos % ps, g, 0),
                            d, ks);
                row_to_f32s(w->V + jj * dp, (const uint8_t *)vc->data + sf_off4(vc, page, pos % ps, g, 0),
                            d, vs);
                continue;
            }
            row_to_f32(w->K + jj * dp,
                       (const char *)kc->data + (size_t)sf_off4(kc, page, pos % ps, g, 0) * es,
                       kc->dtype, d);
            row_to_f32(w->V + jj * dp,
                       (const char *)vc->data + (size_t)sf_off4(vc, page, pos % ps, g, 0) * es,
                       vc->dtype, d);
        }
        for (int64_t r = 0; r < rows; r++) {
            const int64_t a = w->lo[r] > j0 ? w->lo[r] - j0 : 0;
            const int64_t e = w->hi[r] < j0 + nb ? w->hi[r] - j0 : nb;
            if (a >= e) continue;
            const float *qr = w->Q + r * dp;
            float *s = w->S + r * BC;
            float mx = w->m[r];
            /* ALiBi: the row's slope, and its key position less j0 */
            const int64_t h = g * group + r % group;
            const float slope = pr->alibi ? pr->alibi[b * pr->alibi_sb + h * pr->alibi_sh] : 0.0f;
            const int64_t rel = t0 + r / group + lk - lq - j0;
            for (int64_t jj = a; jj < e; jj++) {
                const float *kr = w->K + jj * dp;
                float dot = dot_lanes(qr, kr, d);
                if (cap > 0.0f) dot = cap * tanhf(dot / cap);
                if (pr->alibi) dot -= slope * (float)(rel > jj ? rel - jj : jj - rel);
                s[jj] = dot;
                mx = (dot > mx || isnan(dot)) ? dot : mx;
            }
            /* online softmax: rescale what was accumulated to the new max */
            const float alpha = w->m[r] == -INFINITY ? 0.0f : expf(w->m[r] - mx);
            float *orow = w->O + r * dp;
            float lsum = w->l[r] * alpha;
            for (int64_t c = 0; c < d; c++) orow[c] *= alpha;
            for (int64_t jj = a; jj < e; jj++) {
                const float pj = expf(s[jj] - mx);
                const float *vr = w->V + jj * dp;
                lsum += pj;
                for (int64_t c = 0; c < d; c++) orow[c] += pj * vr[c];
            }
            w->m[r] = mx;
            w->l[r] = lsum;
        }
    }

    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = t0 + r / group, h = g * group + r % group;
        const int empty = w->lo[r] >= w->hi[r];
        const float inv = empty ? 0.0f : 1.0f / w->l[r];
        const int64_t oo = sf_off4(o, b, i, h, 0);
        for (int64_t c = 0; c < d; c++) sf_stf(o->data, o->dtype, oo + c, w->O[r * dp + c] * inv);
        if (pr->has_lse)
            ((float *)p->lse.data)[sf_off3(&p->lse, b, h, i)] =
                empty ? -INFINITY : w->m[r] + logf(w->l[r]);
    }
}

sf_status sf_cpu_attn_paged(sf_ctx *ctx, const sf_paged_problem *pr) {
    const int64_t group = pr->nheads / pr->nheads_kv;
    const int64_t qt = group >= ROWS_MAX ? 1 : ROWS_MAX / group; /* tokens per task */
    const int64_t tq = qt < pr->lq ? qt : pr->lq;
    const int64_t ntiles = (pr->lq + tq - 1) / tq;
    const int64_t rows = tq * group;
    const int nth = sf_cpu_threads(ctx);
    const size_t per = slab_floats(rows, pr->headdim) + 16; /* + 64-byte alignment */
    if (per > SIZE_MAX / sizeof(float) / (size_t)nth)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_attn_paged: CPU workspace too large");
    float *ws = (float *)sf_ws_get(ctx, per * (size_t)nth * sizeof(float));
    if (!ws) return SF_ERR_OUT_OF_MEMORY;

    sf_attn_problem ap;
    memset(&ap, 0, sizeof ap);
    ap.wl = pr->wl;
    ap.wr = pr->wr;
    ap.softcap = pr->softcap;

    const int64_t ntask = pr->batch * pr->nheads_kv * ntiles;
#ifdef _OPENMP
#pragma omp parallel num_threads(nth) if (ntask > 1)
#endif
    {
        slab w;
        carve(sf_cpu_align64(ws + per * (size_t)sf_cpu_tid()), rows, pr->headdim, &w);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t t = 0; t < ntask; t++) {
            /* latest query tiles first: under a causal mask they see the most keys */
            const int64_t tile = ntiles - 1 - t % ntiles, bg = t / ntiles;
            const int64_t b = bg / pr->nheads_kv, g = bg % pr->nheads_kv;
            const int64_t t0 = tile * tq, t1 = t0 + tq < pr->lq ? t0 + tq : pr->lq;
            paged_task(pr, &ap, b, g, t0, t1, &w);
        }
    }
    return SF_OK;
}
