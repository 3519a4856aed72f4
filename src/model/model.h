/* model.h - a transformer decoder (LlamaForCausalLM, Qwen2ForCausalLM) built
 * from the public ops: its weights on the context's device, its paged KV
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

typedef struct sfm_layer {
    sf_tensor in_norm, post_norm; /* (D) f32 */
    sfm_linear q, k, v, o, gate, up, down;
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
    void *logits;              /* (max_seqs, V) on the device              */
    float *stage;              /* host (cap_rows, D): embedding rows      */
    int32_t *pos_h;            /* host staging of the index buffers       */
    void *pos_d, *cu_d, *bt_d, *len_d, *clen_d;
    sfm_alloc *owned;
} sfm_model;

/* Builds the model of an open checkpoint on ctx's device.  dequantize != 0
 * expands GGUF block weights to f32.  The KV pools hold num_pages pages of
 * page_size tokens, max_seqs sequences of at most max_pages_per_seq pages.
 * The checkpoint must outlive the model (weights may point into it). */
sf_status sfm_model_create(sf_ctx *ctx, const sfm_checkpoint *ck, int dequantize, int page_size,
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
                            const int64_t *start, const int32_t *block_table, float *logits,
                            char *err, size_t errlen);

#endif
