/* paged_ref.c - reference (test-oracle) paged KV cache ops.
 *
 * Deliberately naive.  Append copies token by token through the block
 * table (with rope, each K row rotated in double, rounded to f32); FP8
 * pools get the row quantised (x / scale, fp8.h's encoder) with its scale.
 * Attention dequantises FP8 keys and values in double (code * scale).  Attention gathers each sequence's keys and values of one kv head
 * through the block table into contiguous double buffers, materialises the
 * Lq x len score matrix of each query head, masks it, soft-maxes it with
 * the max subtracted and multiplies by V: the algorithm of attn_ref.c, on
 * keys fetched one position at a time.  Host tensors, any strides.
 */
#include "fused_ops.h"

#include <math.h>

/* Element (page, row, head, 0) of a pool for cache position pos of
 * sequence b. */
static int64_t cache_off(const sf_paged_problem *pr, const sf_tensor *bt, const sf_tensor *pool,
                         int64_t b, int64_t pos, int64_t h) {
    const int64_t page = sf_ldi(bt->data, bt->dtype, sf_off2(bt, b, pos / pr->page_size));
    return sf_off4(pool, page, pos % pr->page_size, h, 0);
}

/* K row (b, j, h) rotated at position pos (sf_rope's definition, in
 * double) over its f32 copy `row`: the rotated channels from k rounded to
 * f32, the pass-through ones stay as copied. */
static void rope_row(const sf_rope_spec *s, const sf_tensor *k, int64_t b, int64_t j, int64_t h,
                     float *row, int64_t pos) {
    const int64_t half = s->R / 2;
    for (int64_t i = 0; i < half; i++) {
        double cs, sn;
        sf_rope_angle(s, NULL, pos, i, &cs, &sn);
        const int64_t c1 = s->gptj ? 2 * i : i, c2 = s->gptj ? 2 * i + 1 : i + half;
        const double x1 = sf_ldf(k->data, k->dtype, sf_off4(k, b, j, h, c1));
        const double x2 = sf_ldf(k->data, k->dtype, sf_off4(k, b, j, h, c2));
        row[c1] = (float)(x1 * cs - x2 * sn);
        row[c2] = (float)(x2 * cs + x1 * sn);
    }
}

/* Stores the f32 row of d values at element o of pool `pc`: converted to
 * the pool's dtype, or for FP8 pools quantised with scale s (per-head), or
 * with amax / 448 written to *ws (per token and head). */
static void store_row(const sf_paged_problem *pr, const sf_tensor *pc, int64_t o, const float *row,
                      int64_t d, float s, float *ws) {
    if (!pr->fp8) {
        for (int64_t c = 0; c < d; c++) sf_stf(pc->data, pc->dtype, o + c * pc->stride[3], row[c]);
        return;
    }
    if (ws) {
        float amax = 0.0f;
        for (int64_t c = 0; c < d; c++) amax = fmaxf(amax, fabsf(row[c]));
        s = amax / 448.0f;
        *ws = s;
    }
    for (int64_t c = 0; c < d; c++)
        ((uint8_t *)pc->data)[o + c * pc->stride[3]] = s == 0.0f ? 0 : sf_f32_to_e4m3(row[c] / s);
}

sf_status sf_ref_kv_append(sf_ctx *ctx, const sf_paged_problem *pr) {
    const sf_kv_append_params *p = pr->a;
    const sf_tensor *cs = &p->cache_seqlens, *bt = &p->block_table;
    const sf_tensor *ksc = &p->k_scale, *vsc = &p->v_scale;
    const int64_t Hkv = pr->nheads_kv, d = pr->headdim;
    float *kr = (float *)sf_ws_get(ctx, 2 * (size_t)d * sizeof(float));
    if (!kr) return SF_ERR_OUT_OF_MEMORY;
    float *vr = kr + d;
    for (int64_t b = 0; b < pr->batch; b++) {
        const int64_t start = sf_ldi(cs->data, cs->dtype, b * cs->stride[0]);
        for (int64_t j = 0; j < pr->lq; j++)
            for (int64_t h = 0; h < Hkv; h++) {
                const int64_t pos = start + j;
                const int64_t page = sf_ldi(bt->data, bt->dtype, sf_off2(bt, b, pos / pr->page_size));
                const int64_t row = pos % pr->page_size;
                for (int64_t c = 0; c < d; c++) {
                    kr[c] = sf_ldf(p->k.data, p->k.dtype, sf_off4(&p->k, b, j, h, c));
                    vr[c] = sf_ldf(p->v.data, p->v.dtype, sf_off4(&p->v, b, j, h, c));
                }
                if (pr->rope.p) rope_row(&pr->rope, &p->k, b, j, h, kr, pos);
                float ks = 0.0f, vs = 0.0f, *kw = NULL, *vw = NULL;
                if (pr->fp8 && pr->scale_per_head) {
                    ks = ((const float *)ksc->data)[h * ksc->stride[0]];
                    vs = ((const float *)vsc->data)[h * vsc->stride[0]];
                } else if (pr->fp8) {
                    kw = (float *)ksc->data + sf_off3(ksc, page, row, h);
                    vw = (float *)vsc->data + sf_off3(vsc, page, row, h);
                }
                store_row(pr, &p->k_cache, sf_off4(&p->k_cache, page, row, h, 0), kr, d, ks, kw);
                store_row(pr, &p->v_cache, sf_off4(&p->v_cache, page, row, h, 0), vr, d, vs, vw);
            }
    }
    return SF_OK;
}

sf_status sf_ref_attn_paged(sf_ctx *ctx, const sf_paged_problem *pr) {
    const sf_attn_paged_params *p = pr->p;
    const int64_t H = pr->nheads, Hkv = pr->nheads_kv, d = pr->headdim, lq = pr->lq;
    const int64_t group = H / Hkv;
    const sf_tensor *q = &p->q, *kc = &p->k_cache, *vc = &p->v_cache, *o = &p->out;
    const sf_tensor *lse = &p->lse, *bt = &p->block_table, *sl = &p->seqlens;

    /* the masks and the score modifier of sf_attn_fwd, through its problem */
    sf_attn_problem ap;
    memset(&ap, 0, sizeof ap);
    ap.wl = pr->wl;
    ap.wr = pr->wr;
    ap.softcap = pr->softcap;
    ap.alibi = pr->alibi; /* the slope itself is passed per head */

    int64_t mk = 0;
    for (int64_t b = 0; b < pr->batch; b++) {
        const int64_t lk = sf_ldi(sl->data, sl->dtype, b * sl->stride[0]);
        if (lk > mk) mk = lk;
    }
    /* Workspace in doubles: scores (lq * mk), gathered K and V (2 mk d), a
     * query row and its accumulator (2 d). */
    const double want = (double)lq * (double)mk + 2.0 * (double)mk * (double)d + 2.0 * (double)d;
    if (want > (double)(SIZE_MAX / sizeof(double)) / 2.0 || want > (double)(INT64_MAX / 16))
        return sf_fail(ctx, SF_ERR_TOO_LARGE,
                       "paged attention ref: the %lld x %lld score matrix does not fit in memory",
                       (long long)lq, (long long)mk);
    const size_t nd = (size_t)lq * (size_t)mk + 2 * (size_t)mk * (size_t)d + 2 * (size_t)d + 1;
    double *S = (double *)sf_ws_get(ctx, nd * sizeof(double));
    if (!S) return SF_ERR_OUT_OF_MEMORY;
    double *Kd = S + lq * mk, *Vd = Kd + mk * d, *qrow = Vd + mk * d, *acc = qrow + d;
    const double scale = (double)pr->scale;

    for (int64_t b = 0; b < pr->batch; b++) {
        const int64_t lk = sf_ldi(sl->data, sl->dtype, b * sl->stride[0]);
        for (int64_t h = 0; h < H; h++) {
            const int64_t kvh = h / group;
            const double slope = pr->alibi ? (double)pr->alibi[b * pr->alibi_sb + h * pr->alibi_sh] : 0.0;
            if (h % group == 0) /* gather this kv head's keys and values */
                for (int64_t j = 0; j < lk; j++) {
                    const int64_t ko = cache_off(pr, bt, kc, b, j, kvh);
                    const int64_t vo = cache_off(pr, bt, vc, b, j, kvh);
                    /* FP8: code times its scale */
                    double ks = 1.0, vs = 1.0;
                    if (pr->fp8) {
                        const int64_t page = sf_ldi(bt->data, bt->dtype, sf_off2(bt, b, j / pr->page_size));
                        ks = sf_paged_scale(pr, &p->k_scale, page, j % pr->page_size, kvh);
                        vs = sf_paged_scale(pr, &p->v_scale, page, j % pr->page_size, kvh);
                    }
                    for (int64_t c = 0; c < d; c++) {
                        Kd[j * d + c] = (double)sf_ldf(kc->data, kc->dtype, ko + c * kc->stride[3]) * ks;
                        Vd[j * d + c] = (double)sf_ldf(vc->data, vc->dtype, vo + c * vc->stride[3]) * vs;
                    }
                }
            for (int64_t i = 0; i < lq; i++) {
                int64_t lo, hi;
                sf_attn_key_range(&ap, i, lq, lk, &lo, &hi);
                for (int64_t c = 0; c < d; c++)
                    qrow[c] = (double)sf_ldf(q->data, q->dtype, sf_off4(q, b, i, h, c));
                double *srow = S + i * mk;
                double m = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; c++) dot += qrow[c] * Kd[j * d + c];
                    srow[j] = sf_attn_score_mod(&ap, dot * scale, slope, i, j, lq, lk);
                    /* a NaN score makes m NaN so bad inputs stay visible */
                    m = (srow[j] > m || isnan(srow[j])) ? srow[j] : m;
                }
                float lsev;
                if (lo >= hi) { /* no visible key: out 0, lse -inf */
                    for (int64_t c = 0; c < d; c++) sf_stf(o->data, o->dtype, sf_off4(o, b, i, h, c), 0.0f);
                    lsev = -INFINITY;
                } else {
                    double l = 0.0;
                    for (int64_t c = 0; c < d; c++) acc[c] = 0.0;
                    for (int64_t j = lo; j < hi; j++) {
                        const double pj = exp(srow[j] - m);
                        l += pj;
                        for (int64_t c = 0; c < d; c++) acc[c] += pj * Vd[j * d + c];
                    }
                    for (int64_t c = 0; c < d; c++)
                        sf_stf(o->data, o->dtype, sf_off4(o, b, i, h, c), (float)(acc[c] / l));
                    lsev = (float)(m + log(l));
                }
                if (pr->has_lse) sf_stf(lse->data, SF_F32, sf_off3(lse, b, h, i), lsev);
            }
        }
    }
    return SF_OK;
}
