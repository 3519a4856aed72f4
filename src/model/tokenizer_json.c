/* The tokenizer.json front end (HF `tokenizers` serialisation): a BPE model
 * with its vocab and merges, added_tokens with their flags, the
 * pre_tokenizer tree (Sequence, Split, Digits, ByteLevel) and a normalizer
 * that is absent or NFC. bos / eos and the chat template come from the
 * tokenizer_config.json beside it, when there is one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tokenizer_impl.h"

#define TOK_JSON_MAX ((long)1 << 30)   /* a tokenizer.json over 1 GiB is refused */

/* Reads a whole file; NULL with err set when it cannot. */
static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tok_errf(err, errlen, "tokenizer: cannot open %s", path);
        return NULL;
    }
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n < 0 || n > TOK_JSON_MAX || fseek(f, 0, SEEK_SET) != 0) {
        tok_errf(err, errlen, "tokenizer: %s: unreadable or larger than 1 GiB", path);
        goto out;
    }
    buf = malloc((size_t)n + 1);
    if (!buf) {
        tok_errf(err, errlen, "tokenizer: out of memory reading %s", path);
        goto out;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        tok_errf(err, errlen, "tokenizer: short read on %s", path);
        free(buf);
        buf = NULL;
        goto out;
    }
    buf[n] = 0;
    *len = (size_t)n;
out:
    fclose(f);
    return buf;
}

static int json_id(const cJSON *v, int *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= (double)(1 << 24) ||
        v->valuedouble != (double)(int)v->valuedouble)
        return 0;
    *out = (int)v->valuedouble;
    return 1;
}

static int json_flag(const cJSON *o, const char *key, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v);
    return dflt;
}

static const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* One pre-tokenizer node (recursive for Sequence). *byte_level is set when a
 * ByteLevel step is met: the vocabulary then speaks the GPT-2 alphabet. */
static sf_status pre_node(sfm_tokenizer *t, const cJSON *n, int depth, int *byte_level, char *err, size_t errlen)
{
    const char *type = json_str(n, "type");
    if (!type || depth > 4) {
        tok_errf(err, errlen, "tokenizer: a pre_tokenizer without a type");
        return SF_ERR_INVALID_ARG;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"), *c;
        if (!cJSON_IsArray(arr)) {
            tok_errf(err, errlen, "tokenizer: pre_tokenizer Sequence without pretokenizers");
            return SF_ERR_INVALID_ARG;
        }
        cJSON_ArrayForEach(c, arr) {
            sf_status s = pre_node(t, c, depth + 1, byte_level, err, errlen);
            if (s != SF_OK)
                return s;
        }
        return SF_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char *re = json_str(pat, "Regex"), *lit = json_str(pat, "String");
        const char *beh = json_str(n, "behavior");
        static const char *names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        int b = -1;
        for (int i = 0; beh && i < 5; i++)
            if (strcmp(beh, names[i]) == 0)
                b = i;
        if ((!re && !lit) || b < 0) {
            tok_errf(err, errlen, "tokenizer: Split pre-tokenizer with pattern or behavior it does not read");
            return SF_ERR_UNSUPPORTED;
        }
        const char *p = re ? re : lit;
        if (tok_add_split(t, p, strlen(p), re == NULL, (tok_split_behavior)b, json_flag(n, "invert", 0),
                          err, errlen) != 0)
            return SF_ERR_INVALID_ARG;
        return SF_OK;
    }
    if (strcmp(type, "Digits") == 0) {
        const char *p = json_flag(n, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+";
        return tok_add_split(t, p, strlen(p), 0, TOK_SPLIT_ISOLATED, 0, err, errlen) == 0
                   ? SF_OK : SF_ERR_INVALID_ARG;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        *byte_level = 1;
        if (json_flag(n, "add_prefix_space", 1) && tok_add_prefix_space(t, err, errlen) != 0)
            return SF_ERR_UNSUPPORTED;
        if (json_flag(n, "use_regex", 1) &&
            tok_add_split(t, tok_gpt2_regex, strlen(tok_gpt2_regex), 0, TOK_SPLIT_ISOLATED, 0, err, errlen) != 0)
            return SF_ERR_UNSUPPORTED;
        return SF_OK;
    }
    tok_errf(err, errlen, "tokenizer: pre-tokenizer \"%s\" is not supported (Sequence, Split, Digits, ByteLevel are)",
             type);
    return SF_ERR_UNSUPPORTED;
}

static sf_status normalizer(sfm_tokenizer *t, const cJSON *n, char *err, size_t errlen)
{
    if (!n || cJSON_IsNull(n))
        return SF_OK;
    const char *type = json_str(n, "type");
    if (type && strcmp(type, "NFC") == 0)
        return tok_set_nfc(t, err, errlen) == 0 ? SF_OK : SF_ERR_INVALID_ARG;
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *c;
        cJSON_ArrayForEach(c, arr) {
            sf_status s = normalizer(t, c, err, errlen);
            if (s != SF_OK)
                return s;
        }
        return SF_OK;
    }
    tok_errf(err, errlen, "tokenizer: normalizer \"%s\" is not supported (none or NFC)", type ? type : "?");
    return SF_ERR_UNSUPPORTED;
}

/* bos_token / eos_token are a string or {"content": string}. */
static int config_token(const sfm_tokenizer *t, const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *s = cJSON_IsString(v) ? v->valuestring : json_str(v, "content");
    return s ? tok_lookup(t, s, strlen(s)) : -1;
}

/* 1 when a post_processor template (TemplateProcessing, perhaps inside a
 * Sequence) puts a special token first: Llama-3's puts BOS there. */
static int post_bos(const sfm_tokenizer *t, const cJSON *pp, int depth)
{
    const char *type = json_str(pp, "type");
    const cJSON *c;
    if (!type || depth > 4)
        return 0;
    if (strcmp(type, "Sequence") == 0) {
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(pp, "processors"))
            if (post_bos(t, c, depth + 1))
                return 1;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return 0;
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
    const char *id = json_str(cJSON_GetObjectItemCaseSensitive(first, "SpecialToken"), "id");
    return id && t->bos >= 0 && tok_lookup(t, id, strlen(id)) == t->bos;
}

/* tokenizer_config.json in the same directory: absent is fine. */
static sf_status config(sfm_tokenizer *t, const char *path, char *err, size_t errlen)
{
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
    char *cp = malloc(dl + 32);
    if (!cp) {
        tok_errf(err, errlen, "tokenizer: out of memory");
        return SF_ERR_OUT_OF_MEMORY;
    }
    memcpy(cp, path, dl);
    strcpy(cp + dl, "tokenizer_config.json");
    FILE *f = fopen(cp, "rb");
    if (!f) {
        free(cp);
        return SF_OK;
    }
    fclose(f);
    size_t len = 0;
    char *buf = read_file(cp, &len, err, errlen);
    free(cp);
    if (!buf)
        return SF_ERR_INVALID_ARG;
    cJSON *cfg = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!cfg) {
        tok_errf(err, errlen, "tokenizer: tokenizer_config.json is not valid JSON");
        return SF_ERR_INVALID_ARG;
    }
    t->bos = config_token(t, cfg, "bos_token");
    t->eos = config_token(t, cfg, "eos_token");
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    if (cJSON_IsBool(ab))
        t->add_bos = cJSON_IsTrue(ab) ? 1 : 0;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *c;
    const char *tmpl = cJSON_IsString(ct) ? ct->valuestring : NULL;
    if (cJSON_IsArray(ct))   /* [{"name": "default", "template": ...}, ...] */
        cJSON_ArrayForEach(c, ct) {
            const char *nm = json_str(c, "name");
            if (nm && strcmp(nm, "default") == 0)
                tmpl = json_str(c, "template");
        }
    int rc = tmpl ? tok_set_chat_template(t, tmpl, strlen(tmpl), err, errlen) : 0;
    cJSON_Delete(cfg);
    return rc == 0 ? SF_OK : SF_ERR_OUT_OF_MEMORY;
}

static sf_status build(const cJSON *root, const char *path, sfm_tokenizer **out, char *err, size_t errlen)
{
    const char *name = path ? path : "tokenizer.json";
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *mtype = json_str(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), *v;
    if ((mtype && strcmp(mtype, "BPE") != 0) || !cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        tok_errf(err, errlen, "tokenizer: %s: model \"%s\" is not a BPE with vocab and merges", name,
                 mtype ? mtype : "?");
        return mtype && strcmp(mtype, "BPE") != 0 ? SF_ERR_UNSUPPORTED : SF_ERR_INVALID_ARG;
    }
    const char *cont = json_str(model, "continuing_subword_prefix"), *eow = json_str(model, "end_of_word_suffix");
    if (json_flag(model, "byte_fallback", 0) || (cont && *cont) || (eow && *eow)) {
        tok_errf(err, errlen, "tokenizer: BPE with byte_fallback or subword affixes is not supported");
        return SF_ERR_UNSUPPORTED;
    }
    int n = 0, id = 0;
    cJSON_ArrayForEach(v, vocab) {
        if (!json_id(v, &id)) {
            tok_errf(err, errlen, "tokenizer: vocab entry \"%.40s\" has no valid id", v->string);
            return SF_ERR_INVALID_ARG;
        }
        n = id + 1 > n ? id + 1 : n;
    }
    cJSON_ArrayForEach(v, added) {
        if (!json_id(cJSON_GetObjectItemCaseSensitive(v, "id"), &id) || !json_str(v, "content")) {
            tok_errf(err, errlen, "tokenizer: an added token without id or content");
            return SF_ERR_INVALID_ARG;
        }
        n = id + 1 > n ? id + 1 : n;
    }
    sfm_tokenizer *t = tok_new(n, err, errlen);
    if (!t)
        return SF_ERR_INVALID_ARG;
    sf_status st = SF_ERR_INVALID_ARG;
    cJSON_ArrayForEach(v, vocab) {
        json_id(v, &id);
        if (tok_set_token(t, id, v->string, strlen(v->string), err, errlen) != 0)
            goto fail;
    }
    cJSON_ArrayForEach(v, added) {
        json_id(cJSON_GetObjectItemCaseSensitive(v, "id"), &id);
        const char *c = json_str(v, "content");
        if (tok_set_token(t, id, c, strlen(c), err, errlen) != 0)
            goto fail;
    }
    if (tok_index(t, err, errlen) != 0)
        goto fail;
    cJSON_ArrayForEach(v, merges) {
        /* "a b" (the older form) or ["a", "b"] */
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(v)) {
            const char *sp = strchr(v->valuestring + (v->valuestring[0] != 0), ' ');
            if (!sp) {
                tok_errf(err, errlen, "tokenizer: merge \"%.40s\" has no space", v->valuestring);
                goto fail;
            }
            a = v->valuestring, al = (size_t)(sp - a), b = sp + 1, bl = strlen(b);
        } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsString(cJSON_GetArrayItem(v, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(v, 1))) {
            a = cJSON_GetArrayItem(v, 0)->valuestring, al = strlen(a);
            b = cJSON_GetArrayItem(v, 1)->valuestring, bl = strlen(b);
        } else {
            tok_errf(err, errlen, "tokenizer: a merge that is neither \"a b\" nor [a, b]");
            goto fail;
        }
        if (tok_add_merge(t, a, al, b, bl, err, errlen) != 0)
            goto fail;
    }
    t->ignore_merges = json_flag(model, "ignore_merges", 0);
    cJSON_ArrayForEach(v, added) {
        json_id(cJSON_GetObjectItemCaseSensitive(v, "id"), &id);
        if (tok_add_added(t, id, json_flag(v, "special", 0), json_flag(v, "lstrip", 0), json_flag(v, "rstrip", 0),
                          json_flag(v, "single_word", 0), err, errlen) != 0)
            goto fail;
    }
    if ((st = normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err, errlen)) != SF_OK)
        goto fail;
    int byte_level = 0;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (pre && !cJSON_IsNull(pre) && (st = pre_node(t, pre, 0, &byte_level, err, errlen)) != SF_OK)
        goto fail;
    st = SF_ERR_UNSUPPORTED;
    if (!byte_level) {
        tok_errf(err, errlen, "tokenizer: %s has no ByteLevel pre-tokenizer: only byte-level BPE is supported", name);
        goto fail;
    }
    st = SF_ERR_INVALID_ARG;
    if (tok_finish(t, err, errlen) != 0)
        goto fail;
    t->add_bos = -1;   /* unknown until tokenizer_config.json or the post-processor says */
    if (path && (st = config(t, path, err, errlen)) != SF_OK)
        goto fail;
    if (t->add_bos < 0)
        t->add_bos = post_bos(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), 0);
    *out = t;
    return SF_OK;
fail:
    sfm_tokenizer_free(t);
    return st;
}

sf_status tok_from_json_text(const char *text, size_t len, const char *path, sfm_tokenizer **out, char *err,
                             size_t errlen)
{
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        tok_errf(err, errlen, "tokenizer: %s is not valid JSON", path ? path : "the text");
        return SF_ERR_INVALID_ARG;
    }
    sf_status s = build(root, path, out, err, errlen);
    cJSON_Delete(root);
    return s;
}

sf_status sfm_tokenizer_from_json(const char *path, sfm_tokenizer **out, char *err, size_t errlen)
{
    if (!out || !path) {
        tok_errf(err, errlen, "tokenizer: from_json needs a path and an output");
        return SF_ERR_INVALID_ARG;
    }
    *out = NULL;
    size_t len = 0;
    char *buf = read_file(path, &len, err, errlen);
    if (!buf)
        return SF_ERR_INVALID_ARG;
    sf_status s = tok_from_json_text(buf, len, path, out, err, errlen);
    free(buf);
    return s;
}
