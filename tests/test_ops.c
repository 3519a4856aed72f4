/* test_ops.c - every case of the table x dtype on one backend against the
 * double-precision reference, on fresh random inputs (the seed is printed;
 * --seed replays it), outputs poisoned first, guard bytes checked.
 *
 *   test_ops --op ssd_fwd|ssd_step|attn_fwd --backend cpu|cuda [--seed N] [--all]
 *
 * Exit 0: all passed; 1: a failure; 77: skipped (no CUDA device). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cases.h"

/* What a backend documents it does not serve (seqfuse.h). */
static int documented_unsupported(sfc_op op, sf_dtype dt, sf_backend be) {
    return be == SF_BACKEND_CUDA && op == SFC_ATTN_FWD && dt == SF_F32;
}

int main(int argc, char **argv) {
    int op = -1, all = 0;
    sf_backend be = SF_BACKEND_CPU;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--op") && i + 1 < argc) {
            op = sfc_op_from_name(argv[++i]);
            if (op < 0) {
                fprintf(stderr, "unknown op %s\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            const char *b = argv[++i];
            be = !strcmp(b, "cuda") ? SF_BACKEND_CUDA : !strcmp(b, "ref") ? SF_BACKEND_REF : SF_BACKEND_CPU;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--all")) {
            all = 1;
        } else {
            fprintf(stderr, "usage: test_ops --op OP --backend cpu|cuda [--seed N] [--all]\n");
            return 2;
        }
    }
    int device = SF_DEVICE_CPU;
    if (be == SF_BACKEND_CUDA) {
        if (sf_cuda_device_count() == 0) {
            printf("SKIP: no CUDA device here (%s); the CUDA tests run on a GPU machine\n",
                   sf_has_cuda_build() ? "CUDA build, no device" : "build without CUDA");
            return 77;
        }
        device = 0;
    }
    printf("seed %llu (replay with --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    sf_ctx *ctx = NULL, *ref = NULL;
    if (sf_ctx_create(&ctx, device) != SF_OK || sf_ctx_create(&ref, SF_DEVICE_CPU) != SF_OK) {
        fprintf(stderr, "cannot create contexts\n");
        return 1;
    }
    const sf_dtype dts[] = {SF_F32, SF_F16, SF_BF16};
    int failed = 0, passed = 0, skipped = 0;
    for (int ci = 0; ci < sfc_ncases; ci++) {
        const sfc_case *c = &sfc_cases[ci];
        if (op >= 0 && (int)c->op != op) continue;
        if (c->big && !all) continue;
        for (int di = 0; di < 3; di++) {
            sfc_result r;
            char msg[512];
            sf_status st = sfc_run(c, dts[di], be, ctx, ref, seed, 0, 0, &r, msg, sizeof msg);
            double tol = sfc_tolerance(c->op, dts[di], be);
            const char *dn = sf_dtype_name(dts[di]);
            if (st == SF_ERR_UNSUPPORTED && documented_unsupported(c->op, dts[di], be)) {
                printf("  skip %-22s %-4s documented unsupported: %s\n", c->name, dn, msg);
                skipped++;
                continue;
            }
            int ok = st == SF_OK && r.err <= tol && r.err2 <= tol && r.unwritten == 0 &&
                     r.nonfinite == 0 && r.guard_ok;
            if (st != SF_OK)
                printf("  FAIL %-22s %-4s %s: %s\n", c->name, dn, sf_status_string(st), msg);
            else
                printf("  %s %-22s %-4s err %.2e  err2 %.2e  (tol %.0e)%s%s%s\n", ok ? "ok  " : "FAIL",
                       c->name, dn, r.err, r.err2, tol, r.unwritten ? "  UNWRITTEN outputs" : "",
                       r.nonfinite ? "  NON-FINITE outputs" : "", r.guard_ok ? "" : "  GUARD/PADDING overwritten");
            if (ok)
                passed++;
            else
                failed++;
        }
    }
    sf_ctx_destroy(ctx);
    sf_ctx_destroy(ref);
    printf("%d passed, %d failed, %d skipped (seed %llu)\n", passed, failed, skipped,
           (unsigned long long)seed);
    return failed ? 1 : 0;
}
