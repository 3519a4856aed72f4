/* naive_cpu.c - the naive CPU baselines, f32: attention with the whole
 * score matrix materialised, and the SSD as the plain sequential
 * recurrence.  Plain loops the compiler can vectorise (dot products on
 * eight partial sums), threaded over independent heads and rows: the
 * yardstick for the fused CPU backend on the same threads, so it is kept
 * simple but not slowed on purpose. */
#include <math.h>
#include <stdio.h>

#include "naive_impl.h"

#ifdef _OPENMP
#define SFN_OMP_FOR _Pragma("omp parallel for schedule(static) num_threads(threads)")
#else
#define SFN_OMP_FOR
#endif

/* a . b over n floats, eight partial sums so the loop vectorises without
 * reassociation flags */
static float dot_f32(const float *a, const float *b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

sf_status sfn_cpu_attn_ws(const sfn_attn_shape *s, size_t *bytes, char *msg, size_t msglen) {
    if (!sfn_size(bytes, sizeof(float), s->b, s->H, s->Lq, s->Lk)) {
        snprintf(msg, msglen, "the naive score matrix (%lld x %lld per head) does not fit in memory",
                 (long long)s->Lq, (long long)s->Lk);
        return SF_ERR_TOO_LARGE;
    }
    return SF_OK;
}

void sfn_cpu_attn(const sf_attn_fwd_params *p, const sfn_attn_shape *s, float *S, int threads) {
    const int64_t H = s->H, Lq = s->Lq, Lk = s->Lk, d = s->d, grp = s->H / s->Hkv;
    const int64_t nbh = s->b * H, nrows = nbh * Lq;
    const float *q = (const float *)p->q.data, *k = (const float *)p->k.data;
    const float *v = (const float *)p->v.data;
    float *o = (float *)p->out.data;
    const int64_t *qs = p->q.stride, *ks = p->k.stride, *vs = p->v.stride, *os = p->out.stride;
    const float scale = s->scale;
    (void)threads;

    /* 1. S = scale Q K^T: every score, masked or not */
    SFN_OMP_FOR
    for (int64_t bh = 0; bh < nbh; bh++) {
        const int64_t bi = bh / H, h = bh % H, kh = h / grp;
        float *Sh = S + bh * Lq * Lk;
        for (int64_t i = 0; i < Lq; i++) {
            const float *qi = q + bi * qs[0] + i * qs[1] + h * qs[2];
            for (int64_t j = 0; j < Lk; j++)
                Sh[i * Lk + j] = scale * dot_f32(qi, k + bi * ks[0] + j * ks[1] + kh * ks[2], d);
        }
    }

    /* 2. P = softmax(S + mask) row by row, over S: masked scores become 0,
     *    the max is subtracted (every exponent <= 0); a row that sees no key
     *    is all 0, so its output is 0 */
    SFN_OMP_FOR
    for (int64_t r = 0; r < nrows; r++) {
        float *row = S + r * Lk;
        int64_t lo, hi;
        sfn_key_range(s, r % Lq, &lo, &hi);
        float m = -INFINITY, l = 0.f;
        for (int64_t j = lo; j < hi; j++) m = row[j] > m ? row[j] : m;
        for (int64_t j = lo; j < hi; j++) l += expf(row[j] - m);
        const float inv = hi > lo ? 1.f / l : 0.f;
        for (int64_t j = 0; j < Lk; j++) row[j] = (j >= lo && j < hi) ? expf(row[j] - m) * inv : 0.f;
    }

    /* 3. O = P V, the whole row of P (a dense product, as the naive one is) */
    SFN_OMP_FOR
    for (int64_t bh = 0; bh < nbh; bh++) {
        const int64_t bi = bh / H, h = bh % H, kh = h / grp;
        const float *Ph = S + bh * Lq * Lk;
        for (int64_t i = 0; i < Lq; i++) {
            float *oi = o + bi * os[0] + i * os[1] + h * os[2];
            for (int64_t e = 0; e < d; e++) oi[e] = 0.f;
            for (int64_t j = 0; j < Lk; j++) {
                const float pij = Ph[i * Lk + j];
                const float *vj = v + bi * vs[0] + j * vs[1] + kh * vs[2];
                for (int64_t e = 0; e < d; e++) oi[e] += pij * vj[e];
            }
        }
    }
}

sf_status sfn_cpu_ssd_ws(const sfn_ssd_shape *s, size_t *bytes, char *msg, size_t msglen) {
    if (!sfn_size(bytes, sizeof(float), s->b, s->H, s->P, s->N)) {
        snprintf(msg, msglen, "the naive SSD states do not fit in memory");
        return SF_ERR_TOO_LARGE;
    }
    return SF_OK;
}

/* dt as the library processes it (seqfuse.h): + dt_bias, softplus, clamp */
static float dt_process(float d, float bias, int softplus, float dmin, float dmax) {
    d += bias;
    if (softplus) d = d > 20.f ? d : log1pf(expf(d));
    d = d < dmin ? dmin : d;
    return d > dmax ? dmax : d;
}

void sfn_cpu_ssd(const sf_ssd_fwd_params *p, const sfn_ssd_shape *s, float *state, int threads) {
    const int64_t H = s->H, L = s->L, P = s->P, N = s->N, hpg = s->H / s->G;
    const int64_t nbh = s->b * H;
    const float *x = (const float *)p->x.data, *dtp = (const float *)p->dt.data;
    const float *A = (const float *)p->A.data, *B = (const float *)p->B.data;
    const float *C = (const float *)p->C.data, *D = (const float *)p->D.data;
    const float *z = (const float *)p->z.data, *bias = (const float *)p->dt_bias.data;
    const float *init = (const float *)p->initial_states.data;
    float *out = (float *)p->out.data, *fin = (float *)p->final_states.data;
    const int64_t *xs = p->x.stride, *ds = p->dt.stride, *bs = p->B.stride, *cs = p->C.stride;
    const int64_t *zs = p->z.stride, *ys = p->out.stride, *is = p->initial_states.stride;
    const int64_t *fs = p->final_states.stride;
    (void)threads;

    SFN_OMP_FOR
    for (int64_t bh = 0; bh < nbh; bh++) {
        const int64_t bi = bh / H, h = bh % H, g = h / hpg;
        float *st = state + bh * P * N;
        const float Ah = A[h * p->A.stride[0]];
        const float bh_bias = s->has_bias ? bias[h * p->dt_bias.stride[0]] : 0.f;
        for (int64_t i = 0; i < P; i++)
            for (int64_t n = 0; n < N; n++)
                st[i * N + n] = s->has_init ? init[bi * is[0] + h * is[1] + i * is[2] + n * is[3]] : 0.f;

        for (int64_t t = 0; t < L; t++) {
            const float dt = dt_process(dtp[bi * ds[0] + t * ds[1] + h * ds[2]], bh_bias, p->dt_softplus,
                                        p->dt_min, p->dt_max);
            const float e = dt * Ah, dA = expf(e < 0.f ? e : 0.f); /* decay <= 1 */
            const float *Bt = B + bi * bs[0] + t * bs[1] + g * bs[2];
            const float *Ct = C + bi * cs[0] + t * cs[1] + g * cs[2];
            const float *xt = x + bi * xs[0] + t * xs[1] + h * xs[2];
            float *yt = out + bi * ys[0] + t * ys[1] + h * ys[2];
            for (int64_t i = 0; i < P; i++) {
                const float dx = dt * xt[i];
                float *row = st + i * N;
                for (int64_t n = 0; n < N; n++) row[n] = dA * row[n] + dx * Bt[n];
                float y = dot_f32(row, Ct, N);
                if (s->D_rank == 1) y += D[h * p->D.stride[0]] * xt[i];
                if (s->D_rank == 2) y += D[h * p->D.stride[0] + i * p->D.stride[1]] * xt[i];
                if (s->has_z) {
                    const float zv = z[bi * zs[0] + t * zs[1] + h * zs[2] + i];
                    y *= zv / (1.f + expf(-zv));
                }
                yt[i] = y;
            }
        }

        if (s->has_final)
            for (int64_t i = 0; i < P; i++)
                for (int64_t n = 0; n < N; n++)
                    fin[bi * fs[0] + h * fs[1] + i * fs[2] + n * fs[3]] = st[i * N + n];
    }
}
