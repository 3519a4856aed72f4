/* seqfuse - the command-line tool (public API only).
 *
 *   seqfuse [run] [--json] [--cpu] [--seed N]  the default workload: fused vs naive,
 *                                                same device and dtype, errors vs the reference
 *   seqfuse check [--op OP] [--all] [--seed N]   every op and backend vs the reference
 *   seqfuse bench --op OP [shape flags]          time one op at a given shape
 *   seqfuse info                                 build features and devices
 */
#define _POSIX_C_SOURCE 200809L /* fileno, isatty */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cases.h"
#include "naive.h"

int cmd_generate(int argc, char **argv); /* generate.c */
int cmd_bench_model(int argc, char **argv); /* bench_model.c */

static void usage(FILE *f) {
    fprintf(f,
            "usage: seqfuse [run] [--json] [--cpu] [--seed N] [--threads N]\n"
            "       seqfuse check [--op OP] [--backend cpu|cuda] [--all] [--seed N]\n"
            "       seqfuse bench --op OP [--dtype f32|f16|bf16] [--backend ref|cpu|cuda] [--reps N]\n"
            "                     [--check] [--b N] [--L N] [--H N] [--P N] [--G N] [--N N]\n"
            "                     [--chunk N] [--Lq N] [--Lk N] [--Hkv N] [--d N] [--causal]\n"
            "                     [--window L,R] [--dim N] [--width W] [--group N]\n"
            "                     [--norm-before-gate] [--no-silu] [--page-size N]\n"
            "                     [--wq-n N] [--wq-k K] [--bits 4|8] [--wq-group 32|64|128] [--mins]\n"
            "       seqfuse generate --model PATH (--prompt TEXT | --prompt-ids 1,2,3) [...]\n"
            "                        (text from a checkpoint: `seqfuse generate --help`)\n"
            "       seqfuse bench-model --model PATH [--batch 1,8] [--prompt-len 128,512] [...]\n"
            "                        (the engine's prefill and decode speed: `seqfuse bench-model --help`)\n"
            "       seqfuse info\n"
            "OP: ssd_fwd, ssd_step, attn_fwd, conv1d_fwd, conv1d_update, rmsnorm_gated, kv_append,\n"
            "    attn_paged (paged KV cache: --Lq new tokens, --Lk cached keys per sequence,\n"
            "    --page-size N, default 16),\n"
            "    add_rmsnorm, add_layernorm, swiglu, rope (fused layer ops: `check --op` runs\n"
            "    their cases, on the CPU and on the GPU),\n"
            "    gemm_wq (y = x W^T with W in int4 / int8 codes: --b rows of x, W --wq-n x --wq-k,\n"
            "    default 1 x 4096 x 4096, int4, groups of 128, symmetric unless --mins)\n"
            "\n"
            "With no command, runs the default workload (a Mamba-2 2.7B layer SSD forward, a GQA\n"
            "causal attention and the ViT-B/16 attention) on the GPU when there is one, else the\n"
            "CPU: the fused kernels against the naive algorithms on the same device in the same\n"
            "dtype (time, speed-up, bytes moved), both checked against the double-precision reference.\n");
}

static int parse_int(const char *flag, const char *v, long lo, long hi, int *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end != 0 || x < lo || x > hi) {
        fprintf(stderr, "seqfuse: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, v);
        return 0;
    }
    *out = (int)x;
    return 1;
}

static int parse_seed(const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v == 0 || *v == '-' || *end != 0 || errno == ERANGE) {
        fprintf(stderr, "seqfuse: --seed expects a non-negative integer, got '%s'\n", v);
        return 0;
    }
    *out = (uint64_t)x;
    return 1;
}

static int parse_dtype(const char *v, sf_dtype *dt) {
    if (!strcmp(v, "f32")) *dt = SF_F32;
    else if (!strcmp(v, "f16")) *dt = SF_F16;
    else if (!strcmp(v, "bf16")) *dt = SF_BF16;
    else {
        fprintf(stderr, "seqfuse: --dtype expects f32, f16 or bf16, got '%s'\n", v);
        return 0;
    }
    return 1;
}

static int parse_backend(const char *v, sf_backend *be) {
    if (!strcmp(v, "ref")) *be = SF_BACKEND_REF;
    else if (!strcmp(v, "cpu")) *be = SF_BACKEND_CPU;
    else if (!strcmp(v, "cuda")) *be = SF_BACKEND_CUDA;
    else if (!strcmp(v, "auto")) *be = SF_BACKEND_AUTO;
    else {
        fprintf(stderr, "seqfuse: --backend expects ref, cpu, cuda or auto, got '%s'\n", v);
        return 0;
    }
    return 1;
}

static const char *human_bytes(double b, char *buf, size_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB"};
    int i = 0;
    while (b >= 1024 && i < 3) b /= 1024, i++;
    snprintf(buf, n, "%.1f %s", b, u[i]);
    return buf;
}

static int cmd_info(void) {
    printf("seqfuse %s\n", sf_version_string());
    printf("  CUDA backend built: %s\n", sf_has_cuda_build() ? "yes" : "no");
    printf("  OpenMP:             %s\n", sf_has_openmp() ? "yes" : "no");
    sf_ctx *ctx;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) == SF_OK) {
        printf("  CPU threads:        %d\n", sf_ctx_threads(ctx));
        sf_ctx_destroy(ctx);
    }
    int n = sf_cuda_device_count();
    printf("  CUDA devices:       %d\n", n);
    for (int i = 0; i < n; i++) {
        char name[256];
        if (sf_cuda_device_name(i, name, sizeof name) == SF_OK) printf("    %d: %s\n", i, name);
    }
    return 0;
}

/* The default workload: each case with `workload` set for this device, the
 * fused backend against the naive baseline on the same device in the same
 * dtype (tools/naive/), both checked against the double-precision reference. */
static int cmd_run(int json, int force_cpu, uint64_t seed, int threads) {
    /* progress lines rewrite themselves with \r: only on a terminal */
    const int tty = isatty(fileno(stderr));
    int device = (!force_cpu && sf_cuda_device_count() > 0) ? 0 : SF_DEVICE_CPU;
    int want = device >= 0 ? 2 : 1;
    sf_backend be = device >= 0 ? SF_BACKEND_CUDA : SF_BACKEND_CPU;
    sf_dtype dt = device >= 0 ? SF_BF16 : SF_F32;
    /* GPU calls take well under a millisecond: more of them for a stable median */
    const int reps = device >= 0 ? 10 : 3;
    const char *mem = device >= 0 ? "HBM" : "DRAM";
    sf_ctx *ctx = NULL, *ref = NULL;
    if (sf_ctx_create(&ctx, device) != SF_OK || sf_ctx_create(&ref, SF_DEVICE_CPU) != SF_OK) {
        fprintf(stderr, "seqfuse: cannot create a context\n");
        sf_ctx_destroy(ctx);
        return 1;
    }
    if (threads > 0) sf_ctx_set_threads(ctx, threads), sf_ctx_set_threads(ref, threads);
    sfn_baseline naive;
    sfn_baseline_init(&naive, ctx);
    char dev[256] = "CPU";
    if (device >= 0) sf_cuda_device_name(device, dev, sizeof dev);
    if (!json) {
        printf("seqfuse %s on %s (%d CPU threads), %s, seed %llu\n", sf_version_string(), dev,
               sf_ctx_threads(ref), sf_dtype_name(dt), (unsigned long long)seed);
        printf("%-18s %9s %9s %8s %11s %11s %11s %9s %9s\n", "workload", "fused ms", "naive ms", "speed-up",
               "fused moved", "naive moved", "avoided", "fused err", "naive err");
    } else {
        printf("{\"version\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", \"seed\": %llu, \"naive\": \"%s\", "
               "\"results\": [",
               sf_version_string(), dev, sf_dtype_name(dt), (unsigned long long)seed, sfn_describe(device));
    }
    int status = 0, first = 1;
    double tol_shown = 0;
    for (int ci = 0; ci < sfc_ncases; ci++) {
        const sfc_case *c = &sfc_cases[ci];
        if (c->workload != want) continue;
        if (!json && tty) {
            fprintf(stderr, "  running %s (fused, naive, then the double reference)...\r", c->name);
            fflush(stderr);
        }
        sfc_result r;
        char msg[512];
        sf_status st = sfc_run_baseline(c, dt, be, ctx, ref, seed, reps, &naive.bl, &r, msg, sizeof msg);
        if (!json && tty) fprintf(stderr, "%-70s\r", "");
        if (st != SF_OK) {
            if (json)
                printf("%s{\"workload\": \"%s\", \"error\": \"%s\"}", first ? "" : ", ", c->name, sf_status_string(st));
            else
                printf("%-18s error: %s: %s\n", c->name, sf_status_string(st), msg);
            first = 0;
            status = 1;
            continue;
        }
        const double tol = sfc_tolerance1(c, dt, be), ntol = sfn_tolerance(c, dt, be, &r);
        tol_shown = tol > tol_shown ? tol : tol_shown;
        const int fused_ok = r.err <= tol && r.err2 <= tol && r.unwritten == 0 && r.nonfinite == 0 && r.guard_ok;
        const int naive_ok = r.base_err <= ntol && r.base_err2 <= ntol && r.base_unwritten == 0 &&
                             r.base_nonfinite == 0 && r.base_guard_ok;
        if (!fused_ok || !naive_ok) status = 1;
        const double fb = r.bytes, nbytes = sfn_bytes(c, dt, device, r.bytes);
        if (json) {
            printf("%s{\"workload\": \"%s\", \"op\": \"%s\", \"dtype\": \"%s\", \"flops\": %.6g, \"tolerance\": %.3g, "
                   "\"fused\": {\"backend\": \"%s\", \"ms\": %.6g, \"gflops\": %.6g, \"bytes\": %.6g, "
                   "\"workspace_bytes\": %zu, \"err\": %.3e, \"tolerance\": %.3g, \"ok\": %s}, "
                   "\"naive\": {\"ms\": %.6g, \"gflops\": %.6g, \"bytes\": %.6g, \"err\": %.3e, "
                   "\"tolerance\": %.3g, \"ok\": %s}, "
                   "\"speedup\": %.4g, \"bytes_avoided\": %.6g, \"oracle_ms\": %.6g}",
                   first ? "" : ", ", c->name, sfc_op_name(c->op), sf_dtype_name(dt), r.flops, tol,
                   sf_backend_name(be), r.ms, r.flops / r.ms * 1e-6, fb, r.ws_peak, r.err, tol,
                   fused_ok ? "true" : "false", r.base_ms, r.flops / r.base_ms * 1e-6, nbytes, r.base_err,
                   ntol, naive_ok ? "true" : "false", r.base_ms / r.ms, nbytes - fb, r.ref_ms);
        } else {
            char b1[32], b2[32], b3[32];
            printf("%-18s %9.3f %9.3f %7.1fx %11s %11s %11s %9.1e %9.1e%s%s\n", c->name, r.ms, r.base_ms,
                   r.base_ms / r.ms, human_bytes(fb, b1, sizeof b1), human_bytes(nbytes, b2, sizeof b2),
                   human_bytes(nbytes - fb, b3, sizeof b3), r.err, r.base_err,
                   fused_ok ? "" : "  FUSED OVER TOLERANCE", naive_ok ? "" : "  NAIVE OVER TOLERANCE");
        }
        first = 0;
        fflush(stdout);
    }
    if (json) {
        printf("]}\n");
    } else {
        printf("speed-up = naive ms / fused ms (median of %d calls after a warm-up, each to completion);\n"
               "moved = bytes through %s: fused = inputs read once + outputs written; naive = the same plus\n"
               "the scores S and P written and read (attention; the SSD state stays on chip); avoided = naive - fused;\n"
               "err = relative Frobenius error against the double-precision reference (tolerance %.1e).\n%s.\n",
               reps, mem, tol_shown, sfn_describe(device));
    }
    sf_ctx_destroy(ctx);
    sf_ctx_destroy(ref);
    return status;
}

static int cmd_check(int argc, char **argv) {
    int op = -1, all = 0;
    uint64_t seed = (uint64_t)time(NULL);
    sf_backend only = SF_BACKEND_AUTO;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--op") && i + 1 < argc) {
            op = sfc_op_from_name(argv[++i]);
            if (op < 0) {
                fprintf(stderr, "seqfuse: unknown op '%s' (ssd_fwd, ssd_step, attn_fwd, conv1d_fwd, "
                                "conv1d_update, rmsnorm_gated, kv_append, attn_paged, add_rmsnorm, add_layernorm, swiglu, rope, gemm_wq)\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--all")) {
            all = 1;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (!parse_seed(argv[++i], &seed)) return 2;
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            if (!parse_backend(argv[++i], &only)) return 2;
            if (only == SF_BACKEND_REF) {
                fprintf(stderr, "seqfuse check: the reference is what every backend is checked against; "
                                "give --backend cpu, cuda or auto\n");
                return 2;
            }
        } else {
            fprintf(stderr, "seqfuse check: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    printf("seqfuse check, seed %llu (replay with --seed %llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    int failed = 0, passed = 0, skipped = 0;
    if (only == SF_BACKEND_AUTO || only == SF_BACKEND_CPU) {
        int p, s;
        failed += sfc_check_all(op, SF_BACKEND_CPU, SF_DEVICE_CPU, seed, all, 0, &p, &s);
        passed += p, skipped += s;
    }
    if (only == SF_BACKEND_AUTO || only == SF_BACKEND_CUDA) {
        if (sf_cuda_device_count() > 0) {
            int p, s;
            failed += sfc_check_all(op, SF_BACKEND_CUDA, 0, seed, all, 0, &p, &s);
            passed += p, skipped += s;
        } else {
            printf("  (cuda backend not checked: no CUDA device)\n");
        }
    }
    printf("%d passed, %d failed, %d skipped (seed %llu)\n", passed, failed, skipped, (unsigned long long)seed);
    return failed ? 1 : 0;
}

static int cmd_bench(int argc, char **argv) {
    sfc_case c;
    memset(&c, 0, sizeof c);
    c.name = "custom";
    c.op = (sfc_op)-1;
    c.b = 1, c.L = 4096, c.H = 8, c.P = 64, c.G = 1, c.N = 128, c.chunk = 256, c.D = 1, c.nslots = 0;
    c.Lq = 2048, c.Lk = -1, c.Hkv = -1, c.d = 64;
    c.dim = 5376, c.width = 4, c.silu = 1, c.bias = 1, c.group = 0; /* Mamba-2 2.7B conv/norm */
    sf_dtype dt = SF_F32;
    sf_backend be = SF_BACKEND_AUTO;
    int reps = 5, check = 0, have_window = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "--causal")) { c.causal = 1; continue; }
        if (!strcmp(a, "--check")) { check = 1; continue; }
        if (!strcmp(a, "--norm-before-gate")) { c.norm_before_gate = 1; continue; }
        if (!strcmp(a, "--no-silu")) { c.silu = 0; continue; }
        if (!strcmp(a, "--mins")) { c.wq_min = 1; continue; }
        if (!v) {
            fprintf(stderr, "seqfuse bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--op")) {
            int o = sfc_op_from_name(v);
            if (o < 0) {
                fprintf(stderr, "seqfuse bench: unknown op '%s' (ssd_fwd, ssd_step, attn_fwd, "
                                "conv1d_fwd, conv1d_update, rmsnorm_gated, kv_append, attn_paged, add_rmsnorm, add_layernorm, swiglu, rope, gemm_wq)\n", v);
                return 2;
            }
            c.op = (sfc_op)o;
        } else if (!strcmp(a, "--dtype")) ok = parse_dtype(v, &dt);
        else if (!strcmp(a, "--backend")) ok = parse_backend(v, &be);
        else if (!strcmp(a, "--reps")) ok = parse_int(a, v, 1, 100000, &reps);
        else if (!strcmp(a, "--b")) ok = parse_int(a, v, 1, 1 << 20, &c.b);
        else if (!strcmp(a, "--L")) ok = parse_int(a, v, 1, 1 << 26, &c.L);
        else if (!strcmp(a, "--H")) ok = parse_int(a, v, 1, 4096, &c.H);
        else if (!strcmp(a, "--P")) ok = parse_int(a, v, 1, 4096, &c.P);
        else if (!strcmp(a, "--G")) ok = parse_int(a, v, 1, 4096, &c.G);
        else if (!strcmp(a, "--N")) ok = parse_int(a, v, 1, 4096, &c.N);
        else if (!strcmp(a, "--chunk")) ok = parse_int(a, v, 1, 4096, &c.chunk);
        else if (!strcmp(a, "--Lq")) ok = parse_int(a, v, 1, 1 << 26, &c.Lq);
        else if (!strcmp(a, "--Lk")) ok = parse_int(a, v, 1, 1 << 26, &c.Lk);
        else if (!strcmp(a, "--Hkv")) ok = parse_int(a, v, 1, 4096, &c.Hkv);
        else if (!strcmp(a, "--d")) ok = parse_int(a, v, 1, 4096, &c.d);
        else if (!strcmp(a, "--dim")) ok = parse_int(a, v, 1, 1 << 20, &c.dim);
        else if (!strcmp(a, "--width")) ok = parse_int(a, v, 1, 64, &c.width);
        else if (!strcmp(a, "--group")) ok = parse_int(a, v, 0, 1 << 20, &c.group);
        else if (!strcmp(a, "--page-size")) ok = parse_int(a, v, 1, 256, &c.page_size);
        else if (!strcmp(a, "--wq-n")) ok = parse_int(a, v, 1, 1 << 20, &c.wq_n);
        else if (!strcmp(a, "--wq-k")) ok = parse_int(a, v, 32, 1 << 20, &c.wq_k);
        else if (!strcmp(a, "--bits")) ok = parse_int(a, v, 4, 8, &c.wq_bits);
        else if (!strcmp(a, "--wq-group")) ok = parse_int(a, v, 32, 128, &c.wq_group);
        else if (!strcmp(a, "--window")) {
            if (sscanf(v, "%d,%d", &c.wl, &c.wr) != 2) {
                fprintf(stderr, "seqfuse bench: --window expects L,R (e.g. 128,0 or -1,-1), got '%s'\n", v);
                return 2;
            }
            have_window = 1;
        } else {
            fprintf(stderr, "seqfuse bench: unknown flag '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) return 2;
    }
    if ((int)c.op < 0) {
        fprintf(stderr, "seqfuse bench: --op is required (ssd_fwd, ssd_step, attn_fwd, conv1d_fwd, "
                        "conv1d_update, rmsnorm_gated, kv_append, attn_paged, add_rmsnorm, add_layernorm, swiglu, rope, gemm_wq)\n");
        return 2;
    }
    if (c.op == SFC_GEMM_WQ) { /* Llama-3-8B's q projection, one token, unless given */
        if (c.wq_n == 0) c.wq_n = 4096;
        if (c.wq_k == 0) c.wq_k = 4096;
        if (c.wq_bits == 0) c.wq_bits = 4;
        if (c.wq_group == 0) c.wq_group = 128;
        c.L = 1;
        c.bias = 0;
        if (c.wq_bits != 4 && c.wq_bits != 8) {
            fprintf(stderr, "seqfuse bench: --bits is 4 or 8\n");
            return 2;
        }
    }
    if (c.Lk < 0) c.Lk = c.Lq;
    if (c.Hkv < 0) c.Hkv = c.H;
    if (!have_window) c.wl = c.wr = 0; /* 0,0 in a case means no window */
    if (c.op == SFC_SSD_STEP || c.op == SFC_CONV1D_UPDATE) c.nslots = c.b, c.L = 1;
    if (c.op == SFC_KV_APPEND || c.op == SFC_ATTN_PAGED) { /* every sequence holds Lk keys */
        if (c.page_size == 0) c.page_size = 16;
        for (int i = 0; i < 8; i++) c.klens[i] = c.Lk;
        if (c.op == SFC_KV_APPEND) c.H = c.Hkv;
    }
    int device = SF_DEVICE_CPU;
    if (be == SF_BACKEND_CUDA || (be == SF_BACKEND_AUTO && sf_cuda_device_count() > 0)) {
        if (sf_cuda_device_count() == 0) {
            fprintf(stderr, "seqfuse bench: --backend cuda but there is no CUDA device\n");
            return 1;
        }
        device = 0;
        be = SF_BACKEND_CUDA;
    }
    if (be == SF_BACKEND_AUTO) be = SF_BACKEND_CPU;
    sf_ctx *ctx = NULL, *ref = NULL;
    if (sf_ctx_create(&ctx, device) != SF_OK || sf_ctx_create(&ref, SF_DEVICE_CPU) != SF_OK) {
        fprintf(stderr, "seqfuse: cannot create a context\n");
        return 1;
    }
    fprintf(stderr, "  timing %s (%s, %s, %d reps)...\n", sfc_op_name(c.op), sf_dtype_name(dt),
            sf_backend_name(be), reps);
    sfc_result r;
    char msg[512];
    sf_status st = sfc_run(&c, dt, be, ctx, ref, (uint64_t)time(NULL), reps, !check, &r, msg, sizeof msg);
    int rc = 0;
    if (st != SF_OK) {
        fprintf(stderr, "seqfuse bench: %s: %s\n", sf_status_string(st), msg);
        rc = 1;
    } else {
        char m[32];
        printf("%s %s %s: %.3f ms  %.1f GFLOP/s  %.1f GB/s  workspace %s", sfc_op_name(c.op),
               sf_dtype_name(dt), sf_backend_name(be), r.ms, r.flops / r.ms * 1e-6, r.bytes / r.ms * 1e-6,
               human_bytes((double)r.ws_peak, m, sizeof m));
        if (check) printf("  rel err %.2e (reference %.1f ms)", r.err, r.ref_ms);
        printf("\n");
    }
    sf_ctx_destroy(ctx);
    sf_ctx_destroy(ref);
    return rc;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "generate")) return cmd_generate(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "bench-model")) return cmd_bench_model(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "info")) return cmd_info();
    if (argc >= 2 && !strcmp(argv[1], "check")) return cmd_check(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "bench")) return cmd_bench(argc - 2, argv + 2);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))) {
        usage(stdout);
        return 0;
    }
    int json = 0, force_cpu = 0, threads = 0;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "run")) continue;
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--cpu")) force_cpu = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (!parse_seed(argv[++i], &seed)) return 2;
        }
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!parse_int("--threads", argv[++i], 1, 4096, &threads)) return 2;
        } else {
            fprintf(stderr, "seqfuse: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    return cmd_run(json, force_cpu, seed, threads);
}
