/* case_tensor.c - the tensors of a case: see case_tensor.h. */
#include "case_tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* random numbers: splitmix64                                          */
/* ------------------------------------------------------------------ */

uint64_t ct_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
double ct_rng_unif(uint64_t *s) { return (double)(ct_rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }
double ct_rng_normal(uint64_t *s) {
    double u = ct_rng_unif(s), v = ct_rng_unif(s);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ------------------------------------------------------------------ */
/* tensors of a case                                                   */
/* ------------------------------------------------------------------ */



int64_t ct_numel(const tspec *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

void ct_spec(tspec *t, int rank, const int64_t *shape, sf_dtype dt, int gen) {
    t->present = 1;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
    t->dtype = dt;
    t->gen = gen;
    t->is_out = gen == GEN_OUT;
    t->is_index = dt == SF_I32 || dt == SF_I64 || dt == SF_U8;
}

/* Strides: contiguous, or with every row (dim rank-2) padded by 8 elements
 * and rank-1 tensors stepping by 2, so views are not contiguous while rows
 * stay 16-byte aligned. */
void ct_layout(tspec *t, int strided) {
    size_t es = sf_dtype_size(t->dtype);
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        t->stride[i] = s;
        int64_t ext = t->shape[i] > 0 ? t->shape[i] : 1;
        const int pad = strided && !t->is_index && !t->contig;
        if (pad && t->rank >= 2 && i == t->rank - 1) ext += 8;
        if (pad && t->rank == 1) t->stride[i] = 2, ext *= 2;
        s *= ext;
    }
    int64_t span = 1;
    for (int i = 0; i < t->rank; i++)
        if (t->shape[i] > 0) span += (t->shape[i] - 1) * t->stride[i];
    if (ct_numel(t) == 0) span = 0;
    t->span = (size_t)span * es;
    t->alloc = t->span + GUARD;
}

/* Element i (row-major logical index) -> offset in elements. */
int64_t ct_offset_of(const tspec *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->rank - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    return off;
}

float ct_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    bits = e == 0x1f ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
uint16_t ct_f32_to_f16(float f) { /* inputs here are small normal numbers or zero */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a < 0x38800000u) return (uint16_t)sign; /* flush tiny values: never generated */
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
float ct_bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
uint16_t ct_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float ct_load(const tspec *t, int64_t i) {
    int64_t o = ct_offset_of(t, i);
    switch (t->dtype) {
    case SF_F32: return ((const float *)t->h)[o];
    case SF_F16: return ct_f16_to_f32(((const uint16_t *)t->h)[o]);
    case SF_BF16: return ct_bf16_to_f32(((const uint16_t *)t->h)[o]);
    case SF_I32: return (float)((const int32_t *)t->h)[o];
    case SF_U8: return (float)t->h[o];
    default: return (float)((const int64_t *)t->h)[o];
    }
}

/* Stores v rounded to the target dtype; returns the value actually stored. */
float ct_store(tspec *t, int64_t i, float v) {
    int64_t o = ct_offset_of(t, i);
    switch (t->dtype) {
    case SF_F32: ((float *)t->h)[o] = v; return v;
    case SF_F16: ((uint16_t *)t->h)[o] = ct_f32_to_f16(v); return ct_f16_to_f32(((uint16_t *)t->h)[o]);
    case SF_BF16: ((uint16_t *)t->h)[o] = ct_f32_to_bf16(v); return ct_bf16_to_f32(((uint16_t *)t->h)[o]);
    case SF_I32: ((int32_t *)t->h)[o] = (int32_t)v; return v;
    case SF_U8: t->h[o] = (unsigned char)v; return v;
    default: ((int64_t *)t->h)[o] = (int64_t)v; return v;
    }
}

double ct_gen_value(int gen, uint64_t *s) {
    switch (gen) {
    case GEN_NORMAL: return ct_rng_normal(s);
    case GEN_HALF: return 0.5 * ct_rng_normal(s);
    case GEN_DT_RAW: return -4.0 + 3.0 * ct_rng_unif(s);   /* softplus -> 0.018 .. 0.31 */
    case GEN_DT_POS: return 0.005 + 0.095 * ct_rng_unif(s);
    case GEN_A: return -(0.5 + 7.5 * ct_rng_unif(s));
    case GEN_DTB_SP: return -1.0 + 1.5 * ct_rng_unif(s);
    case GEN_DTB: return 0.02 * ct_rng_unif(s);
    case GEN_SLOPE: return 0.05 + 0.45 * ct_rng_unif(s); /* ALiBi's 2^-8/H .. 2^-1 range */
    case GEN_UNIT: return -1.0 + 2.0 * ct_rng_unif(s);   /* cos / sin tables */
    case GEN_SCALE: return 0.02 + 0.03 * ct_rng_unif(s); /* quantisation scales */
    case GEN_MIN: return -(0.1 + 0.2 * ct_rng_unif(s));  /* quantisation mins, about -8 s */
    default: return 0.0;
    }
}

sf_tensor ct_view(const tspec *t, void *data, int ref, int device) {
    sf_tensor v;
    memset(&v, 0, sizeof v);
    if (!t->present) return v;
    v.data = data;
    v.device = ref ? SF_DEVICE_CPU : device;
    v.dtype = ref && !t->is_index ? SF_F32 : t->dtype;
    v.rank = t->rank;
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        v.shape[i] = t->shape[i];
        v.stride[i] = ref ? s : t->stride[i];
        s *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
    return v;
}

/* Compares output i of the target with the reference output. */
double ct_compare(const tspec *t, const float *ref, long long *unwritten, long long *nonfinite) {
    double num = 0, den = 0;
    int64_t n = ct_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double o = ct_load(t, i), r = ref[i];
        if (isinf(r)) { /* an lse of a fully masked row: must match exactly */
            if (o != r) (*nonfinite)++;
            continue;
        }
        if (isnan(o)) {
            (*unwritten)++;
            continue;
        }
        if (isinf(o)) {
            (*nonfinite)++;
            continue;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A pool after kv_append against the reference's pool, where NaN marks a
 * slot that must still hold the poison: a slot written there counts as
 * non-finite (it should not have been touched), a written slot left NaN as
 * unwritten; the error of the rest is relative, as ct_compare(). */
double ct_compare_pool(const tspec *t, const float *ref, long long *unwritten,
                           long long *nonfinite) {
    double num = 0, den = 0;
    const int64_t n = ct_numel(t);
    for (int64_t i = 0; i < n; i++) {
        const double o = ct_load(t, i), r = ref[i];
        if (isnan(r)) {
            if (!isnan(o)) (*nonfinite)++;
            continue;
        }
        if (isnan(o)) {
            (*unwritten)++;
            continue;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Rounds v to dtype dt (f16/bf16), as a naive kernel storing it would. */
float ct_round_to(sf_dtype dt, float v) {
    return dt == SF_F16 ? ct_f16_to_f32(ct_f32_to_f16(v)) : dt == SF_BF16 ? ct_bf16_to_f32(ct_f32_to_bf16(v)) : v;
}

/* Output padding and guard bytes must still hold the 0xff poison. */
int ct_guards_intact(const tspec *t) {
    size_t es = sf_dtype_size(t->dtype);
    unsigned char *mask = (unsigned char *)calloc(t->alloc, 1);
    if (!mask) return 0; /* cannot check: counted as broken guards */
    int64_t n = ct_numel(t);
    for (int64_t i = 0; i < n; i++) memset(mask + ct_offset_of(t, i) * (int64_t)es, 1, es);
    int ok = 1;
    for (size_t i = 0; i < t->alloc && ok; i++)
        if (!mask[i] && t->h[i] != 0xff) ok = 0;
    free(mask);
    return ok;
}

void ct_ssd_inputs(const sfc_case *c, sf_dtype dt, tspec *t) {
    enum { X, DT, A, B, C, D, Z, DTB, INIT, SEQ, CU };
    const int64_t b = c->b, L = c->L, H = c->H, P = c->P, G = c->G, N = c->N;
    const int64_t ns = c->varlen == 2 ? c->nseq : b;
    const sf_dtype dtdt = c->f32_in & SFC_F32_DT ? SF_F32 : dt;
    const sf_dtype bdt = c->f32_in & SFC_F32_B ? SF_F32 : dt;
    const sf_dtype cdt = c->f32_in & SFC_F32_C ? SF_F32 : dt;
    ct_spec(&t[X], 4, (int64_t[]){b, L, H, P}, dt, GEN_NORMAL);
    ct_spec(&t[DT], 3, (int64_t[]){b, L, H}, dtdt, c->softplus ? GEN_DT_RAW : GEN_DT_POS);
    ct_spec(&t[A], 1, (int64_t[]){H}, SF_F32, GEN_A);
    ct_spec(&t[B], 4, (int64_t[]){b, L, G, N}, bdt, GEN_HALF);
    ct_spec(&t[C], 4, (int64_t[]){b, L, G, N}, cdt, GEN_HALF);
    if (c->D == 1) ct_spec(&t[D], 1, (int64_t[]){H}, SF_F32, GEN_NORMAL);
    if (c->D == 2) ct_spec(&t[D], 2, (int64_t[]){H, P}, SF_F32, GEN_NORMAL);
    if (c->z) ct_spec(&t[Z], 4, (int64_t[]){b, L, H, P}, dt, GEN_NORMAL);
    if (c->dt_bias) ct_spec(&t[DTB], 1, (int64_t[]){H}, SF_F32, c->softplus ? GEN_DTB_SP : GEN_DTB);
    if (c->init) ct_spec(&t[INIT], 4, (int64_t[]){ns, H, P, N}, SF_F32, GEN_HALF);
    if (c->varlen == 1) ct_spec(&t[SEQ], 2, (int64_t[]){b, L}, SF_I32, GEN_NONE);
    if (c->varlen == 2) ct_spec(&t[CU], 1, (int64_t[]){ns + 1}, SF_I32, GEN_NONE);
}
