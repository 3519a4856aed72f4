/* naive_impl.h - what the naive baselines share (tools/naive/): the shapes
 * read from an op's params struct, and the entry points of the CPU
 * (naive_cpu.c) and CUDA (naive_cuda.cu) baselines.  Not part of the
 * library: these are the `seqfuse` main job's yardstick. */
#ifndef SFN_NAIVE_IMPL_H
#define SFN_NAIVE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "cases.h"
#include "seqfuse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dense attention, (b, L, H, d) with a unit inner stride; scale resolved
 * (softmax_scale 0 means 1/sqrt(d)); wl, wr the visible window of row i,
 * keys i + Lk - Lq - wl .. i + Lk - Lq + wr (negative: unbounded; causal
 * sets wr 0), as in seqfuse.h. */
typedef struct sfn_attn_shape {
    int64_t b, Lq, Lk, H, Hkv, d;
    int64_t wl, wr;
    float scale;
    sf_dtype dtype; /* of q, k, v and out */
} sfn_attn_shape;

/* Dense SSD: x (b, L, H, P), B and C (b, L, G, N); D rank 0 (absent), 1
 * (H) or 2 (H, P); optional z, dt_bias, initial and final states (b, H, P, N). */
typedef struct sfn_ssd_shape {
    int64_t b, L, H, P, G, N;
    int D_rank, has_z, has_bias, has_init, has_final;
    sf_dtype dtype; /* of x, dt, B, C, z and out; A, D, dt_bias and the states are f32 */
} sfn_ssd_shape;

/* The shapes of what a baseline serves: dense batches (no cu_seqlens or
 * seq_idx), q/k/v/out of one dtype with a unit inner stride.
 * SF_ERR_UNSUPPORTED with the reason in msg otherwise. */
sf_status sfn_attn_shape_of(const sf_attn_fwd_params *p, sfn_attn_shape *s, char *msg, size_t msglen);
sf_status sfn_ssd_shape_of(const sf_ssd_fwd_params *p, sfn_ssd_shape *s, char *msg, size_t msglen);

/* Visible keys [*lo, *hi) of query row i (empty when *lo >= *hi). */
static inline void sfn_key_range(const sfn_attn_shape *s, int64_t i, int64_t *lo, int64_t *hi) {
    const int64_t pos = i + s->Lk - s->Lq;
    int64_t a = s->wl < 0 ? 0 : pos - s->wl, e = s->wr < 0 ? s->Lk : pos + s->wr + 1;
    *lo = a < 0 ? 0 : a;
    *hi = e > s->Lk ? s->Lk : e;
}

/* a * b * c * d elements of `elem` bytes into *bytes; 0 if that overflows size_t. */
int sfn_size(size_t *bytes, size_t elem, int64_t a, int64_t b, int64_t c, int64_t d);

/* CPU, f32: S is the (b, H, Lq, Lk) score matrix, state the (b, H, P, N)
 * states; both allocated by the caller (sfn_cpu_*_ws gives their bytes). */
sf_status sfn_cpu_attn_ws(const sfn_attn_shape *s, size_t *bytes, char *msg, size_t msglen);
sf_status sfn_cpu_ssd_ws(const sfn_ssd_shape *s, size_t *bytes, char *msg, size_t msglen);
void sfn_cpu_attn(const sf_attn_fwd_params *p, const sfn_attn_shape *s, float *S, int threads);
void sfn_cpu_ssd(const sf_ssd_fwd_params *p, const sfn_ssd_shape *s, float *state, int threads);

/* CUDA, bf16/f16 in and out: a plan holds the cuBLAS handle and the
 * workspace, made by prepare (untimed) for one params struct; run launches
 * on `stream` and waits for it. */
typedef struct sfn_cuda sfn_cuda;
sf_status sfn_cuda_prepare(sfn_cuda **plan, int device, void *stream, sfc_op op, const void *params,
                           char *msg, size_t msglen);
sf_status sfn_cuda_run(sfn_cuda *plan, sfc_op op, const void *params, char *msg, size_t msglen);
void sfn_cuda_release(sfn_cuda *plan);

#ifdef __cplusplus
}
#endif

#endif
