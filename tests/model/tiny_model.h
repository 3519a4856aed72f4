/* Tiny checkpoints built in memory for the loader's tests and the fuzzer's
 * seeds: a 2-layer llama / qwen2 (vocab 16, hidden 32, 4 heads of 8, 2 kv
 * heads, MLP 64) as safetensors bytes or as a GGUF image, with switches that
 * corrupt one thing at a time. */
#ifndef SF_TESTS_TINY_MODEL_H
#define SF_TESTS_TINY_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct tm_buf {
    uint8_t *p;
    size_t n, cap;
} tm_buf;
void tm_put(tm_buf *b, const void *p, size_t n);
void tm_free(tm_buf *b);

#define TM_VOCAB 16
#define TM_HIDDEN 32
#define TM_LAYERS 2
#define TM_HEADS 4
#define TM_KV 2
#define TM_HD 8
#define TM_FFN 64

/* config.json text of the tiny model ("LlamaForCausalLM" or another class). */
const char *tm_config_json(const char *arch_class);

/* The value of element i of the tiny model's tensor `name` (F32 tensors). */
float tm_value(const char *name, int64_t i);

/* Safetensors file bytes of the tiny llama: tensors [lo, hi) of its list
 * (all: 0, -1); corrupt selects one fault (TM_ST_*). */
enum {
    TM_ST_OK = 0, TM_ST_F64, TM_ST_PAST_END, TM_ST_SPAN, TM_ST_OVERLAP, TM_ST_SHAPE, TM_ST_DROP_NORM,
    TM_ST_BAD_JSON, TM_ST_HUGE_HEADER, TM_ST_NEG_SHAPE, TM_ST_FIVE_DIMS, TM_ST_DUP_NAME, TM_ST_COUNT
};
int tm_st_count(void);
const char *tm_st_name(int i);
void tm_safetensors(tm_buf *out, int lo, int hi, int corrupt);

/* A GGUF image of the tiny model: qwen2 = 0 writes llama (q/k rows
 * permuted the way llama.cpp's converter does), 1 qwen2 (with biases). */
enum {
    TM_GG_OK = 0, TM_GG_MAGIC, TM_GG_VERSION, TM_GG_KV_COUNT, TM_GG_T_COUNT, TM_GG_STR_LEN, TM_GG_NESTED,
    TM_GG_VALUE_TYPE, TM_GG_NDIMS, TM_GG_NE_ZERO, TM_GG_Q4K, TM_GG_NE0_ODD, TM_GG_MISALIGNED, TM_GG_PAST_END,
    TM_GG_OVERLAP, TM_GG_ALIGN, TM_GG_ARCH, TM_GG_NO_HEADS, TM_GG_SHAPE, TM_GG_COUNT
};
void tm_gguf(tm_buf *out, int qwen2, int corrupt);
/* Bytes of row r of the HF-order q (k = 0) or k (k = 1) projection of layer l
 * as tm_gguf stores them before permuting (Q4_1 / Q4_0 blocks). */
void tm_gguf_qk_row(int l, int k, int r, uint8_t *row, size_t rowbytes);

#endif
