/* layer_cpu.c - CPU backend of the layer ops: causal depthwise conv1d
 * (prefill and decode update) and gated RMSNorm.
 *
 * All three are memory-bound (a few flops per byte), so the CPU versions
 * aim at one pass over the inputs with unit-stride inner loops the
 * compiler vectorises:
 *  - conv1d prefill works on (64 tokens x 256 channels) tiles of the
 *    channels-last input.  A tile plus its W-1 halo rows is converted to
 *    f32 once (halo rows come from x, from initial_state, or are zero at a
 *    sequence start), then each output row is W fused multiply-adds per
 *    channel across contiguous channels.  Tiles are independent, so they
 *    are spread over the OpenMP threads; a sequence boundary (cu_seqlens)
 *    always starts a new tile, so no window crosses it.
 *  - conv1d update: per (sequence, channel block), the W-1 state values,
 *    the new input, one dot product, the state shifted in place.
 *  - gated RMSNorm: one row per thread at a time; the row (and the gate)
 *    converted to f32 once, the sum of squares in 8 independent f32 lanes
 *    (vectorised, and 8 partial sums keep the rounding of a 5120-long sum
 *    near 1e-7 relative), then one scaling pass.
 */
#include "cpu_common.h"
#include "ssd_cpu.h" /* branch-free exp, ISA clones */
#include "layer_ops.h"

#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define LC_PAD 16      /* floats: rows padded to 64 bytes              */
#define CONV_TT 64     /* tokens per conv tile                          */
#define CONV_CB 256    /* channels per conv tile (f32 working set ~70 KB) */
#define UPD_CB 512     /* channels per conv update item                 */


#define row_in sf_cpu_row_in
#define row_out sf_cpu_row_out

/* ------------------------------------------------------------------ */
/* conv1d prefill                                                       */
/* ------------------------------------------------------------------ */

/* One output row: o[c] = bias[c] + sum_k wT[k][c] * xt[k][c], W fixed per
 * loop so each is a straight vectorisable stream. */
SSD_CLONES static void conv_row(int W, const float *xt, int64_t ld, const float *wT, int64_t ldw,
                                const float *bias, int64_t n, int silu, float *o) {
    switch (W) {
    case 2:
        for (int64_t c = 0; c < n; c++) o[c] = bias[c] + wT[c] * xt[c] + wT[ldw + c] * xt[ld + c];
        break;
    case 3:
        for (int64_t c = 0; c < n; c++)
            o[c] = bias[c] + wT[c] * xt[c] + wT[ldw + c] * xt[ld + c] +
                   wT[2 * ldw + c] * xt[2 * ld + c];
        break;
    default:
        for (int64_t c = 0; c < n; c++)
            o[c] = bias[c] + wT[c] * xt[c] + wT[ldw + c] * xt[ld + c] +
                   wT[2 * ldw + c] * xt[2 * ld + c] + wT[3 * ldw + c] * xt[3 * ld + c];
        break;
    }
    if (silu) silu_inplace(o, n);
}

sf_status sf_cpu_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_problem *pr) {
    const sf_conv1d_params *p = pr->p;
    const int W = pr->width;
    const int64_t dim = pr->dim, nseg = pr->nseg;
    if (nseg == 0 || dim == 0) return SF_OK;
    if (pr->seg == NULL) return sf_fail(ctx, SF_ERR_INTERNAL, "conv1d cpu: no host segment list");
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    const int64_t cb = sf_cpu_min(CONV_CB, sf_cpu_rup(dim, LC_PAD));
    const int64_t ncb = (dim + cb - 1) / cb;
    const int64_t dimP = sf_cpu_rup(dim, LC_PAD);
    /* workspace: transposed weight (W x dim), bias, the tile prefix over
     * segments, and per thread the f32 tile (TT + W - 1 rows) and one
     * output row */
    const size_t per = (size_t)((CONV_TT + 3) * cb + cb);
    const size_t nfl = (size_t)(W + 1) * (size_t)dimP + (size_t)nt * per;
    void *ws = sf_ws_get(ctx, nfl * sizeof(float) + (size_t)(nseg + 1) * sizeof(int64_t) + 128);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    float *wT = sf_cpu_align64(ws);
    float *bias = wT + (size_t)W * dimP;
    float *tiles = bias + dimP;
    int64_t *prefix = (int64_t *)(tiles + (size_t)nt * per);

    const sf_tensor *wt = &p->weight;
    for (int64_t c = 0; c < dim; c++) {
        for (int k = 0; k < W; k++) wT[(int64_t)k * dimP + c] = sf_ldf(wt->data, wt->dtype, sf_off2(wt, c, k));
        bias[c] = pr->has_bias ? sf_ldf(p->bias.data, p->bias.dtype, c * p->bias.stride[0]) : 0.0f;
    }
    prefix[0] = 0;
    for (int64_t s = 0; s < nseg; s++) {
        const int64_t len = pr->seg[s].end - pr->seg[s].start;
        prefix[s + 1] = prefix[s] + (len + CONV_TT - 1) / CONV_TT * ncb;
    }
    const int64_t total = prefix[nseg];
    const sf_tensor *x = &p->x, *out = &p->out, *in = &p->initial_state;

#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t it = 0; it < total; it++) {
        float *xt = tiles + (size_t)sf_cpu_tid() * per;
        float *orow = xt + (CONV_TT + 3) * cb;
        /* the segment holding item `it`: last s with prefix[s] <= it */
        int64_t lo = 0, hi = nseg - 1;
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) / 2;
            if (prefix[mid] <= it) lo = mid; else hi = mid - 1;
        }
        const sf_conv1d_segment *sg = &pr->seg[lo];
        const int64_t local = it - prefix[lo];
        const int64_t r0 = (local / ncb) * CONV_TT, c0 = (local % ncb) * cb;
        const int64_t r1 = sf_cpu_min(r0 + CONV_TT, sg->end - sg->start);
        const int64_t nc = sf_cpu_min(cb, dim - c0);
        /* rows j of the tile are extended positions r0 - (W-1) + j */
        for (int64_t j = 0; j < r1 - r0 + W - 1; j++) {
            const int64_t r = r0 - (W - 1) + j;
            float *row = xt + j * cb;
            if (r >= 0) {
                row_in(x->data, x->dtype, sf_off3(x, sg->b, sg->start + r, c0), nc, row);
            } else if (pr->has_init) {
                for (int64_t c = 0; c < nc; c++)
                    row[c] = sf_ldf(in->data, in->dtype, sf_off3(in, sg->state, c0 + c, W - 1 + r));
            } else {
                memset(row, 0, (size_t)nc * sizeof(float));
            }
        }
        for (int64_t j = 0; j < r1 - r0; j++) {
            conv_row(W, xt + j * cb, cb, wT + c0, dimP, bias + c0, nc, pr->silu, orow);
            row_out(out->data, out->dtype, sf_off3(out, sg->b, sg->start + r0 + j, c0), nc, orow);
        }
    }

    if (pr->has_final) {
        const sf_tensor *fin = &p->final_state;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int64_t u = 0; u < nseg * dim; u++) {
            const sf_conv1d_segment *sg = &pr->seg[u / dim];
            const int64_t c = u % dim, len = sg->end - sg->start;
            for (int64_t k = 0; k < W - 1; k++) {
                const int64_t r = len - (W - 1) + k;
                float v = r >= 0 ? sf_ldf(x->data, x->dtype, sf_off3(x, sg->b, sg->start + r, c))
                          : pr->has_init
                              ? sf_ldf(in->data, in->dtype, sf_off3(in, sg->state, c, W - 1 + r))
                              : 0.0f;
                sf_stf(fin->data, fin->dtype, sf_off3(fin, sg->state, c, k), v);
            }
        }
    }
    return SF_OK;
}

/* ------------------------------------------------------------------ */
/* conv1d decode update                                                 */
/* ------------------------------------------------------------------ */

sf_status sf_cpu_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_problem *pr) {
    const sf_conv1d_update_params *p = pr->p;
    const int W = pr->width;
    const int64_t dim = pr->dim;
    if (pr->batch == 0 || dim == 0) return SF_OK;
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    const int64_t nblk = (dim + UPD_CB - 1) / UPD_CB;
    const sf_tensor *st = &p->conv_state, *x = &p->x, *out = &p->out, *wt = &p->weight;
    /* per thread: a block of x and of the output in f32, so the SiLU and
     * the conversions run as vector loops (one expf per channel made this
     * op ~6 ms for 64 x 5376 on 2 cores) */
    float *bufs = (float *)sf_ws_get(ctx, (size_t)nt * 2 * UPD_CB * sizeof(float) + 64);
    if (!bufs) return SF_ERR_OUT_OF_MEMORY;
    bufs = sf_cpu_align64(bufs);
    const int x_unit = x->stride[1] == 1, out_unit = out->stride[1] == 1;

#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t u = 0; u < pr->batch * nblk; u++) {
        const int64_t i = u / nblk, c0 = (u % nblk) * UPD_CB, c1 = sf_cpu_min(c0 + UPD_CB, dim);
        const int64_t n = c1 - c0;
        float *xb = bufs + (size_t)sf_cpu_tid() * 2 * UPD_CB, *ob = xb + UPD_CB;
        int64_t s = i;
        if (pr->has_idx) s = sf_ldi(p->state_idx.data, p->state_idx.dtype, i * p->state_idx.stride[0]);
        if (s < 0 || s >= pr->nslots) { /* padding: state untouched, output zero */
            memset(ob, 0, (size_t)n * sizeof(float));
        } else {
            if (x_unit)
                row_in(x->data, x->dtype, sf_off2(x, i, c0), n, xb);
            else
                for (int64_t c = 0; c < n; c++) xb[c] = sf_ldf(x->data, x->dtype, sf_off2(x, i, c0 + c));
            for (int64_t c = 0; c < n; c++) {
                float win[4];
                float *sp = (float *)st->data + s * st->stride[0] + (c0 + c) * st->stride[1];
                for (int k = 0; k < W - 1; k++) win[k] = sp[k * st->stride[2]];
                win[W - 1] = xb[c];
                float acc = pr->has_bias ? sf_ldf(p->bias.data, p->bias.dtype, (c0 + c) * p->bias.stride[0])
                                         : 0.0f;
                const float *wc = (const float *)wt->data + (c0 + c) * wt->stride[0];
                for (int k = 0; k < W; k++) acc += win[k] * wc[k * wt->stride[1]];
                ob[c] = acc;
                for (int k = 0; k < W - 1; k++) sp[k * st->stride[2]] = win[k + 1];
            }
            if (pr->silu) silu_inplace(ob, n);
        }
        if (out_unit)
            row_out(out->data, out->dtype, sf_off2(out, i, c0), n, ob);
        else
            for (int64_t c = 0; c < n; c++) sf_stf(out->data, out->dtype, sf_off2(out, i, c0 + c), ob[c]);
    }
    return SF_OK;
}

/* ------------------------------------------------------------------ */
/* gated RMSNorm                                                        */
/* ------------------------------------------------------------------ */

/* Sum of squares in 8 independent lanes: vectorises without -ffast-math
 * and keeps the rounding of long sums small. */
static float sumsq(const float *h, int64_t n) {
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) a[u] += h[j + u] * h[j + u];
    for (; j < n; j++) a[0] += h[j] * h[j];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

sf_status sf_cpu_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_problem *pr) {
    const sf_rmsnorm_gated_params *p = pr->p;
    const int64_t D = pr->dim, G = pr->group, rows = pr->rows;
    if (rows == 0) return SF_OK;
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    const int64_t DP = sf_cpu_rup(D, LC_PAD);
    /* workspace: the weight in f32, and per thread a row of h and of silu(z) */
    void *ws = sf_ws_get(ctx, ((size_t)DP + (size_t)nt * 2 * (size_t)DP) * sizeof(float) + 64);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    float *w = sf_cpu_align64(ws);
    float *bufs = w + DP;
    for (int64_t c = 0; c < D; c++) w[c] = sf_ldf(p->weight.data, p->weight.dtype, c * p->weight.stride[0]);
    const sf_tensor *x = &p->x, *z = &p->z, *out = &p->out;
    const int gate_first = pr->has_z && !pr->norm_before_gate;
    const int gate_after = pr->has_z && pr->norm_before_gate;
    const float eps = pr->eps, invG = 1.0f / (float)G;

#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t r = 0; r < rows; r++) {
        float *h = bufs + (size_t)sf_cpu_tid() * 2 * (size_t)DP;
        float *gz = h + DP;
        row_in(x->data, x->dtype, sf_off2(x, r, 0), D, h);
        if (pr->has_z) {
            row_in(z->data, z->dtype, sf_off2(z, r, 0), D, gz);
            silu_inplace(gz, D);
        }
        if (gate_first)
            for (int64_t c = 0; c < D; c++) h[c] *= gz[c];
        for (int64_t g0 = 0; g0 < D; g0 += G) {
            const float rs = 1.0f / sqrtf(sumsq(h + g0, G) * invG + eps);
            if (gate_after)
                for (int64_t c = g0; c < g0 + G; c++) h[c] = h[c] * rs * w[c] * gz[c];
            else
                for (int64_t c = g0; c < g0 + G; c++) h[c] = h[c] * rs * w[c];
        }
        row_out(out->data, out->dtype, sf_off2(out, r, 0), D, h);
    }
    return SF_OK;
}
