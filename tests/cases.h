/* cases.h - the one table of cases that drives the tests (tests/test_ops.c),
 * `seqfuse check` and `seqfuse bench`, and the machinery that runs a case:
 * seeded random inputs, poisoned outputs with guard bytes, the reference
 * computed from f32 copies of the inputs, relative Frobenius errors.
 * Public API only. */
#ifndef SF_CASES_H
#define SF_CASES_H

#include <stdint.h>

#include "seqfuse.h"

typedef enum sfc_op {
    SFC_SSD_FWD = 0,
    SFC_SSD_STEP = 1,
    SFC_ATTN_FWD = 2,
    SFC_CONV1D_FWD = 3,
    SFC_CONV1D_UPDATE = 4,
    SFC_RMSNORM_GATED = 5,
    SFC_KV_APPEND = 6,
    SFC_ATTN_PAGED = 7,
    SFC_ADD_RMSNORM = 8,
    SFC_ADD_LAYERNORM = 9,
    SFC_SWIGLU = 10,
    SFC_ROPE = 11,
    SFC_GEMM_WQ = 12
} sfc_op;

typedef struct sfc_case {
    const char *name;
    sfc_op op;
    /* Mamba-2 (fwd and step): batch, seqlen, heads, headdim, groups, state */
    int b, L, H, P, G, N, chunk;
    int D;           /* 0 none, 1 shaped (H), 2 shaped (H, P)                */
    int z, dt_bias, softplus;
    float dt_min, dt_max; /* dt_max 0 means unbounded                       */
    int init, final;
    int varlen;      /* 0 none, 1 seq_idx, 2 cu_seqlens                      */
    int seqlens[8];  /* varlen: lengths (sum L for cu_seqlens; a row's split for seq_idx) */
    int nseq;
    int nslots;      /* ssd_step: state slots; > b uses a shuffled state_idx with one pad */
    int f32_in;      /* SSD fwd and step: SFC_F32_DT | _B | _C give those in f32
                        whatever the case's dtype (mamba_ssm's mixed inputs)  */
    sf_dtype state_dtype; /* ssd_step: the state cache's dtype (0: f32)      */
    /* attention: b, H above; */
    int Lq, Lk, Hkv, d, causal, wl, wr;
    int attn_varlen; /* cu_seqlens: per-sequence (Lq, Lk) from qlens/klens  */
    float ascale;    /* softmax scale in units of 1/sqrt(d); 0: the default   */
    float softcap;   /* > 0: capped scores                                    */
    int alibi;       /* ALiBi slopes: 0 none, 1 per head (H), 2 per (b, H)    */
    int qlens[8], klens[8];
    /* conv1d (fwd, update): b, L, init, final, varlen 2 + seqlens/nseq,
     * nslots above; channels, kernel width, SiLU, bias */
    int dim, width, silu, bias;
    /* gated RMSNorm: rows b * L, D = dim, z above; group 0 means D */
    int group, norm_before_gate;
    /* paged KV cache (kv_append, attn_paged): b, H, Hkv, d, causal, wl, wr,
     * ascale, softcap above; Lq = query tokens (attention) or new tokens
     * (append); klens[b] = keys per sequence (attention) or tokens already
     * cached (append).  The pool holds the pages the lengths need plus
     * `spare` unused ones, handed out in a random order from the seed;
     * block-table entries past a sequence's pages are -1 (never read). */
    int page_size, spare;
    /* fused norms (add_rmsnorm, add_layernorm): rows b, D = dim, bias above;
     * a residual, the h output (residual_out), weight and bias in the
     * activation dtype instead of f32, eps (0: 1e-5); the residual and h in
     * f32 whatever the dtype (residual_in_fp32); h written over the
     * residual (residual_out = residual, in place) */
    int residual, hout, wlow;
    float eps;
    int res_f32, h_inplace;
    /* swiglu: rows b, n = dim, layout (sf_swiglu_layout) */
    int layout;
    /* rope: T = L tokens, q heads H, k heads Hkv, head dim d; rotary dim
     * (0: d), GPT-J pairs, shuffled position ids, llama3 scaling, cos/sin
     * tables of npos rows, out-of-place outputs (else in place).  npos is
     * also the range of shuffled positions without tables. */
    int rot_dim, gptj, pos_ids, llama3, tables, npos, out_of_place;
    int rope;        /* kv_append: K rotated on the way in, by rot_dim, gptj,
                        llama3 and tables of npos rows above (positions are
                        the cache positions written)                      */
    /* gemm_wq: M = b rows of x; W (wq_n x wq_k) of wq_bits (4 or 8) codes,
     * groups of wq_group, mins when wq_min, bias above; wq_tiled: the target
     * gets the codes as SF_QW_TILED (sf_tile_qweight of the reference's rows;
     * the CUDA backend's layout: the host backends answer unsupported) */
    int wq_n, wq_k, wq_bits, wq_group, wq_min, wq_tiled;
    int no_k;        /* rope: q only (k absent; Hkv unused)                  */
    int strided;     /* inputs and outputs are views with padded strides      */
    int big;         /* 1: benchmark-sized, left out of the quick test set    */
    int workload;    /* the `seqfuse` default workload: 1 on the CPU, 2 on a GPU */
} sfc_case;

/* sfc_case.f32_in bits */
#define SFC_F32_DT 1
#define SFC_F32_B 2
#define SFC_F32_C 4

extern const sfc_case sfc_cases[];
extern const int sfc_ncases;

const char *sfc_op_name(sfc_op op);
int sfc_op_from_name(const char *s); /* -1 if unknown */

typedef struct sfc_result {
    double err;        /* relative Frobenius error of the main output       */
    double err2;       /* of the second output (final states / lse / state) */
    double err_naive;  /* attention in f16/bf16: the error of a naive attention
                          that rounds S, P and O to the dtype (0 otherwise) */
    long long unwritten;  /* output elements left NaN (poison)            */
    long long nonfinite;  /* ... NaN produced where the reference is finite */
    int guard_ok;      /* guard bytes and stride gaps intact                */
    double ms;         /* median time per call when timed (reps > 0)        */
    double flops, bytes;  /* work of one call, for rates                    */
    size_t ws_peak;    /* workspace peak of the timed backend (bytes)       */
    double ref_ms;     /* one call of the reference (when it ran)           */
    size_t ref_ws_peak;/* the reference's workspace peak (bytes)            */
    /* the baseline of sfc_run_baseline (0 otherwise): errors of its main and
     * second outputs against the same reference, its median time */
    double base_err, base_err2, base_ms;
    long long base_unwritten, base_nonfinite;
    int base_guard_ok;
} sfc_result;

/* Error bound of a backend on a dtype (DESIGN.md section 5). */
double sfc_tolerance(sfc_op op, sf_dtype dt, sf_backend be);
/* The bound of a case's main output: sfc_tolerance of its op, but a
 * kv_append that rotates K is held to sf_rope's bound. */
double sfc_tolerance1(const sfc_case *c, sf_dtype dt, sf_backend be);
/* The bound of case c's second output (sfc_result.err2) in dtype dt: the
 * step's state is rounded to its own dtype, which may be coarser than x's. */
double sfc_tolerance2(const sfc_case *c, sf_dtype dt, sf_backend be);

/* Runs case `c` in dtype `dt` on backend `be` of context `ctx` (CPU or
 * CUDA), with inputs drawn from `seed`; the reference runs on `ref_ctx` (a
 * CPU context) unless `skip_ref`.  reps > 0 also times `reps` calls after a
 * warm-up.  The status of the backend call is returned (SF_ERR_UNSUPPORTED
 * when it cannot serve the case); *msg gets the context's detail text. */
sf_status sfc_run(const sfc_case *c, sf_dtype dt, sf_backend be, sf_ctx *ctx, sf_ctx *ref_ctx,
                  uint64_t seed, int reps, int skip_ref, sfc_result *res, char *msg,
                  size_t msglen);

/* A second implementation of an op timed on a case's own inputs: the
 * `seqfuse` main job's naive baseline (tools/naive/).  `params` is the op's
 * params struct (sf_ssd_fwd_params or sf_attn_fwd_params) holding the
 * target's input tensors and the baseline's own poisoned outputs: out, and
 * final_states when the case has them; lse is absent. */
typedef struct sfc_baseline {
    void *self;
    /* Untimed, once: checks that it serves the case (SF_ERR_UNSUPPORTED with
     * the reason in msg otherwise) and allocates everything `run` needs. */
    sf_status (*prepare)(void *self, sfc_op op, const void *params, char *msg, size_t msglen);
    /* One call; returns once its outputs are in memory. */
    sf_status (*run)(void *self, sfc_op op, const void *params, char *msg, size_t msglen);
    /* Frees what prepare allocated (also after a failed prepare). */
    void (*release)(void *self);
} sfc_baseline;

/* sfc_run (reference included), then the baseline `bl` on the same inputs
 * and device: run once and compared with the reference (res->base_*), and
 * timed as the backend is (a warm-up, then the median of `reps` calls).
 * Ops other than ssd_fwd and attn_fwd give SF_ERR_UNSUPPORTED. */
sf_status sfc_run_baseline(const sfc_case *c, sf_dtype dt, sf_backend be, sf_ctx *ctx,
                           sf_ctx *ref_ctx, uint64_t seed, int reps, const sfc_baseline *bl,
                           sfc_result *res, char *msg, size_t msglen);

/* Runs every case of `op` (-1: all ops) in f32, f16 and bf16 on backend
 * `be` against the reference, printing one line per run to stdout; big
 * cases only with `all`.  Returns the number of failures; *skipped counts
 * what the backend documents it does not serve. */
int sfc_check_all(int op, sf_backend be, int device, uint64_t seed, int all, int threads,
                  int *passed, int *skipped);

/* Monotonic seconds. */
double sfc_now(void);

#endif
