/* config.c - sfm_config from config.json (transformers' field names and
 * defaults, read from its configuration classes) or from GGUF metadata, and
 * the check that every tensor an architecture needs is there with its
 * shape. */
#include "ckpt_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits that keep every product of config values inside int64 and reject
 * nonsense early; real models sit far below them (Llama-3 vocab: 128256). */
#define MAX_VOCAB (1 << 22)
#define MAX_DIM (1 << 17)
#define MAX_LAYERS 4096
#define MAX_HEADS 4096

/* ---------------------------------------------------------------- JSON */
/* Python's json writes infinity as a bare Infinity, which is not JSON:
 * outside strings, Infinity becomes 1e999 (strtod gives inf) and NaN 0. */
static char *sanitize(const char *s, size_t n) {
    char *o = malloc(n * 2 + 1);
    if (!o) return NULL;
    size_t j = 0;
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (in_str) {
            if (ch == '\\' && i + 1 < n) {
                o[j++] = ch;
                ch = s[++i];
            } else if (ch == '"') {
                in_str = 0;
            }
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == 'I' && n - i >= 8 && !memcmp(s + i, "Infinity", 8)) {
            memcpy(o + j, "1e999", 5);
            j += 5;
            i += 7;
            continue;
        } else if (ch == 'N' && n - i >= 3 && !memcmp(s + i, "NaN", 3)) {
            o[j++] = '0';
            i += 2;
            continue;
        }
        o[j++] = ch;
    }
    o[j] = 0;
    return o;
}

typedef struct jctx {
    const cJSON *root;
    char *err;
    size_t errlen;
} jctx;

static const cJSON *jget(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* An integer field in [lo, hi]; def when absent (def < lo: required). */
static sf_status jint(jctx *j, const cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi, int *out) {
    const cJSON *v = jget(o, key);
    if (!v) {
        if (def < lo) return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: %s is missing", key);
        *out = (int)def;
        return SF_OK;
    }
    if (cJSON_IsBool(v) || !cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi))
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: %s is not an integer in [%lld, %lld]",
                        key, (long long)lo, (long long)hi);
    *out = (int)v->valuedouble;
    return SF_OK;
}

/* A number, or Python's {"__float__": "Infinity"} as transformers writes it. */
static int jnum(const cJSON *v, double *out) {
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble;
        return 1;
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "__float__");
    if (cJSON_IsString(f)) {
        if (!strcmp(f->valuestring, "Infinity")) *out = INFINITY;
        else if (!strcmp(f->valuestring, "-Infinity")) *out = -INFINITY;
        else return 0;
        return 1;
    }
    return 0;
}

static sf_status jdbl(jctx *j, const cJSON *o, const char *key, double def, double *out) {
    const cJSON *v = jget(o, key);
    if (!v) {
        *out = def;
        return SF_OK;
    }
    if (!jnum(v, out) || isnan(*out))
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: %s is not a number", key);
    return SF_OK;
}

static sf_status jbool(jctx *j, const cJSON *o, const char *key, int def, int *out) {
    const cJSON *v = jget(o, key);
    if (!v) {
        *out = def;
        return SF_OK;
    }
    if (!cJSON_IsBool(v))
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: %s is not true or false", key);
    *out = cJSON_IsTrue(v);
    return SF_OK;
}

/* bos/eos: an id, a list of ids (the first is taken) or null (-1). */
static sf_status jtoken(jctx *j, const char *key, int *out) {
    const cJSON *v = jget(j->root, key);
    if (cJSON_IsArray(v)) v = v->child;
    *out = -1;
    if (!v || cJSON_IsNull(v)) return SF_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > MAX_VOCAB)
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: %s is not a token id", key);
    *out = (int)v->valuedouble;
    return SF_OK;
}

#define TRY(x)                         \
    do {                               \
        sf_status s_ = (x);            \
        if (s_ != SF_OK) return s_;    \
    } while (0)

/* The rope of attention layers: theta and scaling, top level (transformers
 * 4) or in rope_parameters (transformers 5). */
static sf_status json_rope(jctx *j, sfm_config *g, double partial_default) {
    const cJSON *rp = jget(j->root, "rope_parameters");
    if (rp && !cJSON_IsObject(rp)) rp = NULL;
    const cJSON *sc = jget(j->root, "rope_scaling");
    if (sc && !cJSON_IsObject(sc)) sc = NULL;
    if (!sc) sc = rp;
    TRY(jdbl(j, j->root, "rope_theta", 10000.0, &g->rope_theta));
    if (rp) TRY(jdbl(j, rp, "rope_theta", g->rope_theta, &g->rope_theta));
    if (!(g->rope_theta > 0 && isfinite(g->rope_theta)))
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: rope_theta must be positive");
    double partial;
    TRY(jdbl(j, j->root, "partial_rotary_factor", partial_default, &partial));
    if (rp) TRY(jdbl(j, rp, "partial_rotary_factor", partial, &partial));
    if (!(partial > 0 && partial <= 1))
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: partial_rotary_factor not in (0, 1]");
    g->rope_dim = (int)(g->head_dim * partial);
    if (g->rope_dim < 2 || g->rope_dim % 2)
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: rotary dimension %d is not even",
                        g->rope_dim);
    const char *type = "default";
    if (sc) {
        const cJSON *t = jget(sc, "rope_type");
        if (!t) t = jget(sc, "type");
        if (cJSON_IsString(t)) type = t->valuestring;
    }
    if (!strcmp(type, "default")) return SF_OK;
    if (strcmp(type, "llama3"))
        return sfm_fail(j->err, j->errlen, SF_ERR_UNSUPPORTED,
                        "config.json: rope type %.32s is not supported (default, llama3)", type);
    g->rope_scaling = SFM_ROPE_LLAMA3;
    TRY(jdbl(j, sc, "factor", 8.0, &g->rope_factor));
    TRY(jdbl(j, sc, "low_freq_factor", 1.0, &g->rope_low_freq_factor));
    TRY(jdbl(j, sc, "high_freq_factor", 4.0, &g->rope_high_freq_factor));
    TRY(jint(j, sc, "original_max_position_embeddings", 8192, 1, INT32_MAX, &g->rope_original_max_position));
    if (!(g->rope_factor > 0) || !(g->rope_low_freq_factor > 0) ||
        !(g->rope_high_freq_factor > g->rope_low_freq_factor))
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG,
                        "config.json: llama3 rope needs factor > 0 and high_freq_factor > low_freq_factor > 0");
    return SF_OK;
}

static sf_status json_attention(jctx *j, sfm_config *g, double eps_default, int bias_default) {
    const cJSON *r = j->root;
    TRY(jint(j, r, "num_attention_heads", -1, 1, MAX_HEADS, &g->num_heads));
    TRY(jint(j, r, "num_key_value_heads", g->num_heads, 1, MAX_HEADS, &g->num_kv_heads));
    if (g->num_heads % g->num_kv_heads)
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG,
                        "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                        g->num_heads, g->num_kv_heads);
    TRY(jint(j, r, "head_dim", g->hidden_size / g->num_heads, 1, 1024, &g->head_dim));
    if (g->head_dim < 1)
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: head_dim is 0");
    TRY(jint(j, r, "intermediate_size", -1, 1, MAX_DIM * 8, &g->intermediate_size));
    TRY(jdbl(j, r, "rms_norm_eps", eps_default, &g->norm_eps));
    TRY(jbool(j, r, "attention_bias", bias_default, &g->attn_bias));
    return SF_OK;
}

/* Mamba-2 fields: Mamba2Config's names, or BambaConfig's mamba_* ones. */
static sf_status json_mamba(jctx *j, sfm_config *g, int bamba) {
    const cJSON *r = j->root;
    int expand;
    TRY(jint(j, r, bamba ? "mamba_n_heads" : "num_heads", 128, 1, MAX_DIM, &g->ssm_heads));
    TRY(jint(j, r, bamba ? "mamba_expand" : "expand", 2, 1, 64, &expand));
    int64_t inner = (int64_t)expand * g->hidden_size;
    const cJSON *hd = jget(r, bamba ? "mamba_d_head" : "head_dim");
    if (bamba && (!hd || cJSON_IsString(hd))) /* "auto" */
        g->ssm_head_dim = (int)(inner / g->ssm_heads);
    else
        TRY(jint(j, r, bamba ? "mamba_d_head" : "head_dim", 64, 1, MAX_DIM, &g->ssm_head_dim));
    TRY(jint(j, r, bamba ? "mamba_d_state" : "state_size", bamba ? 256 : 128, 1, 4096, &g->ssm_state));
    TRY(jint(j, r, bamba ? "mamba_n_groups" : "n_groups", bamba ? 1 : 8, 1, MAX_HEADS, &g->ssm_groups));
    TRY(jint(j, r, bamba ? "mamba_d_conv" : "conv_kernel", 4, 1, 64, &g->ssm_conv_kernel));
    TRY(jint(j, r, bamba ? "mamba_chunk_size" : "chunk_size", 256, 1, 1 << 16, &g->ssm_chunk));
    if ((int64_t)g->ssm_heads * g->ssm_head_dim != inner)
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG,
                        "config.json: %d heads x %d head_dim != expand %d x hidden_size %d", g->ssm_heads,
                        g->ssm_head_dim, expand, g->hidden_size);
    if (g->ssm_heads % g->ssm_groups)
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: %d Mamba heads in %d groups",
                        g->ssm_heads, g->ssm_groups);
    g->ssm_inner = (int)inner;
    /* transformers' gated RMSNorm multiplies by silu(z) before normalising */
    g->ssm_norm_before_gate = 0;
    if (!bamba) {
        TRY(jdbl(j, r, "time_step_min", 0.001, &g->ssm_time_step_min));
        TRY(jdbl(j, r, "time_step_max", 0.1, &g->ssm_time_step_max));
    }
    g->ssm_time_step_limit_lo = 0.0;
    g->ssm_time_step_limit_hi = INFINITY;
    const cJSON *lim = jget(r, "time_step_limit");
    if (lim) {
        if (!cJSON_IsArray(lim) || cJSON_GetArraySize(lim) != 2 || !jnum(lim->child, &g->ssm_time_step_limit_lo) ||
            !jnum(lim->child->next, &g->ssm_time_step_limit_hi) ||
            !(g->ssm_time_step_limit_lo <= g->ssm_time_step_limit_hi))
            return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: time_step_limit is not [lo, hi]");
    }
    return SF_OK;
}

static sf_status json_arch(jctx *j, sfm_arch *a) {
    static const struct { const char *cls, *type; sfm_arch a; } tab[] = {
        {"LlamaForCausalLM", "llama", SFM_ARCH_LLAMA},
        {"Qwen2ForCausalLM", "qwen2", SFM_ARCH_QWEN2},
        {"Mamba2ForCausalLM", "mamba2", SFM_ARCH_MAMBA2},
        {"BambaForCausalLM", "bamba", SFM_ARCH_HYBRID}};
    const cJSON *arch = jget(j->root, "architectures");
    const cJSON *name = cJSON_IsArray(arch) ? arch->child : NULL;
    const cJSON *mt = jget(j->root, "model_type");
    const char *n = cJSON_IsString(name) ? name->valuestring : NULL;
    const char *t = cJSON_IsString(mt) ? mt->valuestring : NULL;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (n ? !strcmp(n, tab[i].cls) : t && !strcmp(t, tab[i].type)) {
            *a = tab[i].a;
            return SF_OK;
        }
    if (!n && !t)
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json names no architectures or model_type");
    return sfm_fail(j->err, j->errlen, SF_ERR_UNSUPPORTED,
                    "architecture %.64s is not supported (LlamaForCausalLM, Qwen2ForCausalLM, Mamba2ForCausalLM, "
                    "BambaForCausalLM)", n ? n : t);
}

static sf_status config_json(sfm_checkpoint *c, jctx *j) {
    sfm_config *g = &c->cfg;
    const cJSON *r = j->root;
    if (!cJSON_IsObject(r)) return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json is not a JSON object");
    TRY(json_arch(j, &g->arch));
    TRY(jint(j, r, "vocab_size", -1, 1, MAX_VOCAB, &g->vocab_size));
    TRY(jint(j, r, "hidden_size", -1, 1, MAX_DIM, &g->hidden_size));
    TRY(jint(j, r, "num_hidden_layers", -1, 1, MAX_LAYERS, &g->num_layers));
    TRY(jbool(j, r, "tie_word_embeddings", 0, &g->tie_embeddings));
    TRY(jtoken(j, "bos_token_id", &g->bos_token_id));
    TRY(jtoken(j, "eos_token_id", &g->eos_token_id));
    switch (g->arch) {
    case SFM_ARCH_LLAMA:
        TRY(jint(j, r, "max_position_embeddings", 2048, 1, INT32_MAX, &g->max_position));
        TRY(json_attention(j, g, 1e-6, 0));
        TRY(json_rope(j, g, 1.0));
        break;
    case SFM_ARCH_QWEN2:
        TRY(jint(j, r, "max_position_embeddings", 32768, 1, INT32_MAX, &g->max_position));
        TRY(json_attention(j, g, 1e-6, 1));
        g->attn_bias = 1; /* Qwen2's q/k/v always carry biases */
        TRY(json_rope(j, g, 1.0));
        break;
    case SFM_ARCH_MAMBA2:
        TRY(jdbl(j, r, "layer_norm_epsilon", 1e-5, &g->norm_eps));
        TRY(json_mamba(j, g, 0));
        break;
    case SFM_ARCH_HYBRID: {
        TRY(jint(j, r, "max_position_embeddings", 262144, 1, INT32_MAX, &g->max_position));
        TRY(json_attention(j, g, 1e-5, 0));
        TRY(json_rope(j, g, 0.5)); /* BambaConfig fixes partial_rotary_factor at 0.5 */
        TRY(json_mamba(j, g, 1));
        unsigned char *is_attn = sfm_own(c, (size_t)g->num_layers);
        if (!is_attn) return sfm_fail(j->err, j->errlen, SF_ERR_OUT_OF_MEMORY, "out of memory");
        memset(is_attn, 0, (size_t)g->num_layers);
        const cJSON *idx = jget(r, "attn_layer_indices");
        if (idx && !cJSON_IsArray(idx))
            return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: attn_layer_indices is not a list");
        for (const cJSON *e = idx ? idx->child : NULL; e; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                e->valuedouble >= g->num_layers)
                return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG,
                                "config.json: attn_layer_indices holds a value outside [0, %d)", g->num_layers);
            is_attn[(int)e->valuedouble] = 1;
        }
        g->layer_is_attn = is_attn;
        break;
    }
    }
    if (!(g->norm_eps > 0 && g->norm_eps < 1))
        return sfm_fail(j->err, j->errlen, SF_ERR_INVALID_ARG, "config.json: the norm epsilon is not in (0, 1)");
    return SF_OK;
}

sf_status sfm_config_from_json(sfm_checkpoint *c, const char *text, size_t len, char *err, size_t errlen) {
    if (len > ((size_t)1 << 30)) return sfm_fail(err, errlen, SF_ERR_TOO_LARGE, "config.json is over 1 GiB");
    char *clean = sanitize(text ? text : "", text ? len : 0);
    if (!clean) return sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory reading config.json");
    cJSON *root = cJSON_ParseWithOpts(clean, NULL, 1);
    free(clean);
    if (!root) return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "config.json is not valid JSON");
    jctx j = {root, err, errlen};
    sf_status s = config_json(c, &j);
    cJSON_Delete(root);
    return s;
}

/* ---------------------------------------------------------------- GGUF */
static sf_status meta_int(const sfm_checkpoint *c, const char *arch, const char *key, int64_t def, int64_t lo,
                          int64_t hi, int *out, char *err, size_t errlen) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t v;
    if (!sfm_meta_int(c, k, &v)) {
        if (def < lo) return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "GGUF metadata: %s is missing", k);
        v = def;
    }
    if (v < lo || v > hi)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "GGUF metadata: %s = %lld is not in [%lld, %lld]", k,
                        (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return SF_OK;
}

static double meta_float(const sfm_checkpoint *c, const char *arch, const char *key, double def) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    double v;
    return sfm_meta_float(c, k, &v) ? v : def;
}

#define TRYE(x)                        \
    do {                               \
        sf_status s_ = (x);            \
        if (s_ != SF_OK) return s_;    \
    } while (0)

sf_status sfm_config_from_gguf(sfm_checkpoint *c, char *err, size_t errlen) {
    sfm_config *g = &c->cfg;
    const char *a;
    size_t alen;
    if (!sfm_meta_string(c, "general.architecture", &a, &alen))
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "GGUF metadata: general.architecture is missing");
    char arch[32];
    if (alen == 5 && !memcmp(a, "llama", 5)) g->arch = SFM_ARCH_LLAMA;
    else if (alen == 5 && !memcmp(a, "qwen2", 5)) g->arch = SFM_ARCH_QWEN2;
    else
        return sfm_fail(err, errlen, SF_ERR_UNSUPPORTED, "GGUF architecture %.*s is not supported (llama, qwen2)",
                        (int)(alen < 64 ? alen : 64), a);
    snprintf(arch, sizeof arch, "%.*s", (int)alen, a);
    TRYE(meta_int(c, arch, "block_count", -1, 1, MAX_LAYERS, &g->num_layers, err, errlen));
    TRYE(meta_int(c, arch, "embedding_length", -1, 1, MAX_DIM, &g->hidden_size, err, errlen));
    TRYE(meta_int(c, arch, "feed_forward_length", -1, 1, MAX_DIM * 8, &g->intermediate_size, err, errlen));
    TRYE(meta_int(c, arch, "attention.head_count", -1, 1, MAX_HEADS, &g->num_heads, err, errlen));
    TRYE(meta_int(c, arch, "attention.head_count_kv", g->num_heads, 1, MAX_HEADS, &g->num_kv_heads, err, errlen));
    if (g->num_heads % g->num_kv_heads)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "GGUF metadata: %d heads, %d key/value heads",
                        g->num_heads, g->num_kv_heads);
    TRYE(meta_int(c, arch, "attention.key_length", g->hidden_size / g->num_heads, 2, 1024, &g->head_dim, err,
                  errlen));
    TRYE(meta_int(c, arch, "rope.dimension_count", g->head_dim, 2, g->head_dim, &g->rope_dim, err, errlen));
    TRYE(meta_int(c, arch, "context_length", 2048, 1, INT32_MAX, &g->max_position, err, errlen));
    g->norm_eps = meta_float(c, arch, "attention.layer_norm_rms_epsilon", 1e-5);
    g->rope_theta = meta_float(c, arch, "rope.freq_base", 10000.0);
    if (!(g->norm_eps > 0 && g->norm_eps < 1) || !(g->rope_theta > 0 && isfinite(g->rope_theta)))
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "GGUF metadata: bad norm epsilon or rope base");
    if (g->rope_dim % 2) return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "GGUF metadata: odd rope dimension");
    /* llama.cpp stores Llama-3.1 rope scaling as a factor tensor, and other
     * scalings as rope.scaling.type: neither is implemented */
    char k[128];
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    const char *st;
    size_t stlen;
    if ((sfm_meta_string(c, k, &st, &stlen) && !(stlen == 4 && !memcmp(st, "none", 4))) ||
        sfm_checkpoint_find(c, "rope_freqs.weight"))
        return sfm_fail(err, errlen, SF_ERR_UNSUPPORTED, "GGUF rope scaling (%s or rope_freqs.weight) is not supported", k);
    const sfm_tensor *emb = sfm_checkpoint_find(c, "model.embed_tokens.weight");
    int64_t nv = sfm_meta_array_len(c, "tokenizer.ggml.tokens");
    if (nv <= 0 && emb && emb->ndim == 2) nv = emb->shape[0];
    snprintf(k, sizeof k, "%s.vocab_size", arch);
    int64_t v;
    if (sfm_meta_int(c, k, &v)) nv = v;
    if (nv < 1 || nv > MAX_VOCAB)
        return sfm_fail(err, errlen, SF_ERR_INVALID_ARG, "GGUF: vocabulary size %lld out of range", (long long)nv);
    g->vocab_size = (int)nv;
    if (sfm_meta_int(c, "tokenizer.ggml.bos_token_id", &v) && v >= 0 && v < nv) g->bos_token_id = (int)v;
    if (sfm_meta_int(c, "tokenizer.ggml.eos_token_id", &v) && v >= 0 && v < nv) g->eos_token_id = (int)v;
    g->tie_embeddings = !sfm_checkpoint_find(c, "lm_head.weight");
    g->attn_bias = g->arch == SFM_ARCH_QWEN2 || sfm_checkpoint_find(c, "model.layers.0.self_attn.q_proj.bias");
    return SF_OK;
}

/* ---------------------------------------------------------------- tensors */
typedef struct vctx {
    const sfm_checkpoint *c;
    char *err;
    size_t errlen;
} vctx;

/* Tensor `name` (printf-formatted with the layer) must exist with this
 * shape (d[i] < 0 ends the shape); 1-D ones in a float type. */
static sf_status need(vctx *v, int layer, const char *fmt, int64_t d0, int64_t d1, int64_t d2) {
    char name[160];
    snprintf(name, sizeof name, fmt, layer);
    const sfm_tensor *t = sfm_checkpoint_find(v->c, name);
    if (!t) return sfm_fail(v->err, v->errlen, SF_ERR_INVALID_ARG, "tensor %s is missing", name);
    int64_t want[3] = {d0, d1, d2};
    int nd = d0 < 0 ? 0 : d1 < 0 ? 1 : d2 < 0 ? 2 : 3;
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char got[96] = "", exp[96] = "";
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        for (int i = 0; i < nd; i++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? ", " : "", (long long)want[i]);
        return sfm_fail(v->err, v->errlen, SF_ERR_SHAPE, "tensor %s has shape (%s), the config needs (%s)", name, got,
                        exp);
    }
    if (t->type == SFM_W_I32 || t->type == SFM_W_I64 || (nd == 1 && t->type > SFM_W_BF16))
        return sfm_fail(v->err, v->errlen, SF_ERR_DTYPE, "tensor %s has type %s", name, sfm_wtype_name(t->type));
    return SF_OK;
}

#define NEED(layer, fmt, d0, d1, d2) TRYE(need(&v, layer, fmt, d0, d1, d2))

static sf_status need_attn(vctx *v_, const sfm_config *g, int l) {
    vctx v = *v_;
    int64_t H = g->hidden_size, q = (int64_t)g->num_heads * g->head_dim, kv = (int64_t)g->num_kv_heads * g->head_dim;
    NEED(l, "model.layers.%d.self_attn.q_proj.weight", q, H, -1);
    NEED(l, "model.layers.%d.self_attn.k_proj.weight", kv, H, -1);
    NEED(l, "model.layers.%d.self_attn.v_proj.weight", kv, H, -1);
    NEED(l, "model.layers.%d.self_attn.o_proj.weight", H, q, -1);
    if (g->attn_bias) {
        NEED(l, "model.layers.%d.self_attn.q_proj.bias", q, -1, -1);
        NEED(l, "model.layers.%d.self_attn.k_proj.bias", kv, -1, -1);
        NEED(l, "model.layers.%d.self_attn.v_proj.bias", kv, -1, -1);
    }
    return SF_OK;
}

static sf_status need_mlp(vctx *v_, const sfm_config *g, int l, int bamba) {
    vctx v = *v_;
    int64_t H = g->hidden_size, I = g->intermediate_size;
    NEED(l, bamba ? "model.layers.%d.feed_forward.gate_proj.weight" : "model.layers.%d.mlp.gate_proj.weight", I, H, -1);
    NEED(l, bamba ? "model.layers.%d.feed_forward.up_proj.weight" : "model.layers.%d.mlp.up_proj.weight", I, H, -1);
    NEED(l, bamba ? "model.layers.%d.feed_forward.down_proj.weight" : "model.layers.%d.mlp.down_proj.weight", H, I, -1);
    return SF_OK;
}

/* prefix: "backbone.layers.%d.mixer" (Mamba2) or "model.layers.%d.mamba". */
static sf_status need_mamba(vctx *v_, const sfm_config *g, int l, const char *prefix) {
    vctx v = *v_;
    int64_t H = g->hidden_size, E = g->ssm_inner, nh = g->ssm_heads;
    int64_t conv = E + 2 * (int64_t)g->ssm_groups * g->ssm_state;
    char f[128];
#define NEEDM(suffix, d0, d1, d2)                            \
    do {                                                     \
        snprintf(f, sizeof f, "%s.%s", prefix, suffix);      \
        NEED(l, f, d0, d1, d2);                              \
    } while (0)
    NEEDM("in_proj.weight", E + conv + nh, H, -1);
    NEEDM("conv1d.weight", conv, 1, g->ssm_conv_kernel);
    NEEDM("dt_bias", nh, -1, -1);
    NEEDM("A_log", nh, -1, -1);
    NEEDM("D", nh, -1, -1);
    NEEDM("norm.weight", E, -1, -1);
    NEEDM("out_proj.weight", H, E, -1);
#undef NEEDM
    return SF_OK;
}

sf_status sfm_checkpoint_validate(const sfm_checkpoint *c, char *err, size_t errlen) {
    const sfm_config *g = &c->cfg;
    vctx v = {c, err, errlen};
    int64_t V = g->vocab_size, H = g->hidden_size;
    int mamba2 = g->arch == SFM_ARCH_MAMBA2;
    NEED(0, mamba2 ? "backbone.embeddings.weight" : "model.embed_tokens.weight", V, H, -1);
    NEED(0, mamba2 ? "backbone.norm_f.weight" : g->arch == SFM_ARCH_HYBRID ? "model.final_layernorm.weight"
                                                                           : "model.norm.weight", H, -1, -1);
    if (!g->tie_embeddings) NEED(0, "lm_head.weight", V, H, -1);
    for (int l = 0; l < g->num_layers; l++) {
        switch (g->arch) {
        case SFM_ARCH_LLAMA:
        case SFM_ARCH_QWEN2:
            NEED(l, "model.layers.%d.input_layernorm.weight", H, -1, -1);
            NEED(l, "model.layers.%d.post_attention_layernorm.weight", H, -1, -1);
            TRYE(need_attn(&v, g, l));
            TRYE(need_mlp(&v, g, l, 0));
            break;
        case SFM_ARCH_MAMBA2:
            NEED(l, "backbone.layers.%d.norm.weight", H, -1, -1);
            TRYE(need_mamba(&v, g, l, "backbone.layers.%d.mixer"));
            break;
        case SFM_ARCH_HYBRID:
            NEED(l, "model.layers.%d.input_layernorm.weight", H, -1, -1);
            NEED(l, "model.layers.%d.pre_ff_layernorm.weight", H, -1, -1);
            if (g->layer_is_attn[l]) TRYE(need_attn(&v, g, l));
            else TRYE(need_mamba(&v, g, l, "model.layers.%d.mamba"));
            TRYE(need_mlp(&v, g, l, 1));
            break;
        }
    }
    return SF_OK;
}
