/* ssd_bwd_cpu.c - CPU backward of the Mamba-2 SSD (sf_ssd_bwd).
 *
 * The adjoint recurrence of ssd_bwd_ref.c in f32, organised by chunks of
 * chunk_size tokens:
 *   1. forward over the segment, keeping only the state entering each
 *      chunk (the chunk states, recomputed rather than stored by the
 *      forward: nchunks x P x N floats per task);
 *   2. chunks in reverse: the chunk's per-token states are recomputed from
 *      its entering state (Q+1 x P x N floats), then its tokens run
 *      backwards.  The adjoint G leaves the chunk scaled by the chunk's
 *      decays: the reverse state passing, dH at the chunk boundary.
 * Within a token one pass over each state row does everything:
 *     g = G + dy C;  gb += g B;  da += g h_{t-1};  dB += dt x g;
 *     dC += dy h_t;  G = a g.
 * Tasks are (segment, head) pairs, threaded with OpenMP.  Every output
 * element has one writer or a reduction in a fixed order, so results do
 * not depend on the thread count or the schedule (deterministic by
 * construction, whatever p->deterministic says):
 *   dx, dz, ddt, dinitial_states: written by the task owning the token;
 *   dB, dC: written directly when a group has one head, else each head's
 *     rows go to a (b, L, H, N) buffer summed over the group's heads in
 *     head order afterwards;
 *   dA, ddt_bias, dD: per-task partials summed over segments in order. */
#include "../core/ssd_bwd.h"
#include "cpu_common.h"

#include <math.h>

typedef struct bwd_shared {
    const sf_ssd_problem *pr;
    const sf_ssd_bwd_params *q;
    int64_t PN, Q, nck_max;
    int direct_bc;       /* one head per group: dB, dC rows written in place */
    float *pdB, *pdC;    /* (b, L, H, N) per-head rows when !direct_bc     */
    float *part;         /* per task: dA, ddt_bias, dD[P]                  */
} bwd_shared;

static float silu_d(float z, float *ds) {
    const float s = 1.0f / (1.0f + expf(-z));
    *ds = s * (1.0f + z * (1.0f - s));
    return z * s;
}

/* d(loss)/d(raw dt) from d(loss)/d(processed dt), as sf_dt_process. */
static float ddt_raw(float g, float raw, float bias, int softplus, float dmin, float dmax) {
    const float v = raw + bias;
    const float u = softplus ? sf_softplus(v) : v;
    if (u < dmin || u > dmax) return 0.0f;
    if (softplus && v <= 20.0f) g *= 1.0f / (1.0f + expf(-v));
    return g;
}

/* Per-thread workspace in floats: checkpoints, chunk states, G, rows. */
static int64_t thread_floats(const bwd_shared *s) {
    const int64_t P = s->pr->headdim, N = s->pr->dstate;
    return sf_cpu_rup(s->nck_max * s->PN, 16) + sf_cpu_rup((s->Q + 1) * s->PN, 16) + sf_cpu_rup(s->PN, 16) +
           sf_cpu_rup(4 * N + 6 * P, 16) + 16;
}

static void bwd_task(const bwd_shared *s, int64_t seg, int64_t h, float *ws) {
    const sf_ssd_problem *pr = s->pr;
    const sf_ssd_bwd_params *q = s->q;
    const sf_ssd_fwd_params *p = &q->fwd;
    const sf_ssd_segment *sg = &pr->seg[seg];
    const int64_t P = pr->headdim, N = pr->dstate, PN = s->PN, Q = s->Q, H = pr->nheads;
    const int64_t b = sg->b, g = h / pr->heads_per_group, len = sg->end - sg->start;
    const int64_t nck = (len + Q - 1) / Q;
    float *ck = sf_cpu_align64(ws);
    float *st = ck + sf_cpu_rup(s->nck_max * PN, 16);
    float *G = st + sf_cpu_rup((Q + 1) * PN, 16);
    float *bt = G + sf_cpu_rup(PN, 16), *ct = bt + N, *dBt = ct + N, *dCt = dBt + N;
    float *xr = dCt + N, *dyr = xr + P, *zr = dyr + P, *Dr = zr + P, *gx = Dr + P, *gz = gx + P;

    const float Ah = ((const float *)p->A.data)[h * p->A.stride[0]];
    const float bias = pr->has_dt_bias ? ((const float *)p->dt_bias.data)[h * p->dt_bias.stride[0]] : 0.0f;
    const float dmin = p->dt_min, dmax = p->dt_max;
    const sf_tensor *dtt = &p->dt;
    for (int64_t i = 0; i < P; i++)
        Dr[i] = !pr->has_D ? 0.0f
                : pr->D_per_channel ? ((const float *)p->D.data)[sf_off2(&p->D, h, i)]
                                    : ((const float *)p->D.data)[h * p->D.stride[0]];
    float *part = s->part + (seg * H + h) * (2 + P);
    float pdA = 0.0f, pdtb = 0.0f;
    for (int64_t i = 0; i < P; i++) part[2 + i] = 0.0f;

    /* 1. the state entering each chunk */
    float *cur = st;
    if (pr->has_init && sg->init >= 0) {
        const sf_tensor *in = &p->initial_states;
        for (int64_t i = 0; i < P; i++)
            for (int64_t n = 0; n < N; n++) cur[i * N + n] = ((const float *)in->data)[sf_off4(in, sg->init, h, i, n)];
    } else {
        memset(cur, 0, (size_t)PN * sizeof(float));
    }
    /* one token's update of the state: nxt = a prv + dt x B^T */
#define BWD_STEP(t, prv, nxt)                                                                            \
    do {                                                                                                 \
        const float dtv_ = sf_dt_process(sf_ldf(dtt->data, dtt->dtype, sf_off3(dtt, b, (t), h)), bias,  \
                                         p->dt_softplus, dmin, dmax);                                    \
        const float e_ = dtv_ * Ah;                                                                      \
        const float a_ = expf(e_ < 0.0f ? e_ : 0.0f);                                                    \
        sf_cpu_row_in(p->B.data, p->B.dtype, sf_off4(&p->B, b, (t), g, 0), N, bt);                       \
        sf_cpu_row_in(p->x.data, p->x.dtype, sf_off4(&p->x, b, (t), h, 0), P, xr);                       \
        for (int64_t i = 0; i < P; i++) {                                                                \
            const float xd_ = dtv_ * xr[i];                                                              \
            const float *pr_ = (prv) + i * N;                                                            \
            float *nx_ = (nxt) + i * N;                                                                  \
            for (int64_t n = 0; n < N; n++) nx_[n] = a_ * pr_[n] + xd_ * bt[n];                          \
        }                                                                                                \
    } while (0)
    for (int64_t j = 0; j < nck; j++) {
        memcpy(ck + j * PN, cur, (size_t)PN * sizeof(float));
        const int64_t t0 = sg->start + j * Q, t1 = t0 + Q < sg->end ? t0 + Q : sg->end;
        for (int64_t t = t0; t < t1; t++) {
            BWD_STEP(t, cur, st + PN);
            memcpy(cur, st + PN, (size_t)PN * sizeof(float));
        }
    }

    /* 2. chunks in reverse */
    if (pr->has_final && sg->final >= 0) {
        const sf_tensor *df = &q->dfinal_states;
        for (int64_t i = 0; i < P; i++)
            for (int64_t n = 0; n < N; n++) G[i * N + n] = ((const float *)df->data)[sf_off4(df, sg->final, h, i, n)];
    } else {
        memset(G, 0, (size_t)PN * sizeof(float));
    }
    for (int64_t j = nck - 1; j >= 0; j--) {
        const int64_t t0 = sg->start + j * Q, t1 = t0 + Q < sg->end ? t0 + Q : sg->end;
        memcpy(st, ck + j * PN, (size_t)PN * sizeof(float));
        for (int64_t t = t0; t < t1; t++) BWD_STEP(t, st + (t - t0) * PN, st + (t - t0 + 1) * PN);
        for (int64_t t = t1 - 1; t >= t0; t--) {
            const float *hprev = st + (t - t0) * PN, *hcur = hprev + PN;
            const float raw = sf_ldf(dtt->data, dtt->dtype, sf_off3(dtt, b, t, h));
            const float dtv = sf_dt_process(raw, bias, p->dt_softplus, dmin, dmax);
            const float e = dtv * Ah;
            const int live = e < 0.0f;
            const float a = expf(live ? e : 0.0f);
            sf_cpu_row_in(p->B.data, p->B.dtype, sf_off4(&p->B, b, t, g, 0), N, bt);
            sf_cpu_row_in(p->C.data, p->C.dtype, sf_off4(&p->C, b, t, g, 0), N, ct);
            sf_cpu_row_in(p->x.data, p->x.dtype, sf_off4(&p->x, b, t, h, 0), P, xr);
            sf_cpu_row_in(q->dout.data, q->dout.dtype, sf_off4(&q->dout, b, t, h, 0), P, dyr);
            if (pr->has_z) {
                sf_cpu_row_in(p->z.data, p->z.dtype, sf_off4(&p->z, b, t, h, 0), P, zr);
                for (int64_t i = 0; i < P; i++) {
                    float y = Dr[i] * xr[i];
                    const float *hr = hcur + i * N;
                    for (int64_t n = 0; n < N; n++) y += hr[n] * ct[n];
                    float ds;
                    const float sz = silu_d(zr[i], &ds);
                    gz[i] = dyr[i] * y * ds;
                    dyr[i] *= sz;
                }
            }
            memset(dBt, 0, (size_t)N * sizeof(float));
            memset(dCt, 0, (size_t)N * sizeof(float));
            float ddt = 0.0f, da = 0.0f;
            for (int64_t i = 0; i < P; i++) {
                const float dy = dyr[i], dtx = dtv * xr[i];
                const float *hp = hprev + i * N, *hc = hcur + i * N;
                float *Gi = G + i * N;
                float gb = 0.0f, dai = 0.0f;
                for (int64_t n = 0; n < N; n++) {
                    const float gv = Gi[n] + dy * ct[n];
                    gb += gv * bt[n];
                    dai += gv * hp[n];
                    dBt[n] += dtx * gv;
                    dCt[n] += dy * hc[n];
                    Gi[n] = a * gv;
                }
                da += dai;
                ddt += xr[i] * gb;
                gx[i] = dtv * gb + Dr[i] * dy;
                part[2 + i] += dy * xr[i];
            }
            if (live) {
                ddt += Ah * a * da;
                pdA += dtv * a * da;
            }
            const float gr = ddt_raw(ddt, raw, bias, p->dt_softplus, dmin, dmax);
            pdtb += gr;
            if (q->ddt.data) sf_stf(q->ddt.data, q->ddt.dtype, sf_off3(&q->ddt, b, t, h), gr);
            if (q->dx.data) sf_cpu_row_out(q->dx.data, q->dx.dtype, sf_off4(&q->dx, b, t, h, 0), P, gx);
            if (q->dz.data) sf_cpu_row_out(q->dz.data, q->dz.dtype, sf_off4(&q->dz, b, t, h, 0), P, gz);
            if (s->direct_bc) {
                if (q->dB.data) sf_cpu_row_out(q->dB.data, q->dB.dtype, sf_off4(&q->dB, b, t, g, 0), N, dBt);
                if (q->dC.data) sf_cpu_row_out(q->dC.data, q->dC.dtype, sf_off4(&q->dC, b, t, g, 0), N, dCt);
            } else {
                const int64_t o = ((b * pr->seqlen + t) * H + h) * N;
                memcpy(s->pdB + o, dBt, (size_t)N * sizeof(float));
                memcpy(s->pdC + o, dCt, (size_t)N * sizeof(float));
            }
        }
    }
#undef BWD_STEP
    part[0] = pdA;
    part[1] = pdtb;
    if (q->dinitial_states.data && sg->init >= 0) {
        const sf_tensor *di = &q->dinitial_states;
        for (int64_t i = 0; i < P; i++)
            for (int64_t n = 0; n < N; n++) ((float *)di->data)[sf_off4(di, sg->init, h, i, n)] = G[i * N + n];
    }
}

sf_status sf_cpu_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *bp) {
    const sf_ssd_problem *pr = &bp->f;
    const sf_ssd_bwd_params *q = bp->p;
    if (pr->seg == NULL) return sf_fail(ctx, SF_ERR_INTERNAL, "ssd bwd cpu: no host segment list");
    bwd_shared s;
    memset(&s, 0, sizeof s);
    s.pr = pr;
    s.q = q;
    const int64_t P = pr->headdim, N = pr->dstate, H = pr->nheads, G = pr->ngroups;
    const int64_t nb = pr->batch, L = pr->seqlen;
    s.PN = P * N;
    s.Q = pr->chunk;
    int64_t maxlen = 0;
    for (int64_t i = 0; i < pr->nseg; i++)
        if (pr->seg[i].end - pr->seg[i].start > maxlen) maxlen = pr->seg[i].end - pr->seg[i].start;
    s.nck_max = (maxlen + s.Q - 1) / s.Q;
    s.direct_bc = pr->heads_per_group == 1;
    const int want_bc = q->dB.data || q->dC.data;

    /* workspace: per-thread regions, per-task partials, per-head dB/dC rows */
    const int nt = sf_cpu_threads(ctx);
    const int64_t tf = sf_cpu_rup(thread_floats(&s), 16);
    const int64_t ntask = pr->nseg * H;
    const int64_t npart = sf_cpu_rup(ntask * (2 + P), 16);
    const int64_t nbc = (!s.direct_bc && want_bc) ? nb * L * H * N : 0;
    const int64_t total = (int64_t)nt * tf + npart + 2 * nbc + 16;
    float *ws = (float *)sf_ws_get(ctx, (size_t)total * sizeof(float));
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    float *base = sf_cpu_align64(ws);
    s.part = base + (int64_t)nt * tf;
    s.pdB = nbc ? s.part + npart : NULL;
    s.pdC = nbc ? s.pdB + nbc : NULL;
    if (!want_bc) s.direct_bc = 1; /* no rows to keep: the task writes nothing */

#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (int64_t k = 0; k < ntask; k++) bwd_task(&s, k / H, k % H, base + (int64_t)sf_cpu_tid() * tf);

    if (nbc) { /* dB, dC: each group's heads summed in head order */
        const int64_t hpg = pr->heads_per_group;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
        {
            float *row = base + (int64_t)sf_cpu_tid() * tf; /* thread region reused: N floats */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t bt = 0; bt < nb * L; bt++) {
                const int64_t b = bt / L, t = bt % L;
                for (int64_t g = 0; g < G; g++) {
                    for (int w = 0; w < 2; w++) {
                        const sf_tensor *o = w ? &q->dC : &q->dB;
                        if (!o->data) continue;
                        const float *src = (w ? s.pdC : s.pdB) + (bt * H + g * hpg) * N;
                        memcpy(row, src, (size_t)N * sizeof(float));
                        for (int64_t j = 1; j < hpg; j++)
                            for (int64_t n = 0; n < N; n++) row[n] += src[j * N + n];
                        sf_cpu_row_out(o->data, o->dtype, sf_off4(o, b, t, g, 0), N, row);
                    }
                }
            }
        }
    }
    /* dA, ddt_bias, dD: the tasks' partials, segments in order */
    for (int64_t h = 0; h < H; h++) {
        float sA = 0.0f, sb = 0.0f, sD = 0.0f;
        for (int64_t sg = 0; sg < pr->nseg; sg++) {
            const float *pp = s.part + (sg * H + h) * (2 + P);
            sA += pp[0];
            sb += pp[1];
        }
        if (q->dA.data) ((float *)q->dA.data)[h * q->dA.stride[0]] = sA;
        if (q->ddt_bias.data) ((float *)q->ddt_bias.data)[h * q->ddt_bias.stride[0]] = sb;
        if (!q->dD.data) continue;
        for (int64_t i = 0; i < P; i++) {
            float si = 0.0f;
            for (int64_t sg = 0; sg < pr->nseg; sg++) si += s.part[(sg * H + h) * (2 + P) + 2 + i];
            if (pr->D_per_channel) ((float *)q->dD.data)[sf_off2(&q->dD, h, i)] = si;
            sD += si;
        }
        if (!pr->D_per_channel) ((float *)q->dD.data)[h * q->dD.stride[0]] = sD;
    }
    return SF_OK;
}
