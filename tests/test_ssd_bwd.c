/* test_ssd_bwd.c - sf_ssd_bwd: the reference against finite differences
 * of the reference forward, every backend against the reference over the
 * SSD cases of the table (tests/cases.c), and the validation errors.
 *
 *   test_ssd_bwd --fd                 reference vs finite differences
 *   test_ssd_bwd --backend cpu|cuda   backend vs reference, f32/f16/bf16
 *   test_ssd_bwd --errors             bad inputs give clear errors
 * Options: --seed S, --case NAME, --threads T, --all (big cases too).
 * Exit 0: passed; 1: failed; 77: skipped (no CUDA device). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case_tensor.h"

/* ------------------------------------------------------------------ */
/* finite differences of the reference forward                         */
/* ------------------------------------------------------------------ */

enum { FX, FDT, FA, FB, FC, FD_, FZ, FDTB, FINIT, FSEQ, FCU, FOUT, FFIN, FNT };

typedef struct fd_cfg {
    const char *name;
    int b, L, H, P, G, N;
    int D, z, dt_bias, softplus, init, final;
    float dt_min, dt_max; /* dt_max 0: unbounded */
    int varlen, nseq, seqlens[6];
} fd_cfg;

static const fd_cfg fd_cfgs[] = {
    {"all_opts", 2, 13, 4, 3, 2, 5, 2, 1, 1, 1, 1, 1, 0.02f, 0.25f, 0, 0, {0}},
    {"plain", 1, 9, 2, 2, 1, 3, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0, 0, {0}},
    {"seq_idx", 2, 11, 2, 2, 1, 3, 1, 0, 0, 0, 1, 1, 0.0f, 0.0f, 1, 3, {4, 1, 6}},
    {"cu_seqlens", 1, 12, 2, 3, 2, 4, 1, 1, 1, 0, 1, 1, 0.0f, 0.12f, 2, 4, {5, 0, 1, 6}},
    {"g_eq_h_softplus", 1, 10, 3, 2, 3, 4, 2, 1, 1, 1, 1, 0, 0.0f, 0.0f, 0, 0, {0}},
};

typedef struct fd_prob {
    const fd_cfg *c;
    float *v[FNT];     /* host data, contiguous, f32 (i32 for the index tensors) */
    int64_t n[FNT];    /* elements (0: absent) */
    int rank[FNT];
    int64_t shape[FNT][4];
} fd_prob;

static uint64_t seed_state;

/* a value on the grid of multiples of 2^-12, so x +- k 2^-6 is exact in f32 */
static float grid(double v) { return (float)(nearbyint(v * 4096.0) / 4096.0); }

static void fd_alloc(fd_prob *pr, int k, int rank, const int64_t *sh) {
    pr->rank[k] = rank;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        pr->shape[k][i] = sh[i];
        n *= sh[i];
    }
    pr->n[k] = n;
    pr->v[k] = (float *)calloc((size_t)n + 1, sizeof(float));
    if (!pr->v[k]) {
        printf("FAIL host out of memory\n");
        exit(1);
    }
}

static sf_tensor fd_view(const fd_prob *pr, int k, float *data) {
    sf_tensor t;
    memset(&t, 0, sizeof t);
    if (!pr->n[k] && !pr->v[k]) return t;
    const sf_dtype dt = (k == FSEQ || k == FCU) ? SF_I32 : SF_F32;
    return sf_tensor_contiguous(data ? data : pr->v[k], dt, SF_DEVICE_CPU, pr->rank[k], pr->shape[k]);
}

static void fd_build(fd_prob *pr, const fd_cfg *c) {
    memset(pr, 0, sizeof *pr);
    pr->c = c;
    const int64_t b = c->b, L = c->L, H = c->H, P = c->P, G = c->G, N = c->N;
    const int64_t ns = c->varlen == 2 ? c->nseq : b;
    fd_alloc(pr, FX, 4, (int64_t[]){b, L, H, P});
    fd_alloc(pr, FDT, 3, (int64_t[]){b, L, H});
    fd_alloc(pr, FA, 1, (int64_t[]){H});
    fd_alloc(pr, FB, 4, (int64_t[]){b, L, G, N});
    fd_alloc(pr, FC, 4, (int64_t[]){b, L, G, N});
    if (c->D == 1) fd_alloc(pr, FD_, 1, (int64_t[]){H});
    if (c->D == 2) fd_alloc(pr, FD_, 2, (int64_t[]){H, P});
    if (c->z) fd_alloc(pr, FZ, 4, (int64_t[]){b, L, H, P});
    if (c->dt_bias) fd_alloc(pr, FDTB, 1, (int64_t[]){H});
    if (c->init) fd_alloc(pr, FINIT, 4, (int64_t[]){ns, H, P, N});
    if (c->varlen == 1) fd_alloc(pr, FSEQ, 2, (int64_t[]){b, L});
    if (c->varlen == 2) fd_alloc(pr, FCU, 1, (int64_t[]){ns + 1});
    fd_alloc(pr, FOUT, 4, (int64_t[]){b, L, H, P});
    if (c->final) fd_alloc(pr, FFIN, 4, (int64_t[]){ns, H, P, N});
    for (int64_t i = 0; i < pr->n[FX]; i++) pr->v[FX][i] = grid(ct_rng_normal(&seed_state));
    for (int64_t i = 0; i < pr->n[FDT]; i++)
        pr->v[FDT][i] = grid(c->softplus ? -3.0 + 2.5 * ct_rng_unif(&seed_state) : 0.01 + 0.2 * ct_rng_unif(&seed_state));
    for (int64_t i = 0; i < H; i++) pr->v[FA][i] = grid(-(0.5 + 1.5 * ct_rng_unif(&seed_state)));
    for (int k = FB; k <= FC; k++)
        for (int64_t i = 0; i < pr->n[k]; i++) pr->v[k][i] = grid(0.5 * ct_rng_normal(&seed_state));
    for (int64_t i = 0; i < pr->n[FD_]; i++) pr->v[FD_][i] = grid(ct_rng_normal(&seed_state));
    for (int64_t i = 0; i < pr->n[FZ]; i++) pr->v[FZ][i] = grid(ct_rng_normal(&seed_state));
    for (int64_t i = 0; i < pr->n[FDTB]; i++)
        pr->v[FDTB][i] = grid(c->softplus ? -0.5 + ct_rng_unif(&seed_state) : 0.02 * ct_rng_unif(&seed_state));
    for (int64_t i = 0; i < pr->n[FINIT]; i++) pr->v[FINIT][i] = grid(0.5 * ct_rng_normal(&seed_state));
    if (c->varlen == 1) {
        int32_t *si = (int32_t *)pr->v[FSEQ];
        for (int64_t r = 0; r < b; r++) {
            int64_t pos = 0;
            int id = 0;
            for (int s = 0; s < c->nseq; s++, id++)
                for (int j = 0; j < c->seqlens[s] && pos < L; j++) si[r * L + pos++] = id;
            while (pos < L) si[r * L + pos++] = id;
        }
    }
    if (c->varlen == 2) {
        int32_t *cu = (int32_t *)pr->v[FCU];
        cu[0] = 0;
        for (int i = 0; i < c->nseq; i++) cu[i + 1] = cu[i] + c->seqlens[i];
    }
}

static void fd_free(fd_prob *pr) {
    for (int k = 0; k < FNT; k++) free(pr->v[k]);
}

static void fd_fwd_params(const fd_prob *pr, sf_ssd_fwd_params *p) {
    const fd_cfg *c = pr->c;
    sf_ssd_fwd_params_init(p);
    p->x = fd_view(pr, FX, NULL);
    p->dt = fd_view(pr, FDT, NULL);
    p->A = fd_view(pr, FA, NULL);
    p->B = fd_view(pr, FB, NULL);
    p->C = fd_view(pr, FC, NULL);
    p->D = fd_view(pr, FD_, NULL);
    p->z = fd_view(pr, FZ, NULL);
    p->dt_bias = fd_view(pr, FDTB, NULL);
    p->initial_states = fd_view(pr, FINIT, NULL);
    p->seq_idx = fd_view(pr, FSEQ, NULL);
    p->cu_seqlens = fd_view(pr, FCU, NULL);
    p->out = fd_view(pr, FOUT, NULL);
    p->final_states = fd_view(pr, FFIN, NULL);
    p->chunk_size = 64;
    p->dt_softplus = c->softplus;
    p->dt_min = c->dt_min;
    p->dt_max = c->dt_max > 0.0f ? c->dt_max : INFINITY;
    p->backend = SF_BACKEND_REF;
}

/* The loss sum(w_out out) + sum(w_fin final_states) of the reference forward. */
static double fd_loss(sf_ctx *ctx, const fd_prob *pr, const float *wout, const float *wfin) {
    sf_ssd_fwd_params p;
    fd_fwd_params(pr, &p);
    sf_status s = sf_ssd_fwd(ctx, &p);
    if (s != SF_OK) {
        printf("FAIL reference forward: %s\n", sf_ctx_last_error(ctx));
        exit(1);
    }
    double l = 0.0;
    for (int64_t i = 0; i < pr->n[FOUT]; i++) l += (double)wout[i] * (double)pr->v[FOUT][i];
    for (int64_t i = 0; i < pr->n[FFIN]; i++) l += (double)wfin[i] * (double)pr->v[FFIN][i];
    return l;
}

/* The processed dt of raw value r with bias, in double (clamp flags out). */
static int fd_clamped(const fd_cfg *c, double r, double bias) {
    double v = r + bias;
    double u = c->softplus ? (v > 20.0 ? v : log1p(exp(v))) : v;
    double hi = c->dt_max > 0.0f ? c->dt_max : INFINITY;
    return u < c->dt_min ? -1 : u > hi ? 1 : 0;
}

static int fd_run(sf_ctx *ctx, const fd_cfg *c) {
    fd_prob pr;
    fd_build(&pr, c);
    float *wout = (float *)malloc(sizeof(float) * ((size_t)pr.n[FOUT] + 1));
    float *wfin = (float *)malloc(sizeof(float) * ((size_t)pr.n[FFIN] + 1));
    for (int64_t i = 0; i < pr.n[FOUT]; i++) wout[i] = grid(ct_rng_normal(&seed_state));
    for (int64_t i = 0; i < pr.n[FFIN]; i++) wfin[i] = grid(ct_rng_normal(&seed_state));

    /* analytic gradients from the reference backward */
    static const int ins[] = {FX, FDT, FA, FB, FC, FD_, FZ, FDTB, FINIT};
    static const char *names[] = {"x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"};
    float *grad[9];
    sf_ssd_bwd_params q;
    sf_ssd_bwd_params_init(&q);
    fd_fwd_params(&pr, &q.fwd);
    q.dout = sf_tensor_contiguous(wout, SF_F32, SF_DEVICE_CPU, 4, pr.shape[FOUT]);
    if (pr.n[FFIN]) q.dfinal_states = sf_tensor_contiguous(wfin, SF_F32, SF_DEVICE_CPU, 4, pr.shape[FFIN]);
    sf_tensor *gt[9] = {&q.dx, &q.ddt, &q.dA, &q.dB, &q.dC, &q.dD, &q.dz, &q.ddt_bias, &q.dinitial_states};
    for (int k = 0; k < 9; k++) {
        grad[k] = NULL;
        if (!pr.v[ins[k]]) continue;
        grad[k] = (float *)malloc(sizeof(float) * ((size_t)pr.n[ins[k]] + 1));
        for (int64_t i = 0; i < pr.n[ins[k]]; i++) grad[k][i] = NAN;
        *gt[k] = fd_view(&pr, ins[k], grad[k]);
    }
    q.backend = SF_BACKEND_REF;
    if (sf_ssd_bwd(ctx, &q) != SF_OK) {
        printf("FAIL fd %s: sf_ssd_bwd: %s\n", c->name, sf_ctx_last_error(ctx));
        exit(1);
    }

    /* fourth-order central differences, step 2^-6 */
    const double hstep = 1.0 / 64.0;
    int fails = 0;
    for (int k = 0; k < 9; k++) {
        if (!grad[k]) continue;
        float *v = pr.v[ins[k]];
        double num = 0.0, den = 0.0;
        long skipped = 0, unwritten = 0;
        for (int64_t i = 0; i < pr.n[ins[k]]; i++) {
            const float v0 = v[i];
            if (ins[k] == FDT || ins[k] == FDTB) {
                /* no clamp boundary inside the stencil: the clamp is a kink */
                int kink = 0;
                const int64_t H = c->H;
                for (int64_t j = 0; j < pr.n[FDT] && !kink; j++) {
                    if (ins[k] == FDT && j != i) continue;
                    if (ins[k] == FDTB && j % H != i) continue;
                    const double bias = pr.v[FDTB] ? pr.v[FDTB][j % H] : 0.0;
                    const int s0 = fd_clamped(c, pr.v[FDT][j], bias);
                    for (int m = -2; m <= 2; m++)
                        if (fd_clamped(c, pr.v[FDT][j] + m * hstep, bias) != s0) kink = 1;
                }
                if (kink) {
                    skipped++;
                    continue;
                }
            }
            double f[4];
            const int steps[4] = {-2, -1, 1, 2};
            for (int m = 0; m < 4; m++) {
                v[i] = (float)(v0 + steps[m] * hstep);
                f[m] = fd_loss(ctx, &pr, wout, wfin);
            }
            v[i] = v0;
            const double fdv = (f[0] - 8.0 * f[1] + 8.0 * f[2] - f[3]) / (12.0 * hstep);
            if (isnan(grad[k][i])) {
                unwritten++;
                continue;
            }
            num += (grad[k][i] - fdv) * (grad[k][i] - fdv);
            den += fdv * fdv;
        }
        const double err = den > 0 ? sqrt(num / den) : sqrt(num);
        const int ok = err < 2e-4 && unwritten == 0;
        printf("%s fd %-16s d%-15s rel err %.2e (%lld elements, %ld at a clamp edge skipped)%s\n",
               ok ? "ok  " : "FAIL", c->name, names[k], err, (long long)pr.n[ins[k]], skipped,
               unwritten ? " UNWRITTEN" : "");
        fails += !ok;
    }
    for (int k = 0; k < 9; k++) free(grad[k]);
    free(wout);
    free(wfin);
    fd_free(&pr);
    return fails;
}

/* ------------------------------------------------------------------ */
/* a backend against the reference over the case table                  */
/* ------------------------------------------------------------------ */

enum { X, DT, A, B, C, D, Z, DTB, INIT, SEQ, CU, DOUT, DFIN, GX, GDT, GA, GB, GC, GD, GZ, GDTB, GINIT, NT };
#define NGRAD (NT - GX)
static const char *grad_names[NGRAD] = {"dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_states"};

static void specs(const sfc_case *c, sf_dtype dt, tspec *t) {
    memset(t, 0, sizeof(tspec) * NT);
    const int64_t b = c->b, L = c->L, H = c->H, P = c->P, N = c->N;
    const int64_t ns = c->varlen == 2 ? c->nseq : b;
    ct_ssd_inputs(c, dt, t);
    ct_spec(&t[DOUT], 4, (int64_t[]){b, L, H, P}, dt, GEN_NORMAL);
    if (c->final) ct_spec(&t[DFIN], 4, (int64_t[]){ns, H, P, N}, SF_F32, GEN_HALF);
    /* every gradient the inputs allow */
    for (int k = X; k <= INIT; k++) {
        if (!t[k].present) continue;
        tspec *g = &t[GX + k];
        ct_spec(g, t[k].rank, t[k].shape, t[k].dtype, GEN_OUT);
    }
}

static void fill_index(const sfc_case *c, tspec *t) {
    if (t[CU].present) {
        int32_t *cu = (int32_t *)t[CU].h;
        cu[0] = 0;
        for (int i = 0; i < c->nseq; i++) cu[i + 1] = cu[i] + c->seqlens[i];
    }
    if (t[SEQ].present) {
        int32_t *si = (int32_t *)t[SEQ].h;
        for (int64_t r = 0; r < c->b; r++) {
            int64_t pos = 0, id = 0;
            for (int s = 0; s < c->nseq; s++, id++)
                for (int j = 0; j < c->seqlens[s] && pos < c->L; j++) si[r * c->L + pos++] = (int32_t)id;
            while (pos < c->L) si[r * c->L + pos++] = (int32_t)id;
        }
    }
}

/* The backward's params over tensor data in[k] (ref: the contiguous f32
 * copies on the host). */
static void set_params(const sfc_case *c, tspec *t, int ref, int device, sf_backend be, int det,
                       sf_ssd_bwd_params *q) {
    sf_ssd_bwd_params_init(q);
    void *d[NT];
    for (int k = 0; k < NT; k++) d[k] = ref ? (void *)t[k].ref : t[k].dptr;
    sf_ssd_fwd_params *p = &q->fwd;
    p->x = ct_view(&t[X], d[X], ref, device);
    p->dt = ct_view(&t[DT], d[DT], ref, device);
    p->A = ct_view(&t[A], d[A], ref, device);
    p->B = ct_view(&t[B], d[B], ref, device);
    p->C = ct_view(&t[C], d[C], ref, device);
    p->D = ct_view(&t[D], d[D], ref, device);
    p->z = ct_view(&t[Z], d[Z], ref, device);
    p->dt_bias = ct_view(&t[DTB], d[DTB], ref, device);
    p->initial_states = ct_view(&t[INIT], d[INIT], ref, device);
    p->seq_idx = ct_view(&t[SEQ], d[SEQ], ref, device);
    p->cu_seqlens = ct_view(&t[CU], d[CU], ref, device);
    p->chunk_size = c->chunk;
    p->dt_softplus = c->softplus;
    p->dt_min = c->dt_min;
    p->dt_max = c->dt_max > 0.0f ? c->dt_max : INFINITY;
    q->dout = ct_view(&t[DOUT], d[DOUT], ref, device);
    q->dfinal_states = ct_view(&t[DFIN], d[DFIN], ref, device);
    sf_tensor *g[NGRAD] = {&q->dx, &q->ddt, &q->dA, &q->dB, &q->dC, &q->dD, &q->dz, &q->ddt_bias,
                           &q->dinitial_states};
    for (int k = 0; k < NGRAD; k++) *g[k] = ct_view(&t[GX + k], d[GX + k], ref, device);
    q->deterministic = det;
    q->backend = be;
}

/* Bound of the relative Frobenius error of a gradient in dtype dt: the
 * backends accumulate in f32 (the reference in f64) and store the
 * gradients of x, dt, B, C and z in their dtype. */
static double tolerance(sf_dtype dt, int gpu) {
    if (dt == SF_F32) return gpu ? 1e-3 : 2e-5;
    if (dt == SF_F16) return gpu ? 2e-3 : 1e-3;
    return gpu ? 1e-2 : 5e-3;
}

static int verbose;
static int served; /* backend calls that ran and were checked */

/* Runs case c in dtype dt on ctx; 1 on failure. */
static int run_case(const sfc_case *c, sf_dtype dt, sf_ctx *ctx, sf_ctx *ref_ctx, sf_backend be, uint64_t seed,
                    int det) {
    tspec t[NT];
    specs(c, dt, t);
    uint64_t rng = seed;
    int fail = 0;
    for (int k = 0; k < NT; k++) {
        if (!t[k].present) continue;
        ct_layout(&t[k], c->strided);
        t[k].h = (unsigned char *)malloc(t[k].alloc);
        t[k].ref = (float *)calloc((size_t)ct_numel(&t[k]) + 1, sizeof(float));
        if (!t[k].h || !t[k].ref) {
            printf("FAIL %s: host out of memory\n", c->name);
            exit(1);
        }
        memset(t[k].h, 0xff, t[k].alloc);
        if (t[k].is_out) {
            for (int64_t e = 0; e < ct_numel(&t[k]); e++) t[k].ref[e] = NAN;
            continue;
        }
        if (t[k].is_index) continue;
        for (int64_t e = 0; e < ct_numel(&t[k]); e++)
            t[k].ref[e] = ct_store(&t[k], e, (float)ct_gen_value(t[k].gen, &rng));
    }
    fill_index(c, t);
    for (int k = 0; k < NT; k++)
        if (t[k].present && t[k].is_index) memcpy(t[k].ref, t[k].h, (size_t)ct_numel(&t[k]) * sizeof(int32_t));

    sf_ssd_bwd_params q;
    set_params(c, t, 1, SF_DEVICE_CPU, SF_BACKEND_REF, 0, &q);
    sf_status s = sf_ssd_bwd(ref_ctx, &q);
    if (s != SF_OK) {
        printf("FAIL %s: reference: %s\n", c->name, sf_ctx_last_error(ref_ctx));
        fail = 1;
        goto done;
    }
    const int device = sf_ctx_device(ctx);
    for (int k = 0; k < NT && s == SF_OK; k++) {
        if (!t[k].present) continue;
        s = sf_malloc(ctx, &t[k].dptr, t[k].alloc);
        if (s == SF_OK) s = sf_memcpy(ctx, t[k].dptr, t[k].h, t[k].alloc);
    }
    if (s != SF_OK) {
        printf("FAIL %s: buffers: %s\n", c->name, sf_ctx_last_error(ctx));
        fail = 1;
        goto done;
    }
    /* two calls in deterministic mode: bit-identical */
    for (int rep = 0; rep < (det ? 2 : 1) && !fail; rep++) {
        set_params(c, t, 0, device, be, det, &q);
        s = sf_ssd_bwd(ctx, &q);
        if (s == SF_OK) s = sf_ctx_synchronize(ctx);
        if (s == SF_ERR_UNSUPPORTED && be != SF_BACKEND_CPU) { /* the CPU serves every case */
            printf("skip %-22s %-4s: %s\n", c->name, sf_dtype_name(dt), sf_ctx_last_error(ctx));
            goto done;
        }
        if (s != SF_OK) {
            printf("FAIL %s %s: %s\n", c->name, sf_dtype_name(dt), sf_ctx_last_error(ctx));
            fail = 1;
            goto done;
        }
        for (int k = GX; k < NT; k++) {
            if (!t[k].present) continue;
            if (rep == 0) {
                if (sf_memcpy(ctx, t[k].h, t[k].dptr, t[k].alloc) != SF_OK) {
                    printf("FAIL %s: copy back\n", c->name);
                    fail = 1;
                    goto done;
                }
                continue;
            }
            unsigned char *again = (unsigned char *)malloc(t[k].alloc);
            if (!again || sf_memcpy(ctx, again, t[k].dptr, t[k].alloc) != SF_OK) {
                free(again);
                printf("FAIL %s: copy back\n", c->name);
                fail = 1;
                goto done;
            }
            if (memcmp(again, t[k].h, t[k].alloc) != 0) {
                printf("FAIL %s %s: %s differs between two deterministic calls\n", c->name, sf_dtype_name(dt),
                       grad_names[k - GX]);
                fail = 1;
            }
            free(again);
        }
        if (rep == 0) /* poison again for the second call */
            for (int k = GX; k < NT; k++)
                if (t[k].present && det) {
                    unsigned char *poison = (unsigned char *)malloc(t[k].alloc);
                    if (!poison) continue;
                    memset(poison, 0xff, t[k].alloc);
                    if (sf_memcpy(ctx, t[k].dptr, poison, t[k].alloc) != SF_OK) fail = 1;
                    free(poison);
                }
    }
    served++;
    const double tol = tolerance(dt, device >= 0);
    char line[1024];
    int off = 0;
    int bad = 0;
    for (int k = GX; k < NT; k++) {
        if (!t[k].present) continue;
        long long unw = 0, nonf = 0;
        const double err = ct_compare(&t[k], t[k].ref, &unw, &nonf);
        const int guards = ct_guards_intact(&t[k]);
        const int ok = err <= tol && unw == 0 && nonf == 0 && guards;
        bad |= !ok;
        off += snprintf(line + off, sizeof line - (size_t)off, " %s %.1e%s%s%s", grad_names[k - GX], err,
                        unw ? " UNWRITTEN" : "", nonf ? " NONFINITE" : "", guards ? "" : " GUARDS");
        if (off >= (int)sizeof line) off = (int)sizeof line - 1;
    }
    if (bad || verbose)
        printf("%s %-22s %-4s tol %.0e:%s\n", bad ? "FAIL" : "ok  ", c->name, sf_dtype_name(dt), tol, line);
    else
        printf("ok   %-22s %-4s\n", c->name, sf_dtype_name(dt));
    fail |= bad;
done:
    for (int k = 0; k < NT; k++) {
        if (t[k].dptr) sf_free(ctx, t[k].dptr);
        free(t[k].h);
        free(t[k].ref);
    }
    return fail;
}

/* ------------------------------------------------------------------ */
/* validation                                                            */
/* ------------------------------------------------------------------ */

static int expect_err(sf_ctx *ctx, const sf_ssd_bwd_params *q, sf_status want, const char *word, const char *what) {
    const sf_status s = sf_ssd_bwd(ctx, q);
    const char *msg = sf_ctx_last_error(ctx);
    const int ok = s == want && strstr(msg, word) != NULL;
    printf("%s errors %-40s -> %s: %s\n", ok ? "ok  " : "FAIL", what, sf_status_string(s), msg);
    return !ok;
}

static int run_errors(sf_ctx *ctx) {
    fd_prob pr;
    fd_build(&pr, &fd_cfgs[0]);
    const int64_t n = pr.n[FX];
    float *wout = (float *)calloc((size_t)n, sizeof(float)), *gx = (float *)calloc((size_t)n, sizeof(float));
    float *gz = (float *)calloc((size_t)n, sizeof(float)), *gA = (float *)calloc(64, sizeof(float));
    int fails = 0;
    sf_ssd_bwd_params q, base;
    sf_ssd_bwd_params_init(&base);
    fd_fwd_params(&pr, &base.fwd);
    base.fwd.backend = SF_BACKEND_AUTO;
    base.backend = SF_BACKEND_CPU;
    base.dout = sf_tensor_contiguous(wout, SF_F32, SF_DEVICE_CPU, 4, pr.shape[FX]);
    base.dx = sf_tensor_contiguous(gx, SF_F32, SF_DEVICE_CPU, 4, pr.shape[FX]);

    q = base;
    if (sf_ssd_bwd(ctx, &q) != SF_OK) {
        printf("FAIL errors: the valid call fails: %s\n", sf_ctx_last_error(ctx));
        fails++;
    }
    q = base;
    q.dout.data = NULL;
    fails += expect_err(ctx, &q, SF_ERR_NULL_POINTER, "dout", "dout absent");
    q = base;
    q.dout.dtype = SF_BF16;
    fails += expect_err(ctx, &q, SF_ERR_DTYPE, "dout", "dout bf16 with f32 x");
    q = base;
    q.dx.shape[3] = 2;
    fails += expect_err(ctx, &q, SF_ERR_SHAPE, "dx", "dx of the wrong shape");
    q = base;
    q.dA = sf_tensor_contiguous(gA, SF_F16, SF_DEVICE_CPU, 1, (int64_t[]){pr.shape[FA][0]});
    fails += expect_err(ctx, &q, SF_ERR_DTYPE, "dA", "dA in f16");
    q = base;
    q.fwd.z.data = NULL;
    q.dz = sf_tensor_contiguous(gz, SF_F32, SF_DEVICE_CPU, 4, pr.shape[FX]);
    fails += expect_err(ctx, &q, SF_ERR_INVALID_ARG, "dz", "dz without z");
    q = base;
    q.fwd.initial_states.data = NULL;
    q.dinitial_states = sf_tensor_contiguous(gA, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){1});
    fails += expect_err(ctx, &q, SF_ERR_INVALID_ARG, "dinitial_states", "dinitial_states without states");
    q = base;
    q.dx.data = pr.v[FX];
    fails += expect_err(ctx, &q, SF_ERR_INVALID_ARG, "dx", "dx over x");
    q = base;
    q.deterministic = 2;
    fails += expect_err(ctx, &q, SF_ERR_INVALID_ARG, "deterministic", "deterministic 2");
    q = base;
    q.fwd.chunk_size = 100;
    fails += expect_err(ctx, &q, SF_ERR_INVALID_ARG, "chunk_size", "chunk_size 100");
    q = base;
    q.dfinal_states = sf_tensor_contiguous(gA, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){4});
    fails += expect_err(ctx, &q, SF_ERR_SHAPE, "dfinal_states", "dfinal_states of rank 1");
    q = base;
    q.fwd.A.data = NULL;
    fails += expect_err(ctx, &q, SF_ERR_NULL_POINTER, "A", "A absent");
    free(wout);
    free(gx);
    free(gz);
    free(gA);
    fd_free(&pr);
    return fails;
}

/* An empty sequence (L 0): dinitial_states = dfinal_states, the
 * reductions zero. */
static int run_empty(sf_ctx *ctx, sf_backend be) {
    const int64_t H = 3, P = 2, N = 4, b = 2;
    float x[1], dtv[1], B_[1], C_[1], A_[3] = {-1, -2, -3}, bias[3] = {0, 0, 0};
    float init[2 * 3 * 2 * 4], dfin[2 * 3 * 2 * 4], dinit[2 * 3 * 2 * 4], dA[3], dtb[3];
    for (int i = 0; i < 48; i++) {
        init[i] = (float)i;
        dfin[i] = (float)(i % 7) - 3.0f;
        dinit[i] = NAN;
    }
    for (int i = 0; i < 3; i++) dA[i] = dtb[i] = NAN;
    sf_ssd_bwd_params q;
    sf_ssd_bwd_params_init(&q);
    q.fwd.x = sf_tensor_contiguous(x, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){b, 0, H, P});
    q.fwd.dt = sf_tensor_contiguous(dtv, SF_F32, SF_DEVICE_CPU, 3, (int64_t[]){b, 0, H});
    q.fwd.A = sf_tensor_contiguous(A_, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){H});
    q.fwd.B = sf_tensor_contiguous(B_, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){b, 0, 1, N});
    q.fwd.C = sf_tensor_contiguous(C_, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){b, 0, 1, N});
    q.fwd.dt_bias = sf_tensor_contiguous(bias, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){H});
    q.fwd.initial_states = sf_tensor_contiguous(init, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){b, H, P, N});
    q.dout = sf_tensor_contiguous(x, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){b, 0, H, P});
    q.dfinal_states = sf_tensor_contiguous(dfin, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){b, H, P, N});
    q.dinitial_states = sf_tensor_contiguous(dinit, SF_F32, SF_DEVICE_CPU, 4, (int64_t[]){b, H, P, N});
    q.dA = sf_tensor_contiguous(dA, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){H});
    q.ddt_bias = sf_tensor_contiguous(dtb, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){H});
    q.backend = be;
    int bad = sf_ssd_bwd(ctx, &q) != SF_OK;
    for (int i = 0; i < 48; i++) bad |= dinit[i] != dfin[i];
    for (int i = 0; i < 3; i++) bad |= dA[i] != 0.0f || dtb[i] != 0.0f;
    printf("%s empty L: dinitial_states = dfinal_states, dA = ddt_bias = 0 (%s)\n", bad ? "FAIL" : "ok  ",
           be == SF_BACKEND_REF ? "ref" : "cpu");
    return bad;
}

int main(int argc, char **argv) {
    uint64_t seed = 0x5eed5eedULL;
    const char *mode = "fd", *only = NULL;
    sf_backend be = SF_BACKEND_CPU;
    int threads = 0, all = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fd")) mode = "fd";
        else if (!strcmp(argv[i], "--errors")) mode = "errors";
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            mode = "backend";
            be = !strcmp(argv[++i], "cuda") ? SF_BACKEND_CUDA : SF_BACKEND_CPU;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "-v")) verbose = 1;
        else {
            printf("usage: test_ssd_bwd [--fd | --errors | --backend cpu|cuda] [--seed S] [--case NAME] "
                   "[--threads T] [--all] [-v]\n");
            return 2;
        }
    }
    printf("test_ssd_bwd %s seed 0x%llx\n", mode, (unsigned long long)seed);
    seed_state = seed;
    sf_ctx *host = NULL;
    if (sf_ctx_create(&host, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL cannot create a CPU context\n");
        return 1;
    }
    if (threads > 0) sf_ctx_set_threads(host, threads);
    int fails = 0;
    if (!strcmp(mode, "fd")) {
        for (size_t i = 0; i < sizeof fd_cfgs / sizeof fd_cfgs[0]; i++)
            if (!only || !strcmp(only, fd_cfgs[i].name)) fails += fd_run(host, &fd_cfgs[i]);
        fails += run_empty(host, SF_BACKEND_REF);
    } else if (!strcmp(mode, "errors")) {
        fails += run_errors(host);
        fails += run_empty(host, SF_BACKEND_CPU);
    } else {
        sf_ctx *ctx = host;
        if (be == SF_BACKEND_CUDA) {
            if (sf_ctx_create(&ctx, 0) != SF_OK) {
                printf("SKIP test_ssd_bwd --backend cuda: no CUDA device (%s)\n", sf_ctx_last_error(NULL));
                sf_ctx_destroy(host);
                return 77;
            }
        }
        static const sf_dtype dts[] = {SF_F32, SF_F16, SF_BF16};
        for (int i = 0; i < sfc_ncases; i++) {
            const sfc_case *c = &sfc_cases[i];
            if (c->op != SFC_SSD_FWD || (c->big && !all)) continue;
            if (only && strcmp(only, c->name)) continue;
            for (int d = 0; d < 3; d++) {
                /* mixed-input cases (f32 dt/B/C) only with 16-bit x */
                if (c->f32_in && dts[d] == SF_F32) continue;
                fails += run_case(c, dts[d], ctx, host, be, seed + (uint64_t)i * 131 + (uint64_t)d, d == 0);
            }
        }
        if (ctx != host) sf_ctx_destroy(ctx);
        if (!fails && served == 0) {
            /* nothing checked is not a pass: a pinned configuration that
             * serves none of the cases here is a visible skip, else a failure */
            const char *force = getenv("SF_AUTOTUNE_FORCE");
            sf_ctx_destroy(host);
            if (force && force[0]) {
                printf("SKIP: SF_AUTOTUNE_FORCE=%s served no case here\n", force);
                return 77;
            }
            printf("FAIL: no case ran on the %s backend\n", be == SF_BACKEND_CPU ? "cpu" : "cuda");
            return 1;
        }
    }
    sf_ctx_destroy(host);
    printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
