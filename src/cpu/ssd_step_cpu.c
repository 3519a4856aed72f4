/* ssd_step_cpu.c - the Mamba-2 decode step on the CPU: one token per
 * sequence, the state (f32, f16 or bf16) updated in place in f32, threaded
 * over (sequence, head). */
#include "ssd_cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* One (sequence, head): state (P x N, f32, unit inner stride) updated in
 * place; y accumulated in 16 partial sums so the n loop vectorises. */
SSD_CLONES static void step_rows(float *sbase, int64_t sp, int64_t P, int64_t N,
                                 const float *restrict bn, const float *restrict cn,
                                 const float *restrict xv, float dA, float dt,
                                 float *restrict y) {
    for (int64_t c = 0; c < P; c++) {
        float *restrict row = sbase + c * sp;
        const float dx = dt * xv[c];
        float acc[16] = {0};
        int64_t n = 0;
        for (; n + 16 <= N; n += 16)
            for (int k = 0; k < 16; k++) {
                const float v = dA * row[n + k] + dx * bn[n + k];
                row[n + k] = v;
                acc[k] += v * cn[n + k];
            }
        float s = 0.0f;
        for (; n < N; n++) {
            const float v = dA * row[n] + dx * bn[n];
            row[n] = v;
            s += v * cn[n];
        }
        for (int k = 0; k < 16; k++) s += acc[k];
        y[c] = s;
    }
}

/* The same for an f16 / bf16 state: each row converted to f32 in `tmp`,
 * updated by step_rows (y reads the unrounded f32 values, as with an f32
 * state) and stored back rounded to the state's dtype. */
static void step_rows16(void *sbase, sf_dtype sdt, int64_t off, int64_t sp, int64_t P, int64_t N,
                        const float *bn, const float *cn, const float *xv, float dA, float dt,
                        float *y, float *tmp) {
    for (int64_t c = 0; c < P; c++) {
        cvt_in(sbase, sdt, off + c * sp, N, tmp);
        step_rows(tmp, 0, 1, N, bn, cn, xv + c, dA, dt, y + c);
        cvt_out(sbase, sdt, off + c * sp, N, tmp);
    }
}

sf_status sf_cpu_ssd_step(sf_ctx *ctx, const sf_ssd_step_problem *pr) {
    const sf_ssd_step_params *p = pr->p;
    const int64_t H = pr->nheads, P = pr->headdim, N = pr->dstate;
    if (pr->batch == 0) return SF_OK;
    int nt = ctx->nthreads > 0 ? ctx->nthreads : 1;
#ifndef _OPENMP
    nt = 1;
#endif
    if (pr->batch * H < nt) nt = (int)(pr->batch * H);
    /* per thread: B, C, x, z, y rows in f32, and a state row (16-bit state) */
    const int64_t Np = sf_cpu_rup(N, SSD_PAD), Pp = sf_cpu_rup(P, SSD_PAD);
    const size_t per = (size_t)(3 * Np + 3 * Pp);
    void *ws = sf_ws_get(ctx, (size_t)nt * per * sizeof(float) + 64);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    float *base = sf_cpu_align64(ws);
    const sf_tensor *st = &p->state;

    /* FTZ/DAZ per worker (ssd_fp_enter), restored before the region ends */
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        const unsigned csr = ssd_fp_enter();
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 4)
#endif
        for (int64_t u = 0; u < pr->batch * H; u++) {
            float *bn = base + (size_t)sf_cpu_tid() * per;
            float *cn = bn + Np, *xv = cn + Np, *zv = xv + Pp, *y = zv + Pp, *srow = y + Pp;
            const int64_t i = u / H, h = u % H;
            int64_t s = i;
            if (pr->has_idx)
                s = sf_ldi(p->state_idx.data, p->state_idx.dtype, i * p->state_idx.stride[0]);
            if (s < 0 || s >= pr->nslots) { /* padding: state untouched, output zero */
                for (int64_t c = 0; c < P; c++) y[c] = 0.0f;
                cvt_out(p->out.data, p->out.dtype, sf_off3(&p->out, i, h, 0), P, y);
                continue;
            }
            const int64_t g = h / pr->heads_per_group;
            cvt_in(p->B.data, p->B.dtype, sf_off3(&p->B, i, g, 0), N, bn);
            cvt_in(p->C.data, p->C.dtype, sf_off3(&p->C, i, g, 0), N, cn);
            cvt_in(p->x.data, p->x.dtype, sf_off3(&p->x, i, h, 0), P, xv);
            const float Ah = sf_ldf(p->A.data, p->A.dtype, h * p->A.stride[0]);
            const float bias = pr->has_dt_bias ? sf_ldf(p->dt_bias.data, p->dt_bias.dtype,
                                                        h * p->dt_bias.stride[0])
                                               : 0.0f;
            const float d = sf_dt_process(sf_ldf(p->dt.data, p->dt.dtype, sf_off2(&p->dt, i, h)), bias,
                                   p->dt_softplus, p->dt_min, p->dt_max);
            const float e = d * Ah;
            const float dA = expf(e < 0.0f ? e : 0.0f);
            if (st->dtype == SF_F32)
                step_rows((float *)st->data + sf_off4(st, s, h, 0, 0), st->stride[2], P, N, bn, cn, xv,
                          dA, d, y);
            else
                step_rows16(st->data, st->dtype, sf_off4(st, s, h, 0, 0), st->stride[2], P, N, bn, cn, xv,
                            dA, d, y, srow);
            for (int64_t c = 0; pr->has_D && c < P; c++)
                y[c] += xv[c] * (pr->D_per_channel
                                     ? sf_ldf(p->D.data, p->D.dtype, sf_off2(&p->D, h, c))
                                     : sf_ldf(p->D.data, p->D.dtype, h * p->D.stride[0]));
            if (pr->has_z) {
                cvt_in(p->z.data, p->z.dtype, sf_off3(&p->z, i, h, 0), P, zv);
                for (int64_t c = 0; c < P; c++) y[c] *= sf_silu(zv[c]);
            }
            cvt_out(p->out.data, p->out.dtype, sf_off3(&p->out, i, h, 0), P, y);
        }
        ssd_fp_leave(csr);
    }
    return SF_OK;
}
