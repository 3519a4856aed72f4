/* case_tensor.h - the tensors of a case (tests/case_run.c): seeded
 * generators, strided layouts with guard bytes, f16/bf16 conversion, loads
 * and stores in a tensor's dtype, and the comparison with the reference. */
#ifndef SF_CASE_TENSOR_H
#define SF_CASE_TENSOR_H

#include "cases.h"

enum { GEN_NONE, GEN_NORMAL, GEN_HALF, GEN_DT_RAW, GEN_DT_POS, GEN_A, GEN_DTB_SP, GEN_DTB, GEN_SLOPE, GEN_UNIT, GEN_SCALE, GEN_MIN, GEN_OUT };

#define MAXT 13
#define GUARD 64

typedef struct tspec {
    int present, rank, gen, is_out, is_inout;
    int is_index;         /* integer data (indices, quantised codes): shared
                             as-is with the reference, never padded        */
    int contig;           /* kept contiguous in strided cases            */
    int64_t shape[4], stride[4];
    sf_dtype dtype;       /* the target's dtype                      */
    size_t span;          /* bytes spanned by the strided view        */
    size_t alloc;         /* span + guard                             */
    unsigned char *h;     /* host data in the target's layout         */
    float *ref;           /* contiguous f32 copy (reference input/out) */
    void *dptr;           /* buffer on the target context             */
} tspec;

uint64_t ct_rng_next(uint64_t *s);
double ct_rng_unif(uint64_t *s);
double ct_rng_normal(uint64_t *s);
int64_t ct_numel(const tspec *t);
void ct_spec(tspec *t, int rank, const int64_t *shape, sf_dtype dt, int gen);
/* The SSD forward's inputs of case c (x, dt, A, B, C, D, z, dt_bias,
 * initial_states, seq_idx, cu_seqlens: t[0] .. t[10], in that order, the
 * optional ones only where the case has them); dt, B and C in f32 where the
 * case asks.  Shared by the forward's cases and the backward's. */
void ct_ssd_inputs(const sfc_case *c, sf_dtype dt, tspec *t);
void ct_layout(tspec *t, int strided);
int64_t ct_offset_of(const tspec *t, int64_t i);
float ct_f16_to_f32(uint16_t h);
uint16_t ct_f32_to_f16(float f);
float ct_bf16_to_f32(uint16_t h);
uint16_t ct_f32_to_bf16(float f);
float ct_load(const tspec *t, int64_t i);
float ct_store(tspec *t, int64_t i, float v);
double ct_gen_value(int gen, uint64_t *s);
sf_tensor ct_view(const tspec *t, void *data, int ref, int device);
double ct_compare(const tspec *t, const float *ref, long long *unwritten, long long *nonfinite);
double ct_compare_pool(const tspec *t, const float *ref, long long *unwritten, long long *nonfinite);
float ct_round_to(sf_dtype dt, float v);
int ct_guards_intact(const tspec *t);

#endif
