/* The tokenizer's state and the builder that the two front ends (tokenizer.json
 * and GGUF metadata, tokenizer_load.c) fill; the encoder is tokenizer.c. */
#ifndef SF_MODEL_TOKENIZER_IMPL_H
#define SF_MODEL_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <pcre2.h>

#include "tokenizer.h"

/* One pre-tokenizer step, applied to every piece the previous step left. */
typedef enum tok_step_kind {
    TOK_STEP_SPLIT = 0,     /* split by a regex (HF Split, Digits, ByteLevel's regex) */
    TOK_STEP_PREFIX_SPACE   /* ByteLevel add_prefix_space: " " before a piece lacking one */
} tok_step_kind;

/* HF SplitDelimiterBehavior: what happens to the matched parts. */
typedef enum tok_split_behavior {
    TOK_SPLIT_ISOLATED = 0, TOK_SPLIT_REMOVED, TOK_SPLIT_MERGED_PREV, TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS
} tok_split_behavior;

typedef struct tok_step {
    tok_step_kind kind;
    pcre2_code *re;
    tok_split_behavior behavior;
    int invert;               /* the non-matching parts are the delimiters */
} tok_step;

#define TOK_MAX_STEPS 8

typedef struct tok_added {
    int id;
    const char *s;            /* = text[id] */
    size_t len;
    unsigned char special, lstrip, rstrip, single_word;
} tok_added;

struct sfm_tokenizer {
    int n;                    /* ids 0..n-1 (holes have no text)             */
    char **text;              /* token string as stored (GPT-2 alphabet)     */
    uint32_t *text_len;
    char **piece;             /* bytes it decodes to (may alias text)        */
    uint32_t *piece_len;
    unsigned char *special;
    unsigned char *is_added;
    int32_t *str_slot;        /* open addressing: token string -> id, -1 empty */
    size_t str_cap;
    uint64_t *mkey;           /* merges: (left id, right id) -> rank, result */
    int32_t *mrank, *mnew;
    size_t mcap, nmerges;
    int32_t byte_id[256];     /* id of each byte's one-character token, -1 */
    int ignore_merges;
    int nsteps;
    tok_step steps[TOK_MAX_STEPS];
    pcre2_code *nfc_guard;    /* non-NULL: the model normalises to NFC      */
    int nadded;
    tok_added *added;         /* by first byte, longest first (tok_finish)   */
    int32_t added_start[257]; /* added[added_start[b] .. added_start[b+1]) start with byte b */
    int bos, eos;
    int add_bos;              /* the model's tokenizer prepends BOS         */
    char *system_default;     /* ChatML default system message, or NULL     */
};

/* Builder. All return 0 on success, else write err and return -1. */
sfm_tokenizer *tok_new(int n, char *err, size_t errlen);
int tok_set_token(sfm_tokenizer *t, int id, const char *s, size_t len, char *err, size_t errlen);
/* After every token is set: the string hash, byte ids, decoded pieces. */
int tok_index(sfm_tokenizer *t, char *err, size_t errlen);
int tok_add_merge(sfm_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                  char *err, size_t errlen);
int tok_add_added(sfm_tokenizer *t, int id, int special, int lstrip, int rstrip, int single_word,
                  char *err, size_t errlen);
int tok_add_split(sfm_tokenizer *t, const char *pattern, size_t len, int literal,
                  tok_split_behavior behavior, int invert, char *err, size_t errlen);
int tok_add_prefix_space(sfm_tokenizer *t, char *err, size_t errlen);
int tok_set_nfc(sfm_tokenizer *t, char *err, size_t errlen);
/* The ChatML default system message from a chat template's text, if any. */
int tok_set_chat_template(sfm_tokenizer *t, const char *tmpl, size_t len, char *err, size_t errlen);
/* Last: orders the added tokens for matching. */
int tok_finish(sfm_tokenizer *t, char *err, size_t errlen);
int tok_lookup(const sfm_tokenizer *t, const char *s, size_t len);
/* Rank of merging ids (a, b), -1 if they do not merge; *merged: the result. */
int tok_merge_rank(const sfm_tokenizer *t, int32_t a, int32_t b, int32_t *merged);

/* The GPT-2 regex of HF's ByteLevel pre-tokenizer (use_regex). */
extern const char tok_gpt2_regex[];

/* sfm_tokenizer_from_json on text in memory; path (may be NULL) names it
 * and locates tokenizer_config.json. */
sf_status tok_from_json_text(const char *text, size_t len, const char *path, sfm_tokenizer **out, char *err,
                             size_t errlen);
/* UTF-8 of byte b's GPT-2 alphabet character; returns its length (1 or 2). */
int tok_byte_utf8(int b, char out[2]);
void tok_errf(char *err, size_t errlen, const char *fmt, ...);

#endif
