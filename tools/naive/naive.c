/* naive.c - the naive baselines as an sfc_baseline: the shapes they serve,
 * their workspace (allocated once, before any timed call), the dispatch to
 * the CPU or CUDA baseline, and their byte counts.  See naive.h. */
#include "naive.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_impl.h"

int sfn_size(size_t *bytes, size_t elem, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t f[4] = {a, b, c, d};
    size_t n = elem;
    for (int i = 0; i < 4; i++) {
        if (f[i] < 0) return 0;
        if (f[i] != 0 && n > SIZE_MAX / (size_t)f[i]) return 0;
        n *= (size_t)f[i];
    }
    *bytes = n;
    return 1;
}

static int same_dtype(const sf_tensor *t, sf_dtype dt) { return !t->data || t->dtype == dt; }

sf_status sfn_attn_shape_of(const sf_attn_fwd_params *p, sfn_attn_shape *s, char *msg, size_t msglen) {
    if (p->cu_seqlens_q.data || p->cu_seqlens_k.data) {
        snprintf(msg, msglen, "varlen attention (cu_seqlens) is not served by the naive baseline");
        return SF_ERR_UNSUPPORTED;
    }
    if (p->softcap != 0.0f || p->alibi_slopes.data) {
        snprintf(msg, msglen, "softcap and ALiBi are not served by the naive baseline");
        return SF_ERR_UNSUPPORTED;
    }
    const sf_tensor *t[4] = {&p->q, &p->k, &p->v, &p->out};
    for (int i = 0; i < 4; i++)
        if (t[i]->rank != 4 || t[i]->stride[3] != 1 || t[i]->dtype != p->q.dtype) {
            snprintf(msg, msglen, "naive attention needs q, k, v and out of rank 4, one dtype, unit inner stride");
            return SF_ERR_UNSUPPORTED;
        }
    s->b = p->q.shape[0], s->Lq = p->q.shape[1], s->H = p->q.shape[2], s->d = p->q.shape[3];
    s->Lk = p->k.shape[1], s->Hkv = p->k.shape[2];
    if (s->Hkv <= 0 || s->H % s->Hkv != 0) {
        snprintf(msg, msglen, "naive attention: %lld heads over %lld kv heads", (long long)s->H, (long long)s->Hkv);
        return SF_ERR_UNSUPPORTED;
    }
    s->wl = p->window_left;
    s->wr = p->causal ? 0 : p->window_right;
    s->scale = p->softmax_scale > 0.f ? p->softmax_scale : 1.0f / sqrtf((float)(s->d > 0 ? s->d : 1));
    s->dtype = p->q.dtype;
    return SF_OK;
}

sf_status sfn_ssd_shape_of(const sf_ssd_fwd_params *p, sfn_ssd_shape *s, char *msg, size_t msglen) {
    if (p->cu_seqlens.data || p->seq_idx.data) {
        snprintf(msg, msglen, "varlen SSD (cu_seqlens / seq_idx) is not served by the naive baseline");
        return SF_ERR_UNSUPPORTED;
    }
    const sf_dtype dt = p->x.dtype;
    const sf_tensor *act[6] = {&p->x, &p->dt, &p->B, &p->C, &p->z, &p->out};
    const sf_tensor *f32[5] = {&p->A, &p->D, &p->dt_bias, &p->initial_states, &p->final_states};
    for (int i = 0; i < 6; i++)
        if (!same_dtype(act[i], dt)) {
            snprintf(msg, msglen, "naive SSD needs x, dt, B, C, z and out of one dtype");
            return SF_ERR_UNSUPPORTED;
        }
    for (int i = 0; i < 5; i++)
        if (!same_dtype(f32[i], SF_F32)) {
            snprintf(msg, msglen, "naive SSD needs A, D, dt_bias and the states in f32");
            return SF_ERR_UNSUPPORTED;
        }
    if (p->x.rank != 4 || p->B.rank != 4) {
        snprintf(msg, msglen, "naive SSD needs x (b, L, H, P) and B (b, L, G, N)");
        return SF_ERR_UNSUPPORTED;
    }
    const sf_tensor *rows[5] = {&p->x, &p->B, &p->C, &p->z, &p->out};
    for (int i = 0; i < 5; i++)
        if (rows[i]->data && (rows[i]->rank != 4 || rows[i]->stride[3] != 1)) {
            snprintf(msg, msglen, "naive SSD needs x, B, C, z and out of rank 4 with a unit inner stride");
            return SF_ERR_UNSUPPORTED;
        }
    s->b = p->x.shape[0], s->L = p->x.shape[1], s->H = p->x.shape[2], s->P = p->x.shape[3];
    s->G = p->B.shape[2], s->N = p->B.shape[3];
    if (s->G <= 0 || s->H % s->G != 0) {
        snprintf(msg, msglen, "naive SSD: %lld heads over %lld groups", (long long)s->H, (long long)s->G);
        return SF_ERR_UNSUPPORTED;
    }
    s->D_rank = p->D.data ? p->D.rank : 0;
    s->has_z = p->z.data != NULL;
    s->has_bias = p->dt_bias.data != NULL;
    s->has_init = p->initial_states.data != NULL;
    s->has_final = p->final_states.data != NULL;
    s->dtype = dt;
    return SF_OK;
}

/* ------------------------------------------------------------------ */
/* the sfc_baseline callbacks                                          */
/* ------------------------------------------------------------------ */

static void nb_release(void *self) {
    sfn_baseline *nb = (sfn_baseline *)self;
    free(nb->cpu_ws);
    nb->cpu_ws = NULL;
    nb->cpu_ws_bytes = 0;
    if (nb->gpu) sfn_cuda_release(nb->gpu);
    nb->gpu = NULL;
}

static sf_status cpu_prepare(sfn_baseline *nb, sfc_op op, const void *params, char *msg, size_t msglen) {
    size_t bytes = 0;
    sf_status st;
    sf_dtype dt;
    if (op == SFC_ATTN_FWD) {
        sfn_attn_shape s;
        st = sfn_attn_shape_of((const sf_attn_fwd_params *)params, &s, msg, msglen);
        if (st == SF_OK) st = sfn_cpu_attn_ws(&s, &bytes, msg, msglen);
        dt = s.dtype;
    } else {
        sfn_ssd_shape s;
        st = sfn_ssd_shape_of((const sf_ssd_fwd_params *)params, &s, msg, msglen);
        if (st == SF_OK) st = sfn_cpu_ssd_ws(&s, &bytes, msg, msglen);
        dt = s.dtype;
    }
    if (st != SF_OK) return st;
    if (dt != SF_F32) {
        snprintf(msg, msglen, "the naive CPU baseline is f32 only (got %s)", sf_dtype_name(dt));
        return SF_ERR_UNSUPPORTED;
    }
    nb->cpu_ws = malloc(bytes > 0 ? bytes : 1);
    if (!nb->cpu_ws) {
        snprintf(msg, msglen, "cannot allocate %.3g GB for the naive %s", (double)bytes * 1e-9,
                 op == SFC_ATTN_FWD ? "score matrix" : "states");
        return SF_ERR_OUT_OF_MEMORY;
    }
    nb->cpu_ws_bytes = bytes;
    return SF_OK;
}

static sf_status nb_prepare(void *self, sfc_op op, const void *params, char *msg, size_t msglen) {
    sfn_baseline *nb = (sfn_baseline *)self;
    nb_release(nb);
    if (op != SFC_ATTN_FWD && op != SFC_SSD_FWD) {
        snprintf(msg, msglen, "no naive baseline for %s", sfc_op_name(op));
        return SF_ERR_UNSUPPORTED;
    }
    if (nb->device == SF_DEVICE_CPU) return cpu_prepare(nb, op, params, msg, msglen);
    return sfn_cuda_prepare(&nb->gpu, nb->device, nb->stream, op, params, msg, msglen);
}

static sf_status nb_run(void *self, sfc_op op, const void *params, char *msg, size_t msglen) {
    sfn_baseline *nb = (sfn_baseline *)self;
    if (nb->device != SF_DEVICE_CPU) return sfn_cuda_run(nb->gpu, op, params, msg, msglen);
    if (!nb->cpu_ws) {
        snprintf(msg, msglen, "the naive baseline ran before prepare");
        return SF_ERR_INTERNAL;
    }
    if (op == SFC_ATTN_FWD) {
        const sf_attn_fwd_params *p = (const sf_attn_fwd_params *)params;
        sfn_attn_shape s;
        sf_status st = sfn_attn_shape_of(p, &s, msg, msglen);
        if (st == SF_OK) sfn_cpu_attn(p, &s, (float *)nb->cpu_ws, nb->threads);
        return st;
    }
    const sf_ssd_fwd_params *p = (const sf_ssd_fwd_params *)params;
    sfn_ssd_shape s;
    sf_status st = sfn_ssd_shape_of(p, &s, msg, msglen);
    if (st == SF_OK) sfn_cpu_ssd(p, &s, (float *)nb->cpu_ws, nb->threads);
    return st;
}

void sfn_baseline_init(sfn_baseline *nb, sf_ctx *ctx) {
    memset(nb, 0, sizeof *nb);
    nb->device = sf_ctx_device(ctx);
    nb->threads = sf_ctx_threads(ctx);
    nb->stream = nb->device == SF_DEVICE_CPU ? NULL : sf_ctx_stream(ctx);
    nb->bl.self = nb;
    nb->bl.prepare = nb_prepare;
    nb->bl.run = nb_run;
    nb->bl.release = nb_release;
}

const char *sfn_describe(int device) {
    if (device == SF_DEVICE_CPU)
        return "naive = f32 on the same CPU threads: attention stores all scores, a row softmax, then P V; "
               "the SSD is the sequential recurrence";
    return "naive = same GPU, same dtype: cuBLAS S = Q K^T, a softmax kernel, cuBLAS O = P V; "
           "the SSD a sequential-recurrence kernel (f32 state on chip)";
}

double sfn_tolerance(const sfc_case *c, sf_dtype dt, sf_backend be, const sfc_result *r) {
    const double tol = sfc_tolerance(c->op, dt, be);
    if (c->op != SFC_ATTN_FWD || dt == SF_F32 || !(r->err_naive > 0)) return tol;
    return 2.0 * r->err_naive > tol ? 2.0 * r->err_naive : tol;
}

/* Naive bytes:
 *   attention: Q, K, V read and O written once (the fused minimum without
 *     the f32 lse, which the naive path does not make), plus S written by
 *     the first product and read by the softmax, P written by the softmax and
 *     read by the second product: 4 b H Lq Lk elements of the score dtype
 *     (f32 on the CPU, the input dtype on a GPU).  Causal and windowed
 *     attention still materialises every score: that is the naive algorithm.
 *   SSD: the fused minimum.  The sequential recurrence keeps each (b, h)
 *     state (P N f32, 32 KiB at the 2.7B shape) on chip (GPU shared memory,
 *     CPU cache) and reads every input once: what it loses is parallelism
 *     (L dependent steps per state, no tensor cores), not traffic. */
double sfn_bytes(const sfc_case *c, sf_dtype dt, int device, double fused_bytes) {
    if (c->op != SFC_ATTN_FWD) return fused_bytes;
    const double rows = (double)c->b * c->H * c->Lq;
    const double es = device == SF_DEVICE_CPU ? 4.0 : (double)sf_dtype_size(dt);
    return fused_bytes - 4.0 * rows + 4.0 * rows * c->Lk * es;
}

#ifndef SFN_WITH_CUDA
/* A build without the CUDA backend: a GPU baseline cannot be made. */
sf_status sfn_cuda_prepare(sfn_cuda **plan, int device, void *stream, sfc_op op, const void *params,
                           char *msg, size_t msglen) {
    (void)device, (void)stream, (void)op, (void)params;
    *plan = NULL;
    snprintf(msg, msglen, "the naive GPU baseline is not built (no CUDA)");
    return SF_ERR_UNSUPPORTED;
}
sf_status sfn_cuda_run(sfn_cuda *plan, sfc_op op, const void *params, char *msg, size_t msglen) {
    (void)plan, (void)op, (void)params;
    snprintf(msg, msglen, "the naive GPU baseline is not built (no CUDA)");
    return SF_ERR_UNSUPPORTED;
}
void sfn_cuda_release(sfn_cuda *plan) { (void)plan; }
#endif
