/* test_autotune.c - the autotuner on fake candidates with known costs:
 * picks the fastest, skips candidates that cannot serve, persists the choice
 * (a second context reads it back without timing), honours SF_AUTOTUNE=0 and
 * SF_AUTOTUNE_FORCE, and reports a forced configuration that cannot serve.
 * Internal API: links the static library. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune.h"

static int failures = 0;
#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);    \
            printf(__VA_ARGS__);                           \
            printf("\n");                                  \
            failures++;                                    \
        }                                                  \
    } while (0)

typedef struct {
    int calls[4];
    int last;
    int timed;      /* runs made with a time requested */
    int broken;     /* candidate 3 fails with a CUDA-like error */
} fake;

/* cost of candidate c: 3, 1, unsupported, 2 ms */
static sf_status run_fake(sf_ctx *ctx, int c, void *arg, double *ms) {
    fake *f = (fake *)arg;
    f->calls[c]++;
    f->last = c;
    if (c == 2) return sf_fail(ctx, SF_ERR_UNSUPPORTED, "tile too large for this head dim");
    if (c == 3 && f->broken) return sf_fail(ctx, SF_ERR_CUDA, "kernel fault");
    if (ms) {
        f->timed++;
        *ms = c == 0 ? 3.0 : c == 1 ? 1.0 : 2.0;
    }
    return SF_OK;
}

/* two candidates, 1.1 and 1.0 ms, on a machine that gets 0.05 ms slower at
 * every run (a clock or temperature drift): timed one candidate after the
 * other, the first would look faster; timed in rounds, the second wins */
typedef struct {
    int runs;
    int seq[64], nseq; /* candidates of the timed runs, in order */
} drift;
static sf_status run_drift(sf_ctx *ctx, int c, void *arg, double *ms) {
    (void)ctx;
    drift *d = (drift *)arg;
    const double t = (c == 0 ? 1.1 : 1.0) + 0.05 * d->runs++;
    if (ms) {
        *ms = t;
        if (d->nseq < 64) d->seq[d->nseq++] = c;
    }
    return SF_OK;
}

int main(void) {
    char path[] = "/tmp/sf_autotune_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    remove(path);
    setenv("SF_AUTOTUNE_CACHE", path, 1);
    unsetenv("SF_AUTOTUNE");
    unsetenv("SF_AUTOTUNE_FORCE");
    const char *names[] = {"t64", "t128", "t256", "t64x2"};
    fake f;
    memset(&f, 0, sizeof f);
    sf_tune_request rq = {"FakeGPU", "attn_fwd", SF_BF16, "d128_L4096", 4, names, run_fake, &f, 3, 0};

    sf_ctx *ctx;
    sf_ctx_create(&ctx, SF_DEVICE_CPU);
    int choice = -1, ran = 0;
    sf_status s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_OK, "tuning failed: %s", sf_ctx_last_error(ctx));
    CHECK(choice == 1 && ran == 1, "chose %d (ran %d), expected the 1 ms candidate t128", choice, ran);
    CHECK(f.last == 1, "the last run must be the chosen candidate, was %d", f.last);
    CHECK(f.calls[0] >= 2 && f.calls[3] >= 2, "every serving candidate must be timed");
    /* same context, same bucket: no timing */
    memset(&f, 0, sizeof f);
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_OK && choice == 1 && ran == 0 && f.calls[0] + f.calls[1] + f.calls[3] == 0,
          "a cached bucket must not be timed again");
    sf_ctx_destroy(ctx);

    /* a new context reads the file */
    sf_ctx_create(&ctx, SF_DEVICE_CPU);
    memset(&f, 0, sizeof f);
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_OK && choice == 1 && ran == 0 && f.calls[1] == 0, "the cache file was not used");
    /* another bucket is tuned on its own */
    rq.bucket = "d64_L512";
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_OK && ran == 1 && f.calls[0] > 0, "a new bucket must be tuned");

    /* disabled: candidate 0, nothing run */
    setenv("SF_AUTOTUNE", "0", 1);
    rq.bucket = "d256";
    memset(&f, 0, sizeof f);
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_OK && choice == 0 && ran == 0 && f.calls[0] == 0, "SF_AUTOTUNE=0 must not time");
    unsetenv("SF_AUTOTUNE");

    /* no timing allowed (stream capture): candidate 0 for an uncached bucket, untimed */
    rq.bucket = "capture";
    rq.no_timing = 1;
    memset(&f, 0, sizeof f);
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_OK && choice == 0 && ran == 0 && f.timed == 0, "no_timing must not time");
    rq.no_timing = 0;

    /* a candidate that fails for real ends tuning with its status */
    rq.bucket = "broken";
    memset(&f, 0, sizeof f);
    f.broken = 1;
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_ERR_CUDA && strstr(sf_ctx_last_error(ctx), "kernel fault"),
          "a failing candidate must not pass for unsupported: %s", sf_status_string(s));
    f.broken = 0;

    /* forced: run once, untimed */
    setenv("SF_AUTOTUNE_FORCE", "ssd_fwd:x,attn_fwd:t64x2", 1);
    CHECK(sf_autotune_forced("attn_fwd") && sf_autotune_forced("ssd_fwd") &&
              !sf_autotune_forced("conv1d_fwd"),
          "sf_autotune_forced");
    memset(&f, 0, sizeof f);
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_OK && choice == 3 && ran == 1 && f.calls[3] == 1 && f.timed == 0,
          "forced t64x2: got %d, %d runs, %d timed", choice, f.calls[3], f.timed);
    f.broken = 1;
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_ERR_CUDA, "a forced configuration that fails must report its error, not %s",
          sf_status_string(s));
    f.broken = 0;
    setenv("SF_AUTOTUNE_FORCE", "attn_fwd:t256", 1);
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_ERR_UNSUPPORTED && strstr(sf_ctx_last_error(ctx), "t256") &&
              strstr(sf_ctx_last_error(ctx), "tile too large"),
          "a forced configuration that cannot serve: %s", sf_ctx_last_error(ctx));
    setenv("SF_AUTOTUNE_FORCE", "attn_fwd:nonesuch", 1);
    s = sf_autotune(ctx, &rq, &choice, &ran);
    CHECK(s == SF_ERR_INVALID_ARG && strstr(sf_ctx_last_error(ctx), "t64x2"),
          "an unknown forced name must list the configurations: %s", sf_ctx_last_error(ctx));
    unsetenv("SF_AUTOTUNE_FORCE");

    /* timed runs go in rounds (warm-ups first), so drift does not pick */
    drift dr;
    memset(&dr, 0, sizeof dr);
    const char *dnames[] = {"slow", "fast"};
    sf_tune_request rd = {"FakeGPU", "attn_fwd", SF_BF16, "drift", 2, dnames, run_drift, &dr, 3, 0};
    s = sf_autotune(ctx, &rd, &choice, &ran);
    CHECK(s == SF_OK && choice == 1, "under drift the 1.0 ms candidate must win, chose %d", choice);
    static const int want[] = {0, 1, 0, 1, 0, 1, 0, 1};
    int order_ok = dr.nseq == 8;
    for (int i = 0; order_ok && i < 8; i++) order_ok = dr.seq[i] == want[i];
    CHECK(order_ok, "timed runs must alternate between the candidates (%d timed runs)", dr.nseq);
    sf_tune_request big = rd;
    big.ncand = SF_TUNE_MAX_CAND + 1;
    big.bucket = "too_many";
    s = sf_autotune(ctx, &big, &choice, &ran);
    CHECK(s == SF_ERR_INTERNAL, "more than SF_TUNE_MAX_CAND candidates must be refused: %s",
          sf_status_string(s));
    sf_ctx_destroy(ctx);
    remove(path);
    printf("%s\n", failures ? "autotune: FAILED" : "autotune: ok");
    return failures ? 1 : 0;
}
