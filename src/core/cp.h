/* cp.h - context parallelism inside the library: the validated problems
 * of the building blocks (sf_ssd_cp_*, sf_attn_merge), their backend entry
 * points, and the transport-independent drivers (the all-gather scan for
 * SSD, the ring for attention) that src/cuda/comm_nccl.cu runs over NCCL
 * and tests/test_cp.c runs over threads in one process. */
#ifndef SF_CP_H
#define SF_CP_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sf_ssd_cp_local's log-decay and sf_ssd_cp_correct's g both need the
 * processed dt of the slice; both read the sf_ssd_fwd params. */
typedef struct sf_cp_ssd_problem {
    const sf_ssd_fwd_params *p;
    int64_t batch, seqlen, nheads, headdim, ngroups, dstate;
    int64_t heads_per_group;
    int has_z, has_dt_bias, has_final;
    sf_tensor logdecay;     /* (b, H) f32: output of logdecay, input of correct */
    sf_tensor h_in;         /* (b, H, P, N) f32 (correct)                        */
    sf_tensor state_local;  /* (b, H, P, N) f32 (correct, with final_states)     */
} sf_cp_ssd_problem;

typedef struct sf_cp_combine_problem {
    sf_tensor states_all, logdecay_all, h_in;
    int rank;
    int64_t batch, nheads, headdim, dstate;
} sf_cp_combine_problem;

/* dst = merge(a, b) by lse; b absent (data NULL): dst = a.  dst may be a
 * (in place, element by element); out tensors of any float dtype. */
typedef struct sf_cp_merge_problem {
    sf_tensor a_out, a_lse, b_out, b_lse, dst_out, dst_lse;
    int64_t batch, seqlen, nheads, headdim;
} sf_cp_merge_problem;

sf_status sf_ref_cp_logdecay(sf_ctx *ctx, const sf_cp_ssd_problem *pr);
sf_status sf_ref_cp_correct(sf_ctx *ctx, const sf_cp_ssd_problem *pr);
sf_status sf_ref_cp_combine(sf_ctx *ctx, const sf_cp_combine_problem *pr);
sf_status sf_ref_cp_merge(sf_ctx *ctx, const sf_cp_merge_problem *pr);

sf_status sf_cpu_cp_logdecay(sf_ctx *ctx, const sf_cp_ssd_problem *pr);
sf_status sf_cpu_cp_correct(sf_ctx *ctx, const sf_cp_ssd_problem *pr);
sf_status sf_cpu_cp_combine(sf_ctx *ctx, const sf_cp_combine_problem *pr);
sf_status sf_cpu_cp_merge(sf_ctx *ctx, const sf_cp_merge_problem *pr);
/* Copies a (b, L, Hkv, d) tensor of any strides into contiguous dst. */
sf_status sf_cpu_cp_pack(sf_ctx *ctx, void *dst, const sf_tensor *src);

sf_status sf_cuda_cp_logdecay(sf_ctx *ctx, const sf_cp_ssd_problem *pr);
sf_status sf_cuda_cp_correct(sf_ctx *ctx, const sf_cp_ssd_problem *pr);
sf_status sf_cuda_cp_combine(sf_ctx *ctx, const sf_cp_combine_problem *pr);
sf_status sf_cuda_cp_merge(sf_ctx *ctx, const sf_cp_merge_problem *pr);
sf_status sf_cuda_cp_pack(sf_ctx *ctx, void *dst, const sf_tensor *src);

/* Internal merge with a separate destination (validated like
 * sf_attn_merge, dtypes of the three outs free): the ring driver merges
 * the last part straight into the caller's out from its f32 accumulator. */
sf_status sf_cp_merge_into(sf_ctx *ctx, sf_backend be, const sf_tensor *a_out,
                           const sf_tensor *a_lse, const sf_tensor *b_out, const sf_tensor *b_lse,
                           const sf_tensor *dst_out, const sf_tensor *dst_lse);

/* ------------------------------------------------------------------ */
/* Transport: what the drivers need from the ranks' interconnect         */
/* ------------------------------------------------------------------ */
/* Ordering follows the context: for a CUDA context the operations are
 * stream-ordered with the work queued on ctx (asynchronous); for a CPU
 * context they complete before returning. */
typedef struct sf_cp_transport {
    void *user;
    int rank, nranks;
    /* Memory on the context's device that stays valid across the whole
     * driver call (not the context's workspace: the inner ops use that).
     * NULL with the error recorded on ctx when it cannot be had. */
    void *(*buffer)(void *user, sf_ctx *ctx, size_t bytes);
    /* In-place all-gather: slot r (bytes at buf + r * bytes) comes from
     * rank r; the transfer starts after the work queued on ctx so far. */
    sf_status (*allgather)(void *user, sf_ctx *ctx, void *buf, size_t bytes);
    /* Records the point of ctx's queue that the next ring_start waits for
     * (the buffers it overwrites are no longer read after that point). */
    sf_status (*mark)(void *user, sf_ctx *ctx);
    /* Sends n buffers of `bytes` to rank + 1 and receives n into recv from
     * rank - 1 (mod nranks), once the last mark is reached; may overlap
     * the work queued on ctx after the mark. */
    sf_status (*ring_start)(void *user, sf_ctx *ctx, const void *const *send,
                            void *const *recv, int n, size_t bytes);
    /* Work queued on ctx after this call sees the received data. */
    sf_status (*ring_wait)(void *user, sf_ctx *ctx);
} sf_cp_transport;

/* The drivers of sf_ssd_fwd_cp and sf_attn_fwd_ring over any transport. */
sf_status sf_cp_ssd_run(sf_ctx *ctx, const sf_ssd_fwd_params *p, const sf_cp_transport *t);
sf_status sf_cp_attn_ring_run(sf_ctx *ctx, const sf_attn_fwd_params *p,
                              const sf_cp_transport *t);

#ifdef __cplusplus
}
#endif
#endif
