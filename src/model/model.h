/* model.h - a decoder (LlamaForCausalLM, Qwen2ForCausalLM, Mamba2ForCausalLM,
 * the hybrid BambaForCausalLM) built from the public ops: its weights on the context's device, its paged KV
 * pools, its activation buffers, and one forward pass over a batch of
 * sequences (a prefill of whole prompts, or one decode token each).
 * Used by engine.c; not installed. */
#ifndef SF_MODEL_MODEL_H
#define SF_MODEL_MODEL_H

#include "checkpoint.h"

/* A Linear layer: dense weights (sf_gemm, any float dtype on the host) or
 * integer codes (sf_gemm_wq), and an optional f32 bias. */
typedef struct sfm_linear {
    int quant;
    sf_tensor w;       /* (n, k) when !quant */
    sf_qweight q;      /* when quant */
    sf_tensor bias;    /* (n) f32 or absent */
    int64_t n, k;
} sfm_linear;

/* A Mamba-2 mixer (transformers' Mamba2Mixer): in_proj -> [z | xBC | dt],
 * causal conv1d + SiLU on xBC, SSD with D, gated RMSNorm with z, out_proj. */
typedef struct sfm_mamba {
    sfm_linear in_proj, out_proj;
    sf_tensor conv_w, conv_b;     /* (conv_dim, W) f32, (conv_dim) f32 or absent */
    sf_tensor A, D, dt_bias;      /* (H) f32: A = -exp(A_log)                    */
    sf_tensor norm;               /* (E) f32: the gated norm's weight            */
    sf_tensor conv_state;         /* (max_seqs, conv_dim, W-1) f32, per slot     */
    sf_tensor ssm_state;          /* (max_seqs, H, P, N) f32, per slot           */
} sfm_mamba;

typedef struct sfm_layer {
    sf_tensor in_norm, post_norm; /* (D) f32; Mamba-2 layers: in_norm only */
    sfm_linear q, k, v, o, gate, up, down;
    /* q, k, v (and gate, up) as one product when their weights share a type:
     * the rows stacked [q; k; v] ([gate; up]), n > 0 when loaded so; the
     * separate ones are then empty.  One launch instead of three (two): a
     * decode step's small products are latency-bound. */
    sfm_linear qkv, gate_up;
    int rope_pairs;               /* qkv's q and k rows in rotary pairs (GPT-J order) */
    sfm_mamba *mamba;             /* non-NULL: a Mamba-2 layer */
} sfm_layer;

typedef struct sfm_alloc sfm_alloc;

typedef struct sfm_model {
    sf_ctx *ctx;
    const sfm_config *cfg;
    sf_dtype act;              /* activation and KV dtype (f32 on the CPU) */
    sfm_layer *layers;
    sf_tensor final_norm;
    sfm_linear lm_head;
    const float *embed;        /* host (V, D) f32: the lookup table */
    int64_t weight_bytes;
    /* paged KV: per layer one K and one V pool (num_pages, page, Hkv, d) */
    int page_size, max_pages_per_seq, max_seqs;
    int64_t num_pages, kv_bytes;
    sf_tensor *kpool, *vpool;
    /* activations, cap_rows token rows */
    int64_t cap_rows;
    void *x, *h, *q, *k, *v, *att, *tmp, *g, *u, *a;
    void *gn_scratch;          /* CUDA: the fused product + norm's scratch (layer/gemv_norm.h) */
    int fused_mlp;             /* CUDA, f16 / bf16: decode steps' gate/up product with SwiGLU in one
                                  sf_gemm_swiglu launch (dense weights) */
    int dec_fuse;              /* CUDA, bf16: decode steps' attention layers on the fused
                                  products of layer/dec_gemv.h (norms in their prologues, the
                                  residual adds in their epilogues) */
    int dec_pdl;               /* and each launched as a programmatic dependent (dec_gemv.h pdl) */
    double *rope_turns;        /* CUDA: (rope_dim / 2) f_i / 2 pi for the fused q/k/v
                                  product's rotation (dec_gemv.h SF_DEC_QKV), or NULL */
    void *qkv;                 /* the stacked q/k/v product (rows, QD + 2 KD); g holds
                                  the stacked gate/up one (rows, 2F)             */
    void *zxd, *xbc, *y, *yn;  /* Mamba-2: in_proj out, conv out, SSD out, norm out */
    int32_t *slots_h;          /* host staging of the state slots         */
    void *slots_d;
    void *logits;              /* (max_seqs, V) in act on the device       */
    void *logits_h;            /* host staging of logits                   */
    float *stage;              /* host (cap_rows, D): embedding rows      */
    int32_t *pos_h;            /* host staging of the index buffers       */
    void *pos_d, *cu_d, *bt_d, *len_d, *clen_d;
    void *ids_d;               /* a prefill's token ids (cap_rows), for sf_embed */
    /* the device-resident decode step (step.c; CUDA contexts): the step's
     * index arrays packed in one pinned host buffer and its device twin,
     * (5 + max_pages_per_seq) * max_seqs i32: ids | pos | len | clen |
     * slots | block table; the sampled tokens; the embedding table in act;
     * per slot the sampler's seen marks (max_seqs, V) u8 and RNG state */
    int32_t *step_h, *tok_h;
    uint64_t *rng_h;           /* pinned: the RNG state a slot starts from */
    void *step_d, *tok_d, *seen_d, *rng_d;
    sf_tensor table;
    int32_t scratch_page;      /* a KV page no sequence owns: padding rows */
    int dev_sample;            /* sf_sample serves this context           */
    int rows_gen;              /* counts the activation buffers' regrowths
                                  (a captured graph holds their addresses) */
    sfm_alloc *owned;
} sfm_model;

/* The device index tensors of a pass: positions (T), cu_seqlens (n+1),
 * lengths after the pass and before it (n), state slots (n), block table
 * (n, max_pages_per_seq); all i32. */
typedef struct sfm_index {
    void *pos, *cu, *len, *clen, *slots, *bt;
} sfm_index;

/* Builds the model of an open checkpoint on ctx's device, its activations
 * and KV cache in act (f32, f16 or bf16; the residual stream, the Mamba
 * states and the norms' weights stay f32).  dequantize != 0
 * expands GGUF block weights to f32.  The KV pools hold num_pages pages of
 * page_size tokens, max_seqs sequences of at most max_pages_per_seq pages.
 * The checkpoint must outlive the model (weights may point into it). */
sf_status sfm_model_create(sf_ctx *ctx, const sfm_checkpoint *ck, sf_dtype act, int dequantize, int page_size,
                           int64_t num_pages, int max_seqs, int max_pages_per_seq, sfm_model **out,
                           char *err, size_t errlen);
void sfm_model_destroy(sfm_model *m);

/* One forward pass over n sequences (n <= max_seqs): sequence i brings
 * lens[i] new tokens (ids, concatenated in order) at positions start[i] ..
 * start[i] + lens[i] - 1, its pages in row i of block_table (host, (n,
 * max_pages_per_seq) i32, covering start[i] + lens[i] tokens).  Either a
 * prefill (every start 0; lens any) or a decode step (every len 1).  The
 * K/V of the new tokens are written to the pages; logits (host, (n, V) f32)
 * get the logits after each sequence's last new token. */
sf_status sfm_model_forward(sfm_model *m, int n, const int32_t *ids, const int64_t *lens,
                            const int64_t *start, const int32_t *block_table, const int32_t *slots,
                            float *logits, char *err, size_t errlen);

/* The layers of a pass over T rows of n sequences, m->tmp (the embeddings)
 * to m->h (the final norm's output); cu and slots on the host are read by a
 * prefill only.  Capturable when decode != 0. */
sf_status sfm_model_layers(sfm_model *m, int n, int64_t T, int decode, const sfm_index *ix, const int32_t *cu,
                           const int32_t *slots, char *err, size_t errlen);
/* The first n rows of the last pass's logits to the host as f32 (synchronous). */
sf_status sfm_model_logits_host(sfm_model *m, int n, float *logits, char *err, size_t errlen);

/* step.c: the device-resident decode step.  sfm_step_create allocates its
 * buffers (m->step_h ...) and checks that sf_embed serves this context
 * (SF_ERR_UNSUPPORTED: the engine keeps the host path) and whether
 * sf_sample does (m->dev_sample; else the host samples).
 * sfm_step_admit sets a slot's RNG state and seen marks (the prompt's
 * tokens when penalty != 0).  sfm_step_decode runs one step over the first
 * n rows of m->step_h (live rows then padding rows), directly or through
 * *graph (captured into it when NULL; graph NULL: direct).  sfm_step_sample
 * samples rows 0 .. n-1 of m->logits with the slots at `slots_d` (device)
 * into m->tok_h and waits for them: the step's only synchronisation. */
sf_status sfm_step_create(sfm_model *m, char *err, size_t errlen);
void sfm_step_destroy(sfm_model *m); /* by sfm_model_destroy */
sf_status sfm_step_admit(sfm_model *m, int slot, uint64_t rng, const int32_t *hist, int64_t nhist, int penalty,
                         char *err, size_t errlen);
sf_status sfm_step_decode(sfm_model *m, int n, sf_graph **graph, char *err, size_t errlen);
sf_status sfm_step_sample(sfm_model *m, int n, const void *slots_d, const sf_sampling *s, char *err, size_t errlen);
/* The packed step arrays (host side; the device twin has the same layout). */
static inline int32_t *sfm_step_ids(sfm_model *m) { return m->step_h; }
static inline int32_t *sfm_step_pos(sfm_model *m) { return m->step_h + m->max_seqs; }
static inline int32_t *sfm_step_len(sfm_model *m) { return m->step_h + 2 * m->max_seqs; }
static inline int32_t *sfm_step_clen(sfm_model *m) { return m->step_h + 3 * m->max_seqs; }
static inline int32_t *sfm_step_slots(sfm_model *m) { return m->step_h + 4 * m->max_seqs; }
static inline int32_t *sfm_step_bt(sfm_model *m) { return m->step_h + 5 * m->max_seqs; }

/* Shared by model.c and mamba.c. */
sf_status sfm_model_fail(char *err, size_t errlen, sf_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
void *sfm_dev_alloc(sfm_model *m, size_t bytes);
sf_status sfm_host_f32(sfm_model *m, const sfm_tensor *t, float **out, char *err, size_t errlen);
const sfm_tensor *sfm_need(const sfm_checkpoint *ck, const char *name, char *err, size_t errlen);
sf_status sfm_load_vec(sfm_model *m, const sfm_tensor *t, int64_t n, sf_tensor *out, char *err, size_t errlen);
sf_status sfm_load_linear(sfm_model *m, const sfm_tensor *t, const sfm_tensor *bias, int64_t n, int64_t k,
                          int dequantize, sfm_linear *L, char *err, size_t errlen);
sf_status sfm_linear_apply(sfm_model *m, const sfm_linear *L, void *x, int64_t M, void *y);
/* n f32 values into f32 / bf16 / f16 (in place allowed), rounded to nearest even. */
void sfm_f32_to(sf_dtype dt, const float *src, void *dst, int64_t n);
/* mamba.c: the weights and state slots of Mamba-2 layer l ("prefix" names
 * its mixer), and the mixer over the batch up to out_proj's input: m->h
 * in, m->yn out (the caller runs out_proj with the norm after it).  cu holds
 * the batch's row offsets (n+1, host) and slots_h its state slots (host, a
 * prefill's), slots_d the state slots on the device (n, a decode's). */
sf_status sfm_mamba_load(sfm_model *m, const sfm_checkpoint *ck, const char *prefix, int dequantize,
                         sfm_mamba **out, char *err, size_t errlen);
sf_status sfm_mamba_mixer(sfm_model *m, const sfm_mamba *mb, int n, int64_t T, const int32_t *cu,
                          const int32_t *slots_h, void *slots_d, int decode, char *err, size_t errlen);

#endif
