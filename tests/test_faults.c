/* test_faults.c - fault injection (the sqlite habit): make the n-th
 * allocation of a context fail, for every n up to past the last one an op
 * makes, and check that the op answers SF_ERR_OUT_OF_MEMORY (or succeeds,
 * once n is past its allocations), crashes nowhere, leaks nothing (run under
 * ASan in CI), and that the same context then serves the op correctly.
 * Internal API (sf_ctx_debug_fail_alloc): links the static library. */
#include <stdio.h>
#include <string.h>

#include "cases.h"
#include "internal.h"

int main(void) {
    const char *names[] = {"ssd_full", "ssd_cu_seqlens", "ssd_seq_idx", "step_full",
                           "attn_causal_gqa", "attn_varlen", "conv_cu_seqlens", "rms_group64"};
    const sf_backend bes[] = {SF_BACKEND_REF, SF_BACKEND_CPU};
    sf_ctx *ref;
    if (sf_ctx_create(&ref, SF_DEVICE_CPU) != SF_OK) return 1;
    int failures = 0, runs = 0, ooms = 0;
    for (int ci = 0; ci < sfc_ncases; ci++) {
        const sfc_case *c = &sfc_cases[ci];
        int want = 0;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) want |= !strcmp(c->name, names[k]);
        /* every op family at least once: the first case of each op too */
        if (!want && (ci == 0 || sfc_cases[ci - 1].op == c->op)) continue;
        if (c->big || c->workload) continue;
        for (int bi = 0; bi < 2; bi++) {
            sf_ctx *ctx;
            if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) return 1;
            double tol = sfc_tolerance(c->op, SF_F32, bes[bi]);
            for (long n = 1; n <= 24; n++) {
                sfc_result r;
                char msg[512];
                sf_ctx_debug_fail_alloc(ctx, n);
                /* no reference here (the recovery run below checks the values) */
                sf_status st = sfc_run(c, SF_F32, bes[bi], ctx, ref, 7, 0, 1, &r, msg, sizeof msg);
                runs++;
                if (st == SF_ERR_OUT_OF_MEMORY) {
                    ooms++;
                    if (!strstr(msg, "allocate")) {
                        printf("FAIL %s/%s n=%ld: out-of-memory without a detail: \"%s\"\n", c->name,
                               sf_backend_name(bes[bi]), n, msg);
                        failures++;
                    }
                } else if (st != SF_OK || !r.guard_ok) {
                    printf("FAIL %s/%s n=%ld: %s (%s), err %.2e\n", c->name, sf_backend_name(bes[bi]),
                           n, sf_status_string(st), msg, r.err);
                    failures++;
                }
                /* the same context, no injection: must work */
                sf_ctx_debug_fail_alloc(ctx, 0);
                st = sfc_run(c, SF_F32, bes[bi], ctx, ref, 8, 0, 0, &r, msg, sizeof msg);
                if (st != SF_OK || r.err > tol || r.unwritten || !r.guard_ok) {
                    printf("FAIL %s/%s after an injected failure at n=%ld: %s (%s)\n", c->name,
                           sf_backend_name(bes[bi]), n, sf_status_string(st), msg);
                    failures++;
                }
                /* a fresh context per n keeps the arena empty, so every n
                 * reaches the op's own allocations again */
                sf_ctx_destroy(ctx);
                if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) return 1;
            }
            sf_ctx_destroy(ctx);
        }
    }
    sf_ctx_destroy(ref);
    printf("fault injection: %d runs, %d answered out-of-memory, %d failures\n", runs, ooms, failures);
    return failures || ooms == 0 ? 1 : 0;
}
