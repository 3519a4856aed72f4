/* fused_cpu.c - CPU backend of the fused layer ops: residual add +
 * RMSNorm / LayerNorm, SwiGLU, RoPE.
 *
 * All three are memory-bound (a few flops per byte): one pass over the
 * inputs, rows (tokens) spread over the OpenMP threads, each row converted
 * to f32 once into a per-thread buffer of the context's workspace, the
 * arithmetic in unit-stride loops the compiler vectorises, one conversion
 * back.
 *  - norms: h = x + residual in f32, written out (residual_out) before the
 *    statistics; the sums in 8 independent f32 lanes (vectorised, and the
 *    rounding of a 8192-long sum stays near 1e-7 relative); LayerNorm takes
 *    the mean first and then the squares of h - mean (two passes over the
 *    f32 row, no cancellation of E[h^2] - mean^2).
 *  - SwiGLU: silu with the branch-free exp of ssd_cpu.h (libm's expf
 *    would dominate), interleaved pairs split in the f32 buffer.
 *  - RoPE: per token the R/2 cos and sin, from the tables or in double from
 *    pos * f_i (f_i once per call), then every head of q and k rotated in
 *    f32.
 */
#include "cpu_common.h"
#include "fused_ops.h"
#include "ssd_cpu.h" /* branch-free exp (silu_inplace), ISA clones */

#include <math.h>
#include <stdint.h>
#include <string.h>

#define FC_PAD 16 /* floats: per-thread rows padded to 64 bytes */

static float sum8(const float *h, int64_t n) {
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) a[u] += h[j + u];
    for (; j < n; j++) a[0] += h[j];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* sum of (h - m)^2 in 8 lanes */
static float sumsq8(const float *h, int64_t n, float m) {
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) a[u] += (h[j + u] - m) * (h[j + u] - m);
    for (; j < n; j++) a[0] += (h[j] - m) * (h[j] - m);
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Bytes of nf floats per thread plus `shared` floats, 64-byte aligned,
 * with overflow checks; 0 when it does not fit in size_t. */
static size_t ws_bytes(int64_t shared, int64_t nf, int nt) {
    const uint64_t per = (uint64_t)sf_cpu_rup(nf, FC_PAD), sh = (uint64_t)sf_cpu_rup(shared, FC_PAD);
    if (per > (SIZE_MAX / 8) / (uint64_t)nt) return 0;
    const uint64_t tot = sh + per * (uint64_t)nt;
    if (tot > (SIZE_MAX - 128) / sizeof(double)) return 0;
    return (size_t)(tot * sizeof(double) + 128); /* doubles: room for the RoPE frequencies */
}

sf_status sf_cpu_add_norm(sf_ctx *ctx, const sf_norm_problem *pr) {
    const sf_norm_params *p = pr->p;
    const int64_t D = pr->dim, rows = pr->rows, DP = sf_cpu_rup(D, FC_PAD);
    if (rows == 0) return SF_OK;
    const int nt = sf_cpu_threads(ctx);
    /* workspace: weight and bias in f32, and per thread h and the residual row */
    const size_t bytes = ws_bytes(2 * DP, 2 * DP, nt);
    void *ws = bytes ? sf_ws_get(ctx, bytes) : NULL;
    if (!ws) /* sf_ws_get has said what it could not allocate */
        return bytes ? SF_ERR_OUT_OF_MEMORY
                     : sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: cannot allocate the workspace for rows of %lld (its size overflows)", pr->op, (long long)D);
    float *w = sf_cpu_align64(ws), *bias = w + DP, *bufs = bias + DP;
    for (int64_t c = 0; c < D; c++) {
        w[c] = sf_ldf(p->weight.data, p->weight.dtype, c * p->weight.stride[0]);
        bias[c] = pr->has_bias ? sf_ldf(p->bias.data, p->bias.dtype, c * p->bias.stride[0]) : 0.0f;
    }
    const sf_tensor *x = &p->x, *res = &p->residual, *ho = &p->residual_out, *out = &p->out;
    const float invD = 1.0f / (float)D, eps = pr->eps;

#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (rows > 1) /* one row: no fork */
#endif
    for (int64_t r = 0; r < rows; r++) {
        float *h = bufs + (size_t)sf_cpu_tid() * 2 * (size_t)DP, *rb = h + DP;
        sf_cpu_row_in(x->data, x->dtype, sf_off2(x, r, 0), D, h);
        if (pr->has_res) {
            sf_cpu_row_in(res->data, res->dtype, sf_off2(res, r, 0), D, rb);
            for (int64_t c = 0; c < D; c++) h[c] += rb[c];
        }
        /* the residual row is read in full before an in-place residual_out */
        if (pr->has_hout) sf_cpu_row_out(ho->data, ho->dtype, sf_off2(ho, r, 0), D, h);
        const float m = pr->layer ? sum8(h, D) * invD : 0.0f;
        const float rs = 1.0f / sqrtf(sumsq8(h, D, m) * invD + eps);
        if (pr->has_bias)
            for (int64_t c = 0; c < D; c++) h[c] = (h[c] - m) * rs * w[c] + bias[c];
        else
            for (int64_t c = 0; c < D; c++) h[c] = (h[c] - m) * rs * w[c];
        sf_cpu_row_out(out->data, out->dtype, sf_off2(out, r, 0), D, h);
    }
    return SF_OK;
}

sf_status sf_cpu_swiglu(sf_ctx *ctx, const sf_swiglu_problem *pr) {
    const sf_swiglu_params *p = pr->p;
    const int64_t n = pr->n, rows = pr->rows, NP = sf_cpu_rup(n, FC_PAD);
    if (rows == 0) return SF_OK;
    const int nt = sf_cpu_threads(ctx);
    /* per thread: the gates (n) and the ups (n) of a row, and for the
     * interleaved layout the raw 2n row they are split from */
    const int64_t per = 2 * NP + (pr->layout == SF_SWIGLU_INTERLEAVED ? 2 * NP : 0);
    const size_t bytes = ws_bytes(0, per, nt);
    void *ws = bytes ? sf_ws_get(ctx, bytes) : NULL;
    if (!ws) /* sf_ws_get has said what it could not allocate */
        return bytes ? SF_ERR_OUT_OF_MEMORY
                     : sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_swiglu: cannot allocate the workspace for rows of %lld (its size overflows)", (long long)n);
    float *bufs = sf_cpu_align64(ws);
    const sf_tensor *g = &p->gate, *u = &p->up, *out = &p->out;

#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (rows > 1) /* one row: no fork */
#endif
    for (int64_t r = 0; r < rows; r++) {
        float *a = bufs + (size_t)sf_cpu_tid() * (size_t)sf_cpu_rup(per, FC_PAD), *b = a + NP;
        if (pr->layout == SF_SWIGLU_SEPARATE) {
            sf_cpu_row_in(g->data, g->dtype, sf_off2(g, r, 0), n, a);
            sf_cpu_row_in(u->data, u->dtype, sf_off2(u, r, 0), n, b);
        } else if (pr->layout == SF_SWIGLU_CONCAT) {
            sf_cpu_row_in(g->data, g->dtype, sf_off2(g, r, 0), n, a);
            sf_cpu_row_in(g->data, g->dtype, sf_off2(g, r, n), n, b);
        } else {
            float *raw = b + NP;
            sf_cpu_row_in(g->data, g->dtype, sf_off2(g, r, 0), 2 * n, raw);
            for (int64_t j = 0; j < n; j++) a[j] = raw[2 * j], b[j] = raw[2 * j + 1];
        }
        silu_inplace(a, n);
        for (int64_t j = 0; j < n; j++) a[j] *= b[j];
        sf_cpu_row_out(out->data, out->dtype, sf_off2(out, r, 0), n, a);
    }
    return SF_OK;
}

void sf_cpu_rope_cs(const sf_rope_spec *s, const double *freq, int64_t pos, float *cs, float *sn) {
    for (int64_t i = 0; i < s->R / 2; i++) {
        double c, n;
        sf_rope_angle(s, freq, pos, i, &c, &n);
        cs[i] = (float)c;
        sn[i] = (float)n;
    }
}

void sf_cpu_rope_row(const sf_rope_spec *s, float *buf, const float *cs, const float *sn) {
    const int64_t half = s->R / 2;
    if (s->gptj) {
        for (int64_t i = 0; i < half; i++) {
            const float x1 = buf[2 * i], x2 = buf[2 * i + 1];
            buf[2 * i] = x1 * cs[i] - x2 * sn[i];
            buf[2 * i + 1] = x2 * cs[i] + x1 * sn[i];
        }
    } else {
        float *lo = buf, *hi = buf + half;
        for (int64_t i = 0; i < half; i++) {
            const float x1 = lo[i], x2 = hi[i];
            lo[i] = x1 * cs[i] - x2 * sn[i];
            hi[i] = x2 * cs[i] + x1 * sn[i];
        }
    }
}

/* Rotates head rows of src (T, nh, d) into dst for token t, with the
 * token's cos and sin (R/2 each); buf holds d floats. */
static void rope_token(const sf_rope_problem *pr, const sf_tensor *src, const sf_tensor *dst,
                       int inplace, int64_t t, const float *cs, const float *sn, float *buf) {
    const int64_t d = pr->d, nh = src->shape[1];
    const int64_t nw = inplace ? pr->R : d; /* in place the pass-through stays as it is */
    for (int64_t h = 0; h < nh; h++) {
        sf_cpu_row_in(src->data, src->dtype, sf_off3(src, t, h, 0), nw, buf);
        sf_cpu_rope_row(&pr->spec, buf, cs, sn);
        sf_cpu_row_out(dst->data, dst->dtype, sf_off3(dst, t, h, 0), nw, buf);
    }
}

sf_status sf_cpu_rope(sf_ctx *ctx, const sf_rope_problem *pr) {
    const sf_rope_params *p = pr->p;
    const int64_t T = pr->T, half = pr->R / 2, d = pr->d;
    if (T == 0) return SF_OK;
    const int nt = sf_cpu_threads(ctx);
    /* workspace: the frequencies (doubles), per thread cos, sin and a head row */
    const int64_t HP = sf_cpu_rup(half, FC_PAD), per = 2 * HP + sf_cpu_rup(d, FC_PAD);
    const size_t bytes = ws_bytes(2 * HP, per, nt);
    void *ws = bytes ? sf_ws_get(ctx, bytes) : NULL;
    if (!ws) /* sf_ws_get has said what it could not allocate */
        return bytes ? SF_ERR_OUT_OF_MEMORY
                     : sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_rope: cannot allocate the workspace for head dim %lld (its size overflows)", (long long)d);
    double *freq = (double *)sf_cpu_align64(ws);
    float *bufs = (float *)(freq + HP);
    if (!pr->has_tab)
        for (int64_t i = 0; i < half; i++) freq[i] = sf_rope_freq(p, pr->R, i);
    const sf_tensor *qd = pr->q_inplace ? &p->q : &p->q_out, *kd = pr->k_inplace ? &p->k : &p->k_out;

#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (T > 1) /* one token: no fork */
#endif
    for (int64_t t = 0; t < T; t++) {
        float *cs = bufs + (size_t)sf_cpu_tid() * (size_t)per, *sn = cs + HP, *buf = sn + HP;
        sf_cpu_rope_cs(&pr->spec, freq, sf_rope_pos(pr, t), cs, sn);
        rope_token(pr, &p->q, qd, pr->q_inplace, t, cs, sn, buf);
        if (pr->has_k) rope_token(pr, &p->k, kd, pr->k_inplace, t, cs, sn, buf);
    }
    return SF_OK;
}
