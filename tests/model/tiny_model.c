/* tiny_model.c - the tiny checkpoints of tiny_model.h, byte by byte. */
#include "tiny_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tm_put(tm_buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) abort(); /* test code: out of memory is fatal */
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
void tm_free(tm_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
static void put_u32(tm_buf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    tm_put(b, x, 4);
}
static void put_u64(tm_buf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    tm_put(b, x, 8);
}
static void put_str(tm_buf *b, const char *s) {
    put_u64(b, strlen(s));
    tm_put(b, s, strlen(s));
}

const char *tm_config_json(const char *cls) {
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"architectures\": [\"%s\"], \"vocab_size\": %d, \"hidden_size\": %d, \"num_hidden_layers\": %d, "
             "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"intermediate_size\": %d, "
             "\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"max_position_embeddings\": 256, "
             "\"bos_token_id\": 1, \"eos_token_id\": [2, 3], \"tie_word_embeddings\": false, "
             "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
             "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}}",
             cls, TM_VOCAB, TM_HIDDEN, TM_LAYERS, TM_HEADS, TM_KV, TM_FFN);
    return buf;
}

float tm_value(const char *name, int64_t i) {
    uint32_t h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
    h ^= (uint32_t)i * 2654435761u;
    h ^= h >> 15;
    return (float)((int)(h % 2001) - 1000) / 1000.0f;
}

/* ---------------------------------------------------------------- safetensors */
typedef struct st_t {
    char name[80];
    int ndim;
    int64_t shape[2];
} st_t;

static int st_list(st_t *t) {
    int n = 0;
#define ADD(nm, nd, a, b)                                  \
    do {                                                   \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);   \
        t[n].ndim = nd;                                    \
        t[n].shape[0] = a;                                 \
        t[n].shape[1] = b;                                 \
        n++;                                               \
    } while (0)
    ADD("model.embed_tokens.weight", 2, TM_VOCAB, TM_HIDDEN);
    ADD("model.norm.weight", 1, TM_HIDDEN, 0);
    ADD("lm_head.weight", 2, TM_VOCAB, TM_HIDDEN);
    for (int l = 0; l < TM_LAYERS; l++) {
        static const struct { const char *s; int nd, a, b; } per[] = {
            {"input_layernorm.weight", 1, TM_HIDDEN, 0},
            {"post_attention_layernorm.weight", 1, TM_HIDDEN, 0},
            {"self_attn.q_proj.weight", 2, TM_HEADS * TM_HD, TM_HIDDEN},
            {"self_attn.k_proj.weight", 2, TM_KV * TM_HD, TM_HIDDEN},
            {"self_attn.v_proj.weight", 2, TM_KV * TM_HD, TM_HIDDEN},
            {"self_attn.o_proj.weight", 2, TM_HIDDEN, TM_HEADS * TM_HD},
            {"mlp.gate_proj.weight", 2, TM_FFN, TM_HIDDEN},
            {"mlp.up_proj.weight", 2, TM_FFN, TM_HIDDEN},
            {"mlp.down_proj.weight", 2, TM_HIDDEN, TM_FFN}};
        for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
            char nm[80];
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, per[k].s);
            ADD(nm, per[k].nd, per[k].a, per[k].b);
        }
    }
#undef ADD
    return n;
}

int tm_st_count(void) {
    st_t t[64];
    return st_list(t);
}
const char *tm_st_name(int i) {
    static st_t t[64];
    st_list(t);
    return t[i].name;
}

void tm_safetensors(tm_buf *out, int lo, int hi, int corrupt) {
    st_t t[64];
    int n = st_list(t);
    if (hi < 0 || hi > n) hi = n;
    char *hdr = malloc(65536);
    if (!hdr) abort();
    size_t h = 0;
    h += (size_t)snprintf(hdr + h, 65536 - h, "{\"__metadata__\": {\"format\": \"pt\"}");
    uint64_t off = 0, first_b = 0, first_e = 0;
    tm_buf data = {0};
    for (int i = lo; i < hi; i++) {
        int64_t numel = t[i].ndim == 1 ? t[i].shape[0] : t[i].shape[0] * t[i].shape[1];
        uint64_t b = off, e = off + (uint64_t)numel * 4;
        for (int64_t k = 0; k < numel; k++) {
            float v = tm_value(t[i].name, k);
            tm_put(&data, &v, 4);
        }
        off = e;
        const char *name = t[i].name, *dtype = "F32";
        char shape[96];
        if (t[i].ndim == 1) snprintf(shape, sizeof shape, "[%lld]", (long long)t[i].shape[0]);
        else snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)t[i].shape[0], (long long)t[i].shape[1]);
        int k = i - lo;
        if (k == 0) first_b = b, first_e = e;
        if (corrupt == TM_ST_F64 && k == 0) dtype = "F64";
        if (corrupt == TM_ST_PAST_END && i == hi - 1) e += 4;
        if (corrupt == TM_ST_SPAN && k == 0) e -= 4;
        if (corrupt == TM_ST_OVERLAP && k == 2) b = first_b + 4, e = b + (uint64_t)numel * 4;
        if (corrupt == TM_ST_SHAPE && strstr(name, "q_proj")) snprintf(shape, sizeof shape, "[16, 64]");
        if (corrupt == TM_ST_DROP_NORM && strstr(name, "layers.1.post_attention")) continue;
        if (corrupt == TM_ST_NEG_SHAPE && k == 0) snprintf(shape, sizeof shape, "[-1, 32]");
        if (corrupt == TM_ST_FIVE_DIMS && k == 0) snprintf(shape, sizeof shape, "[1, 1, 1, 16, 32]");
        if (corrupt == TM_ST_DUP_NAME && k == 1) name = t[lo].name;
        (void)first_e;
        h += (size_t)snprintf(hdr + h, 65536 - h, ", \"%s\": {\"dtype\": \"%s\", \"shape\": %s, "
                              "\"data_offsets\": [%llu, %llu]}", name, dtype, shape,
                              (unsigned long long)b, (unsigned long long)e);
    }
    if (corrupt != TM_ST_BAD_JSON) hdr[h++] = '}';
    while (h % 8) hdr[h++] = ' ';
    uint64_t hl = corrupt == TM_ST_HUGE_HEADER ? h + data.n + 1 : h;
    put_u64(out, hl);
    tm_put(out, hdr, h);
    tm_put(out, data.p, data.n);
    tm_free(&data);
    free(hdr);
}

/* ---------------------------------------------------------------- GGUF */
void tm_gguf_qk_row(int l, int k, int r, uint8_t *row, size_t rowbytes) {
    for (size_t i = 0; i < rowbytes; i++) row[i] = (uint8_t)(l * 131 + k * 71 + r * 17 + (int)i * 5 + 3);
}

enum { G_F32 = 0, G_F16 = 1, G_Q4_0 = 2, G_Q4_1 = 3, G_Q8_0 = 8, G_BF16 = 30 };
typedef struct gg_t {
    char gname[64], hf[80];
    uint32_t type, ndim;
    uint64_t ne[5];
    uint64_t off, bytes;
    int layer, qk; /* qk: 1 q, 2 k (rows to permute), 0 other */
} gg_t;

static uint64_t gg_bytes(uint32_t type, uint64_t n) {
    switch (type) {
    case G_F32: return n * 4;
    case G_F16: case G_BF16: return n * 2;
    case G_Q8_0: return n / 32 * 34;
    case G_Q4_0: return n / 32 * 18;
    default: return n / 32 * 20;
    }
}

static int gg_list(gg_t *t, int qwen2) {
    int n = 0;
#define GADD(g, h, ty, a, b, lay, q)                                         \
    do {                                                                     \
        memset(&t[n], 0, sizeof t[n]);                                       \
        snprintf(t[n].gname, sizeof t[n].gname, "%s", g);                    \
        snprintf(t[n].hf, sizeof t[n].hf, "%s", h);                          \
        t[n].type = ty;                                                      \
        t[n].ne[0] = a;                                                      \
        t[n].ne[1] = b;                                                      \
        t[n].ndim = b ? 2 : 1;                                               \
        t[n].layer = lay;                                                    \
        t[n].qk = q;                                                         \
        n++;                                                                 \
    } while (0)
    GADD("token_embd.weight", "model.embed_tokens.weight", G_Q8_0, TM_HIDDEN, TM_VOCAB, 0, 0);
    GADD("output_norm.weight", "model.norm.weight", G_F32, TM_HIDDEN, 0, 0, 0);
    for (int l = 0; l < TM_LAYERS; l++) {
        char g[64], h[80];
#define L(gs, hs, ty, a, b, q)                                                \
    do {                                                                      \
        snprintf(g, sizeof g, "blk.%d.%s", l, gs);                            \
        snprintf(h, sizeof h, "model.layers.%d.%s", l, hs);                   \
        GADD(g, h, ty, a, b, l, q);                                           \
    } while (0)
        L("attn_norm.weight", "input_layernorm.weight", G_F32, TM_HIDDEN, 0, 0);
        L("ffn_norm.weight", "post_attention_layernorm.weight", G_F32, TM_HIDDEN, 0, 0);
        L("attn_q.weight", "self_attn.q_proj.weight", G_Q4_1, TM_HIDDEN, TM_HEADS * TM_HD, 1);
        L("attn_k.weight", "self_attn.k_proj.weight", G_Q4_0, TM_HIDDEN, TM_KV * TM_HD, 2);
        L("attn_v.weight", "self_attn.v_proj.weight", G_F16, TM_HIDDEN, TM_KV * TM_HD, 0);
        L("attn_output.weight", "self_attn.o_proj.weight", G_BF16, TM_HEADS * TM_HD, TM_HIDDEN, 0);
        L("ffn_gate.weight", "mlp.gate_proj.weight", G_Q8_0, TM_HIDDEN, TM_FFN, 0);
        L("ffn_up.weight", "mlp.up_proj.weight", G_Q8_0, TM_HIDDEN, TM_FFN, 0);
        L("ffn_down.weight", "mlp.down_proj.weight", G_Q4_1, TM_FFN, TM_HIDDEN, 0);
        if (qwen2) {
            L("attn_q.bias", "self_attn.q_proj.bias", G_F32, TM_HEADS * TM_HD, 0, 0);
            L("attn_k.bias", "self_attn.k_proj.bias", G_F32, TM_KV * TM_HD, 0, 0);
            L("attn_v.bias", "self_attn.v_proj.bias", G_F32, TM_KV * TM_HD, 0, 0);
        }
#undef L
    }
#undef GADD
    return n;
}

static void kv_str(tm_buf *b, int *nkv, const char *k, const char *v) {
    put_str(b, k);
    put_u32(b, 8);
    put_str(b, v);
    ++*nkv;
}
static void kv_u32(tm_buf *b, int *nkv, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, 4);
    put_u32(b, v);
    ++*nkv;
}
static void kv_f32(tm_buf *b, int *nkv, const char *k, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put_str(b, k);
    put_u32(b, 6);
    put_u32(b, u);
    ++*nkv;
}
static void kv_raw(tm_buf *b, int *nkv, const char *k, uint32_t type, const void *p, size_t n) {
    put_str(b, k);
    put_u32(b, type);
    tm_put(b, p, n);
    ++*nkv;
}

void tm_gguf(tm_buf *out, int qwen2, int corrupt) {
    gg_t t[64];
    int nt = gg_list(t, qwen2);
    const char *a = qwen2 ? "qwen2" : "llama";
    uint32_t align = corrupt == TM_GG_ALIGN ? 48 : 32;
    tm_buf kv = {0};
    int nkv = 0;
    char k[96];
    if (corrupt == TM_GG_STR_LEN) {
        put_str(&kv, "general.architecture");
        put_u32(&kv, 8);
        put_u64(&kv, (uint64_t)1 << 50);
        nkv++;
    } else {
        kv_str(&kv, &nkv, "general.architecture", corrupt == TM_GG_ARCH ? "gpt2" : a);
    }
    kv_u32(&kv, &nkv, "general.alignment", align);
#define AK(key) (snprintf(k, sizeof k, "%s.%s", a, key), k)
    kv_u32(&kv, &nkv, AK("block_count"), TM_LAYERS);
    kv_u32(&kv, &nkv, AK("context_length"), 128);
    kv_u32(&kv, &nkv, AK("embedding_length"), TM_HIDDEN);
    kv_u32(&kv, &nkv, AK("feed_forward_length"), TM_FFN);
    if (corrupt != TM_GG_NO_HEADS) kv_u32(&kv, &nkv, AK("attention.head_count"), TM_HEADS);
    kv_u32(&kv, &nkv, AK("attention.head_count_kv"), TM_KV);
    kv_f32(&kv, &nkv, AK("attention.layer_norm_rms_epsilon"), 1e-5f);
    kv_f32(&kv, &nkv, AK("rope.freq_base"), 100000.0f);
    kv_u32(&kv, &nkv, AK("rope.dimension_count"), TM_HD);
#undef AK
    kv_str(&kv, &nkv, "tokenizer.ggml.model", "gpt2");
    { /* arrays: strings, i32, f32 */
        tm_buf arr = {0};
        put_u32(&arr, 8);
        put_u64(&arr, TM_VOCAB);
        for (int i = 0; i < TM_VOCAB; i++) {
            char s[8];
            snprintf(s, sizeof s, "t%d", i);
            put_str(&arr, s);
        }
        kv_raw(&kv, &nkv, "tokenizer.ggml.tokens", 9, arr.p, arr.n);
        arr.n = 0;
        put_u32(&arr, 5);
        put_u64(&arr, TM_VOCAB);
        for (int i = 0; i < TM_VOCAB; i++) put_u32(&arr, (uint32_t)(i % 3 - 1));
        kv_raw(&kv, &nkv, "tokenizer.ggml.token_type", 9, arr.p, arr.n);
        arr.n = 0;
        put_u32(&arr, 6);
        put_u64(&arr, TM_VOCAB);
        for (int i = 0; i < TM_VOCAB; i++) {
            float f = (float)i * -0.5f;
            uint32_t u;
            memcpy(&u, &f, 4);
            put_u32(&arr, u);
        }
        kv_raw(&kv, &nkv, "tokenizer.ggml.scores", 9, arr.p, arr.n);
        if (corrupt == TM_GG_NESTED) {
            arr.n = 0;
            put_u32(&arr, 9);
            put_u64(&arr, 1);
            put_u32(&arr, 4);
            put_u64(&arr, 0);
            kv_raw(&kv, &nkv, "test.nested", 9, arr.p, arr.n);
        }
        tm_free(&arr);
    }
    kv_u32(&kv, &nkv, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(&kv, &nkv, "tokenizer.ggml.eos_token_id", 2);
    { /* every scalar type once */
        uint8_t u8 = 200;
        int8_t i8 = -5;
        uint16_t u16 = 60000;
        int16_t i16 = -300;
        int32_t i32 = -70000;
        uint64_t u64 = (uint64_t)1 << 40;
        int64_t i64 = -((int64_t)1 << 40);
        double f64 = 0.25;
        uint8_t bl = 1;
        kv_raw(&kv, &nkv, "test.u8", 0, &u8, 1);
        kv_raw(&kv, &nkv, "test.i8", 1, &i8, 1);
        kv_raw(&kv, &nkv, "test.u16", 2, &u16, 2);
        kv_raw(&kv, &nkv, "test.i16", 3, &i16, 2);
        kv_raw(&kv, &nkv, "test.i32", 5, &i32, 4);
        kv_raw(&kv, &nkv, "test.bool", 7, &bl, 1);
        kv_raw(&kv, &nkv, "test.u64", 10, &u64, 8);
        kv_raw(&kv, &nkv, "test.i64", 11, &i64, 8);
        kv_raw(&kv, &nkv, "test.f64", 12, &f64, 8);
        if (corrupt == TM_GG_VALUE_TYPE) kv_raw(&kv, &nkv, "test.bad", 13, &u64, 8);
    }
    /* tensor offsets */
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        uint64_t n = t[i].ne[0] * (t[i].ndim == 2 ? t[i].ne[1] : 1);
        t[i].bytes = gg_bytes(t[i].type, n);
        t[i].off = off;
        off = (off + t[i].bytes + 31) / 32 * 32;
    }
    uint64_t data_bytes = off;
    tm_buf ti = {0};
    for (int i = 0; i < nt; i++) {
        gg_t g = t[i];
        int last = i == nt - 1;
        if (corrupt == TM_GG_NDIMS && i == 1) g.ndim = 5, g.ne[1] = g.ne[2] = g.ne[3] = g.ne[4] = 1;
        if (corrupt == TM_GG_NE_ZERO && i == 1) g.ne[0] = 0;
        if (corrupt == TM_GG_Q4K && g.qk == 2) g.type = 12;
        if (corrupt == TM_GG_NE0_ODD && i == 0) g.ne[0] = 40;
        if (corrupt == TM_GG_MISALIGNED && last) g.off += 4;
        if (corrupt == TM_GG_PAST_END && last) g.off += 4096;
        if (corrupt == TM_GG_OVERLAP && i == 3) g.off = t[2].off;
        if (corrupt == TM_GG_SHAPE && strstr(g.gname, "attn_v")) g.ne[1] = 8;
        put_str(&ti, g.gname);
        put_u32(&ti, g.ndim);
        for (uint32_t d = 0; d < g.ndim; d++) put_u64(&ti, g.ne[d]);
        put_u32(&ti, g.type);
        put_u64(&ti, g.off);
    }
    tm_put(out, corrupt == TM_GG_MAGIC ? "GGUX" : "GGUF", 4);
    put_u32(out, corrupt == TM_GG_VERSION ? 1 : 3);
    put_u64(out, corrupt == TM_GG_T_COUNT ? (uint64_t)1 << 40 : (uint64_t)nt);
    put_u64(out, corrupt == TM_GG_KV_COUNT ? (uint64_t)1 << 60 : (uint64_t)nkv);
    tm_put(out, kv.p, kv.n);
    tm_put(out, ti.p, ti.n);
    while (out->n % align) tm_put(out, "", 1);
    size_t base = out->n;
    uint8_t *zero = calloc(1, data_bytes);
    if (!zero) abort();
    tm_put(out, zero, data_bytes);
    free(zero);
    for (int i = 0; i < nt; i++) {
        uint8_t *d = out->p + base + t[i].off;
        uint64_t rows = t[i].ndim == 2 ? t[i].ne[1] : 1, rb = t[i].bytes / rows;
        if (t[i].type == G_F32) {
            for (uint64_t e = 0; e < t[i].ne[0] * rows; e++) {
                float v = tm_value(t[i].hf, (int64_t)e);
                memcpy(d + e * 4, &v, 4);
            }
        } else if (t[i].qk && !qwen2) {
            /* llama.cpp's permute: view the rows as (heads, 2, hd/2), swap
             * the last two axes -> (heads, hd/2, 2), flatten */
            int heads = t[i].qk == 1 ? TM_HEADS : TM_KV, half = TM_HD / 2;
            for (int hh = 0; hh < heads; hh++)
                for (int two = 0; two < 2; two++)
                    for (int j = 0; j < half; j++) {
                        int src = (hh * 2 + two) * half + j;     /* index in (heads, 2, half) */
                        int dst = (hh * half + j) * 2 + two;     /* index in (heads, half, 2) */
                        tm_gguf_qk_row(t[i].layer, t[i].qk - 1, src, d + (uint64_t)dst * rb, rb);
                    }
        } else if (t[i].qk) {
            for (uint64_t r = 0; r < rows; r++) tm_gguf_qk_row(t[i].layer, t[i].qk - 1, (int)r, d + r * rb, rb);
        } else {
            for (uint64_t e = 0; e < t[i].bytes; e++) d[e] = (uint8_t)(e * 7 + (uint64_t)i);
        }
    }
    tm_free(&kv);
    tm_free(&ti);
}
