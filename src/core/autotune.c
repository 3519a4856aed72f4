/* autotune.c - see autotune.h.  The cache file holds one line per choice:
 * "device|op|dtype|bucket <TAB> configuration <TAB> ms"; later lines win. */
#define _POSIX_C_SOURCE 200809L
#include "autotune.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

void sf_tune_table_free(sf_tune_table *t) {
    if (!t) return;
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}

static const char *cache_path(char *buf, size_t len) {
    const char *p = getenv("SF_AUTOTUNE_CACHE");
    if (p) return *p ? p : NULL;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, len, "%s/seqfuse/autotune.tsv", xdg);
    else if (home && *home)
        snprintf(buf, len, "%s/.cache/seqfuse/autotune.tsv", home);
    else
        return NULL;
    return buf;
}

/* mkdir -p of the file's folder; failures surface when the file is opened. */
static void make_parent_dirs(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *s = tmp + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return;
        *s = '/';
    }
}

static sf_tune_entry *put(sf_tune_table *t, const char *key, const char *name, double ms) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->e[i].key, key)) {
            snprintf(t->e[i].name, sizeof t->e[i].name, "%s", name);
            t->e[i].ms = ms;
            return &t->e[i];
        }
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        sf_tune_entry *e = (sf_tune_entry *)realloc(t->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        t->e = e;
        t->cap = cap;
    }
    sf_tune_entry *e = &t->e[t->n++];
    snprintf(e->key, sizeof e->key, "%s", key);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->ms = ms;
    return e;
}

static void load(sf_tune_table *t) {
    t->loaded = 1;
    char pb[1024];
    const char *path = cache_path(pb, sizeof pb);
    if (!path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *k = line, *n = strchr(k, '\t');
        if (!n) continue;
        *n++ = 0;
        char *m = strchr(n, '\t');
        if (!m) continue;
        *m++ = 0;
        put(t, k, n, atof(m));
    }
    fclose(f);
}

static void save(const char *key, const char *name, double ms) {
    char pb[1024];
    const char *path = cache_path(pb, sizeof pb);
    if (!path) return;
    make_parent_dirs(path);
    FILE *f = fopen(path, "a");
    if (!f) return; /* a read-only home only costs re-tuning next run */
    fprintf(f, "%s\t%s\t%.6g\n", key, name, ms);
    fclose(f);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The forced configuration for `op` in SF_AUTOTUNE_FORCE ("op:name,..."),
 * copied into buf; NULL if none. */
static const char *forced_name(const char *op, char *buf, size_t len) {
    const char *env = getenv("SF_AUTOTUNE_FORCE");
    if (!env || !*env) return NULL;
    size_t ol = strlen(op);
    for (const char *s = env; *s;) {
        const char *end = strchr(s, ',');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n > ol && !strncmp(s, op, ol) && s[ol] == ':') {
            size_t m = n - ol - 1;
            if (m >= len) m = len - 1;
            memcpy(buf, s + ol + 1, m);
            buf[m] = 0;
            return buf;
        }
        s += n + (end ? 1 : 0);
    }
    return NULL;
}

const char *sf_autotune_forced_name(const char *op, char *buf, size_t len) {
    return forced_name(op, buf, len);
}

int sf_autotune_forced(const char *op) {
    char fb[64];
    return forced_name(op, fb, sizeof fb) != NULL;
}

/* SF_AUTOTUNE_LOG=1: the timings behind each choice on stderr */
static int tune_log(void) {
    const char *v = getenv("SF_AUTOTUNE_LOG");
    return v && *v && strcmp(v, "0") != 0;
}

/* Among the candidates whose short-timing medians med[] are within
 * SF_TUNE_CLOSE of the fastest, the one with the lowest estimated sustained
 * time (see sf_tune_sustain_fn); *best unchanged when there is nothing to
 * weigh or the power cannot be read.  Fails only with a candidate's real
 * failure. */
static sf_status power_pick(sf_ctx *ctx, const sf_tune_request *rq, const double *med,
                            const unsigned char *serves, int *best) {
    const char *off = getenv("SF_AUTOTUNE_POWER");
    if (!rq->sustain || (off && !strcmp(off, "0")) || med[*best] < SF_TUNE_SUSTAIN_MS) return SF_OK;
    int close[SF_TUNE_SUSTAIN_MAX], nc = 0;
    close[nc++] = *best;
    /* the next fastest first, up to SF_TUNE_SUSTAIN_MAX in all */
    for (;;) {
        int next = -1;
        for (int c = 0; c < rq->ncand; c++) {
            int taken = 0;
            for (int k = 0; k < nc; k++) taken |= close[k] == c;
            if (!serves[c] || taken || med[c] > med[*best] * SF_TUNE_CLOSE) continue;
            if (next < 0 || med[c] < med[next]) next = c;
        }
        if (next < 0 || nc == SF_TUNE_SUSTAIN_MAX) break;
        close[nc++] = next;
    }
    if (nc < 2) return SF_OK;
    double energy[SF_TUNE_SUSTAIN_MAX] = {0}, limit = 0;
    for (int r = 0; r < SF_TUNE_SUSTAIN_ROUNDS; r++)
        for (int i = 0; i < nc; i++) {
            /* rotated each round, so that a drift of the board's state
             * weighs on every candidate alike */
            const int k = (i + r) % nc;
            double ms = 0, w = 0, lim = 0;
            sf_status st = rq->sustain(ctx, close[k], rq->arg, &ms, &w, &lim);
            if (st == SF_ERR_UNSUPPORTED) {
                ctx->err[0] = 0;
                return SF_OK;
            }
            if (st != SF_OK) return st;
            if (!(lim > 0) || !(ms > 0) || !(w > 0)) return SF_OK; /* nothing to weigh */
            energy[k] += ms * w / SF_TUNE_SUSTAIN_ROUNDS; /* mJ a call */
            limit = lim;
            if (tune_log())
                fprintf(stderr, "seqfuse autotune %s %s: %s sustained %.4f ms a call at %.1f W (limit %.0f W)\n",
                        rq->op, rq->bucket, rq->names[close[k]], ms, w, lim);
        }
    double best_score = -1;
    for (int k = 0; k < nc; k++) {
        const double by_power = energy[k] / limit; /* ms a call held at the limit */
        const double score = by_power > med[close[k]] ? by_power : med[close[k]];
        if (tune_log())
            fprintf(stderr, "seqfuse autotune %s %s: %s %.1f mJ a call, score %.4f ms\n", rq->op, rq->bucket,
                    rq->names[close[k]], energy[k], score);
        if (best_score < 0 || score < best_score) best_score = score, *best = close[k];
    }
    return SF_OK;
}

sf_status sf_autotune(sf_ctx *ctx, const sf_tune_request *rq, int *choice, int *ran) {
    *choice = 0;
    *ran = 0;
    if (rq->ncand < 1 || rq->ncand > SF_TUNE_MAX_CAND)
        return sf_fail(ctx, SF_ERR_INTERNAL, "autotune: %d candidates (1 to %d)", rq->ncand, SF_TUNE_MAX_CAND);
    char fb[64];
    const char *force = forced_name(rq->op, fb, sizeof fb);
    if (force) {
        for (int i = 0; i < rq->ncand; i++) {
            if (strcmp(rq->names[i], force) != 0) continue;
            ctx->err[0] = 0;
            sf_status st = rq->run(ctx, i, rq->arg, NULL);
            if (st == SF_ERR_UNSUPPORTED) {
                char why[SF_ERRMSG_LEN];
                snprintf(why, sizeof why, "%s", ctx->err);
                return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                               "%s: the forced configuration '%s' (SF_AUTOTUNE_FORCE) cannot serve "
                               "this shape (bucket %s)%s%s",
                               rq->op, force, rq->bucket, why[0] ? ": " : "", why);
            }
            if (st != SF_OK) return st;
            *choice = i;
            *ran = 1;
            return SF_OK;
        }
        char list[512] = "";
        size_t n = 0;
        for (int i = 0; i < rq->ncand && n < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", rq->names[i]);
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "%s: SF_AUTOTUNE_FORCE names configuration '%s', which does not exist "
                       "(configurations: %s)",
                       rq->op, force, list);
    }
    const char *off = getenv("SF_AUTOTUNE");
    if (off && !strcmp(off, "0")) return SF_OK;

    if (!ctx->tune) {
        ctx->tune = (sf_tune_table *)calloc(1, sizeof(sf_tune_table));
        if (!ctx->tune) return sf_fail(ctx, SF_ERR_OUT_OF_MEMORY, "autotune: out of memory");
    }
    sf_tune_table *t = ctx->tune;
    if (!t->loaded) load(t);
    char key[160];
    snprintf(key, sizeof key, "%s|%s|%s|%s", rq->device, rq->op, sf_dtype_name(rq->dtype), rq->bucket);
    for (int i = 0; i < t->n; i++) {
        if (strcmp(t->e[i].key, key) != 0) continue;
        for (int c = 0; c < rq->ncand; c++)
            if (!strcmp(rq->names[c], t->e[i].name)) {
                *choice = c;
                return SF_OK;
            }
        break; /* a configuration this build no longer has: tune again */
    }
    if (rq->no_timing) return SF_OK;

    /* One warm-up run per candidate (its time discarded; it also finds
     * those that cannot serve), then the timed runs in rounds, one run of
     * every serving candidate a round, so that a drift of the clock or the
     * temperature during tuning weighs on all of them alike; the median of
     * each.  (With each candidate's runs one after the other, the tuner's
     * pick at d 128 L 2048 attention measured ~5% below the other
     * candidate in bench/gpu_attn.py.) */
    int reps = rq->reps < 1 ? 1 : rq->reps > 32 ? 32 : rq->reps;
    double times[SF_TUNE_MAX_CAND][32];
    unsigned char serves[SF_TUNE_MAX_CAND];
    for (int c = 0; c < rq->ncand; c++) {
        double ms = 0;
        sf_status st = rq->run(ctx, c, rq->arg, &ms);
        serves[c] = st == SF_OK;
        if (st == SF_ERR_UNSUPPORTED) continue;
        if (st != SF_OK) return st;
    }
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < rq->ncand; c++) {
            if (!serves[c]) continue;
            sf_status st = rq->run(ctx, c, rq->arg, &times[c][r]);
            if (st != SF_OK) return st;
        }
    double best = -1, med[SF_TUNE_MAX_CAND];
    int best_i = -1;
    for (int c = 0; c < rq->ncand; c++) {
        med[c] = 0;
        if (!serves[c]) continue;
        qsort(times[c], (size_t)reps, sizeof(double), cmp_d);
        med[c] = times[c][reps / 2];
        if (tune_log())
            fprintf(stderr, "seqfuse autotune %s %s: %s median %.4f ms\n", rq->op, rq->bucket, rq->names[c], med[c]);
        if (best_i < 0 || med[c] < best) best = med[c], best_i = c;
    }
    if (best_i < 0)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: no configuration can serve this shape (bucket %s)",
                       rq->op, rq->bucket);
    ctx->err[0] = 0; /* candidates that declined left their reasons here */
    sf_status pst = power_pick(ctx, rq, med, serves, &best_i);
    if (pst != SF_OK) return pst;
    best = med[best_i];
    sf_status st = rq->run(ctx, best_i, rq->arg, NULL);
    if (st != SF_OK) return st;
    *choice = best_i;
    *ran = 1;
    put(t, key, rq->names[best_i], best);
    save(key, rq->names[best_i], best);
    return SF_OK;
}
