/* cp_cpu.c - CPU backend of the context-parallel pieces: slice log-decay,
 * the entering-state correction, the combine over ranks, the lse merge
 * and the K/V pack of the ring driver.
 *
 * Only the correction does real arithmetic: per token, exp(g_t) times the
 * P x N entering state applied to C_t, i.e. an (L x N) by (N x P) product
 * per head, the size of the carried-state term of the SSD output.  It
 * runs per (row, head, 32-token block) over the threads, with the state
 * copied once to a contiguous f32 block and each C row converted once;
 * the N-long dot products use 8 independent partial sums (vectorised, and
 * a shorter rounding chain).  g_t is a running sum over the whole slice,
 * so it is accumulated in double: an f32 sum over 10^5 tokens would
 * drift by far more than the f32 rounding of the result.  Everything
 * else is memory-bound and done in one pass. */
#include "cp.h"
#include "cpu_common.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define CP_TB 32 /* tokens per correction work item */


/* Running sum of min(dt A, 0) over the slice for (b, h): into g[0..L) when
 * g is given; returns the total. */
static double cp_decay_scan(const sf_cp_ssd_problem *pr, int64_t b, int64_t h, float *g) {
    const sf_ssd_fwd_params *p = pr->p;
    const sf_tensor *dtt = &p->dt;
    const float A = sf_ldf(p->A.data, p->A.dtype, h * p->A.stride[0]);
    const float bias =
        pr->has_dt_bias ? sf_ldf(p->dt_bias.data, p->dt_bias.dtype, h * p->dt_bias.stride[0]) : 0.0f;
    double acc = 0.0;
    for (int64_t t = 0; t < pr->seqlen; t++) {
        const float d = sf_dt_process(sf_ldf(dtt->data, dtt->dtype, sf_off3(dtt, b, t, h)), bias,
                              p->dt_softplus, p->dt_min, p->dt_max);
        const float e = d * A;
        acc += (double)(e < 0.0f ? e : 0.0f);
        if (g) g[t] = (float)acc;
    }
    return acc;
}

sf_status sf_cpu_cp_logdecay(sf_ctx *ctx, const sf_cp_ssd_problem *pr) {
    const int64_t nbh = pr->batch * pr->nheads;
    const sf_tensor *ld = &pr->logdecay;
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t bh = 0; bh < nbh; bh++) {
        const int64_t b = bh / pr->nheads, h = bh % pr->nheads;
        sf_stf(ld->data, SF_F32, sf_off2(ld, b, h), (float)cp_decay_scan(pr, b, h, NULL));
    }
    return SF_OK;
}

static inline float cp_dot(const float *restrict a, const float *restrict c, int64_t n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int u = 0; u < 8; u++) s[u] += a[k + u] * c[k + u];
    float tail = 0.0f;
    for (; k < n; k++) tail += a[k] * c[k];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

sf_status sf_cpu_cp_correct(sf_ctx *ctx, const sf_cp_ssd_problem *pr) {
    const sf_ssd_fwd_params *p = pr->p;
    const int64_t L = pr->seqlen, H = pr->nheads, P = pr->headdim, N = pr->dstate;
    const int64_t nbh = pr->batch * H;
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    const int64_t npad = (N + 15) / 16 * 16; /* 64-byte rows of the C buffers */
    const size_t need = ((size_t)nbh * (size_t)L + (size_t)nbh * (size_t)(P * N) +
                         (size_t)nt * (size_t)npad + 16) * sizeof(float);
    float *g = (float *)sf_ws_get(ctx, need);
    if (!g) return SF_ERR_OUT_OF_MEMORY;
    float *hs = g + nbh * L;               /* h_in, contiguous (b, H, P, N) */
    float *cb = hs + nbh * P * N;          /* one converted C row per thread */
    const sf_tensor *hin = &pr->h_in, *C = &p->C, *z = &p->z, *out = &p->out;

#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t bh = 0; bh < nbh; bh++) {
        const int64_t b = bh / H, h = bh % H;
        cp_decay_scan(pr, b, h, g + bh * L);
        float *dst = hs + bh * P * N;
        for (int64_t i = 0; i < P; i++)
            for (int64_t n = 0; n < N; n++)
                dst[i * N + n] = sf_ldf(hin->data, SF_F32, sf_off4(hin, b, h, i, n));
    }

    const int64_t ntb = (L + CP_TB - 1) / CP_TB;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t it = 0; it < nbh * ntb; it++) {
        const int64_t bh = it / ntb, t0 = (it % ntb) * CP_TB;
        const int64_t b = bh / H, h = bh % H, grp = h / pr->heads_per_group;
        const int64_t t1 = t0 + CP_TB < L ? t0 + CP_TB : L;
        const float *hrow = hs + bh * P * N;
        float *c = cb + (int64_t)sf_cpu_tid() * npad;
        for (int64_t t = t0; t < t1; t++) {
            for (int64_t n = 0; n < N; n++) c[n] = sf_ldf(C->data, C->dtype, sf_off4(C, b, t, grp, n));
            const float e = expf(g[bh * L + t]);
            for (int64_t i = 0; i < P; i++) {
                float y = e * cp_dot(hrow + i * N, c, N);
                if (pr->has_z) y *= sf_silu(sf_ldf(z->data, z->dtype, sf_off4(z, b, t, h, i)));
                const int64_t o = sf_off4(out, b, t, h, i);
                sf_stf(out->data, out->dtype, o, sf_ldf(out->data, out->dtype, o) + y);
            }
        }
    }

    if (!pr->has_final) return SF_OK;
    const sf_tensor *fin = &p->final_states, *st = &pr->state_local, *ld = &pr->logdecay;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t bh = 0; bh < nbh; bh++) {
        const int64_t b = bh / H, h = bh % H;
        const float w = expf(sf_ldf(ld->data, SF_F32, sf_off2(ld, b, h)));
        const float *src = hs + bh * P * N;
        for (int64_t i = 0; i < P; i++)
            for (int64_t n = 0; n < N; n++)
                sf_stf(fin->data, SF_F32, sf_off4(fin, b, h, i, n),
                       w * src[i * N + n] + sf_ldf(st->data, SF_F32, sf_off4(st, b, h, i, n)));
    }
    return SF_OK;
}

sf_status sf_cpu_cp_combine(sf_ctx *ctx, const sf_cp_combine_problem *pr) {
    const sf_tensor *S = &pr->states_all, *ld = &pr->logdecay_all, *hin = &pr->h_in;
    const int64_t H = pr->nheads, P = pr->headdim, N = pr->dstate, nbh = pr->batch * H;
    const float *sd = (const float *)S->data, *ldd = (const float *)ld->data;
    float *hd = (float *)hin->data;
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t bh = 0; bh < nbh; bh++) {
        const int64_t b = bh / H, h = bh % H;
        for (int64_t i = 0; i < P; i++)
            for (int64_t n = 0; n < N; n++) {
                /* h <- exp(ld_q) h + S_q for q < rank (the jump formula) */
                float v = 0.0f;
                for (int64_t q = 0; q < pr->rank; q++) {
                    const float w = expf(ldd[sf_off3(ld, q, b, h)]);
                    v = w * v + sd[q * S->stride[0] + b * S->stride[1] + h * S->stride[2] +
                                   i * S->stride[3] + n * S->stride[4]];
                }
                hd[sf_off4(hin, b, h, i, n)] = v;
            }
    }
    return SF_OK;
}

sf_status sf_cpu_cp_merge(sf_ctx *ctx, const sf_cp_merge_problem *pr) {
    const sf_tensor *ao = &pr->a_out, *al = &pr->a_lse, *bo = &pr->b_out, *bl = &pr->b_lse;
    const sf_tensor *dout = &pr->dst_out, *dl = &pr->dst_lse;
    const int has_b = bo->data != NULL;
    const int64_t L = pr->seqlen, H = pr->nheads, d = pr->headdim;
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t bl_ = 0; bl_ < pr->batch * L; bl_++) {
        const int64_t b = bl_ / L, l = bl_ % L;
        for (int64_t h = 0; h < H; h++) {
            const float la = ((const float *)al->data)[sf_off3(al, b, h, l)];
            const float lb = has_b ? ((const float *)bl->data)[sf_off3(bl, b, h, l)] : -INFINITY;
            /* An empty side (lse -inf) has weight 0 and its out is not read. */
            const float m = la > lb ? la : lb;
            float wa = 0.0f, wb = 0.0f, lse = -INFINITY;
            if (m > -INFINITY) {
                wa = la > -INFINITY ? expf(la - m) : 0.0f;
                wb = lb > -INFINITY ? expf(lb - m) : 0.0f;
                lse = m + logf(wa + wb);
            }
            const float inv = wa + wb > 0.0f ? 1.0f / (wa + wb) : 0.0f;
            const int64_t oa = sf_off3(ao, b, l, h), ob = has_b ? sf_off3(bo, b, l, h) : 0;
            const int64_t od = sf_off3(dout, b, l, h);
            for (int64_t e = 0; e < d; e++) {
                float v = 0.0f;
                if (wa > 0.0f) v += wa * sf_ldf(ao->data, ao->dtype, oa + e);
                if (wb > 0.0f) v += wb * sf_ldf(bo->data, bo->dtype, ob + e);
                sf_stf(dout->data, dout->dtype, od + e, v * inv);
            }
            ((float *)dl->data)[sf_off3(dl, b, h, l)] = lse;
        }
    }
    return SF_OK;
}

sf_status sf_cpu_cp_pack(sf_ctx *ctx, void *dst, const sf_tensor *src) {
    const size_t es = sf_dtype_size(src->dtype);
    const int64_t B = src->shape[0], L = src->shape[1], Hk = src->shape[2], d = src->shape[3];
    const int nt = sf_cpu_threads(ctx);
    (void)nt; /* unused without OpenMP */
    /* unit inner stride (validated): one memcpy per head row */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t bl = 0; bl < B * L; bl++) {
        const int64_t b = bl / L, l = bl % L;
        for (int64_t h = 0; h < Hk; h++)
            memcpy((char *)dst + (size_t)(((bl * Hk) + h) * d) * es,
                   (const char *)src->data + (size_t)sf_off3(src, b, l, h) * es, (size_t)d * es);
    }
    return SF_OK;
}
