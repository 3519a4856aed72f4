/* Byte-level BPE (GPT-2 / Llama-3 / Qwen2 / SmolLM style) from a Hugging Face
 * tokenizer.json or from GGUF metadata (tokenizer.ggml.*): the pre-tokenizer
 * split by the model's regex (PCRE2, Unicode classes), bytes mapped to the
 * GPT-2 printable alphabet, merges by rank, added/special tokens matched
 * before splitting. Encodes to exactly the ids the HF `tokenizers` library
 * gives; decodes ids back to bytes (UTF-8 may be split across tokens: the
 * caller streams bytes). */
#ifndef SF_MODEL_TOKENIZER_H
#define SF_MODEL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "seqfuse.h"
#include "checkpoint.h"

typedef struct sfm_tokenizer sfm_tokenizer;

/* From a tokenizer.json file. */
sf_status sfm_tokenizer_from_json(const char *path, sfm_tokenizer **out, char *err, size_t errlen);
/* From an open GGUF checkpoint's metadata (tokenizer.ggml.model "gpt2"). */
sf_status sfm_tokenizer_from_gguf(const sfm_checkpoint *c, sfm_tokenizer **out, char *err, size_t errlen);
/* From a checkpoint: tokenizer.json in a HF directory, else GGUF metadata. */
sf_status sfm_tokenizer_open(const sfm_checkpoint *c, sfm_tokenizer **out, char *err, size_t errlen);
void sfm_tokenizer_free(sfm_tokenizer *t);

int sfm_tokenizer_vocab_size(const sfm_tokenizer *t);
int sfm_tokenizer_bos(const sfm_tokenizer *t);   /* -1 if none */
int sfm_tokenizer_eos(const sfm_tokenizer *t);   /* -1 if none */
/* 1 if the model's own tokenizer puts BOS before a text (Llama-3: GGUF
 * tokenizer.ggml.add_bos_token, tokenizer_config.json add_bos_token, or a
 * post-processor template that starts with BOS), 0 otherwise (SmolLM2, Qwen2). */
int sfm_tokenizer_add_bos(const sfm_tokenizer *t);
/* 1 if the id is a special (control) token, e.g. "<|im_end|>". */
int sfm_tokenizer_is_special(const sfm_tokenizer *t, int id);
/* Id of a token string (special tokens included), -1 if unknown. */
int sfm_tokenizer_token_id(const sfm_tokenizer *t, const char *token);

/* Encodes text (len bytes of UTF-8; invalid UTF-8 is encoded byte by byte,
 * as the byte-level alphabet allows). Special tokens written in the text
 * are recognised when parse_special != 0. Writes at most cap ids to ids and
 * returns the total count (call again with a larger buffer if it exceeds
 * cap), or -1 on an internal error (message in err). No BOS is added.
 * A model that normalises to NFC (Qwen2) gets -1 for text that NFC could
 * change (a composable mark, a singleton): NFC itself is not implemented. */
int64_t sfm_tokenizer_encode(const sfm_tokenizer *t, const char *text, size_t len, int parse_special,
                             int32_t *ids, int64_t cap, char *err, size_t errlen);
/* The bytes of one token (special tokens as their text). NULL for a bad id. */
const char *sfm_tokenizer_piece(const sfm_tokenizer *t, int id, size_t *len);

/* The chat template as a ChatML-style marker set when the model has one
 * (SmolLM2, Qwen2: "<|im_start|>role\ncontent<|im_end|>\n"), else the Llama-3
 * header markers; formats one user message followed by the assistant prompt.
 * BOS is never part of it: prepend it when sfm_tokenizer_add_bos says so.
 * Returns bytes needed (excluding NUL), writing at most cap bytes with a NUL. */
size_t sfm_tokenizer_chat_prompt(const sfm_tokenizer *t, const char *user, char *buf, size_t cap);

#endif
