/* qweight_cpu.c - the host conversions of quantised weights (seqfuse.h):
 * round-to-nearest quantisation, dequantisation, and the repacking of GGUF
 * Q4_0 / Q4_1 / Q8_0 blocks into the sf_qweight layout.  Rows are shared out
 * over the OpenMP threads.
 *
 * GGUF block layouts, from ggml's definitions (ggml/src/ggml-common.h:
 * block_q4_0 {ggml_half d; uint8_t qs[QK4_0 / 2];}, block_q4_1 {ggml_half d,
 * m; uint8_t qs[QK4_1 / 2];}, block_q8_0 {ggml_half d; int8_t qs[QK8_0];},
 * QK = 32) and its reference dequantisers (dequantize_row_q4_0 and friends):
 * element j < 16 of a 4-bit block is the low nibble of qs[j], element j + 16
 * the high nibble of qs[j]; Q4_0: w = d * (u - 8); Q4_1: w = d * u + m;
 * Q8_0: w = d * q.  The sf_qweight layout pairs neighbours instead (byte i:
 * elements 2i, 2i + 1), so the nibbles are regrouped; the scales are the
 * blocks' f16 values, copied or widened to f32, and the code offsets are the
 * same (Q4_0's 8 is SF_QW_INT4's symmetric offset): bit-exact.
 */
#include "cpu_common.h"
#include "gemm_wq.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* double -> f32 rounded to odd: a later round to nearest even to f16 or
 * bf16 (fewer significand bits) then equals one rounding of the double. */
static float f32_odd(double v) {
    float f = (float)v;
    if ((double)f == v || !isfinite(f)) return f;
    uint32_t b;
    memcpy(&b, &f, 4);
    if (fabs((double)f) > fabs(v)) b -= 1; /* toward zero first */
    b |= 1u;
    memcpy(&f, &b, 4);
    return f;
}

/* v rounded once (to nearest even) to dtype dt, as float. */
static float round_dt(sf_dtype dt, double v) {
    switch (dt) {
    case SF_F16: return sf_f16_to_f32(sf_f32_to_f16(f32_odd(v)));
    case SF_BF16: return sf_bf16_to_f32(sf_f32_to_bf16(f32_odd(v)));
    default: return (float)v;
    }
}

/* v rounded to dtype dt toward +inf (dir > 0) or -inf (dir < 0): the
 * nearest value first, then one step outward when that fell short. */
static float round_dt_dir(sf_dtype dt, double v, int dir) {
    float r = round_dt(dt, v);
    if (!isfinite(r) || (dir > 0 ? (double)r >= v : (double)r <= v)) return r;
    if (dt == SF_F32) return nextafterf(r, dir > 0 ? INFINITY : -INFINITY);
    /* f16 / bf16: one unit in the last place away from r, toward dir */
    uint16_t h = dt == SF_F16 ? sf_f32_to_f16(r) : sf_f32_to_bf16(r);
    if (r == 0.0f)
        h = dir > 0 ? 0x0001 : 0x8001;
    else if ((r > 0.0f) == (dir > 0))
        h = (uint16_t)(h + 1); /* magnitude up */
    else
        h = (uint16_t)(h - 1); /* magnitude down */
    return dt == SF_F16 ? sf_f16_to_f32(h) : sf_bf16_to_f32(h);
}

/* Quantises row n; on a fault returns the group index (>= 0) and what. */
static int64_t quant_row(const sf_tensor *w, const sf_qweight *q, int64_t n, const char **what) {
    const int64_t K = q->k, g = q->group_size, G = K / g;
    const int has_min = q->mins.data != NULL, int4 = q->format == SF_QW_INT4;
    const sf_dtype sdt = q->scales.dtype;
    uint8_t *d = (uint8_t *)q->data.data + n * sf_wq_row_bytes(int4, K);
    const int L = int4 ? 15 : 255;
    for (int64_t j = 0; j < G; j++) {
        double lo = INFINITY, hi = -INFINITY, amax = 0.0;
        for (int64_t i = 0; i < g; i++) {
            const double v = sf_ldf(w->data, w->dtype, n * w->stride[0] + j * g + i);
            if (!isfinite(v)) {
                *what = "a weight that is not finite";
                return j;
            }
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            amax = fabs(v) > amax ? fabs(v) : amax;
        }
        double s, m = 0.0;
        /* s rounded up and m down: every value lies in [m, m + L s] (or
         * within +-7 s, +-127 s), so no code is clamped and each dequantised
         * value is within s / 2 of its weight */
        if (has_min) {
            m = round_dt_dir(sdt, lo, -1);
            if (!isfinite(m)) {
                *what = "a min past the range of the scales' dtype";
                return j;
            }
            s = round_dt_dir(sdt, (hi - m) / (double)L, 1);
        } else {
            s = round_dt_dir(sdt, amax / (int4 ? 7.0 : 127.0), 1);
        }
        if (!isfinite(s)) {
            *what = "a scale past the range of the scales' dtype";
            return j;
        }
        sf_stf(q->scales.data, sdt, j * q->n + n, (float)s);
        if (has_min) sf_stf(q->mins.data, sdt, j * q->n + n, (float)m);
        for (int64_t i = 0; i < g; i++) {
            const double v = sf_ldf(w->data, w->dtype, n * w->stride[0] + j * g + i);
            int c;
            if (has_min) {
                double r = s > 0.0 ? nearbyint((v - m) / s) : 0.0;
                c = (int)(r < 0.0 ? 0.0 : r > L ? L : r);
            } else {
                const double lim = int4 ? 7.0 : 127.0, neg = int4 ? -8.0 : -127.0;
                double r = s > 0.0 ? nearbyint(v / s) : 0.0;
                c = (int)(r < neg ? neg : r > lim ? lim : r);
                if (int4) c += 8;
            }
            const int64_t k = j * g + i;
            if (int4) {
                uint8_t *b = d + k / 2;
                *b = (k & 1) ? (uint8_t)((*b & 15) | (c << 4)) : (uint8_t)c;
            } else {
                d[k] = (uint8_t)(has_min ? c : (int)(uint8_t)(int8_t)c);
            }
        }
    }
    return -1;
}

sf_status sf_cpu_quantize_weights(sf_ctx *ctx, const sf_tensor *w, const sf_qweight *q) {
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    int64_t bad_n = -1, bad_j = -1;
    const char *bad_what = "";
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t n = 0; n < q->n; n++) {
        const char *what = "";
        const int64_t j = quant_row(w, q, n, &what);
        if (j >= 0) {
#ifdef _OPENMP
#pragma omp critical(sf_quant_fault)
#endif
            if (bad_n < 0 || n < bad_n) bad_n = n, bad_j = j, bad_what = what;
        }
    }
    if (bad_n >= 0)
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "sf_quantize_weights: row %lld, group %lld (columns %lld..%lld) has %s",
                       (long long)bad_n, (long long)bad_j, (long long)(bad_j * q->group_size),
                       (long long)((bad_j + 1) * q->group_size - 1), bad_what);
    return SF_OK;
}

sf_status sf_cpu_dequantize_weights(sf_ctx *ctx, const sf_qweight *q, const sf_tensor *w) {
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    const int64_t K = q->k, g = q->group_size;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t n = 0; n < q->n; n++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t j = k / g;
            const double v = (double)sf_wq_scale(q, j, n) * (double)sf_wq_value(q, n, k) +
                             (double)sf_wq_min(q, j, n);
            const int64_t off = n * w->stride[0] + k;
            if (w->dtype == SF_F32)
                ((float *)w->data)[off] = (float)v;
            else
                sf_stf(w->data, w->dtype, off, f32_odd(v));
        }
    return SF_OK;
}

/* Row-layout codes into SF_QW_TILED (seqfuse.h): each element's code moved
 * to its slot, rows and row bytes past the codes zero. */
sf_status sf_cpu_tile_qweight(sf_ctx *ctx, const sf_qweight *q, const sf_tensor *tiled) {
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    const int int4 = q->format == SF_QW_INT4;
    const int64_t N = q->n, K = q->k, rb = sf_wq_row_bytes(int4, K);
    const int64_t np = sf_wq_tiled_rows(N), bp = sf_wq_tiled_row_bytes(int4, K);
    const uint8_t *src = (const uint8_t *)q->data.data;
    uint8_t *dst = (uint8_t *)tiled->data;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t n = 0; n < np; n++) {
        const uint8_t *r = n < N ? src + n * rb : NULL; /* padding rows: no codes */
        for (int64_t u = 0; u < bp; u += int4 ? 4 : 8) { /* a unit of 8 elements */
            uint8_t out[8] = {0};
            if (r && u < rb)
                for (int e = 0; e < 8; e++) {
                    const int slot = sf_wq_tiled_slot(e);
                    if (int4) {
                        const int c = (r[u + e / 2] >> (4 * (e & 1))) & 15;
                        out[slot / 2] |= (uint8_t)(c << (4 * (slot & 1)));
                    } else {
                        out[slot] = r[u + e];
                    }
                }
            for (int i = 0; i < (int4 ? 4 : 8); i++) dst[sf_wq_tiled_off(n, u + i, bp)] = out[i];
        }
    }
    return SF_OK;
}

/* A GGUF f16 (little-endian bytes) into a scales / mins tensor (f16 bits
 * copied, or the exact f32 value). */
static void put_half(const sf_tensor *t, int64_t off, const uint8_t *src) {
    const uint16_t h = (uint16_t)(src[0] | (src[1] << 8));
    if (t->dtype == SF_F16)
        ((uint16_t *)t->data)[off] = h;
    else
        ((float *)t->data)[off] = sf_f16_to_f32(h);
}

sf_status sf_cpu_repack_gguf(sf_ctx *ctx, sf_gguf_type type, const uint8_t *blocks,
                             const sf_qweight *q) {
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    const int bs = type == SF_GGUF_Q4_0 ? 18 : type == SF_GGUF_Q4_1 ? 20 : 34;
    const int64_t nb = q->k / 32, N = q->n;
    const int int4 = type != SF_GGUF_Q8_0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t n = 0; n < N; n++) {
        uint8_t *d = (uint8_t *)q->data.data + n * sf_wq_row_bytes(int4, q->k);
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = blocks + (n * nb + b) * bs;
            put_half(&q->scales, b * N + n, blk);
            if (type == SF_GGUF_Q8_0) {
                memcpy(d + b * 32, blk + 2, 32);
                continue;
            }
            if (type == SF_GGUF_Q4_1) put_half(&q->mins, b * N + n, blk + 2);
            const uint8_t *qs = blk + (type == SF_GGUF_Q4_1 ? 4 : 2);
            /* GGUF element e: qs[e] low nibble (e < 16), qs[e - 16] high nibble */
            uint8_t u[32];
            for (int e = 0; e < 16; e++) {
                u[e] = qs[e] & 15;
                u[e + 16] = qs[e] >> 4;
            }
            for (int i = 0; i < 16; i++) d[b * 16 + i] = (uint8_t)(u[2 * i] | (u[2 * i + 1] << 4));
        }
    }
    return SF_OK;
}
