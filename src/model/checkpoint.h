/* Checkpoints as the engine sees them: a set of named weight tensors in host
 * memory (memory-mapped files) plus one normalised model configuration, from
 * either a Hugging Face directory (config.json + model.safetensors, or shards
 * listed by model.safetensors.index.json) or one GGUF file.
 *
 * Names are Hugging Face's ("model.layers.3.self_attn.q_proj.weight"): the
 * GGUF reader maps llama.cpp's names ("blk.3.attn_q.weight") onto them and
 * undoes the row permutation llama.cpp's converter applies to llama q/k
 * projections, so the layers see one layout whatever the file. Shapes are in
 * PyTorch order (a Linear weight is (out, in), row-major).
 *
 * Memory: tensors point into the read-only mappings, except the llama q/k
 * projections (weights and biases) of a GGUF file, which are un-permuted
 * into copies the checkpoint owns (whole rows move, so quantised blocks are
 * copied as they are): for SmolLM2-135M Q4_1, 8.3 MB next to the 98 MB file.
 * safetensors data may be unaligned (the header length is arbitrary); GGUF
 * data is aligned to general.alignment (32 by default).
 *
 * Errors of sfm_checkpoint_open: SF_ERR_INVALID_ARG for a missing file or
 * directory, a truncated or corrupt file (lengths, counts, offsets, overlaps,
 * bad JSON) or a missing tensor; SF_ERR_UNSUPPORTED for an architecture,
 * dtype, GGUF tensor type or version it does not read (the message names
 * it); SF_ERR_SHAPE for a tensor whose shape disagrees with the config;
 * SF_ERR_DTYPE for a norm or bias stored quantised or as integers;
 * SF_ERR_TOO_LARGE for sizes that overflow; SF_ERR_OUT_OF_MEMORY. */
#ifndef SF_MODEL_CHECKPOINT_H
#define SF_MODEL_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "seqfuse.h"

/* Storage types of a weight tensor. The block types are GGUF's (32 elements
 * a block along the innermost dimension; layouts in seqfuse.h, sf_repack_gguf). */
typedef enum sfm_wtype {
    SFM_W_F32 = 0,
    SFM_W_F16,
    SFM_W_BF16,
    SFM_W_Q8_0,
    SFM_W_Q4_0,
    SFM_W_Q4_1,
    SFM_W_I64,   /* safetensors integer tensors that some checkpoints carry */
    SFM_W_I32
} sfm_wtype;

const char *sfm_wtype_name(sfm_wtype t);

#define SFM_MAX_DIMS 4

typedef struct sfm_tensor {
    const char *name;             /* HF name, owned by the checkpoint          */
    sfm_wtype type;
    int ndim;
    int64_t shape[SFM_MAX_DIMS];  /* PyTorch order, shape[ndim-1] innermost    */
    const void *data;             /* host memory, valid while the checkpoint is */
    uint64_t nbytes;              /* exactly what type and shape imply         */
} sfm_tensor;

typedef enum sfm_arch {
    SFM_ARCH_LLAMA = 0,   /* LlamaForCausalLM, GGUF general.architecture "llama" */
    SFM_ARCH_QWEN2,       /* Qwen2ForCausalLM (q/k/v biases)                     */
    SFM_ARCH_MAMBA2,      /* Mamba2ForCausalLM (transformers' layout)            */
    SFM_ARCH_HYBRID       /* BambaForCausalLM: Mamba-2 layers, attention at attn_layer_indices */
} sfm_arch;

const char *sfm_arch_name(sfm_arch a);

typedef enum sfm_rope_scaling { SFM_ROPE_NONE = 0, SFM_ROPE_LLAMA3 } sfm_rope_scaling;

/* Everything the layers need, whatever the source. Fields that an
 * architecture does not use are 0. */
typedef struct sfm_config {
    sfm_arch arch;
    int vocab_size;
    int hidden_size;
    int num_layers;
    int max_position;              /* max_position_embeddings / context_length */
    double norm_eps;               /* rms_norm_eps / layer_norm_epsilon        */
    int tie_embeddings;            /* lm_head = embed_tokens                    */
    int bos_token_id, eos_token_id;/* -1 when absent                           */
    /* attention layers */
    int num_heads, num_kv_heads, head_dim;
    int intermediate_size;         /* SwiGLU MLP width                         */
    int attn_bias;                 /* q/k/v projections carry biases (Qwen2)   */
    double rope_theta;
    int rope_dim;                  /* rotated dimensions of a head: head_dim,
                                      or less (Bamba's partial rotary: half) */
    sfm_rope_scaling rope_scaling;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position;
    /* Mamba-2 layers */
    int ssm_heads;                 /* mamba: num_heads                         */
    int ssm_head_dim;              /* P                                         */
    int ssm_state;                 /* N                                         */
    int ssm_groups;                /* G (n_groups)                              */
    int ssm_conv_kernel;           /* conv_kernel                               */
    int ssm_chunk;                 /* chunk_size                                */
    int ssm_inner;                 /* intermediate = heads * head_dim          */
    int ssm_norm_before_gate;      /* gated RMSNorm order: 0 in transformers'
                                      Mamba2 and Bamba (y * silu(z), then norm) */
    double ssm_time_step_min, ssm_time_step_max, ssm_time_step_limit_lo, ssm_time_step_limit_hi;
    /* hybrid: layer_is_attn[i] != 0 for attention layers (NULL otherwise;
     * owned by the checkpoint) */
    const unsigned char *layer_is_attn;
} sfm_config;

typedef struct sfm_checkpoint sfm_checkpoint;

/* Opens `path`: a directory holding config.json and model.safetensors (or
 * model.safetensors.index.json and its shards), or a .gguf file. Every tensor
 * header is checked against the file sizes (offsets, extents, type sizes,
 * overlaps) and the configuration against the architecture's needs. On
 * failure returns an error status and writes a one-line reason into err. */
sf_status sfm_checkpoint_open(const char *path, sfm_checkpoint **out, char *err, size_t errlen);
void sfm_checkpoint_close(sfm_checkpoint *c);

const sfm_config *sfm_checkpoint_config(const sfm_checkpoint *c);
/* NULL when absent. */
const sfm_tensor *sfm_checkpoint_find(const sfm_checkpoint *c, const char *name);
int sfm_checkpoint_count(const sfm_checkpoint *c);
const sfm_tensor *sfm_checkpoint_tensor(const sfm_checkpoint *c, int i);
/* 1 for a GGUF file, 0 for safetensors. */
int sfm_checkpoint_is_gguf(const sfm_checkpoint *c);
/* The directory of a HF checkpoint (tokenizer.json lives there), or the GGUF
 * file's path. */
const char *sfm_checkpoint_path(const sfm_checkpoint *c);

/* GGUF metadata (for the tokenizer and the chat template). NULL / 0 when
 * absent, the file is not GGUF, or the key has another type. */
typedef enum sfm_meta_type {
    SFM_META_NONE = 0, SFM_META_INT, SFM_META_FLOAT, SFM_META_BOOL, SFM_META_STRING, SFM_META_ARRAY
} sfm_meta_type;
sfm_meta_type sfm_meta_get_type(const sfm_checkpoint *c, const char *key);
/* Integers of any width (a u64 past INT64_MAX is absent), and bools as 0 / 1. */
int sfm_meta_int(const sfm_checkpoint *c, const char *key, int64_t *out);     /* 1 if found */
int sfm_meta_float(const sfm_checkpoint *c, const char *key, double *out);
/* A string value (not NUL-terminated in the file): pointer and length. */
int sfm_meta_string(const sfm_checkpoint *c, const char *key, const char **s, size_t *len);
/* Arrays: element count, and element i of a string / integer / float array. */
int64_t sfm_meta_array_len(const sfm_checkpoint *c, const char *key);
int sfm_meta_array_string(const sfm_checkpoint *c, const char *key, int64_t i, const char **s, size_t *len);
int sfm_meta_array_int(const sfm_checkpoint *c, const char *key, int64_t i, int64_t *out);
int sfm_meta_array_float(const sfm_checkpoint *c, const char *key, int64_t i, double *out);

#endif
