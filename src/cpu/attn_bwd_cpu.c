/* attn_bwd_cpu.c - FlashAttention backward on the CPU: tiled, f32
 * accumulation, O(N) memory, no atomics, deterministic by construction.
 *
 * One task per (batch entry, kv head), OpenMP dynamic over tasks: the task
 * owns dK and dV of its kv head and dQ of every query head of its group, so
 * no two threads ever add to one element and the summation order is fixed
 * by the loops alone (run to run, and whatever the thread count).
 *
 * Inside a task (FlashAttention-2 order): for each key tile of BC keys, K
 * and V are converted to f32 once (row-major for the axpy products and
 * transposed for the score products), dK and dV of the tile accumulate in
 * f32; for each query head of the group and each query tile of BR rows that
 * sees the key tile:
 *     S = scale Q K^T, s = mod(S) (softcap, ALiBi), P = exp(s - lse)
 *     dP = dO V^T,  dS = P (dP - D) (1 - tanh^2(S / cap) with softcap)
 *     dV += P^T dO,  dK += scale dS^T Q,  dQacc += scale dS K
 * with D = rowsum(dO * O) computed once per row before the key loop and
 * dQacc the task's f32 rows (group x Lq x d) written out at the end.  Key
 * tiles outside a query tile's causal/window band are skipped; inside, the
 * mask zeroes P.  Every product is a loop of axpys over a contiguous row
 * (dims, or the BC keys of a score row) that the compiler vectorises.
 *
 * Per-thread workspace (floats): K, V row-major and K^T, V^T (4 BC d), dK,
 * dV (2 BC d), the query tile's Q and dO (2 BR d), S and dP (2 BR BC), and
 * dQacc, D, lse of the group (group Lq (d + 2)).
 */
#include "attn_bwd.h"
#include "cpu_common.h"

#include <math.h>
#include <stdlib.h>

#define BR 32 /* query rows per tile */
#define BC 64 /* keys per tile       */

#if defined(__clang__) || !defined(__GNUC__)
#define SF_FMA_ATTR
#else
#define SF_FMA_ATTR __attribute__((optimize("fp-contract=fast")))
#endif

typedef struct bwd_plan {
    const sf_attn_bwd_problem *bp;
    int64_t d, group, mq;
    size_t off_k, off_v, off_kt, off_vt, off_dk, off_dv, off_q, off_do, off_s, off_dp, off_dq, off_dd,
        off_lse, per_thread;
} bwd_plan;

static int64_t row_off(const sf_tensor *t, int varlen, int64_t b, int64_t r, int64_t h) {
    return varlen ? sf_off3(t, r, h, 0) : sf_off4(t, b, r, h, 0);
}

/* y[0..n) += a x[0..n) */
SF_FMA_ATTR static inline void axpy(float *restrict y, float a, const float *restrict x, int64_t n) {
    for (int64_t c = 0; c < n; c++) y[c] += a * x[c];
}

/* One (key tile, query head, query tile) step.  Q, dO: nq x d rows; K, V:
 * nk x d rows, Kt, Vt: d x BC; rows i0.. of the sequence, keys k0.. */
SF_FMA_ATTR static void tile_step(const bwd_plan *pl, float *ws, int64_t b, int64_t h, int64_t i0, int nq,
                                  int64_t j0, int nk, int64_t lq, int64_t lk, const float *dD,
                                  const float *lse, float *dQacc) {
    const sf_attn_problem *pr = &pl->bp->f;
    const int64_t d = pl->d;
    const float scale = pr->scale, cap = pr->softcap;
    const float slope = pr->alibi ? pr->alibi[b * pr->alibi_sb + h * pr->alibi_sh] : 0.0f;
    const float *K = ws + pl->off_k, *Kt = ws + pl->off_kt, *Vt = ws + pl->off_vt;
    const float *Q = ws + pl->off_q, *dO = ws + pl->off_do;
    float *dK = ws + pl->off_dk, *dV = ws + pl->off_dv, *S = ws + pl->off_s, *dP = ws + pl->off_dp;

    for (int i = 0; i < nq; i++) {
        float *srow = S + (int64_t)i * BC, *prow = dP + (int64_t)i * BC;
        for (int j = 0; j < BC; j++) srow[j] = prow[j] = 0.0f;
        const float *qi = Q + i * d, *oi = dO + i * d;
        for (int64_t c = 0; c < d; c++) {
            axpy(srow, qi[c], Kt + c * BC, BC);
            axpy(prow, oi[c], Vt + c * BC, BC);
        }
        int64_t lo, hi;
        sf_attn_key_range(pr, i0 + i, lq, lk, &lo, &hi);
        const float l = lse[i0 + i], D = dD[i0 + i];
        for (int j = 0; j < nk; j++) {
            const int64_t kj = j0 + j;
            if (kj < lo || kj >= hi || l == -INFINITY) { /* masked: P = 0, dS = 0 */
                srow[j] = prow[j] = 0.0f;
                continue;
            }
            const float t = srow[j] * scale;
            float s = t, dmod = 1.0f;
            if (cap > 0.0f) {
                const float th = tanhf(t / cap);
                s = cap * th;
                dmod = 1.0f - th * th;
            }
            if (pr->alibi) {
                const int64_t dist = i0 + i + lk - lq - kj;
                s -= slope * (float)(dist < 0 ? -dist : dist);
            }
            const float P = expf(s - l);
            srow[j] = P;
            prow[j] = P * (prow[j] - D) * dmod * scale; /* scale folded into dS */
        }
    }
    /* dV += P^T dO, dK += dS^T Q, dQ += dS K */
    for (int i = 0; i < nq; i++) {
        const float *srow = S + (int64_t)i * BC, *prow = dP + (int64_t)i * BC;
        const float *qi = Q + i * d, *oi = dO + i * d;
        float *dqi = dQacc + (i0 + i) * d;
        for (int j = 0; j < nk; j++) {
            if (srow[j] != 0.0f) axpy(dV + j * d, srow[j], oi, d);
            if (prow[j] != 0.0f) {
                axpy(dK + j * d, prow[j], qi, d);
                axpy(dqi, prow[j], K + j * d, d);
            }
        }
    }
}

/* Task (b, kvh): the whole gradient of one kv head and its query heads. */
static void task(const bwd_plan *pl, float *ws, int64_t b, int64_t kvh) {
    const sf_attn_problem *pr = &pl->bp->f;
    const sf_attn_fwd_params *f = pr->p;
    const sf_attn_bwd_params *p = pl->bp->p;
    const int vl = pr->varlen;
    const int64_t d = pl->d, group = pl->group;
    int64_t q0, lq, k0, lk;
    sf_attn_seq(pr, b, &q0, &lq, &k0, &lk);
    float *dQacc = ws + pl->off_dq, *dD = ws + pl->off_dd, *lse = ws + pl->off_lse;
    float *Q = ws + pl->off_q, *dO = ws + pl->off_do;
    float *K = ws + pl->off_k, *V = ws + pl->off_v, *Kt = ws + pl->off_kt, *Vt = ws + pl->off_vt;
    float *dK = ws + pl->off_dk, *dV = ws + pl->off_dv;

    /* D = rowsum(dO * O) and lse of every row of the group; dQacc = 0 */
    for (int64_t g = 0; g < group; g++) {
        const int64_t h = kvh * group + g;
        for (int64_t i = 0; i < lq; i++) {
            sf_cpu_row_in(p->dout.data, p->dout.dtype, row_off(&p->dout, vl, b, q0 + i, h), d, Q);
            sf_cpu_row_in(f->out.data, f->out.dtype, row_off(&f->out, vl, b, q0 + i, h), d, dO);
            float D = 0.0f;
            for (int64_t c = 0; c < d; c++) D += Q[c] * dO[c];
            dD[g * lq + i] = D;
            const int64_t lso = vl ? sf_off2(&f->lse, h, q0 + i) : sf_off3(&f->lse, b, h, i);
            lse[g * lq + i] = sf_ldf(f->lse.data, f->lse.dtype, lso);
        }
    }
    memset(dQacc, 0, (size_t)(group * lq * d) * sizeof(float));

    for (int64_t j0 = 0; j0 < lk; j0 += BC) {
        const int nk = (int)sf_cpu_min(BC, lk - j0);
        for (int j = 0; j < nk; j++) {
            sf_cpu_row_in(f->k.data, f->k.dtype, row_off(&f->k, vl, b, k0 + j0 + j, kvh), d, K + j * d);
            sf_cpu_row_in(f->v.data, f->v.dtype, row_off(&f->v, vl, b, k0 + j0 + j, kvh), d, V + j * d);
        }
        for (int64_t c = 0; c < d; c++)
            for (int j = 0; j < BC; j++) {
                Kt[c * BC + j] = j < nk ? K[j * d + c] : 0.0f;
                Vt[c * BC + j] = j < nk ? V[j * d + c] : 0.0f;
            }
        memset(dK, 0, (size_t)(BC * d) * sizeof(float));
        memset(dV, 0, (size_t)(BC * d) * sizeof(float));
        for (int64_t g = 0; g < group; g++) {
            const int64_t h = kvh * group + g;
            for (int64_t i0 = 0; i0 < lq; i0 += BR) {
                const int nq = (int)sf_cpu_min(BR, lq - i0);
                /* the band of the tile: the first row's lo, the last row's hi */
                int64_t lo, hi, lo2, hi2;
                sf_attn_key_range(pr, i0, lq, lk, &lo, &hi);
                sf_attn_key_range(pr, i0 + nq - 1, lq, lk, &lo2, &hi2);
                if (hi2 <= j0 || lo >= j0 + nk || lo >= hi2) continue;
                for (int i = 0; i < nq; i++) {
                    sf_cpu_row_in(f->q.data, f->q.dtype, row_off(&f->q, vl, b, q0 + i0 + i, h), d, Q + i * d);
                    sf_cpu_row_in(p->dout.data, p->dout.dtype, row_off(&p->dout, vl, b, q0 + i0 + i, h), d,
                                  dO + i * d);
                }
                tile_step(pl, ws, b, h, i0, nq, j0, nk, lq, lk, dD + g * lq, lse + g * lq, dQacc + g * lq * d);
            }
        }
        for (int j = 0; j < nk; j++) {
            sf_cpu_row_out(p->dk.data, p->dk.dtype, row_off(&p->dk, vl, b, k0 + j0 + j, kvh), d, dK + j * d);
            sf_cpu_row_out(p->dv.data, p->dv.dtype, row_off(&p->dv, vl, b, k0 + j0 + j, kvh), d, dV + j * d);
        }
    }
    for (int64_t g = 0; g < group; g++)
        for (int64_t i = 0; i < lq; i++)
            sf_cpu_row_out(p->dq.data, p->dq.dtype, row_off(&p->dq, vl, b, q0 + i, kvh * group + g), d,
                           dQacc + (g * lq + i) * d);
}

sf_status sf_cpu_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_problem *bp) {
    const sf_attn_problem *pr = &bp->f;
    bwd_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.bp = bp;
    pl.d = pr->headdim;
    pl.group = pr->nheads / pr->nheads_kv;
    pl.mq = pr->max_lq;
    const int64_t d = pl.d;
    /* the slab, each piece rounded to 16 floats (64 bytes) */
    size_t o = 0;
#define PIECE(off, n) (pl.off = o, o += (size_t)sf_cpu_rup((int64_t)(n), 16))
    const double big = (double)pl.group * (double)pl.mq * ((double)d + 2.0);
    if (big > 1e15)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_attn_bwd: the CPU workspace (%.3g floats per thread) is too large",
                       big);
    PIECE(off_k, BC * d);
    PIECE(off_v, BC * d);
    PIECE(off_kt, BC * d);
    PIECE(off_vt, BC * d);
    PIECE(off_dk, BC * d);
    PIECE(off_dv, BC * d);
    PIECE(off_q, BR * d);
    PIECE(off_do, BR * d);
    PIECE(off_s, BR * BC);
    PIECE(off_dp, BR * BC);
    PIECE(off_dq, pl.group * pl.mq * d);
    PIECE(off_dd, pl.group * pl.mq);
    PIECE(off_lse, pl.group * pl.mq);
#undef PIECE
    pl.per_thread = o;
    const int64_t ntask = pr->batch * pr->nheads_kv;
    int nt = sf_cpu_threads(ctx);
    if ((int64_t)nt > ntask) nt = (int)(ntask > 0 ? ntask : 1);
    const double bytes = 4.0 * (double)nt * (double)pl.per_thread + 64.0;
    if (bytes > (double)(SIZE_MAX / 2))
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_attn_bwd: the CPU workspace (%.3g bytes) is too large", bytes);
    float *slabs = sf_cpu_align64(sf_ws_get(ctx, (size_t)bytes));
    if (!slabs) return SF_ERR_OUT_OF_MEMORY; /* the arena set the detail */

#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (int64_t t = 0; t < ntask; t++)
        task(&pl, slabs + (size_t)sf_cpu_tid() * pl.per_thread, t / pr->nheads_kv, t % pr->nheads_kv);
    return SF_OK;
}
