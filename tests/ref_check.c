/* ref_check.c - helpers of the reference checks; see ref_check.h. */
#include "ref_check.h"

int g_fail;

/* ---------------------------------------------------------------- rng */
uint64_t g_rng;
uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
double urand(double lo, double hi) {
    return lo + (hi - lo) * (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0);
}
void fill_u(double *a, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) a[i] = urand(lo, hi);
}

void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        printf("FAIL: test out of memory\n");
        exit(1);
    }
    return p;
}

/* --------------------------------------------------- strided tensors */
/* The test keeps every tensor twice: a logical row-major double array the
 * formulations read, and the library's buffer with its own strides.
 * Storing into the buffer rounds the logical values to the dtype, so both
 * sides see the same numbers. */


size_t esize(sf_dtype dt) { return dt == SF_F32 || dt == SF_I32 ? 4 : dt == SF_I64 ? 8 : 2; }

uint16_t f32_to_bf16(float f) { /* round to nearest even; no NaN inputs */
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
float bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* IEEE half, written from the definition rather than bit tricks: round
 * to the half quantum of the value's binade in double (round-half-even,
 * the default rounding mode), then encode.  Test values stay far below
 * the half range. */
uint16_t f64_to_f16(double v) {
    uint16_t sign = v < 0 ? 0x8000u : 0;
    double a = fabs(v);
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    double quantum = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
    a = nearbyint(a / quantum) * quantum;
    if (a == 0.0) return sign;
    if (a < ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)(a / ldexp(1.0, -24)));
    frexp(a, &e);
    uint16_t man = (uint16_t)((a / ldexp(1.0, e - 1) - 1.0) * 1024.0);
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | man);
}
double f16_to_f64(uint16_t h) {
    int ex = (h >> 10) & 0x1f, man = h & 0x3ff;
    double a = ex == 0 ? ldexp((double)man, -24) : ldexp(1.0 + man / 1024.0, ex - 15);
    return (h & 0x8000u) ? -a : a;
}

/* Poison: a NaN pattern in either float width, recognisable in guards. */
void poison_at(const tbuf *b, int64_t off) {
    if (esize(b->t.dtype) == 4) {
        uint32_t v = 0x7fa5a5a5u;
        memcpy((char *)b->t.data + off * 4, &v, 4);
    } else if (esize(b->t.dtype) == 2) {
        uint16_t v = 0x7fa5u;
        memcpy((char *)b->t.data + off * 2, &v, 2);
    }
}
int is_poison(const tbuf *b, int64_t off) {
    if (esize(b->t.dtype) == 4) {
        uint32_t v;
        memcpy(&v, (char *)b->t.data + off * 4, 4);
        return v == 0x7fa5a5a5u;
    }
    uint16_t v;
    memcpy(&v, (char *)b->t.data + off * 2, 2);
    return v == 0x7fa5u;
}

/* LAY_PAD: padding after every row of every dim, and a non-unit innermost
 * stride when the header does not ask for a unit one.  LAY_PERM (rank 4):
 * dims 1 and 2 swapped in memory, plus the padding. */
void tb_make(tbuf *b, sf_dtype dt, int rank, const int64_t *shape, int lay, int unit_inner) {
    memset(b, 0, sizeof *b);
    b->t.dtype = dt;
    b->t.device = SF_DEVICE_CPU;
    b->t.rank = rank;
    int ord[SF_MAX_RANK];
    for (int i = 0; i < rank; i++) ord[i] = i;
    if (lay == LAY_PERM && rank == 4) {
        ord[1] = 2;
        ord[2] = 1;
    }
    int64_t acc = (lay != LAY_DENSE && !unit_inner) ? 2 : 1;
    for (int k = rank - 1; k >= 0; k--) {
        int d = ord[k];
        b->t.shape[d] = shape[d];
        b->t.stride[d] = acc;
        acc = acc * shape[d] + (lay != LAY_DENSE ? 3 : 0);
    }
    b->cap = acc;
    b->t.data = xcalloc((size_t)acc, esize(dt));
    for (int64_t i = 0; i < acc; i++) poison_at(b, i);
}
int64_t tb_numel(const tbuf *b) {
    int64_t n = 1;
    for (int i = 0; i < b->t.rank; i++) n *= b->t.shape[i];
    return n;
}
int64_t tb_off(const tbuf *b, int64_t li) {
    int64_t off = 0;
    for (int d = b->t.rank - 1; d >= 0; d--) {
        off += (li % b->t.shape[d]) * b->t.stride[d];
        li /= b->t.shape[d];
    }
    return off;
}
/* Stores logical values (rounded in place to the dtype). */
void tb_put(tbuf *b, double *v) {
    for (int64_t i = 0, n = tb_numel(b); i < n; i++) {
        int64_t o = tb_off(b, i);
        if (b->t.dtype == SF_F32) {
            float f = (float)v[i];
            ((float *)b->t.data)[o] = f;
            v[i] = f;
        } else if (b->t.dtype == SF_BF16) {
            uint16_t h = f32_to_bf16((float)v[i]);
            ((uint16_t *)b->t.data)[o] = h;
            v[i] = bf16_to_f32(h);
        } else if (b->t.dtype == SF_F16) {
            uint16_t h = f64_to_f16(v[i]);
            ((uint16_t *)b->t.data)[o] = h;
            v[i] = f16_to_f64(h);
        } else if (b->t.dtype == SF_I32) {
            ((int32_t *)b->t.data)[o] = (int32_t)v[i];
        }
    }
}
/* A poisoned buffer holding `v` (NULL: left poisoned, for outputs). */
void tb_new(tbuf *b, sf_dtype dt, int rank, const int64_t *shape, int lay, int unit_inner,
                   double *v) {
    tb_make(b, dt, rank, shape, lay, unit_inner);
    if (v) tb_put(b, v);
}
void tb_get(const tbuf *b, double *v) {
    for (int64_t i = 0, n = tb_numel(b); i < n; i++) {
        int64_t o = tb_off(b, i);
        const uint16_t *h = (const uint16_t *)b->t.data;
        v[i] = b->t.dtype == SF_F32    ? (double)((float *)b->t.data)[o]
               : b->t.dtype == SF_F16 ? f16_to_f64(h[o])
                                      : (double)bf16_to_f32(h[o]);
    }
}
/* Elements outside the logical view must still hold the poison. */
int tb_guard_ok(const tbuf *b) {
    unsigned char *in = xcalloc((size_t)b->cap, 1);
    for (int64_t i = 0, n = tb_numel(b); i < n; i++) in[tb_off(b, i)] = 1;
    int ok = 1;
    for (int64_t i = 0; i < b->cap && ok; i++)
        if (!in[i] && !is_poison(b, i)) ok = 0;
    free(in);
    return ok;
}
void tb_free(tbuf *b) {
    free(b->t.data);
    b->t.data = NULL;
}

/* Bound on the relative Frobenius error when the only difference is the
 * rounding of the stored output: a little above the dtype's half ulp. */
double dtype_tol(sf_dtype dt) { return dt == SF_F32 ? 1e-6 : dt == SF_F16 ? 1e-3 : 4e-3; }

/* Relative Frobenius error of got vs want; NaN in got counts as failure. */
double rel_err(const double *got, const double *want, int64_t n, int *nan) {
    double num = 0, den = 0;
    *nan = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) *nan = 1;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
double expect_close(const char *what, const double *got, const double *want, int64_t n,
                           double tol) {
    int nan;
    double e = rel_err(got, want, n, &nan);
    if (nan || !(e <= tol))
        FAILF("%s: relative error %.3e (tolerance %.1e)%s", what, e, tol,
              nan ? ", non-finite output" : "");
    return e;
}

