/* ref_check.h - helpers shared by the reference checks (test_ref_independent.c,
 * test_ref_attn.c): failure counting, seeded random numbers, strided and
 * poisoned test tensors, relative errors.  Public API only. */
#ifndef SF_REF_CHECK_H
#define SF_REF_CHECK_H

#include "seqfuse.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int g_fail;      /* failures so far */
extern uint64_t g_rng;  /* splitmix64 state, seeded by main */

#define FAILF(...)                 \
    do {                           \
        printf("FAIL: ");          \
        printf(__VA_ARGS__);       \
        printf("\n");              \
        g_fail++;                  \
    } while (0)

/* The test keeps every tensor twice: a logical row-major double array the
 * formulations read, and the library's buffer with its own strides. */
enum { LAY_DENSE = 0, LAY_PAD = 1, LAY_PERM = 2 };

typedef struct {
    sf_tensor t;
    int64_t cap; /* elements in the buffer */
} tbuf;

uint64_t rng_u64(void);
double urand(double lo, double hi);
void fill_u(double *a, int64_t n, double lo, double hi);
void *xcalloc(size_t n, size_t sz);
size_t esize(sf_dtype dt);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f64_to_f16(double v);
double f16_to_f64(uint16_t h);
void poison_at(const tbuf *b, int64_t off);
int is_poison(const tbuf *b, int64_t off);
void tb_make(tbuf *b, sf_dtype dt, int rank, const int64_t *shape, int lay, int unit_inner);
int64_t tb_numel(const tbuf *b);
int64_t tb_off(const tbuf *b, int64_t li);
void tb_put(tbuf *b, double *v);
void tb_new(tbuf *b, sf_dtype dt, int rank, const int64_t *shape, int lay, int unit_inner,
            double *v);
void tb_get(const tbuf *b, double *v);
int tb_guard_ok(const tbuf *b);
void tb_free(tbuf *b);
double dtype_tol(sf_dtype dt);
double rel_err(const double *got, const double *want, int64_t n, int *nan);
double expect_close(const char *what, const double *got, const double *want, int64_t n,
                    double tol);

/* The attention checks (test_ref_attn.c). */
void run_attn_tests(sf_ctx *ctx);

#endif
