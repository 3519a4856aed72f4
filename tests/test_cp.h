/* test_cp.h - what test_cp.c (the simulated ranks) shares with
 * test_cp_units.c (unit checks and error paths). */
#ifndef SF_TEST_CP_H
#define SF_TEST_CP_H

#include <pthread.h>
#include <stdio.h>

#include "cp.h"

extern int failures;
#define CHECK(cond, ...)                                    \
    do {                                                    \
        if (!(cond)) {                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);     \
            printf(__VA_ARGS__);                            \
            printf("\n");                                   \
            failures++;                                     \
        }                                                   \
    } while (0)
#define OKS(call)                                                                              \
    do {                                                                                       \
        sf_status s_ = (call);                                                                 \
        if (s_ != SF_OK) {                                                                     \
            printf("FAIL %s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call, sf_status_string(s_), \
                   sf_ctx_last_error(ctx));                                                    \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

/* The device of the pass being run (SF_DEVICE_CPU or 0), and a context
 * for its memory. */
extern int g_dev;
extern sf_ctx *g_mem;

/* A buffer with a host side (h) and its copy on g_dev (d; = h on the CPU). */
typedef struct dbuf {
    void *h, *d;
    sf_dtype dt;
    int64_t n;
} dbuf;
dbuf bnew(sf_dtype dt, int64_t n);
dbuf brnd(sf_dtype dt, int64_t n, double lo, double hi); /* uniform, uploaded */
void bput(dbuf b);    /* host -> device */
void bget(dbuf b);    /* device -> host */
void bpoison(dbuf b); /* NaN everywhere, uploaded */
void bfree(dbuf *b);
void poison(void *p, sf_dtype dt, int64_t n);
/* A contiguous tensor on g_dev. */
sf_tensor T(void *p, sf_dtype dt, int rank, const int64_t *shape);
sf_ctx *mk_ctx(sf_backend be);

/* Thread transport: R ranks of one process exchanging through mailboxes. */
#define MAXR 4
typedef struct world {
    int R;
    pthread_barrier_t bar;
    const void *mail[MAXR][2];
} world;
typedef struct rank_tp {
    world *w;
    int rank;
    sf_ctx *ctx;
    void *buf;
    size_t size;
} rank_tp;
sf_cp_transport make_tp(rank_tp *r, int R);

typedef struct ssd_case {
    const char *name;
    sf_dtype dt;
    int b, L, H, P, G, N, chunk;
    int D; /* 0 none, 1 per head, 2 per channel */
    int z, softplus, init, final;
    float dt_min, dt_max;
    sf_backend be;
    int R;
    int lens[MAXR]; /* slice lengths; all 0: equal split */
} ssd_case;
typedef struct ssd_data {
    dbuf x, dt, B, C, z, A, D, bias, init;
} ssd_data;
/* Params over tokens [t0, t0 + n) of the case's global tensors. */
sf_ssd_fwd_params ssd_params(const ssd_case *c, const ssd_data *d, int64_t t0, int64_t n,
                             void *out, void *fin, int with_init);

void check_merge_units(sf_backend be);
void check_combine_units(sf_backend be);
void check_errors(void);

#endif
