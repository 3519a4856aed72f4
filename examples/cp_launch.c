/* cp_launch.c - context parallelism on one machine: one process per GPU.
 *
 *   cp_launch [--nranks R] [--L tokens] [--iters n] [--timeout s]
 *
 * The parent creates the communicator id (sf_comm_id_create touches no
 * GPU, so it may precede fork: CUDA must not be initialised before a
 * fork), forks R ranks and waits.  Rank r opens a context on GPU r, joins
 * the communicator and generates its part of one long random sequence
 * (a counter-based generator: every rank draws exactly the values a
 * single process would draw for the same global positions), then runs
 *   sf_ssd_fwd_cp     Mamba-2 2.7B layer shape (H 80, P 64, N 128, G 1,
 *                     chunk 256, bf16, D, z, dt_bias + softplus): rank r
 *                     holds tokens [r L/R, (r+1) L/R)
 *   sf_attn_fwd_ring  causal, 32 query heads over 8 KV heads of 128, bf16,
 *                     load-balanced layout (chunks r and 2R-1-r of L/(2R))
 * and writes its outputs into a shared mapping.  Rank 0 then runs the
 * single-GPU ops over the whole sequence.  The parent compares (relative
 * Frobenius error), prints the times and the strong-scaling efficiency
 * T_1 / (R T_R), and exits 0 when the errors are within the bf16 bound.
 * Exit 77 (skipped) when there are fewer GPUs than ranks or no NCCL. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seqfuse.h"

#define MAXR 16
enum { SH = 80, SP = 64, SN = 128, SG = 1, AH = 32, AHK = 8, AD = 128 };

typedef struct shared_hdr {
    double t_ssd[MAXR], t_attn[MAXR], t_ssd1, t_attn1;
} shared_hdr;

static int R = 2, ITERS = 5, TIMEOUT = 300;
static int64_t L = 16384;
static sf_comm_id g_id;
static shared_hdr *hdr;
static uint16_t *ssd_cp, *ssd_ref, *att_cp, *att_ref;
static float *fin_cp, *fin_ref, *lse_cp, *lse_ref;

/* ------------------------------------------------------------------ */
/* Deterministic inputs                                                 */
/* ------------------------------------------------------------------ */

/* Uniform in [lo, hi) from (stream, index): the same value on every rank. */
static float hrand(uint64_t stream, uint64_t i, float lo, float hi) {
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ULL ^ (stream * 0xd1b54a32d192ed03ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return lo + (hi - lo) * (float)((double)(z >> 11) / 9007199254740992.0);
}

static uint16_t to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest even (inputs are finite) */
    return (uint16_t)(x >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* rows [t0, t0 + n) of a global (L, width) bf16 stream into dst */
static void fill_rows(uint16_t *dst, uint64_t stream, int64_t t0, int64_t n, int64_t width, float lo,
                      float hi) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < width; j++)
            dst[t * width + j] = to_bf16(hrand(stream, (uint64_t)((t0 + t) * width + j), lo, hi));
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* One rank                                                            */
/* ------------------------------------------------------------------ */

#define TRY(call)                                                                               \
    do {                                                                                        \
        sf_status s_ = (call);                                                                  \
        if (s_ != SF_OK) {                                                                      \
            fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, #call, sf_status_string(s_),        \
                    ctx ? sf_ctx_last_error(ctx) : "");                                         \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

/* A device copy of host data (dev NULL on failure). */
static void *upload(sf_ctx *ctx, const void *host, size_t bytes) {
    void *d = NULL;
    if (sf_malloc(ctx, &d, bytes) != SF_OK) return NULL;
    if (sf_memcpy(ctx, d, host, bytes) != SF_OK) {
        sf_free(ctx, d);
        return NULL;
    }
    return d;
}

typedef struct ssd_bufs { void *x, *dt, *B, *C, *z, *A, *D, *bias, *out, *fin; } ssd_bufs;

/* Inputs of tokens [t0, t0 + n) on the device, and their params. */
static int ssd_setup(sf_ctx *ctx, int rank, int64_t t0, int64_t n, ssd_bufs *d, sf_ssd_fwd_params *p) {
    const int dev = sf_ctx_device(ctx);
    uint16_t *h = malloc((size_t)(n * SH * SP) * 2);
    float hf[SH];
    if (!h) return 1;
    struct { void **dst; uint64_t s; int64_t w; float lo, hi; } in[] = {
        {&d->x, 1, SH * SP, -1, 1}, {&d->z, 2, SH * SP, -2, 2}, {&d->dt, 3, SH, -3, 0},
        {&d->B, 4, SG * SN, -1, 1}, {&d->C, 5, SG * SN, -1, 1}};
    for (int i = 0; i < 5; i++) {
        fill_rows(h, in[i].s, t0, n, in[i].w, in[i].lo, in[i].hi);
        if (!(*in[i].dst = upload(ctx, h, (size_t)(n * in[i].w) * 2))) return 1;
    }
    free(h);
    for (int i = 0; i < SH; i++) hf[i] = -expf(hrand(6, (uint64_t)i, -4.5f, 0.0f)); /* A */
    if (!(d->A = upload(ctx, hf, sizeof hf))) return 1;
    for (int i = 0; i < SH; i++) hf[i] = hrand(7, (uint64_t)i, -1, 1);
    if (!(d->D = upload(ctx, hf, sizeof hf))) return 1;
    for (int i = 0; i < SH; i++) hf[i] = hrand(8, (uint64_t)i, -1, 1);
    if (!(d->bias = upload(ctx, hf, sizeof hf))) return 1;
    if (sf_malloc(ctx, &d->out, (size_t)(n * SH * SP) * 2) != SF_OK) return 1;
    if (sf_malloc(ctx, &d->fin, (size_t)(SH * SP * SN) * 4) != SF_OK) return 1;
    sf_ssd_fwd_params_init(p);
    p->x = sf_tensor_contiguous(d->x, SF_BF16, dev, 4, (int64_t[]){1, n, SH, SP});
    p->z = sf_tensor_contiguous(d->z, SF_BF16, dev, 4, (int64_t[]){1, n, SH, SP});
    p->out = sf_tensor_contiguous(d->out, SF_BF16, dev, 4, (int64_t[]){1, n, SH, SP});
    p->dt = sf_tensor_contiguous(d->dt, SF_BF16, dev, 3, (int64_t[]){1, n, SH});
    p->B = sf_tensor_contiguous(d->B, SF_BF16, dev, 4, (int64_t[]){1, n, SG, SN});
    p->C = sf_tensor_contiguous(d->C, SF_BF16, dev, 4, (int64_t[]){1, n, SG, SN});
    p->A = sf_tensor_contiguous(d->A, SF_F32, dev, 1, (int64_t[]){SH});
    p->D = sf_tensor_contiguous(d->D, SF_F32, dev, 1, (int64_t[]){SH});
    p->dt_bias = sf_tensor_contiguous(d->bias, SF_F32, dev, 1, (int64_t[]){SH});
    p->final_states = sf_tensor_contiguous(d->fin, SF_F32, dev, 4, (int64_t[]){1, SH, SP, SN});
    p->dt_softplus = 1;
    p->chunk_size = 256;
    (void)rank;
    return 0;
}

static void ssd_free(sf_ctx *ctx, ssd_bufs *d) {
    void *ps[] = {d->x, d->dt, d->B, d->C, d->z, d->A, d->D, d->bias, d->out, d->fin};
    for (int i = 0; i < 10; i++) sf_free(ctx, ps[i]);
    memset(d, 0, sizeof *d);
}

typedef struct attn_bufs { void *q, *k, *v, *out, *lse; } attn_bufs;

/* Global position of local row i of rank r in the load-balanced layout. */
static int64_t gpos(int r, int64_t Lc, int64_t i) {
    return i < Lc ? r * Lc + i : (2 * R - 1 - r) * Lc + (i - Lc);
}

/* Rows of rank r (r < 0: the whole sequence in order). */
static int attn_setup(sf_ctx *ctx, int r, attn_bufs *d, sf_attn_fwd_params *p) {
    const int dev = sf_ctx_device(ctx);
    const int64_t n = r < 0 ? L : L / R, Lc = L / (2 * R);
    uint16_t *h = malloc((size_t)(n * AH * AD) * 2);
    if (!h) return 1;
    struct { void **dst; uint64_t s; int64_t w; } in[] = {
        {&d->q, 11, AH * AD}, {&d->k, 12, AHK * AD}, {&d->v, 13, AHK * AD}};
    for (int i = 0; i < 3; i++) {
        for (int64_t t = 0; t < n; t++)
            fill_rows(h + t * in[i].w, in[i].s, r < 0 ? t : gpos(r, Lc, t), 1, in[i].w, -1, 1);
        if (!(*in[i].dst = upload(ctx, h, (size_t)(n * in[i].w) * 2))) return 1;
    }
    free(h);
    if (sf_malloc(ctx, &d->out, (size_t)(n * AH * AD) * 2) != SF_OK) return 1;
    if (sf_malloc(ctx, &d->lse, (size_t)(n * AH) * 4) != SF_OK) return 1;
    sf_attn_fwd_params_init(p);
    p->q = sf_tensor_contiguous(d->q, SF_BF16, dev, 4, (int64_t[]){1, n, AH, AD});
    p->k = sf_tensor_contiguous(d->k, SF_BF16, dev, 4, (int64_t[]){1, n, AHK, AD});
    p->v = sf_tensor_contiguous(d->v, SF_BF16, dev, 4, (int64_t[]){1, n, AHK, AD});
    p->out = sf_tensor_contiguous(d->out, SF_BF16, dev, 4, (int64_t[]){1, n, AH, AD});
    p->lse = sf_tensor_contiguous(d->lse, SF_F32, dev, 3, (int64_t[]){1, AH, n});
    p->causal = 1;
    return 0;
}

static void attn_free(sf_ctx *ctx, attn_bufs *d) {
    void *ps[] = {d->q, d->k, d->v, d->out, d->lse};
    for (int i = 0; i < 5; i++) sf_free(ctx, ps[i]);
    memset(d, 0, sizeof *d);
}

/* Average seconds of one call: one warm-up (it sizes the buffers), then ITERS. */
#define TIME(var, call)                                   \
    do {                                                  \
        TRY(call);                                        \
        TRY(sf_ctx_synchronize(ctx));                     \
        const double t0_ = now();                         \
        for (int it_ = 0; it_ < ITERS; it_++) TRY(call);  \
        TRY(sf_ctx_synchronize(ctx));                     \
        var = (now() - t0_) / ITERS;                      \
    } while (0)

static int rank_main(int rank) {
    sf_ctx *ctx = NULL;
    const int ngpu = sf_cuda_device_count();
    if (ngpu < R) {
        if (rank == 0) printf("cp_launch: %d ranks need %d GPUs, found %d: skipped\n", R, R, ngpu);
        return 77;
    }
    TRY(sf_ctx_create(&ctx, rank));
    sf_comm *comm = NULL;
    TRY(sf_comm_create(&comm, ctx, &g_id, R, rank));

    /* SSD: rank r holds tokens [r Lr, (r+1) Lr) */
    const int64_t Lr = L / R, t0 = rank * Lr;
    ssd_bufs sb;
    sf_ssd_fwd_params sp;
    memset(&sb, 0, sizeof sb);
    if (ssd_setup(ctx, rank, t0, Lr, &sb, &sp)) TRY(SF_ERR_OUT_OF_MEMORY);
    TIME(hdr->t_ssd[rank], sf_ssd_fwd_cp(ctx, comm, &sp));
    TRY(sf_memcpy(ctx, ssd_cp + t0 * SH * SP, sb.out, (size_t)(Lr * SH * SP) * 2));
    if (rank == R - 1) TRY(sf_memcpy(ctx, fin_cp, sb.fin, (size_t)(SH * SP * SN) * 4));
    ssd_free(ctx, &sb);

    /* ring attention, load-balanced layout */
    const int64_t Lc = L / (2 * R);
    attn_bufs ab;
    sf_attn_fwd_params ap;
    memset(&ab, 0, sizeof ab);
    if (attn_setup(ctx, rank, &ab, &ap)) TRY(SF_ERR_OUT_OF_MEMORY);
    TIME(hdr->t_attn[rank], sf_attn_fwd_ring(ctx, comm, &ap));
    {
        uint16_t *o = malloc((size_t)(2 * Lc * AH * AD) * 2);
        float *l = malloc((size_t)(2 * Lc * AH) * 4);
        if (!o || !l) TRY(SF_ERR_OUT_OF_MEMORY);
        TRY(sf_memcpy(ctx, o, ab.out, (size_t)(2 * Lc * AH * AD) * 2));
        TRY(sf_memcpy(ctx, l, ab.lse, (size_t)(2 * Lc * AH) * 4));
        for (int64_t i = 0; i < 2 * Lc; i++) {
            const int64_t g = gpos(rank, Lc, i);
            memcpy(att_cp + g * AH * AD, o + i * AH * AD, (size_t)(AH * AD) * 2);
            for (int h = 0; h < AH; h++) lse_cp[h * L + g] = l[h * 2 * Lc + i];
        }
        free(o);
        free(l);
    }
    attn_free(ctx, &ab);
    sf_comm_destroy(comm);

    if (rank == 0) { /* the single-GPU ops over the whole sequence */
        if (ssd_setup(ctx, rank, 0, L, &sb, &sp)) TRY(SF_ERR_OUT_OF_MEMORY);
        TIME(hdr->t_ssd1, sf_ssd_fwd(ctx, &sp));
        TRY(sf_memcpy(ctx, ssd_ref, sb.out, (size_t)(L * SH * SP) * 2));
        TRY(sf_memcpy(ctx, fin_ref, sb.fin, (size_t)(SH * SP * SN) * 4));
        ssd_free(ctx, &sb);
        if (attn_setup(ctx, -1, &ab, &ap)) TRY(SF_ERR_OUT_OF_MEMORY);
        TIME(hdr->t_attn1, sf_attn_fwd(ctx, &ap));
        TRY(sf_memcpy(ctx, att_ref, ab.out, (size_t)(L * AH * AD) * 2));
        TRY(sf_memcpy(ctx, lse_ref, ab.lse, (size_t)(L * AH) * 4));
        attn_free(ctx, &ab);
    }
    sf_ctx_destroy(ctx);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Parent                                                              */
/* ------------------------------------------------------------------ */

static double rel16(const uint16_t *a, const uint16_t *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = from_bf16(a[i]), y = from_bf16(b[i]);
        if (isnan(x)) return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return sqrt(num / (den > 0 ? den : 1));
}
static double rel32(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Waits for every rank; on the first failure (or the timeout) stops the
 * others, which would otherwise wait forever inside NCCL. */
static int wait_ranks(const pid_t *pid) {
    int left = R, worst = 0, skipped = 0;
    const double deadline = now() + TIMEOUT;
    int done[MAXR] = {0};
    while (left > 0) {
        int st = 0;
        const pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            for (int r = 0; r < R; r++)
                if (pid[r] == w) done[r] = 1;
            left--;
            const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            if (code == 77) skipped = 1;
            else if (code != 0 && !worst) worst = code;
        } else if (now() > deadline && !worst) {
            fprintf(stderr, "cp_launch: timeout after %d s\n", TIMEOUT);
            worst = 124;
        } else {
            usleep(100000);
        }
        if (worst || skipped)
            for (int r = 0; r < R; r++)
                if (!done[r]) kill(pid[r], SIGTERM);
    }
    return worst ? worst : skipped ? 77 : 0;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--nranks") && i + 1 < argc) R = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--L") && i + 1 < argc) L = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) ITERS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) TIMEOUT = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--nranks R] [--L tokens] [--iters n] [--timeout s]\n", argv[0]);
            return 2;
        }
    }
    if (R < 1 || R > MAXR || L < 2 * R || L % (2 * R) != 0 || ITERS < 1) {
        fprintf(stderr, "cp_launch: need 1 <= nranks <= %d and L a multiple of 2 nranks\n", MAXR);
        return 2;
    }
    sf_status s = sf_comm_id_create(&g_id);
    if (s == SF_ERR_UNSUPPORTED) {
        printf("cp_launch: this seqfuse was built without NCCL: skipped\n");
        return 77;
    }
    if (s != SF_OK) {
        fprintf(stderr, "cp_launch: sf_comm_id_create: %s\n", sf_status_string(s));
        return 1;
    }
    /* shared with the ranks: times and every output, cp and reference */
    const size_t n16 = (size_t)L * SH * SP, a16 = (size_t)L * AH * AD, nf = (size_t)SH * SP * SN;
    const size_t bytes = sizeof(shared_hdr) + 4 * n16 + 4 * a16 + 8 * nf + 8 * (size_t)L * AH + 256;
    char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "cp_launch: cannot map %zu bytes\n", bytes);
        return 1;
    }
    hdr = (shared_hdr *)m;
    char *c = m + ((sizeof(shared_hdr) + 63) & ~(size_t)63);
    ssd_cp = (uint16_t *)c; c += 2 * n16;
    ssd_ref = (uint16_t *)c; c += 2 * n16;
    att_cp = (uint16_t *)c; c += 2 * a16;
    att_ref = (uint16_t *)c; c += 2 * a16;
    fin_cp = (float *)c; c += 4 * nf;
    fin_ref = (float *)c; c += 4 * nf;
    lse_cp = (float *)c; c += 4 * (size_t)L * AH;
    lse_ref = (float *)c;

    pid_t pid[MAXR];
    fflush(stdout);
    for (int r = 0; r < R; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            const int code = rank_main(r);
            fflush(stdout); /* _exit skips stdio's flush */
            fflush(stderr);
            _exit(code);
        }
        if (pid[r] < 0) {
            fprintf(stderr, "cp_launch: fork failed\n");
            for (int q = 0; q < r; q++) kill(pid[q], SIGTERM);
            return 1;
        }
    }
    const int rc = wait_ranks(pid);
    if (rc != 0) return rc;

    double ts = 0, ta = 0;
    for (int r = 0; r < R; r++) {
        ts = fmax(ts, hdr->t_ssd[r]);
        ta = fmax(ta, hdr->t_attn[r]);
    }
    const double e_out = rel16(ssd_cp, ssd_ref, (int64_t)n16), e_fin = rel32(fin_cp, fin_ref, (int64_t)nf);
    const double e_att = rel16(att_cp, att_ref, (int64_t)a16), e_lse = rel32(lse_cp, lse_ref, L * AH);
    const double aflop = 2.0 * AH * AD * (double)L * (double)L; /* causal: half of 4 H d L^2 */
    printf("cp_launch: %d ranks, L %lld, bf16\n", R, (long long)L);
    printf("  ssd  (H %d P %d N %d):  1 GPU %8.3f ms | %d GPUs %8.3f ms  speedup %.2fx  efficiency %.0f%%"
           "  | err out %.2e final %.2e\n", SH, SP, SN, 1e3 * hdr->t_ssd1, R, 1e3 * ts,
           hdr->t_ssd1 / ts, 100 * hdr->t_ssd1 / (R * ts), e_out, e_fin);
    printf("  attn (causal %d/%d x %d): 1 GPU %8.3f ms (%.0f TFLOP/s) | %d GPUs %8.3f ms  speedup %.2fx"
           "  efficiency %.0f%%  | err out %.2e lse %.2e\n", AH, AHK, AD, 1e3 * hdr->t_attn1,
           aflop / hdr->t_attn1 * 1e-12, R, 1e3 * ta, hdr->t_attn1 / ta,
           100 * hdr->t_attn1 / (R * ta), e_att, e_lse);
    for (int r = 0; r < R; r++)
        printf("  rank %d: ssd %.3f ms, attn %.3f ms\n", r, 1e3 * hdr->t_ssd[r], 1e3 * hdr->t_attn[r]);
    const int ok = e_out < 1e-2 && e_fin < 1e-2 && e_att < 1e-2 && e_lse < 1e-4;
    printf("cp_launch: %s\n", ok ? "OK" : "FAILED (errors past the bf16 bounds)");
    munmap(m, bytes);
    return ok ? 0 : 1;
}
