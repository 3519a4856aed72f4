/* test_cp.c - context parallelism simulated in one process on the CPU.
 *
 * R in {1, 2, 3, 4} ranks.  For each case the inputs of one long sequence
 * are split as the drivers expect (SSD: contiguous slices; attention: the
 * load-balanced layout, rank r holding chunks r and 2R-1-r) and the result
 * is compared with one sf_ssd_fwd / sf_attn_fwd over the whole sequence,
 * on the same backend and dtype:
 *   sim     the public building blocks, rank after rank, with a host-side
 *           gather (SSD) or the documented ring schedule replayed with
 *           sf_attn_fwd + sf_attn_merge into an f32 accumulator that starts
 *           empty (lse -inf, out NaN: must not be read);
 *   driver  the drivers of src/core/cp.c (the code under sf_ssd_fwd_cp and
 *           sf_attn_fwd_ring) on R threads with a mailbox transport.
 * Errors are relative Frobenius norms; outputs are poisoned with NaN first.
 * Then unit checks of merge / combine and the error paths
 * (test_cp_units.c).  With a CUDA
 * device present the cases run again on it (ranks simulated on the one
 * GPU, the thread transport copying device memory), which exercises the
 * CUDA kernels of every piece for R > 1; CI without a GPU skips that. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cp.h"

int failures = 0;

/* ------------------------------------------------------------------ */
/* Data helpers                                                        */
/* ------------------------------------------------------------------ */

static uint64_t rng_state = 0x5eed5eedULL;
static double urand(double lo, double hi) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        printf("out of memory\n");
        exit(1);
    }
    return p;
}

int g_dev = SF_DEVICE_CPU;
sf_ctx *g_mem;

static size_t bbytes(const dbuf *b) { return (size_t)b->n * sf_dtype_size(b->dt); }
void bput(dbuf b) {
    if (b.d != b.h && sf_memcpy(g_mem, b.d, b.h, bbytes(&b)) != SF_OK) exit(1);
}
void bget(dbuf b) {
    if (b.d != b.h && sf_memcpy(g_mem, b.h, b.d, bbytes(&b)) != SF_OK) exit(1);
}
dbuf bnew(sf_dtype dt, int64_t n) {
    dbuf b = {NULL, NULL, dt, n};
    b.h = xalloc(bbytes(&b));
    b.d = b.h;
    if (g_dev >= 0 && sf_malloc(g_mem, &b.d, bbytes(&b)) != SF_OK) {
        printf("device allocation failed\n");
        exit(1);
    }
    return b;
}
void bfree(dbuf *b) {
    if (b->d != b->h) sf_free(g_mem, b->d);
    free(b->h);
    b->h = b->d = NULL;
}
void poison(void *p, sf_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; i++) sf_stf(p, dt, i, NAN);
}
void bpoison(dbuf b) {
    poison(b.h, b.dt, b.n);
    bput(b);
}
dbuf brnd(sf_dtype dt, int64_t n, double lo, double hi) {
    dbuf b = bnew(dt, n);
    for (int64_t i = 0; i < n; i++) sf_stf(b.h, dt, i, (float)urand(lo, hi));
    bput(b);
    return b;
}
sf_tensor T(void *p, sf_dtype dt, int rank, const int64_t *shape) {
    return sf_tensor_contiguous(p, dt, g_dev, rank, shape);
}

/* Tokens [t0, t0 + n) along dim 1 of a tensor. */
static sf_tensor along1(sf_tensor t, int64_t t0, int64_t n) {
    t.data = (char *)t.data + t0 * t.stride[1] * (int64_t)sf_dtype_size(t.dtype);
    t.shape[1] = n;
    return t;
}

/* Relative Frobenius error accumulated over pieces; NaN counts as failure. */
typedef struct err_acc { double num, den; int nan; } err_acc;
static void err_add(err_acc *e, const void *a, sf_dtype adt, const void *b, sf_dtype bdt, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double x = sf_ldf(a, adt, i), y = sf_ldf(b, bdt, i);
        if (isnan(x)) e->nan = 1;
        if (isinf(y) && x == y) continue; /* -inf lse on both sides */
        e->num += (x - y) * (x - y);
        e->den += y * y;
    }
}
static double err_val(const err_acc *e) {
    return e->nan ? INFINITY : sqrt(e->num / (e->den > 0 ? e->den : 1.0));
}

/* f32: the brief's bound.  f16/bf16: the CP output is rounded twice (before
 * and after the correction / merge) against once for the single call:
 * about two roundings of the format (measured 2.5e-4 f16, 2.1e-3 bf16). */
static double dtol(sf_dtype dt) {
    if (g_dev >= 0) /* f32 SSD runs TF32 products: two TF32 results differ by ~3e-4 */
        return dt == SF_F32 ? 2e-3 : dt == SF_F16 ? 3e-3 : 1.5e-2;
    return dt == SF_F32 ? 1e-5 : dt == SF_F16 ? 2e-3 : 1e-2;
}

sf_ctx *mk_ctx(sf_backend be) {
    sf_ctx *c = NULL;
    if (sf_ctx_create(&c, g_dev) != SF_OK) {
        printf("cannot create a context on device %d\n", g_dev);
        exit(1);
    }
    sf_ctx_set_backend(c, be);
    return c;
}

/* ------------------------------------------------------------------ */
/* Thread transport: R ranks of one process exchanging through mailboxes */
/* ------------------------------------------------------------------ */

/* Memory of the rank's context; copies through sf_memcpy (synchronous),
 * after waiting for the rank's queued work, so it serves CUDA contexts
 * (device-to-device) as well as CPU ones. */
static void *tp_buffer(void *user, sf_ctx *ctx, size_t bytes) {
    rank_tp *r = (rank_tp *)user;
    if (bytes > r->size) {
        sf_free(ctx, r->buf);
        r->buf = NULL;
        r->size = 0;
        if (sf_malloc(ctx, &r->buf, bytes) != SF_OK) return NULL;
        r->size = bytes;
    }
    /* garbage, as fresh device memory would be: the drivers must not read
     * anything they did not write */
    if (g_dev < 0) memset(r->buf, 0xff, bytes);
    return r->buf;
}
static sf_status tp_allgather(void *user, sf_ctx *ctx, void *buf, size_t bytes) {
    rank_tp *r = (rank_tp *)user;
    sf_status s = sf_ctx_synchronize(ctx);
    r->w->mail[r->rank][0] = buf;
    pthread_barrier_wait(&r->w->bar);
    for (int q = 0; q < r->w->R; q++)
        if (q != r->rank && s == SF_OK)
            s = sf_memcpy(ctx, (char *)buf + q * bytes, (const char *)r->w->mail[q][0] + q * bytes, bytes);
    pthread_barrier_wait(&r->w->bar);
    return s;
}
static sf_status tp_mark(void *user, sf_ctx *ctx) {
    (void)user;
    (void)ctx;
    return SF_OK;
}
/* Each rank reads its predecessor's send buffers directly; between the two
 * barriers every rank writes only its own receive buffers, which are never
 * anyone's send buffers in the same step. */
static sf_status tp_ring_start(void *user, sf_ctx *ctx, const void *const *send, void *const *recv,
                               int n, size_t bytes) {
    rank_tp *r = (rank_tp *)user;
    const int prev = (r->rank + r->w->R - 1) % r->w->R;
    sf_status s = sf_ctx_synchronize(ctx);
    for (int i = 0; i < n; i++) r->w->mail[r->rank][i] = send[i];
    pthread_barrier_wait(&r->w->bar);
    for (int i = 0; i < n && s == SF_OK; i++) s = sf_memcpy(ctx, recv[i], r->w->mail[prev][i], bytes);
    pthread_barrier_wait(&r->w->bar);
    return s;
}
static sf_status tp_ring_wait(void *user, sf_ctx *ctx) {
    (void)user;
    (void)ctx;
    return SF_OK;
}

sf_cp_transport make_tp(rank_tp *r, int R) {
    sf_cp_transport t = {r, r->rank, R, tp_buffer, tp_allgather, tp_mark, tp_ring_start, tp_ring_wait};
    return t;
}

typedef struct job {
    world *w;
    int rank, is_attn;
    sf_backend be;
    sf_ssd_fwd_params ssd;
    sf_attn_fwd_params attn;
    sf_status status;
    char err[SF_ERRMSG_LEN];
} job;

static sf_comm *g_comm; /* when set, the (one-rank) jobs run the public NCCL drivers */

static void *job_main(void *arg) {
    job *j = (job *)arg;
    sf_ctx *ctx = mk_ctx(j->be);
    sf_ctx_set_threads(ctx, 1);
    rank_tp r = {j->w, j->rank, ctx, NULL, 0};
    sf_cp_transport t = make_tp(&r, j->w->R);
    if (g_comm) /* the public drivers over a real (one-rank) NCCL communicator */
        j->status = j->is_attn ? sf_attn_fwd_ring(ctx, g_comm, &j->attn) : sf_ssd_fwd_cp(ctx, g_comm, &j->ssd);
    else
        j->status = j->is_attn ? sf_cp_attn_ring_run(ctx, &j->attn, &t) : sf_cp_ssd_run(ctx, &j->ssd, &t);
    if (j->status == SF_OK) j->status = sf_ctx_synchronize(ctx);
    snprintf(j->err, sizeof j->err, "%s", sf_ctx_last_error(ctx));
    sf_free(ctx, r.buf);
    sf_ctx_destroy(ctx);
    return NULL;
}

/* Runs jobs[0..R) on R threads; returns 0 when every rank succeeded. */
static int run_jobs(job *jobs, int R) {
    world w;
    memset(&w, 0, sizeof w);
    w.R = R;
    pthread_barrier_init(&w.bar, NULL, (unsigned)R);
    pthread_t th[MAXR];
    for (int r = 0; r < R; r++) {
        jobs[r].w = &w;
        jobs[r].rank = r;
        pthread_create(&th[r], NULL, job_main, &jobs[r]);
    }
    int bad = 0;
    for (int r = 0; r < R; r++) {
        pthread_join(th[r], NULL);
        if (jobs[r].status != SF_OK) {
            printf("FAIL driver rank %d: %s (%s)\n", r, sf_status_string(jobs[r].status), jobs[r].err);
            bad = 1;
        }
    }
    pthread_barrier_destroy(&w.bar);
    return bad;
}

/* ------------------------------------------------------------------ */
/* SSD                                                                 */
/* ------------------------------------------------------------------ */

/* Params over tokens [t0, t0 + n) of the case's global tensors. */
sf_ssd_fwd_params ssd_params(const ssd_case *c, const ssd_data *d, int64_t t0, int64_t n,
                                    void *out, void *fin, int with_init) {
    sf_ssd_fwd_params p;
    sf_ssd_fwd_params_init(&p);
    const int64_t b = c->b, L = c->L, H = c->H, P = c->P, G = c->G, N = c->N;
    p.x = along1(T(d->x.d, c->dt, 4, (int64_t[]){b, L, H, P}), t0, n);
    p.dt = along1(T(d->dt.d, c->dt, 3, (int64_t[]){b, L, H}), t0, n);
    p.B = along1(T(d->B.d, c->dt, 4, (int64_t[]){b, L, G, N}), t0, n);
    p.C = along1(T(d->C.d, c->dt, 4, (int64_t[]){b, L, G, N}), t0, n);
    if (c->z) p.z = along1(T(d->z.d, c->dt, 4, (int64_t[]){b, L, H, P}), t0, n);
    p.out = along1(T(out, c->dt, 4, (int64_t[]){b, L, H, P}), t0, n);
    p.A = T(d->A.d, SF_F32, 1, (int64_t[]){H});
    if (c->D == 1) p.D = T(d->D.d, SF_F32, 1, (int64_t[]){H});
    if (c->D == 2) p.D = T(d->D.d, SF_F32, 2, (int64_t[]){H, P});
    if (c->softplus) p.dt_bias = T(d->bias.d, SF_F32, 1, (int64_t[]){H});
    if (c->init && with_init) p.initial_states = T(d->init.d, SF_F32, 4, (int64_t[]){b, H, P, N});
    if (fin) p.final_states = T(fin, SF_F32, 4, (int64_t[]){b, H, P, N});
    p.chunk_size = c->chunk;
    p.dt_softplus = c->softplus;
    p.dt_min = c->dt_min;
    p.dt_max = c->dt_max;
    p.backend = c->be;
    return p;
}

static double ssd_err(err_acc *e, dbuf got, dbuf want) {
    bget(got);
    err_add(e, got.h, got.dt, want.h, want.dt, want.n);
    return err_val(e);
}

static void run_ssd_case(const ssd_case *c) {
    const int R = c->R;
    const int64_t b = c->b, L = c->L, H = c->H, P = c->P, G = c->G, N = c->N;
    const int64_t nx = b * L * H * P, nbc = b * L * G * N, nst = b * H * P * N;
    ssd_data d;
    d.x = brnd(c->dt, nx, -1, 1);
    d.dt = c->softplus ? brnd(c->dt, b * L * H, -2, 1) : brnd(c->dt, b * L * H, 0.0, 0.3);
    d.B = brnd(c->dt, nbc, -1, 1);
    d.C = brnd(c->dt, nbc, -1, 1);
    d.z = brnd(c->dt, nx, -2, 2);
    d.A = bnew(SF_F32, H);
    for (int64_t h = 0; h < H; h++) /* slow and fast decays */
        ((float *)d.A.h)[h] = -(float)exp(urand(log(0.01), log(1.0)));
    bput(d.A);
    d.D = brnd(SF_F32, H * P, -1, 1);
    d.bias = brnd(SF_F32, H, -1, 0.5);
    d.init = brnd(SF_F32, nst, -0.5, 0.5);
    int64_t start[MAXR + 1];
    start[0] = 0;
    for (int r = 0; r < R; r++) start[r + 1] = start[r] + (c->lens[0] ? c->lens[r] : L / R);
    if (start[R] != L) {
        printf("bad case %s\n", c->name);
        exit(1);
    }
    sf_ctx *ctx = mk_ctx(c->be);

    /* reference: one call over everything, and the state after every
     * slice (prefix runs) */
    dbuf out_ref = bnew(c->dt, nx), tmp = bnew(c->dt, nx), fin_ref = bnew(SF_F32, R * nst);
    for (int r = 0; r < R; r++) {
        sf_ssd_fwd_params p = ssd_params(c, &d, 0, start[r + 1], r == R - 1 ? out_ref.d : tmp.d,
                                         (float *)fin_ref.d + r * nst, 1);
        OKS(sf_ssd_fwd(ctx, &p));
    }
    bget(out_ref);
    bget(fin_ref);

    /* sim: building blocks rank by rank */
    dbuf out = bnew(c->dt, nx), fin = bnew(SF_F32, R * nst), hin = bnew(SF_F32, nst);
    dbuf sall = bnew(SF_F32, R * nst), lall = bnew(SF_F32, R * b * H);
    float *S = sall.d, *LD = lall.d, *F = fin.d;
    bpoison(out);
    bpoison(fin);
    for (int r = 0; r < R; r++) {
        sf_ssd_fwd_params p = ssd_params(c, &d, start[r], start[r + 1] - start[r], out.d, NULL, r == 0);
        OKS(sf_ssd_cp_local(ctx, &p, T(S + r * nst, SF_F32, 4, (int64_t[]){b, H, P, N}),
                            T(LD + r * b * H, SF_F32, 2, (int64_t[]){b, H})));
    }
    err_acc e_unc = {0, 0, 0}, eo = {0, 0, 0}, ef = {0, 0, 0}, eo2 = {0, 0, 0}, ef2 = {0, 0, 0};
    ssd_err(&e_unc, out, out_ref);
    for (int r = 0; r < R; r++) { /* the "all-gather" is that every rank sees sall / lall */
        OKS(sf_ssd_cp_combine(ctx, T(S, SF_F32, 5, (int64_t[]){R, b, H, P, N}),
                              T(LD, SF_F32, 3, (int64_t[]){R, b, H}), r,
                              T(hin.d, SF_F32, 4, (int64_t[]){b, H, P, N})));
        sf_ssd_fwd_params p = ssd_params(c, &d, start[r], start[r + 1] - start[r], out.d,
                                         c->final ? F + r * nst : NULL, r == 0);
        OKS(sf_ssd_cp_correct(ctx, &p, T(hin.d, SF_F32, 4, (int64_t[]){b, H, P, N}),
                              T(S + r * nst, SF_F32, 4, (int64_t[]){b, H, P, N}),
                              T(LD + r * b * H, SF_F32, 2, (int64_t[]){b, H})));
    }
    ssd_err(&eo, out, out_ref);
    if (c->final) ssd_err(&ef, fin, fin_ref);

    /* driver: the same through sf_cp_ssd_run on R threads */
    bpoison(out);
    bpoison(fin);
    job jobs[MAXR];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < R; r++) {
        jobs[r].be = c->be;
        /* every rank passes initial_states: the driver reads rank 0's only */
        jobs[r].ssd = ssd_params(c, &d, start[r], start[r + 1] - start[r], out.d,
                                 c->final ? F + r * nst : NULL, 1);
    }
    int bad = run_jobs(jobs, R);
    ssd_err(&eo2, out, out_ref);
    if (c->final) ssd_err(&ef2, fin, fin_ref);

    const double tol = dtol(c->dt);
    printf("ssd  %-4s %-36s R=%d  sim out %.2e fin %.2e | driver out %.2e fin %.2e  (uncorrected %.1e, tol %.0e)\n",
           g_dev < 0 ? "cpu" : "cuda", c->name, R, err_val(&eo), err_val(&ef), err_val(&eo2),
           err_val(&ef2), err_val(&e_unc), tol);
    CHECK(err_val(&eo) < tol && err_val(&ef) < tol, "ssd %s R=%d sim", c->name, R);
    CHECK(!bad && err_val(&eo2) < tol && err_val(&ef2) < tol, "ssd %s R=%d driver", c->name, R);
    CHECK(R == 1 || err_val(&e_unc) > 0.05, "ssd %s R=%d: the correction should matter", c->name, R);

    dbuf *all[] = {&d.x, &d.dt, &d.B, &d.C, &d.z, &d.A, &d.D, &d.bias, &d.init, &out_ref, &tmp,
                  &fin_ref, &out, &fin, &hin, &sall, &lall};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) bfree(all[i]);
    sf_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------ */
/* Attention                                                           */
/* ------------------------------------------------------------------ */

typedef struct attn_case {
    const char *name;
    sf_dtype dt;
    int b, Lc, H, Hkv, d, causal, lse;
    float scale;
    sf_backend be;
    int R;
    int fused_kv; /* driver gets k, v as strided views of one (b, L, 2, Hkv, d) buffer */
} attn_case;

/* Global position of local row i of rank r (chunks r and 2R-1-r). */
static int64_t gpos(int R, int r, int64_t Lc, int64_t i) {
    return i < Lc ? r * Lc + i : (2 * R - 1 - r) * Lc + (i - Lc);
}

/* Copies the rank's rows of a global (b, S, Hx, d) tensor to local (b, 2Lc, Hx, d)
 * with local row stride `lrow` elements. */
static void gather_rows(void *dst, int64_t lrow, const void *src, int64_t b, int R, int r, int64_t Lc,
                        int64_t rowlen, size_t es) {
    const int64_t S = 2 * R * Lc;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < 2 * Lc; i++)
            memcpy((char *)dst + (size_t)((bi * 2 * Lc + i) * lrow) * es,
                   (const char *)src + (size_t)((bi * S + gpos(R, r, Lc, i)) * rowlen) * es,
                   (size_t)rowlen * es);
}

static void run_attn_case(const attn_case *c) {
    const int R = c->R;
    const int64_t b = c->b, Lc = c->Lc, H = c->H, Hk = c->Hkv, d = c->d, S = 2 * R * Lc, Ll = 2 * Lc;
    const size_t es = sf_dtype_size(c->dt);
    dbuf q = brnd(c->dt, b * S * H * d, -1.5, 1.5), k = brnd(c->dt, b * S * Hk * d, -1.5, 1.5);
    dbuf v = brnd(c->dt, b * S * Hk * d, -1, 1);
    sf_ctx *ctx = mk_ctx(c->be);

    sf_attn_fwd_params p;
    sf_attn_fwd_params_init(&p);
    dbuf out_ref = bnew(c->dt, b * S * H * d), lse_ref = bnew(SF_F32, b * H * S);
    p.q = T(q.d, c->dt, 4, (int64_t[]){b, S, H, d});
    p.k = T(k.d, c->dt, 4, (int64_t[]){b, S, Hk, d});
    p.v = T(v.d, c->dt, 4, (int64_t[]){b, S, Hk, d});
    p.out = T(out_ref.d, c->dt, 4, (int64_t[]){b, S, H, d});
    p.lse = T(lse_ref.d, SF_F32, 3, (int64_t[]){b, H, S});
    p.causal = c->causal;
    p.softmax_scale = c->scale;
    p.backend = c->be;
    OKS(sf_attn_fwd(ctx, &p));
    bget(out_ref);
    bget(lse_ref);
    const float *lref = lse_ref.h;

    /* local inputs of every rank */
    dbuf ql[MAXR], kl[MAXR], vl[MAXR], kvf[MAXR], outl[MAXR], lsel[MAXR];
    for (int r = 0; r < R; r++) {
        ql[r] = bnew(c->dt, b * Ll * H * d);
        kl[r] = bnew(c->dt, b * Ll * Hk * d);
        vl[r] = bnew(c->dt, b * Ll * Hk * d);
        kvf[r] = bnew(c->dt, b * Ll * 2 * Hk * d);
        gather_rows(ql[r].h, H * d, q.h, b, R, r, Lc, H * d, es);
        gather_rows(kl[r].h, Hk * d, k.h, b, R, r, Lc, Hk * d, es);
        gather_rows(vl[r].h, Hk * d, v.h, b, R, r, Lc, Hk * d, es);
        gather_rows(kvf[r].h, 2 * Hk * d, k.h, b, R, r, Lc, Hk * d, es);
        gather_rows((char *)kvf[r].h + (size_t)(Hk * d) * es, 2 * Hk * d, v.h, b, R, r, Lc, Hk * d, es);
        bput(ql[r]);
        bput(kl[r]);
        bput(vl[r]);
        bput(kvf[r]);
    }
    const int64_t oshape[4] = {b, Ll, H, d}, kshape[4] = {b, Ll, Hk, d}, lshape[3] = {b, H, Ll};

    /* sim: the documented schedule with the public ops, f32 accumulator */
    err_acc eo = {0, 0, 0}, el = {0, 0, 0}, eo2 = {0, 0, 0}, el2 = {0, 0, 0};
    dbuf acc = bnew(SF_F32, b * Ll * H * d), lacc = bnew(SF_F32, b * H * Ll);
    dbuf part = bnew(c->dt, b * Ll * H * d), plse = bnew(SF_F32, b * H * Ll);
    for (int r = 0; r < R; r++) {
        bpoison(acc); /* empty rows: out must not be read */
        for (int64_t i = 0; i < b * H * Ll; i++) ((float *)lacc.h)[i] = -INFINITY;
        bput(lacc);
        sf_tensor A = T(acc.d, SF_F32, 4, oshape), AL = T(lacc.d, SF_F32, 3, lshape);
        sf_tensor Pt = T(part.d, c->dt, 4, oshape), PL = T(plse.d, SF_F32, 3, lshape);
        for (int s = 0; s < R; s++) {
            const int src = (r - s + R) % R;
            sf_attn_fwd_params a = p;
            a.k = T(kl[src].d, c->dt, 4, kshape);
            a.v = T(vl[src].d, c->dt, 4, kshape);
            a.q = T(ql[r].d, c->dt, 4, oshape);
            a.out = Pt;
            a.lse = PL;
            a.causal = 0;
            int64_t m0 = 0, mn = Ll; /* rows merged this step */
            if (s == 0) {
                a.causal = c->causal;
            } else if (c->causal && src < r) {
                a.k = along1(a.k, 0, Lc);
                a.v = along1(a.v, 0, Lc);
            } else if (c->causal) {
                a.q = along1(a.q, Lc, Lc);
                a.out = along1(Pt, Lc, Lc);
                a.lse.data = (float *)plse.d + Lc;
                a.lse.shape[2] = Lc;
                m0 = Lc;
                mn = Lc;
            }
            OKS(sf_attn_fwd(ctx, &a));
            sf_tensor al = AL, pl = PL;
            al.data = (float *)lacc.d + m0;
            pl.data = (float *)plse.d + m0;
            al.shape[2] = pl.shape[2] = mn;
            OKS(sf_attn_merge(ctx, along1(A, m0, mn), al, along1(Pt, m0, mn), pl));
        }
        bget(acc);
        bget(lacc);
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t i = 0; i < Ll; i++) {
                const int64_t g = gpos(R, r, Lc, i);
                err_add(&eo, (float *)acc.h + (bi * Ll + i) * H * d, SF_F32,
                        (char *)out_ref.h + (size_t)((bi * S + g) * H * d) * es, c->dt, H * d);
                for (int64_t h = 0; h < H; h++)
                    err_add(&el, (float *)lacc.h + (bi * H + h) * Ll + i, SF_F32,
                            lref + (bi * H + h) * S + g, SF_F32, 1);
            }
    }

    /* driver on R threads */
    job jobs[MAXR];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < R; r++) {
        outl[r] = bnew(c->dt, b * Ll * H * d);
        lsel[r] = bnew(SF_F32, b * H * Ll);
        bpoison(outl[r]);
        bpoison(lsel[r]);
        sf_attn_fwd_params a = p;
        a.q = T(ql[r].d, c->dt, 4, oshape);
        a.k = T(kl[r].d, c->dt, 4, kshape);
        a.v = T(vl[r].d, c->dt, 4, kshape);
        if (c->fused_kv) {
            const int64_t st[4] = {Ll * 2 * Hk * d, 2 * Hk * d, d, 1};
            a.k.data = kvf[r].d;
            a.v.data = (char *)kvf[r].d + (size_t)(Hk * d) * es;
            memcpy(a.k.stride, st, sizeof st);
            memcpy(a.v.stride, st, sizeof st);
        }
        a.out = T(outl[r].d, c->dt, 4, oshape);
        a.lse = c->lse ? T(lsel[r].d, SF_F32, 3, lshape) : (sf_tensor){0};
        jobs[r].is_attn = 1;
        jobs[r].be = c->be;
        jobs[r].attn = a;
    }
    int bad = run_jobs(jobs, R);
    for (int r = 0; r < R; r++) {
        bget(outl[r]);
        bget(lsel[r]);
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t i = 0; i < Ll; i++) {
                const int64_t g = gpos(R, r, Lc, i);
                err_add(&eo2, (char *)outl[r].h + (size_t)((bi * Ll + i) * H * d) * es, c->dt,
                        (char *)out_ref.h + (size_t)((bi * S + g) * H * d) * es, c->dt, H * d);
                if (c->lse)
                    for (int64_t h = 0; h < H; h++)
                        err_add(&el2, (float *)lsel[r].h + (bi * H + h) * Ll + i, SF_F32,
                                lref + (bi * H + h) * S + g, SF_F32, 1);
            }
    }
    const double tol = dtol(c->dt);
    char l2[16] = "   -    ";
    if (c->lse) snprintf(l2, sizeof l2, "%.2e", err_val(&el2));
    printf("attn %-4s %-36s R=%d  sim out %.2e lse %.2e | driver out %.2e lse %s  (tol %.0e)\n",
           g_dev < 0 ? "cpu" : "cuda", c->name, R, err_val(&eo), err_val(&el), err_val(&eo2), l2, tol);
    CHECK(err_val(&eo) < tol && err_val(&el) < 1e-5, "attn %s R=%d sim", c->name, R);
    CHECK(!bad && err_val(&eo2) < tol && err_val(&el2) < 1e-5, "attn %s R=%d driver", c->name, R);

    for (int r = 0; r < R; r++) {
        dbuf *bs[] = {&ql[r], &kl[r], &vl[r], &kvf[r], &outl[r], &lsel[r]};
        for (int i = 0; i < 6; i++) bfree(bs[i]);
    }
    dbuf *all[] = {&q, &k, &v, &out_ref, &lse_ref, &acc, &lacc, &part, &plse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) bfree(all[i]);
    sf_ctx_destroy(ctx);
}

/* One pass over the cases on g_dev: backend CPU (and REF) on the host,
 * CUDA on a device (where f32 attention is served by the CPU only). */
static void run_pass(void) {
    const int gpu = g_dev >= 0;
    const sf_backend CPU = gpu ? SF_BACKEND_CUDA : SF_BACKEND_CPU, REF = SF_BACKEND_REF;
    if (sf_ctx_create(&g_mem, g_dev) != SF_OK) exit(1);
    for (int R = 1; R <= 4; R++) {
        ssd_case c = {"f32 D z bias+softplus init final GQA", SF_F32, 2, 192, 4, 8, 2, 16, 64,
                      1, 1, 1, 1, 1, 0.0f, INFINITY, CPU, R, {0}};
        run_ssd_case(&c);
    }
    const ssd_case ssd_more[] = {
        {"f32 uneven slices, D(H,P), clamp", SF_F32, 1, 203, 4, 8, 1, 16, 64, 2, 0, 0, 0, 1, 0.02f,
         0.25f, CPU, 3, {70, 64, 69}},
        {"f32 uneven slices 4 ranks, chunk 128", SF_F32, 2, 150, 2, 4, 2, 8, 128, 1, 1, 1, 1, 1,
         0.0f, INFINITY, CPU, 4, {1, 60, 33, 56}},
        {"f16 D z bias+softplus init final", SF_F16, 2, 192, 4, 8, 2, 16, 64, 1, 1, 1, 1, 1, 0.0f,
         INFINITY, CPU, 2, {0}},
        {"f16 all, 4 ranks", SF_F16, 1, 256, 4, 16, 1, 32, 64, 2, 1, 1, 1, 1, 0.0f, INFINITY, CPU, 4, {0}},
        {"bf16 D z bias+softplus init final", SF_BF16, 2, 192, 4, 8, 2, 16, 64, 1, 1, 1, 1, 1, 0.0f,
         INFINITY, CPU, 3, {0}},
        {"f32 long slices (g over 1024 tokens)", SF_F32, 1, 4096, 2, 4, 1, 8, 256, 1, 1, 1, 1, 1,
         0.0f, INFINITY, CPU, 4, {0}},
        {"ref backend f32 all", SF_F32, 1, 96, 2, 4, 1, 8, 64, 1, 1, 1, 1, 1, 0.0f, INFINITY, REF, 3, {0}},
        /* chunk 128 / 256 with dstate a multiple of 4: on CUDA the driver's
         * two passes (final states alone, then the forward from the entering
         * state) instead of local + correct */
        {"bf16 chunk 256 D z bias+softplus init final, uneven", SF_BF16, 2, 700, 4, 16, 2, 32, 256, 1, 1,
         1, 1, 1, 0.0f, INFINITY, CPU, 3, {300, 256, 144}},
        {"f16 chunk 128 D(H,P) GQA, 4 ranks", SF_F16, 1, 512, 8, 16, 2, 64, 128, 2, 1, 1, 1, 1, 0.0f,
         INFINITY, CPU, 4, {0}},
    };
    for (size_t i = 0; i < sizeof ssd_more / sizeof ssd_more[0]; i++)
        if (!(gpu && ssd_more[i].be == REF)) run_ssd_case(&ssd_more[i]);

    for (int R = 1; R <= 4; R++) {
        attn_case c = {"causal GQA lse", gpu ? SF_BF16 : SF_F32, 2, 20, 4, 2, 32, 1, 1, 0.0f, CPU, R, 0};
        run_attn_case(&c);
    }
    const attn_case attn_more[] = {
        {"f32 non-causal MHA scale 0.3 no lse", SF_F32, 1, 24, 2, 2, 16, 0, 0, 0.3f, CPU, 3, 0},
        {"f32 causal fused k/v (packed)", SF_F32, 2, 16, 4, 1, 32, 1, 1, 0.0f, CPU, 3, 1},
        {"f32 non-causal fused k/v", SF_F32, 1, 16, 2, 1, 8, 0, 1, 0.0f, CPU, 2, 1},
        {"f16 causal GQA lse", SF_F16, 2, 20, 4, 2, 32, 1, 1, 0.0f, CPU, 4, 0},
        {"bf16 causal GQA no lse", SF_BF16, 1, 32, 4, 2, 64, 1, 0, 0.0f, CPU, 2, 0},
        {"bf16 non-causal fused k/v", SF_BF16, 2, 12, 2, 2, 32, 0, 1, 0.0f, CPU, 3, 1},
        {"f16 causal MQA fused k/v d 128", SF_F16, 1, 72, 4, 1, 128, 1, 1, 0.0f, CPU, 3, 1},
        {"ref backend f32 causal", SF_F32, 1, 8, 2, 1, 16, 1, 1, 0.0f, REF, 3, 0},
        {"ref backend bf16 causal fused k/v", SF_BF16, 1, 8, 2, 2, 8, 1, 1, 0.0f, REF, 2, 1},
    };
    for (size_t i = 0; i < sizeof attn_more / sizeof attn_more[0]; i++)
        if (!(gpu && (attn_more[i].be == REF || attn_more[i].dt == SF_F32))) run_attn_case(&attn_more[i]);

    check_merge_units(CPU);
    check_combine_units(CPU);
    if (!gpu) {
        check_merge_units(REF);
        check_combine_units(REF);
        check_errors();
    } else { /* the public NCCL drivers with one rank against the same single calls */
        sf_comm_id id;
        sf_status s = sf_comm_id_create(&id);
        if (s == SF_OK) s = sf_comm_create(&g_comm, g_mem, &id, 1, 0);
        if (s == SF_OK) {
            ssd_case c = {"NCCL 1 rank: bf16 all", SF_BF16, 2, 320, 4, 16, 2, 32, 64, 1, 1, 1, 1, 1,
                          0.0f, INFINITY, CPU, 1, {0}};
            run_ssd_case(&c);
            attn_case a = {"NCCL 1 rank: bf16 causal fused k/v", SF_BF16, 2, 40, 4, 2, 64, 1, 1,
                           0.0f, CPU, 1, 1};
            run_attn_case(&a);
            sf_comm_destroy(g_comm);
            g_comm = NULL;
        } else {
            printf("NCCL drivers not run: %s (%s)\n", sf_status_string(s), sf_ctx_last_error(g_mem));
            CHECK(s == SF_ERR_UNSUPPORTED, "sf_comm_create with one rank");
        }
    }
    sf_ctx_destroy(g_mem);
    g_mem = NULL;
}

/* test_cp [--cpu | --cuda]: both passes by default (the CUDA one when a
 * device is present); --cuda alone answers 77 (skipped) without one. */
int main(int argc, char **argv) {
    const int only_cpu = argc > 1 && !strcmp(argv[1], "--cpu");
    const int only_cuda = argc > 1 && !strcmp(argv[1], "--cuda");
    const int ngpu = sf_cuda_device_count();
    if (!only_cuda) {
        g_dev = SF_DEVICE_CPU;
        run_pass();
    }
    if (!only_cpu && ngpu > 0) {
        g_dev = 0;
        run_pass();
    } else if (only_cuda) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
