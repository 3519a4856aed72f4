/* The GGUF front end: tokenizer.ggml.* metadata of a "gpt2" (byte-level BPE)
 * vocabulary, and sfm_tokenizer_open, which picks tokenizer.json or GGUF.
 *
 * tokenizer.ggml.pre names the pre-tokenizer; each maps to the regex list
 * llama.cpp's llama-vocab.cpp applies one after another (each an HF Split
 * with the Isolated behaviour), which is what the model's own tokenizer.json
 * does:
 *   gpt2     the GPT-2 regex (HF ByteLevel use_regex)
 *   smollm   "\p{N}" (HF Digits individual_digits), then the GPT-2 regex
 *   llama-bpe Llama-3's regex, with ignore_merges as in Llama-3's tokenizer.json
 *   qwen2    Qwen2's regex (single digits), with Qwen2's NFC normaliser
 *   default  llama.cpp's fallback list (punctuation, GPT-2, numbers, 3 digits) */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

static const char llama3_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct pre_family {
    const char *names;          /* tokenizer.ggml.pre values, '|' separated */
    const char *regex[4];
    int ignore_merges, nfc, add_bos;   /* add_bos: when the file does not say */
} pre_family;

static const pre_family families[] = {
    {"gpt2|mpt|olmo|jais", {tok_gpt2_regex}, 0, 0, 0},
    {"smollm|starcoder|refact|codeshell|command-r", {"\\p{N}", tok_gpt2_regex}, 0, 0, 0},
    {"llama-bpe|llama3|llama-v3", {llama3_regex}, 1, 0, 1},
    {"qwen2|stablelm2", {qwen2_regex}, 0, 1, 0},
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", tok_gpt2_regex, "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0, 0},
};

static int name_in(const char *list, const char *s, size_t len)
{
    for (const char *p = list; *p;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && memcmp(p, s, len) == 0)
            return 1;
        p += l + (e != NULL);
    }
    return 0;
}

sf_status sfm_tokenizer_from_gguf(const sfm_checkpoint *c, sfm_tokenizer **out, char *err, size_t errlen)
{
    if (!out || !c) {
        tok_errf(err, errlen, "tokenizer: from_gguf needs a checkpoint and an output");
        return SF_ERR_INVALID_ARG;
    }
    *out = NULL;
    const char *s;
    size_t sl;
    if (!sfm_meta_string(c, "tokenizer.ggml.model", &s, &sl)) {
        tok_errf(err, errlen, "tokenizer: the GGUF file has no tokenizer.ggml.model");
        return SF_ERR_INVALID_ARG;
    }
    if (sl != 4 || memcmp(s, "gpt2", 4) != 0) {
        tok_errf(err, errlen, "tokenizer: GGUF tokenizer \"%.*s\" is not supported (byte-level BPE \"gpt2\" is)",
                 (int)(sl > 40 ? 40 : sl), s);
        return SF_ERR_UNSUPPORTED;
    }
    const char *pre = "default";
    size_t pl = 7;
    sfm_meta_string(c, "tokenizer.ggml.pre", &pre, &pl);
    const pre_family *fam = NULL;
    for (size_t i = 0; i < sizeof families / sizeof *families && !fam; i++)
        if (name_in(families[i].names, pre, pl))
            fam = &families[i];
    if (!fam) {
        tok_errf(err, errlen, "tokenizer: GGUF pre-tokenizer \"%.*s\" is not supported (gpt2, smollm, llama-bpe, "
                 "qwen2, default and their aliases are)", (int)(pl > 40 ? 40 : pl), pre);
        return SF_ERR_UNSUPPORTED;
    }
    int64_t n = sfm_meta_array_len(c, "tokenizer.ggml.tokens");
    if (n <= 0 || n > (1 << 24)) {
        tok_errf(err, errlen, "tokenizer: tokenizer.ggml.tokens has %lld entries", (long long)n);
        return SF_ERR_INVALID_ARG;
    }
    int64_t ntypes = sfm_meta_array_len(c, "tokenizer.ggml.token_type");
    if (ntypes != 0 && ntypes != n) {
        tok_errf(err, errlen, "tokenizer: %lld token types for %lld tokens", (long long)ntypes, (long long)n);
        return SF_ERR_INVALID_ARG;
    }
    sfm_tokenizer *t = tok_new((int)n, err, errlen);
    if (!t)
        return SF_ERR_INVALID_ARG;
    sf_status st = SF_ERR_INVALID_ARG;
    for (int64_t i = 0; i < n; i++) {
        if (!sfm_meta_array_string(c, "tokenizer.ggml.tokens", i, &s, &sl)) {
            tok_errf(err, errlen, "tokenizer: tokenizer.ggml.tokens[%lld] is not a string", (long long)i);
            goto fail;
        }
        if (sl > 0 && tok_set_token(t, (int)i, s, sl, err, errlen) != 0)   /* "" is a hole */
            goto fail;
    }
    if (tok_index(t, err, errlen) != 0)
        goto fail;
    int64_t nm = sfm_meta_array_len(c, "tokenizer.ggml.merges");
    for (int64_t i = 0; i < nm; i++) {
        if (!sfm_meta_array_string(c, "tokenizer.ggml.merges", i, &s, &sl)) {
            tok_errf(err, errlen, "tokenizer: tokenizer.ggml.merges[%lld] is not a string", (long long)i);
            goto fail;
        }
        const char *sp = sl > 1 ? memchr(s + 1, ' ', sl - 1) : NULL;   /* "a b" */
        if (!sp) {
            tok_errf(err, errlen, "tokenizer: merge %lld has no space", (long long)i);
            goto fail;
        }
        if (tok_add_merge(t, s, (size_t)(sp - s), sp + 1, sl - (size_t)(sp - s) - 1, err, errlen) != 0)
            goto fail;
    }
    /* token types: 3 control (special, matched when parse_special), 4 user
     * defined (always matched in text) */
    for (int64_t i = 0; i < ntypes; i++) {
        int64_t ty = 0;
        if (!sfm_meta_array_int(c, "tokenizer.ggml.token_type", i, &ty)) {
            tok_errf(err, errlen, "tokenizer: tokenizer.ggml.token_type[%lld] is not an integer", (long long)i);
            goto fail;
        }
        if ((ty == 3 || ty == 4) && t->text[i] && tok_add_added(t, (int)i, ty == 3, 0, 0, 0, err, errlen) != 0)
            goto fail;
    }
    int64_t v;
    if (sfm_meta_int(c, "tokenizer.ggml.bos_token_id", &v) && v >= 0 && v < n)
        t->bos = (int)v;
    if (sfm_meta_int(c, "tokenizer.ggml.eos_token_id", &v) && v >= 0 && v < n)
        t->eos = (int)v;
    t->add_bos = fam->add_bos;
    if (sfm_meta_int(c, "tokenizer.ggml.add_bos_token", &v))
        t->add_bos = v != 0;
    t->ignore_merges = fam->ignore_merges;
    for (int k = 0; k < 4 && fam->regex[k]; k++)
        if (tok_add_split(t, fam->regex[k], strlen(fam->regex[k]), 0, TOK_SPLIT_ISOLATED, 0, err, errlen) != 0)
            goto fail;
    if (fam->nfc && tok_set_nfc(t, err, errlen) != 0)
        goto fail;
    if (sfm_meta_string(c, "tokenizer.chat_template", &s, &sl) && tok_set_chat_template(t, s, sl, err, errlen) != 0)
        goto fail;
    if (tok_finish(t, err, errlen) != 0)
        goto fail;
    *out = t;
    return SF_OK;
fail:
    sfm_tokenizer_free(t);
    return st;
}

sf_status sfm_tokenizer_open(const sfm_checkpoint *c, sfm_tokenizer **out, char *err, size_t errlen)
{
    if (!out || !c) {
        tok_errf(err, errlen, "tokenizer: open needs a checkpoint and an output");
        return SF_ERR_INVALID_ARG;
    }
    *out = NULL;
    if (sfm_checkpoint_is_gguf(c))
        return sfm_tokenizer_from_gguf(c, out, err, errlen);
    const char *dir = sfm_checkpoint_path(c);
    size_t dl = dir ? strlen(dir) : 0;
    char *path = malloc(dl + 16);
    if (!path) {
        tok_errf(err, errlen, "tokenizer: out of memory");
        return SF_ERR_OUT_OF_MEMORY;
    }
    memcpy(path, dir ? dir : "", dl);
    strcpy(path + dl, dl && dir[dl - 1] != '/' ? "/tokenizer.json" : "tokenizer.json");
    sf_status s = sfm_tokenizer_from_json(path, out, err, errlen);
    free(path);
    if (s != SF_OK)
        return s;
    /* no tokenizer_config.json: the ids config.json gives */
    const sfm_config *cfg = sfm_checkpoint_config(c);
    if (cfg && (*out)->bos < 0 && cfg->bos_token_id >= 0 && cfg->bos_token_id < (*out)->n)
        (*out)->bos = cfg->bos_token_id;
    if (cfg && (*out)->eos < 0 && cfg->eos_token_id >= 0 && cfg->eos_token_id < (*out)->n)
        (*out)->eos = cfg->eos_token_id;
    return SF_OK;
}
