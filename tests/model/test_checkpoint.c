/* test_checkpoint.c - the checkpoint loaders (src/model/) on tiny files
 * written here: safetensors (one file, and sharded with an index) and GGUF
 * (llama, with its q/k rows permuted as llama.cpp does, and qwen2), checked
 * name by name, shape by shape and value by value; then a table of
 * corruptions, each giving its status and message (leaks: the ASan build).
 *   test_checkpoint                   the tests
 *   test_checkpoint --smollm2         the SmolLM2 GGUF (SF_SMOLLM2_GGUF), 77 if absent
 *   test_checkpoint --write-seeds DIR the fuzzer's seeds */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "model.h"
#include "tiny_model.h"

static int g_fail;
/* snprintf into a path buffer; a path that does not fit is fatal */
#define PATHF(buf, ...)                                                   \
    do {                                                                  \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) {  \
            fprintf(stderr, "path too long\n");                           \
            exit(1);                                                      \
        }                                                                 \
    } while (0)
#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) {                                                \
            g_fail++;                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                             \
            fprintf(stderr, "\n");                                    \
        }                                                             \
    } while (0)

static char g_dir[256];

static void write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[512];
    PATHF(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}
static void write_text(const char *dir, const char *name, const char *s) { write_file(dir, name, s, strlen(s)); }

static void rm_dir(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "a.safetensors", "b.safetensors", "m.gguf"};
    char p[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        PATHF(p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}
static const char *subdir(const char *name) {
    static char p[512];
    PATHF(p, "%s/%s", g_dir, name);
    mkdir(p, 0700);
    return p;
}

/* Every tensor of the tiny llama, F32 values as tm_value gives them. */
static void check_tiny_llama(const sfm_checkpoint *c, const char *what) {
    const sfm_config *g = sfm_checkpoint_config(c);
    CHECK(g->arch == SFM_ARCH_LLAMA && g->vocab_size == TM_VOCAB && g->hidden_size == TM_HIDDEN &&
              g->num_layers == TM_LAYERS && g->num_heads == TM_HEADS && g->num_kv_heads == TM_KV &&
              g->head_dim == TM_HD && g->intermediate_size == TM_FFN && g->rope_dim == TM_HD,
          "%s: config sizes", what);
    CHECK(g->rope_theta == 500000.0 && g->norm_eps == 1e-5 && g->max_position == 256 && !g->tie_embeddings &&
              g->bos_token_id == 1 && g->eos_token_id == 2 && !g->attn_bias,
          "%s: config scalars", what);
    CHECK(g->rope_scaling == SFM_ROPE_LLAMA3 && g->rope_factor == 32.0 && g->rope_low_freq_factor == 1.0 &&
              g->rope_high_freq_factor == 4.0 && g->rope_original_max_position == 64,
          "%s: llama3 rope", what);
    CHECK(sfm_checkpoint_count(c) == tm_st_count(), "%s: %d tensors, want %d", what, sfm_checkpoint_count(c),
          tm_st_count());
    for (int i = 0; i < tm_st_count(); i++) {
        const char *name = tm_st_name(i);
        const sfm_tensor *t = sfm_checkpoint_find(c, name);
        CHECK(t != NULL, "%s: %s missing", what, name);
        if (!t) continue;
        CHECK(t->type == SFM_W_F32 && !strcmp(t->name, name), "%s: %s type", what, name);
        int64_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
        CHECK(t->nbytes == (uint64_t)n * 4, "%s: %s bytes", what, name);
        int bad = 0;
        for (int64_t e = 0; e < n; e++) {
            float v;
            memcpy(&v, (const uint8_t *)t->data + e * 4, 4);
            bad += v != tm_value(name, e);
        }
        CHECK(!bad, "%s: %s has %d wrong values", what, name, bad);
    }
    const sfm_tensor *q = sfm_checkpoint_find(c, "model.layers.1.self_attn.k_proj.weight");
    CHECK(q && q->ndim == 2 && q->shape[0] == TM_KV * TM_HD && q->shape[1] == TM_HIDDEN, "%s: k_proj shape", what);
    CHECK(!sfm_checkpoint_find(c, "model.layers.2.mlp.up_proj.weight"), "%s: a tensor that is not there", what);
}

static void test_safetensors(void) {
    tm_buf b = {0};
    tm_safetensors(&b, 0, -1, TM_ST_OK);
    const char *d = subdir("st");
    write_text(d, "config.json", tm_config_json("LlamaForCausalLM"));
    write_file(d, "model.safetensors", b.p, b.n);
    sfm_checkpoint *c = NULL;
    char err[256];
    sf_status s = sfm_checkpoint_open(d, &c, err, sizeof err);
    CHECK(s == SF_OK, "safetensors open: %s", err);
    if (c) {
        CHECK(!sfm_checkpoint_is_gguf(c) && !strcmp(sfm_checkpoint_path(c), d), "safetensors: kind and path");
        CHECK(sfm_meta_get_type(c, "general.architecture") == SFM_META_NONE, "safetensors: no metadata");
        check_tiny_llama(c, "safetensors");
        sfm_checkpoint_close(c);
    }
    /* sharded: tensors [0, 9) in a.safetensors, the rest in b */
    d = subdir("sharded");
    write_text(d, "config.json", tm_config_json("LlamaForCausalLM"));
    tm_buf a = {0}, bb = {0};
    tm_safetensors(&a, 0, 9, TM_ST_OK);
    tm_safetensors(&bb, 9, -1, TM_ST_OK);
    write_file(d, "a.safetensors", a.p, a.n);
    write_file(d, "b.safetensors", bb.p, bb.n);
    char idx[8192];
    size_t n = (size_t)snprintf(idx, sizeof idx, "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {");
    for (int i = 0; i < tm_st_count(); i++)
        n += (size_t)snprintf(idx + n, sizeof idx - n, "%s\"%s\": \"%s\"", i ? ", " : "", tm_st_name(i),
                              i < 9 ? "a.safetensors" : "b.safetensors");
    snprintf(idx + n, sizeof idx - n, "}}");
    write_text(d, "model.safetensors.index.json", idx);
    s = sfm_checkpoint_open(d, &c, err, sizeof err);
    CHECK(s == SF_OK, "sharded open: %s", err);
    if (c) {
        check_tiny_llama(c, "sharded");
        sfm_checkpoint_close(c);
    }
    /* a name listed under the wrong shard, then a missing shard */
    char *p = strstr(idx, "\"model.norm.weight\": \"a.safetensors\"");
    CHECK(p != NULL, "index text");
    if (p) {
        memcpy(strstr(p, "a.safetensors"), "b", 1);
        write_text(d, "model.safetensors.index.json", idx);
        s = sfm_checkpoint_open(d, &c, err, sizeof err);
        CHECK(s == SF_ERR_INVALID_ARG && strstr(err, "model.norm.weight is listed in b.safetensors but missing"),
              "wrong shard: %d %s", s, err);
    }
    char path[512];
    PATHF(path, "%s/a.safetensors", d);
    unlink(path);
    s = sfm_checkpoint_open(d, &c, err, sizeof err);
    CHECK(s == SF_ERR_INVALID_ARG && strstr(err, "a.safetensors") && !c, "missing shard: %d %s", s, err);
    tm_free(&a);
    tm_free(&bb);
    tm_free(&b);
}

static void test_st_corrupt(void) {
    static const struct { int corrupt; sf_status s; const char *msg; } tab[] = {
        {TM_ST_F64, SF_ERR_UNSUPPORTED, "model.embed_tokens.weight has dtype F64"},
        {TM_ST_PAST_END, SF_ERR_INVALID_ARG, "past the data area"},
        {TM_ST_SPAN, SF_ERR_INVALID_ARG, "need 2048"},
        {TM_ST_OVERLAP, SF_ERR_INVALID_ARG, "overlap"},
        {TM_ST_SHAPE, SF_ERR_SHAPE, "q_proj.weight has shape (16, 64), the config needs (32, 32)"},
        {TM_ST_DROP_NORM, SF_ERR_INVALID_ARG, "model.layers.1.post_attention_layernorm.weight is missing"},
        {TM_ST_BAD_JSON, SF_ERR_INVALID_ARG, "not valid JSON"},
        {TM_ST_HUGE_HEADER, SF_ERR_INVALID_ARG, "exceeds the file"},
        {TM_ST_NEG_SHAPE, SF_ERR_INVALID_ARG, "shape[0] is not a non-negative integer"},
        {TM_ST_FIVE_DIMS, SF_ERR_UNSUPPORTED, "5 dimensions"},
        {TM_ST_DUP_NAME, SF_ERR_INVALID_ARG, "appears twice"}};
    const char *cfg = tm_config_json("LlamaForCausalLM");
    char err[256];
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        tm_buf b = {0};
        tm_safetensors(&b, 0, -1, tab[i].corrupt);
        sfm_checkpoint *c = NULL;
        sf_status s = sfm_checkpoint_open_st_memory(b.p, b.n, cfg, &c, err, sizeof err);
        CHECK(s == tab[i].s && strstr(err, tab[i].msg) && !c, "safetensors fault %d: %s (%d), want %s", tab[i].corrupt,
              err, s, tab[i].msg);
        tm_free(&b);
    }
    /* every prefix of the header and a stride of the data: an error, never a crash */
    tm_buf b = {0};
    tm_safetensors(&b, 0, -1, TM_ST_OK);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b.p[i];
    int bad = 0;
    for (size_t n = 0; n < b.n; n += n < 8 + hl + 64 ? 1 : 97) {
        sfm_checkpoint *c = NULL;
        if (sfm_checkpoint_open_st_memory(b.p, n, cfg, &c, err, sizeof err) == SF_OK || c) bad++;
        sfm_checkpoint_close(c);
    }
    CHECK(!bad, "%d truncated safetensors images opened", bad);
    sfm_checkpoint *c = NULL;
    CHECK(sfm_checkpoint_open_st_memory(b.p, b.n, cfg, &c, err, sizeof err) == SF_OK, "whole image: %s", err);
    sfm_checkpoint_close(c);
    /* configs */
    static const struct { const char *from, *to; sf_status s; const char *msg; } cf[] = {
        {"LlamaForCausalLM", "GPTNeoXForCausalLM", SF_ERR_UNSUPPORTED, "architecture GPTNeoXForCausalLM is not supported"},
        {"\"hidden_size\"", "\"hidden_sizes\"", SF_ERR_INVALID_ARG, "hidden_size is missing"},
        {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", SF_ERR_INVALID_ARG, "not a multiple"},
        {"\"llama3\"", "\"yarn\"", SF_ERR_UNSUPPORTED, "rope type yarn"},
        {"\"intermediate_size\": 64", "\"intermediate_size\": 65", SF_ERR_SHAPE, "gate_proj.weight has shape"},
        {"\"vocab_size\": 16", "\"vocab_size\": -16", SF_ERR_INVALID_ARG, "vocab_size is not an integer"},
        {"1e-05", "[1e-05", SF_ERR_INVALID_ARG, "config.json is not valid JSON"},
        {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": 3", SF_ERR_INVALID_ARG, "not true or false"}};
    for (size_t i = 0; i < sizeof cf / sizeof cf[0]; i++) {
        char text[2048];
        const char *p = strstr(cfg, cf[i].from);
        size_t pre = (size_t)(p - cfg);
        snprintf(text, sizeof text, "%.*s%s%s", (int)pre, cfg, cf[i].to, p + strlen(cf[i].from));
        sf_status s = sfm_checkpoint_open_st_memory(b.p, b.n, text, &c, err, sizeof err);
        CHECK(s == cf[i].s && strstr(err, cf[i].msg) && !c, "config fault %zu: %s (%d), want %s", i, err, s, cf[i].msg);
    }
    tm_free(&b);
    sf_status s = sfm_checkpoint_open("/nonexistent/sf_model", &c, err, sizeof err);
    CHECK(s == SF_ERR_INVALID_ARG && strstr(err, "no such file"), "missing path: %s", err);
    s = sfm_checkpoint_open(g_dir, &c, err, sizeof err);
    CHECK(s == SF_ERR_INVALID_ARG && strstr(err, "config.json"), "directory without config: %s", err);
}

static void check_gguf(const sfm_checkpoint *c, int qwen2) {
    const char *what = qwen2 ? "gguf qwen2" : "gguf llama";
    const sfm_config *g = sfm_checkpoint_config(c);
    CHECK(g->arch == (qwen2 ? SFM_ARCH_QWEN2 : SFM_ARCH_LLAMA) && g->vocab_size == TM_VOCAB &&
              g->hidden_size == TM_HIDDEN && g->num_layers == TM_LAYERS && g->num_heads == TM_HEADS &&
              g->num_kv_heads == TM_KV && g->head_dim == TM_HD && g->intermediate_size == TM_FFN &&
              g->max_position == 128 && g->tie_embeddings && g->bos_token_id == 1 && g->eos_token_id == 2 &&
              g->attn_bias == qwen2 && g->rope_theta == 100000.0 && fabs(g->norm_eps - 1e-5) < 1e-12 &&
              g->rope_dim == TM_HD && g->rope_scaling == SFM_ROPE_NONE,
          "%s: config", what);
    CHECK(sfm_checkpoint_is_gguf(c), "%s: is_gguf", what);
    static const struct { const char *name; sfm_wtype t; int64_t d0, d1; } want[] = {
        {"model.embed_tokens.weight", SFM_W_Q8_0, TM_VOCAB, TM_HIDDEN},
        {"model.norm.weight", SFM_W_F32, TM_HIDDEN, 0},
        {"model.layers.1.input_layernorm.weight", SFM_W_F32, TM_HIDDEN, 0},
        {"model.layers.0.post_attention_layernorm.weight", SFM_W_F32, TM_HIDDEN, 0},
        {"model.layers.1.self_attn.q_proj.weight", SFM_W_Q4_1, TM_HEADS * TM_HD, TM_HIDDEN},
        {"model.layers.0.self_attn.k_proj.weight", SFM_W_Q4_0, TM_KV * TM_HD, TM_HIDDEN},
        {"model.layers.0.self_attn.v_proj.weight", SFM_W_F16, TM_KV * TM_HD, TM_HIDDEN},
        {"model.layers.1.self_attn.o_proj.weight", SFM_W_BF16, TM_HIDDEN, TM_HEADS * TM_HD},
        {"model.layers.0.mlp.gate_proj.weight", SFM_W_Q8_0, TM_FFN, TM_HIDDEN},
        {"model.layers.1.mlp.up_proj.weight", SFM_W_Q8_0, TM_FFN, TM_HIDDEN},
        {"model.layers.1.mlp.down_proj.weight", SFM_W_Q4_1, TM_HIDDEN, TM_FFN}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const sfm_tensor *t = sfm_checkpoint_find(c, want[i].name);
        CHECK(t && t->type == want[i].t && t->ndim == (want[i].d1 ? 2 : 1) && t->shape[0] == want[i].d0 &&
                  (!want[i].d1 || t->shape[1] == want[i].d1),
              "%s: %s type or shape", what, want[i].name);
        if (t && t->type == SFM_W_F32) {
            int bad = 0;
            for (int64_t e = 0; e < t->shape[0]; e++) {
                float v;
                memcpy(&v, (const uint8_t *)t->data + e * 4, 4);
                bad += v != tm_value(want[i].name, e);
            }
            CHECK(!bad, "%s: %s values", what, want[i].name);
        }
        /* in the mapping at general.alignment (q/k are copies) */
        if (t && !strstr(want[i].name, "q_proj") && !strstr(want[i].name, "k_proj"))
            CHECK((uintptr_t)t->data % 32 == 0, "%s: %s aligned", what, want[i].name);
    }
    CHECK(!sfm_checkpoint_find(c, "lm_head.weight"), "%s: tied output", what);
    CHECK(sfm_checkpoint_find(c, "model.layers.0.self_attn.v_proj.bias") ? qwen2 : !qwen2, "%s: biases", what);
    /* q/k rows in HF order whatever the file held */
    int bad = 0;
    for (int l = 0; l < TM_LAYERS; l++)
        for (int k = 0; k < 2; k++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s.weight", l, k ? "k_proj" : "q_proj");
            const sfm_tensor *t = sfm_checkpoint_find(c, name);
            if (!t) {
                bad++;
                continue;
            }
            size_t rb = (size_t)(t->nbytes / (uint64_t)t->shape[0]);
            uint8_t row[64];
            for (int r = 0; r < t->shape[0]; r++) {
                tm_gguf_qk_row(l, k, r, row, rb);
                bad += memcmp(row, (const uint8_t *)t->data + (size_t)r * rb, rb) != 0;
            }
        }
    CHECK(!bad, "%s: %d q/k rows not in HF order", what, bad);
    /* metadata of every type */
    int64_t iv;
    double fv;
    const char *s;
    size_t len;
    CHECK(sfm_meta_string(c, "tokenizer.ggml.model", &s, &len) && len == 4 && !memcmp(s, "gpt2", 4), "meta string");
    CHECK(sfm_meta_get_type(c, "tokenizer.ggml.tokens") == SFM_META_ARRAY &&
              sfm_meta_array_len(c, "tokenizer.ggml.tokens") == TM_VOCAB &&
              sfm_meta_array_string(c, "tokenizer.ggml.tokens", 11, &s, &len) && len == 3 && !memcmp(s, "t11", 3) &&
              !sfm_meta_array_string(c, "tokenizer.ggml.tokens", TM_VOCAB, &s, &len) &&
              !sfm_meta_array_int(c, "tokenizer.ggml.tokens", 0, &iv),
          "meta string array");
    CHECK(sfm_meta_array_int(c, "tokenizer.ggml.token_type", 0, &iv) && iv == -1 &&
              sfm_meta_array_int(c, "tokenizer.ggml.token_type", 2, &iv) && iv == 1, "meta int array");
    CHECK(sfm_meta_array_float(c, "tokenizer.ggml.scores", 3, &fv) && fv == -1.5, "meta float array");
    CHECK(sfm_meta_int(c, "test.u8", &iv) && iv == 200 && sfm_meta_int(c, "test.i8", &iv) && iv == -5 &&
              sfm_meta_int(c, "test.u16", &iv) && iv == 60000 && sfm_meta_int(c, "test.i16", &iv) && iv == -300 &&
              sfm_meta_int(c, "test.i32", &iv) && iv == -70000 && sfm_meta_int(c, "test.u64", &iv) &&
              iv == (int64_t)1 << 40 && sfm_meta_int(c, "test.i64", &iv) && iv == -((int64_t)1 << 40) &&
              sfm_meta_int(c, "test.bool", &iv) && iv == 1,
          "meta ints");
    CHECK(sfm_meta_get_type(c, "test.bool") == SFM_META_BOOL && sfm_meta_get_type(c, "test.i8") == SFM_META_INT &&
              sfm_meta_get_type(c, "test.f64") == SFM_META_FLOAT && sfm_meta_float(c, "test.f64", &fv) && fv == 0.25 &&
              !sfm_meta_float(c, "test.u8", &fv) && !sfm_meta_int(c, "test.f64", &iv) &&
              !sfm_meta_int(c, "no.such.key", &iv) && sfm_meta_get_type(c, "no.such.key") == SFM_META_NONE,
          "meta types");
}

static void test_gguf(void) {
    char err[256];
    for (int qwen2 = 0; qwen2 < 2; qwen2++) {
        tm_buf b = {0};
        tm_gguf(&b, qwen2, TM_GG_OK);
        const char *d = subdir("gguf");
        write_file(d, "m.gguf", b.p, b.n);
        char path[512];
        PATHF(path, "%s/m.gguf", d);
        sfm_checkpoint *c = NULL;
        sf_status s = sfm_checkpoint_open(path, &c, err, sizeof err);
        CHECK(s == SF_OK, "gguf open (qwen2 %d): %s", qwen2, err);
        if (c) {
            CHECK(!strcmp(sfm_checkpoint_path(c), path), "gguf path");
            check_gguf(c, qwen2);
            sfm_checkpoint_close(c);
        }
        tm_free(&b);
    }
    static const struct { int corrupt; sf_status s; const char *msg; } tab[] = {
        {TM_GG_MAGIC, SF_ERR_INVALID_ARG, "no GGUF magic"},
        {TM_GG_VERSION, SF_ERR_UNSUPPORTED, "version 1"},
        {TM_GG_KV_COUNT, SF_ERR_INVALID_ARG, "cannot fit"},
        {TM_GG_T_COUNT, SF_ERR_INVALID_ARG, "cannot fit"},
        {TM_GG_STR_LEN, SF_ERR_INVALID_ARG, "truncated at byte"},
        {TM_GG_NESTED, SF_ERR_UNSUPPORTED, "test.nested holds nested arrays"},
        {TM_GG_VALUE_TYPE, SF_ERR_INVALID_ARG, "unknown value type 13"},
        {TM_GG_NDIMS, SF_ERR_INVALID_ARG, "output_norm.weight has 5 dimensions"},
        {TM_GG_NE_ZERO, SF_ERR_INVALID_ARG, "ne[0] = 0"},
        {TM_GG_Q4K, SF_ERR_UNSUPPORTED, "blk.0.attn_k.weight has type Q4_K (12)"},
        {TM_GG_NE0_ODD, SF_ERR_INVALID_ARG, "ne[0] = 40 is not a multiple"},
        {TM_GG_MISALIGNED, SF_ERR_INVALID_ARG, "is not a multiple of the alignment 32"},
        {TM_GG_PAST_END, SF_ERR_INVALID_ARG, "past the end of the file"},
        {TM_GG_OVERLAP, SF_ERR_INVALID_ARG, "overlap"},
        {TM_GG_ALIGN, SF_ERR_INVALID_ARG, "general.alignment"},
        {TM_GG_ARCH, SF_ERR_UNSUPPORTED, "GGUF architecture gpt2 is not supported"},
        {TM_GG_NO_HEADS, SF_ERR_INVALID_ARG, "llama.attention.head_count is missing"},
        {TM_GG_SHAPE, SF_ERR_SHAPE, "v_proj.weight has shape (8, 32), the config needs (16, 32)"}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        tm_buf b = {0};
        tm_gguf(&b, 0, tab[i].corrupt);
        sfm_checkpoint *c = NULL;
        sf_status s = sfm_checkpoint_open_gguf_memory(b.p, b.n, &c, err, sizeof err);
        CHECK(s == tab[i].s && strstr(err, tab[i].msg) && !c, "gguf fault %d: %s (%d), want %s", tab[i].corrupt, err,
              s, tab[i].msg);
        sfm_checkpoint_close(c);
        tm_free(&b);
    }
    /* every prefix of the header and infos, a stride of the data */
    tm_buf b = {0};
    tm_gguf(&b, 0, TM_GG_OK);
    int bad = 0;
    for (size_t n = 0; n < b.n; n += n < 1600 ? 1 : 61) {
        sfm_checkpoint *c = NULL;
        if (sfm_checkpoint_open_gguf_memory(b.p, n, &c, err, sizeof err) == SF_OK || c) bad++;
        sfm_checkpoint_close(c);
    }
    CHECK(!bad, "%d truncated GGUF images opened", bad);
    tm_free(&b);
}

/* The real model: SmolLM2-135M-Instruct Q4_1 (skipped, 77, without it). */
static int test_smollm2(void) {
    const char *p = getenv("SF_SMOLLM2_GGUF");
    if (!p || access(p, R_OK)) {
        printf("SKIPPED: set SF_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf\n");
        return 77;
    }
    sfm_checkpoint *c = NULL;
    char err[256];
    sf_status s = sfm_checkpoint_open(p, &c, err, sizeof err);
    CHECK(s == SF_OK, "SmolLM2: %s", err);
    if (!c) return 1;
    const sfm_config *g = sfm_checkpoint_config(c);
    CHECK(g->arch == SFM_ARCH_LLAMA && g->num_layers == 30 && g->hidden_size == 576 && g->num_heads == 9 &&
              g->num_kv_heads == 3 && g->head_dim == 64 && g->intermediate_size == 1536 && g->vocab_size == 49152 &&
              g->rope_theta == 100000.0 && fabs(g->norm_eps - 1e-5) < 1e-12 && g->tie_embeddings,
          "SmolLM2 config");
    int counts[8] = {0};
    for (int i = 0; i < sfm_checkpoint_count(c); i++) counts[sfm_checkpoint_tensor(c, i)->type]++;
    CHECK(sfm_checkpoint_count(c) == 272 && counts[SFM_W_Q4_1] == 210 && counts[SFM_W_F32] == 61 &&
              counts[SFM_W_Q8_0] == 1,
          "SmolLM2 tensors: %d (Q4_1 %d, F32 %d, Q8_0 %d)", sfm_checkpoint_count(c), counts[SFM_W_Q4_1],
          counts[SFM_W_F32], counts[SFM_W_Q8_0]);
    const sfm_tensor *t = sfm_checkpoint_find(c, "model.layers.29.self_attn.k_proj.weight");
    CHECK(t && t->type == SFM_W_Q4_1 && t->shape[0] == 192 && t->shape[1] == 576 && t->nbytes == 192 * 18 * 20,
          "SmolLM2 k_proj");
    t = sfm_checkpoint_find(c, "model.embed_tokens.weight");
    CHECK(t && t->type == SFM_W_Q8_0 && t->shape[0] == 49152 && t->shape[1] == 576, "SmolLM2 embeddings");
    CHECK(sfm_meta_array_len(c, "tokenizer.ggml.tokens") == 49152, "SmolLM2 vocabulary");
    printf("SmolLM2: %d tensors, config checked\n", sfm_checkpoint_count(c));
    sfm_checkpoint_close(c);
    return g_fail ? 1 : 0;
}

/* Seeds for tests/fuzz/fuzz_model_load.c: byte 0 picks GGUF (0), a
 * safetensors image with its config.json (1: u16 length, text, image) or a
 * config.json alone (2). */
static int write_seeds(const char *dir) {
    mkdir(dir, 0755);
    for (int k = 0; k < 2; k++) {
        tm_buf b = {0};
        tm_put(&b, "\0", 1);
        tm_gguf(&b, k, TM_GG_OK);
        write_file(dir, k ? "gguf_qwen2" : "gguf_llama", b.p, b.n);
        tm_free(&b);
    }
    const char *cfg = tm_config_json("LlamaForCausalLM");
    tm_buf b = {0};
    uint8_t hdr[3] = {1, (uint8_t)(strlen(cfg) & 255), (uint8_t)(strlen(cfg) >> 8)};
    tm_put(&b, hdr, 3);
    tm_put(&b, cfg, strlen(cfg));
    tm_safetensors(&b, 0, -1, TM_ST_OK);
    write_file(dir, "safetensors_llama", b.p, b.n);
    b.n = 0;
    tm_put(&b, "\2", 1);
    tm_put(&b, cfg, strlen(cfg));
    write_file(dir, "config_llama", b.p, b.n);
    tm_free(&b);
    printf("seeds written to %s\n", dir);
    return 0;
}

/* sfm_host_f32 widens a weight of any rank as (product of the leading
 * extents, last extent): a bf16 conv1d weight (C, 1, W) gives all C * W
 * values (it once read it as (1, W) and copied C * W floats out of W). */
static void test_host_f32_rank3(void) {
    enum { CC = 37, WW = 4 };
    uint16_t raw[CC * WW];
    for (int i = 0; i < CC * WW; i++) {
        const float v = (float)(i % 29) - 7.0f; /* exact in bf16 */
        uint32_t u;
        memcpy(&u, &v, 4);
        raw[i] = (uint16_t)(u >> 16);
    }
    sfm_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "conv1d.weight";
    t.type = SFM_W_BF16;
    t.ndim = 3;
    t.shape[0] = CC, t.shape[1] = 1, t.shape[2] = WW;
    t.data = raw;
    t.nbytes = sizeof raw;
    sfm_model *m = calloc(1, sizeof *m);
    float *f = NULL;
    char err[256] = "";
    CHECK(m && sfm_host_f32(m, &t, &f, err, sizeof err) == SF_OK && f, "sfm_host_f32 of a (37, 1, 4) bf16 tensor: %s", err);
    int bad = 0;
    for (int i = 0; f && i < CC * WW; i++) bad += f[i] != (float)(i % 29) - 7.0f;
    CHECK(bad == 0, "sfm_host_f32 of a (37, 1, 4) bf16 tensor: %d of %d values wrong", bad, CC * WW);
    sfm_model_destroy(m);
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--write-seeds")) return write_seeds(argv[2]);
    if (argc > 1 && !strcmp(argv[1], "--smollm2")) return test_smollm2();
    snprintf(g_dir, sizeof g_dir, "/tmp/sf_ckpt_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_safetensors();
    test_st_corrupt();
    test_gguf();
    test_host_f32_rank3();
    static const char *const subs[] = {"st", "sharded", "gguf"};
    for (size_t i = 0; i < 3; i++) {
        char p[512];
        PATHF(p, "%s/%s", g_dir, subs[i]);
        rm_dir(p);
    }
    rmdir(g_dir);
    if (g_fail) {
        fprintf(stderr, "%d checks failed\n", g_fail);
        return 1;
    }
    printf("checkpoint: all checks passed\n");
    return 0;
}
