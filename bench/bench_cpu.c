/* bench_cpu.c - the CPU backend against its peers, measured in one run.
 *
 *   1. OpenBLAS sgemm, 2048^3 f32, with the library's thread count: the
 *      matrix-product ceiling of this machine.
 *   2. sf_attn_fwd backend CPU, f32 b 1 H 8 L 2048 d 64 causal: GFLOP/s
 *      (4 b H L^2 d / 2 for the causal half) and the fraction of sgemm's
 *      rate; error against backend REF.
 *   3. sf_ssd_fwd backend CPU vs backend REF, f32 b 1 L 4096 H 8 P 64 N 128
 *      G 1 chunk 256 with D and z: speed-up and error.
 * Every time is a median on the monotonic clock: sgemm and attention over
 * two rounds of [sgemm block, attention block], each block an untimed
 * warm-up call then --reps timed calls (default 5, at least 3), so both
 * see the same machine load; a pause between blocks lets the other pool's
 * spinning threads (OpenBLAS's or OpenMP's) go to sleep.  SSD: one warm-up
 * then --reps runs per backend.
 *
 * OpenBLAS built with DYNAMIC_ARCH may not know a recent CPU and fall back
 * to its oldest kernels (0.3.21 picks "Prescott", SSE3, on a Xeon with
 * AVX-512: 50 instead of 300 GFLOP/s on 2 cores).  That would flatter us,
 * so when the core it chose is weaker than the CPU, the program restarts
 * itself once with OPENBLAS_CORETYPE set (SkylakeX for AVX-512, Haswell
 * for AVX2); --no-blas-fix keeps OpenBLAS's own choice.
 *
 * Usage: bench_cpu [--reps N] [--threads N] [--csv FILE] [--no-blas-fix]
 * CSV columns: date, cpu, op, shape, ours_ms, peer, peer_ms, ratio, commit
 * (ratio = peer_ms / ours_ms; for attention peer_ms is the time sgemm needs
 * for the same FLOP count, so ratio is the fraction of the sgemm rate).
 */
#define _GNU_SOURCE
#include "seqfuse.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* OpenBLAS extensions; weak, so the program also links against another
 * CBLAS (then the thread count and core checks are skipped). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
char *openblas_get_config(void);
#pragma weak openblas_set_num_threads
#pragma weak openblas_get_corename
#pragma weak openblas_get_config

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pause_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(float lo, float hi) { /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    uint64_t r = rng * 0x2545f4914f6cdd1dull;
    return lo + (hi - lo) * (float)((double)(r >> 40) / (double)(1ull << 24));
}

/* 64-byte aligned, as a framework's tensors are: glibc's malloc returns
 * large blocks 16 bytes past a page boundary, which makes every 64-byte
 * vector load of a row straddle two cache lines (measured: attention 5-25%
 * slower on such buffers; sgemm packs its operands and does not care). */
static float *alloc_fill(size_t n, float lo, float hi) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "bench_cpu: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = urand(lo, hi);
    return p;
}

static double rel_err(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t') c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, len, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

/* Restarts the program with OPENBLAS_CORETYPE set when OpenBLAS picked a
 * core weaker than the CPU (see the header comment).  Returns only when no
 * restart happened. */
static void maybe_fix_blas_core(char **argv) {
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
    if (!openblas_get_corename || getenv("OPENBLAS_CORETYPE")) return;
    const char *core = openblas_get_corename();
    if (!core) return;
    const char *want = NULL;
    static const char *avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *avx2_cores[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    int ok = 0;
    if (__builtin_cpu_supports("avx512f")) {
        for (size_t i = 0; i < sizeof avx512_cores / sizeof *avx512_cores; i++)
            ok |= strcasecmp(core, avx512_cores[i]) == 0;
        if (!ok) want = "SkylakeX";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        for (size_t i = 0; i < sizeof avx2_cores / sizeof *avx2_cores; i++)
            ok |= strcasecmp(core, avx2_cores[i]) == 0;
        if (!ok) want = "Haswell";
    }
    if (!want) return;
    printf("note: OpenBLAS chose core '%s' on a CPU with %s; restarting with "
           "OPENBLAS_CORETYPE=%s (--no-blas-fix to keep it)\n",
           core, strcmp(want, "SkylakeX") == 0 ? "AVX-512" : "AVX2", want);
    fflush(stdout);
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv);
    perror("bench_cpu: re-exec failed; continuing with OpenBLAS's choice");
#else
    (void)argv;
#endif
}

typedef struct row {
    const char *op;
    char shape[160];
    double ours_ms, peer_ms, ratio, err;
    const char *peer;
    int ok;
} row;

/* ------------------------------------------------------------------ */

static sf_status attn_call(sf_ctx *ctx, sf_attn_fwd_params *p, sf_backend be, float *out,
                           const int64_t *shape) {
    p->backend = be;
    p->out = sf_tensor_contiguous(out, SF_F32, SF_DEVICE_CPU, 4, shape);
    return sf_attn_fwd(ctx, p);
}

static double time_sgemm(int n, const float *a, const float *b, float *c) {
    double t = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return now_s() - t;
}

int main(int argc, char **argv) {
    int reps = 5, threads = 0, blas_fix = 1;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv = argv[++i];
        else if (strcmp(argv[i], "--no-blas-fix") == 0) blas_fix = 0;
        else {
            fprintf(stderr, "usage: %s [--reps N] [--threads N] [--csv FILE] [--no-blas-fix]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    if (reps > 101) reps = 101;
    if (blas_fix) maybe_fix_blas_core(argv);

    sf_ctx *ctx = NULL;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
        fprintf(stderr, "bench_cpu: cannot create a CPU context\n");
        return 1;
    }
    if (threads > 0) sf_ctx_set_threads(ctx, threads);
    const int nth = sf_ctx_threads(ctx);
    if (openblas_set_num_threads) openblas_set_num_threads(nth);
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    printf("seqfuse %s, CPU '%s', %d threads (OpenMP %s)\n", sf_version_string(), cpu, nth,
           sf_has_openmp() ? "on" : "off");
    /* Other work on the machine skews the ratio (OpenBLAS's threads
     * synchronise per block and suffer more from time-slicing than our
     * dynamic schedule), so say when the machine was busy. */
    double load1 = -1.0;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load1) != 1) load1 = -1.0;
        fclose(lf);
    }
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (load1 >= 0.0) printf("load average %.2f on %ld CPUs\n", load1, ncpu);
    if (load1 > 0.5 * (double)ncpu)
        printf("WARNING: the machine is busy; timings and ratios are unreliable\n");
    if (openblas_get_config && openblas_get_corename)
        printf("BLAS: %s, core %s\n", openblas_get_config(), openblas_get_corename());
    else
        printf("BLAS: not OpenBLAS (thread count not set)\n");

    row rows[3];
    memset(rows, 0, sizeof rows);
    double *ts = malloc(sizeof(double) * 2 * (size_t)reps), *tg = malloc(sizeof(double) * 2 * (size_t)reps);

    /* ---- 1 + 2: sgemm and attention, alternating ---------------------- */
    const int n = 2048;
    float *ga = alloc_fill((size_t)n * n, -1, 1), *gb = alloc_fill((size_t)n * n, -1, 1);
    float *gc = alloc_fill((size_t)n * n, 0, 0);
    const int64_t B = 1, H = 8, L = 2048, d = 64;
    const int64_t ashape[4] = {B, L, H, d};
    const size_t an = (size_t)(B * L * H * d);
    float *q = alloc_fill(an, -1, 1), *k = alloc_fill(an, -1, 1), *v = alloc_fill(an, -1, 1);
    float *o = alloc_fill(an, 0, 0), *oref = alloc_fill(an, 0, 0);
    sf_attn_fwd_params ap;
    sf_attn_fwd_params_init(&ap);
    ap.q = sf_tensor_contiguous(q, SF_F32, SF_DEVICE_CPU, 4, ashape);
    ap.k = sf_tensor_contiguous(k, SF_F32, SF_DEVICE_CPU, 4, ashape);
    ap.v = sf_tensor_contiguous(v, SF_F32, SF_DEVICE_CPU, 4, ashape);
    ap.causal = 1;
    const double attn_flop = 4.0 * (double)B * (double)H * (double)L * (double)L * (double)d / 2.0;
    const double gemm_flop = 2.0 * n * (double)n * n;

    row *rg = &rows[0], *ra = &rows[1];
    rg->op = "sgemm";
    snprintf(rg->shape, sizeof rg->shape, "%dx%dx%d f32", n, n, n);
    rg->peer = "none";
    ra->op = "attn_fwd";
    snprintf(ra->shape, sizeof ra->shape, "f32 b%lld H%lld L%lld d%lld causal", (long long)B,
             (long long)H, (long long)L, (long long)d);
    ra->peer = "openblas_sgemm_rate";
    /* Two rounds of [sgemm block, attention block]; each block wakes its
     * thread pool with an untimed call (the first call after a pause is
     * 10-15% slower) and then times reps calls back to back. */
    const int nsamp = 2 * reps;
    ra->ok = 1;
    for (int round = 0, si = 0; round < 2; round++, si += reps) {
        pause_s(0.3);
        time_sgemm(n, ga, gb, gc);
        for (int r = 0; r < reps; r++) tg[si + r] = time_sgemm(n, ga, gb, gc);
        pause_s(0.3);
        if (ra->ok) ra->ok = attn_call(ctx, &ap, SF_BACKEND_CPU, o, ashape) == SF_OK;
        for (int r = 0; r < reps && ra->ok; r++) {
            double t = now_s();
            ra->ok = attn_call(ctx, &ap, SF_BACKEND_CPU, o, ashape) == SF_OK;
            ts[si + r] = now_s() - t;
        }
    }
    if (!ra->ok) printf("attn_fwd cpu failed: %s\n", sf_ctx_last_error(ctx));
    const double g_s = median(tg, nsamp);
    const double gemm_rate = gemm_flop / g_s;
    rg->ours_ms = g_s * 1e3;
    rg->ok = 1;
    if (ra->ok) {
        ra->ours_ms = median(ts, nsamp) * 1e3;
        ra->peer_ms = attn_flop / gemm_rate * 1e3;
        ra->ratio = ra->peer_ms / ra->ours_ms;
        if (attn_call(ctx, &ap, SF_BACKEND_REF, oref, ashape) == SF_OK)
            ra->err = rel_err(o, oref, an);
        else
            ra->err = NAN;
    }
    free(ga);
    free(gb);
    free(gc);
    free(q);
    free(k);
    free(v);
    free(o);
    free(oref);

    /* ---- 3: SSD, CPU against REF ----------------------------------------- */
    const int64_t SL = 4096, SH = 8, P = 64, N = 128, G = 1;
    const int64_t xs[4] = {1, SL, SH, P}, dts[3] = {1, SL, SH}, hs[1] = {SH}, bs[4] = {1, SL, G, N};
    const size_t xn = (size_t)(SL * SH * P), bn = (size_t)(SL * G * N);
    float *x = alloc_fill(xn, -1, 1), *z = alloc_fill(xn, -1, 1);
    float *dt = alloc_fill((size_t)(SL * SH), 0.001f, 0.1f);
    float *A = alloc_fill((size_t)SH, -4.0f, -0.5f), *Dv = alloc_fill((size_t)SH, 0.5f, 1.5f);
    float *Bm = alloc_fill(bn, -1, 1), *Cm = alloc_fill(bn, -1, 1);
    float *y = alloc_fill(xn, 0, 0), *yref = alloc_fill(xn, 0, 0);
    sf_ssd_fwd_params sp;
    sf_ssd_fwd_params_init(&sp);
    sp.x = sf_tensor_contiguous(x, SF_F32, SF_DEVICE_CPU, 4, xs);
    sp.z = sf_tensor_contiguous(z, SF_F32, SF_DEVICE_CPU, 4, xs);
    sp.dt = sf_tensor_contiguous(dt, SF_F32, SF_DEVICE_CPU, 3, dts);
    sp.A = sf_tensor_contiguous(A, SF_F32, SF_DEVICE_CPU, 1, hs);
    sp.D = sf_tensor_contiguous(Dv, SF_F32, SF_DEVICE_CPU, 1, hs);
    sp.B = sf_tensor_contiguous(Bm, SF_F32, SF_DEVICE_CPU, 4, bs);
    sp.C = sf_tensor_contiguous(Cm, SF_F32, SF_DEVICE_CPU, 4, bs);
    sp.chunk_size = 256;
    row *rs = &rows[2];
    rs->op = "ssd_fwd";
    snprintf(rs->shape, sizeof rs->shape, "f32 b1 L%lld H%lld P%lld N%lld G%lld chunk256 D z",
             (long long)SL, (long long)SH, (long long)P, (long long)N, (long long)G);
    rs->peer = "seqfuse_ref";
    sf_backend be[2] = {SF_BACKEND_REF, SF_BACKEND_CPU};
    float *outs[2] = {yref, y};
    double med[2] = {0, 0};
    int ok[2] = {1, 1};
    for (int e = 0; e < 2; e++) {
        sp.backend = be[e];
        sp.out = sf_tensor_contiguous(outs[e], SF_F32, SF_DEVICE_CPU, 4, xs);
        for (int r = -1; r < reps && ok[e]; r++) { /* r = -1: warm-up */
            double t = now_s();
            ok[e] = sf_ssd_fwd(ctx, &sp) == SF_OK;
            if (r >= 0) ts[r] = now_s() - t;
        }
        if (!ok[e])
            printf("ssd_fwd %s failed: %s\n", sf_backend_name(be[e]), sf_ctx_last_error(ctx));
        else
            med[e] = median(ts, reps);
    }
    rs->ok = ok[0] && ok[1];
    if (rs->ok) {
        rs->ours_ms = med[1] * 1e3;
        rs->peer_ms = med[0] * 1e3;
        rs->ratio = med[0] / med[1];
        rs->err = rel_err(y, yref, xn);
    }
    free(x);
    free(z);
    free(dt);
    free(A);
    free(Dv);
    free(Bm);
    free(Cm);
    free(y);
    free(yref);

    /* ---- report ---------------------------------------------------------- */
    printf("\n%-9s %-44s %10s %12s  %s\n", "op", "shape", "ours ms", "rate", "vs peer");
    printf("%-9s %-44s %10.2f %8.1f GF/s  (the ceiling)\n", rg->op, rg->shape, rg->ours_ms,
           gemm_rate * 1e-9);
    if (ra->ok)
        printf("%-9s %-44s %10.2f %8.1f GF/s  %.1f%% of sgemm rate, rel err %.2e\n", ra->op,
               ra->shape, ra->ours_ms, attn_flop / (ra->ours_ms * 1e-3) * 1e-9, 100.0 * ra->ratio,
               ra->err);
    else
        printf("%-9s %-44s %10s\n", ra->op, ra->shape, "failed");
    if (rs->ok)
        printf("%-9s %-44s %10.2f %12s  ref %.1f ms, %.1fx faster, rel err %.2e\n", rs->op,
               rs->shape, rs->ours_ms, "", rs->peer_ms, rs->ratio, rs->err);
    else
        printf("%-9s %-44s %10s\n", rs->op, rs->shape, "failed");

    if (csv) {
        FILE *f = fopen(csv, "a");
        if (!f) {
            perror(csv);
            return 1;
        }
        if (ftell(f) == 0) fprintf(f, "date,cpu,op,shape,ours_ms,peer,peer_ms,ratio,commit\n");
        char date[64];
        time_t tt = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));
        const char *commit = getenv("SF_COMMIT") ? getenv("SF_COMMIT") : "unknown";
        for (int i = 0; i < 3; i++) {
            if (!rows[i].ok) continue;
            fprintf(f, "%s,\"%s\",%s,\"%s\",%.3f,%s,%.3f,%.4f,%s\n", date, cpu, rows[i].op,
                    rows[i].shape, rows[i].ours_ms, rows[i].peer, rows[i].peer_ms, rows[i].ratio,
                    commit);
        }
        fclose(f);
    }
    free(ts);
    free(tg);
    sf_ctx_destroy(ctx);
    return ra->ok && rs->ok ? 0 : 1;
}
