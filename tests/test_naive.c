/* test_naive.c - the naive baselines of the `seqfuse` main job
 * (tools/naive/) against the double-precision reference, on the small SSD
 * and attention cases of the table: causal, GQA, windows, Lq != Lk, D of
 * both shapes, z, dt_bias with softplus and clamps, initial and final
 * states, strided views, empty batches.  The CPU baseline in f32, the GPU
 * one in bf16 and f16, each within sfn_tolerance.  Varlen cases are outside what the baselines serve
 * (the workload has none): they must say so, and are listed as skipped.
 *
 *   test_naive --backend cpu|cuda [--seed N]
 * Exit 0 on success, 1 on a failure, 77 (skipped) for cuda without a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "naive.h"

int main(int argc, char **argv) {
    int cuda = 0;
    uint64_t seed = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) cuda = !strcmp(argv[++i], "cuda");
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: test_naive --backend cpu|cuda [--seed N]\n");
            return 2;
        }
    }
    if (cuda) {
#ifndef SFN_WITH_CUDA
        printf("skip: built without CUDA: no naive GPU baseline\n");
        return 77;
#endif
        if (sf_cuda_device_count() <= 0) {
            printf("skip: no CUDA device\n");
            return 77;
        }
    }
    const int device = cuda ? 0 : SF_DEVICE_CPU;
    const sf_backend be = cuda ? SF_BACKEND_CUDA : SF_BACKEND_CPU;
    sf_ctx *ctx = NULL, *ref = NULL;
    if (sf_ctx_create(&ctx, device) != SF_OK || sf_ctx_create(&ref, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL cannot create the contexts\n");
        sf_ctx_destroy(ctx);
        return 1;
    }
    sfn_baseline nb;
    sfn_baseline_init(&nb, ctx);
    const sf_dtype cpu_dts[] = {SF_F32}, gpu_dts[] = {SF_BF16, SF_F16};
    const sf_dtype *dts = cuda ? gpu_dts : cpu_dts;
    const int ndt = cuda ? 2 : 1;
    int passed = 0, failed = 0, skipped = 0;
    printf("naive %s baseline vs the reference, seed %llu\n", cuda ? "CUDA" : "CPU", (unsigned long long)seed);
    for (int ci = 0; ci < sfc_ncases; ci++) {
        const sfc_case *c = &sfc_cases[ci];
        if ((c->op != SFC_SSD_FWD && c->op != SFC_ATTN_FWD) || c->big || c->workload) continue;
        const int varlen = c->varlen || c->attn_varlen;
        const int mods = c->softcap > 0.f || c->alibi; /* the naive baseline has no score modifiers */
        for (int di = 0; di < ndt; di++) {
            sfc_result r;
            char msg[512];
            const char *dn = sf_dtype_name(dts[di]);
            sf_status st = sfc_run_baseline(c, dts[di], be, ctx, ref, seed, 0, &nb.bl, &r, msg, sizeof msg);
            /* f32 dt / B / C beside 16-bit x: the naive SSD takes one dtype */
            const int mixed = c->f32_in && dts[di] != SF_F32;
            if (varlen || mods || mixed) {
                /* not served: a clear SF_ERR_UNSUPPORTED from the baseline */
                const char *what = varlen ? "varlen" : mods ? "softcap and ALiBi" : "one dtype";
                int ok = st == SF_ERR_UNSUPPORTED && strstr(msg, "naive baseline") && strstr(msg, what);
                printf("  %s %-22s %-4s %s: %s\n", ok ? "skip" : "FAIL", c->name, dn, what,
                       ok ? msg : "expected SF_ERR_UNSUPPORTED naming it");
                ok ? skipped++ : failed++;
                continue;
            }
            const double tol = st == SF_OK ? sfn_tolerance(c, dts[di], be, &r) : 0.0;
            int ok = st == SF_OK && r.base_err <= tol && r.base_err2 <= tol && r.base_unwritten == 0 &&
                     r.base_nonfinite == 0 && r.base_guard_ok;
            if (st != SF_OK)
                printf("  FAIL %-22s %-4s %s: %s\n", c->name, dn, sf_status_string(st), msg);
            else
                printf("  %s %-22s %-4s naive err %.2e  err2 %.2e  (fused %.2e; tol %.1e)%s%s%s\n",
                       ok ? "ok  " : "FAIL", c->name, dn, r.base_err, r.base_err2, r.err, tol,
                       r.base_unwritten ? "  UNWRITTEN outputs" : "",
                       r.base_nonfinite ? "  NON-FINITE outputs" : "",
                       r.base_guard_ok ? "" : "  GUARD/PADDING overwritten");
            fflush(stdout);
            ok ? passed++ : failed++;
        }
    }
    printf("%d passed, %d failed, %d skipped (varlen, score modifiers, mixed dtypes)\n", passed, failed, skipped);
    sf_ctx_destroy(ctx);
    sf_ctx_destroy(ref);
    return failed || passed == 0 ? 1 : 0;
}
