/* autotune.h - choose a kernel configuration per shape bucket by timing the
 * candidates once, keep the fastest, persist the choice.
 *
 * Key: (device model, op, dtype, bucket).  The bucket is a short string the
 * op builds from the shape features that change the best configuration
 * (e.g. "d128_L4096_causal"): shapes in one bucket share a choice.
 *
 * Environment:
 *   SF_AUTOTUNE=0                 no timing: candidate 0 (the op's heuristic)
 *   SF_AUTOTUNE_FORCE=op:name     use configuration `name` for `op`; if it
 *                                 cannot serve the shape: SF_ERR_UNSUPPORTED
 *   SF_AUTOTUNE_POWER=0           rank by short timings only (no sustained
 *                                 runs at the power cap, below)
 *   SF_AUTOTUNE_LOG=1             each candidate's timings on stderr
 *   SF_AUTOTUNE_CACHE=path        the cache file (default
 *                                 $XDG_CACHE_HOME/seqfuse/autotune.tsv, else
 *                                 ~/.cache/seqfuse/autotune.tsv); "" = memory only
 */
#ifndef SF_AUTOTUNE_H
#define SF_AUTOTUNE_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs candidate `cand` once; with ms != NULL the run is timed (*ms set),
 * with ms == NULL it only runs (forced and cached choices, the final run).
 * Returns SF_OK; SF_ERR_UNSUPPORTED when the candidate cannot serve the
 * problem (the reason on the context: tuning skips it); anything else is a
 * real failure, which ends tuning with that status.  While tuning, every
 * serving candidate runs 1 + reps times (an untimed warm-up each, then reps
 * rounds of one timed run per candidate); the last run made is always the
 * chosen candidate's, untimed, so its outputs are the op's result. */
typedef sf_status (*sf_tune_run_fn)(sf_ctx *ctx, int cand, void *arg, double *ms);

/* Sustained runs of candidate `cand` (optional): back to back for a few
 * tenths of a second, reporting the time per call (*ms), the board power
 * drawn meanwhile (*watts) and the board's power limit (*limit_w).  Returns
 * SF_OK; SF_ERR_UNSUPPORTED when the power cannot be read (no NVML, no
 * energy counter), which leaves the choice to the short timings; anything
 * else ends tuning with that status.
 *
 * Why: on a board held at its power limit the clock falls until the power
 * fits, so a call's sustained time is about its energy over the limit, not
 * its time in a short burst at full clock.  When candidates of calls of
 * SF_TUNE_SUSTAIN_MS or longer are within SF_TUNE_CLOSE of the fastest
 * short timing, each of them (in alternating order, SF_TUNE_SUSTAIN_ROUNDS
 * times) is run sustained and scored max(short time, energy per call /
 * power limit); the lowest score wins.  H200, d 128 attention at L 16384:
 * two configurations within 0.3% in short timings, one 2.6% lower in energy
 * per call, 1.3-2.2% faster sustained (notes/attn_persist.md, clusters). */
typedef sf_status (*sf_tune_sustain_fn)(sf_ctx *ctx, int cand, void *arg, double *ms, double *watts,
                                        double *limit_w);
#define SF_TUNE_SUSTAIN_MS 1.0
#define SF_TUNE_CLOSE 1.03
#define SF_TUNE_SUSTAIN_ROUNDS 2
#define SF_TUNE_SUSTAIN_MAX 4 /* candidates run sustained at most */

/* most candidates a request may list (the largest table, attention, has 10) */
#define SF_TUNE_MAX_CAND 64

typedef struct sf_tune_request {
    const char *device;      /* model name, e.g. "NVIDIA H200"            */
    const char *op;          /* e.g. "ssd_fwd"                            */
    sf_dtype dtype;
    const char *bucket;
    int ncand;               /* 1 to SF_TUNE_MAX_CAND                     */
    const char *const *names; /* ncand configuration names (no tabs)      */
    sf_tune_run_fn run;
    void *arg;
    int reps;                /* timed runs per candidate (median); >= 1   */
    int no_timing;           /* e.g. during stream capture: use a cached or
                                forced choice, else candidate 0; time nothing */
    sf_tune_sustain_fn sustain; /* NULL: short timings only              */
} sf_tune_request;

/* Picks the configuration for the request and leaves the op's outputs
 * computed by it.  *choice gets the candidate index; *ran is set when the
 * chosen candidate has already been run on these inputs (the caller then
 * must not run it again). */
sf_status sf_autotune(sf_ctx *ctx, const sf_tune_request *rq, int *choice, int *ran);

/* Whether SF_AUTOTUNE_FORCE names a configuration for `op`. */
int sf_autotune_forced(const char *op);
/* The configuration SF_AUTOTUNE_FORCE names for `op`, copied into buf; NULL
 * if none (for ops that pick by a selector rather than by timing). */
const char *sf_autotune_forced_name(const char *op, char *buf, size_t len);

/* The per-context table (ctx->tune); freed with the context. */
typedef struct sf_tune_entry {
    char key[160];
    char name[48];
    double ms;
} sf_tune_entry;

typedef struct sf_tune_table {
    sf_tune_entry *e;
    int n, cap;
    int loaded;
} sf_tune_table;

void sf_tune_table_free(sf_tune_table *t);

#ifdef __cplusplus
}
#endif
#endif
