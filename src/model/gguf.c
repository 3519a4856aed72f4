/* gguf.c - GGUF v2/v3 files (llama.cpp's format), read in place.
 *
 * Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count, the
 * metadata (u64-length key, u32 value type, value), the tensor infos
 * (name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml type, u64
 * offset), then the data from the next multiple of general.alignment (32 by
 * default). Every count and length is checked against the bytes left before
 * anything is allocated, and tables grow only with entries actually read, so
 * a corrupt count cannot make the reader allocate more than the file holds.
 * Multi-byte values are little-endian (the host's on x86-64 and AArch64). */
#include "ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GT_U8, GT_I8, GT_U16, GT_I16, GT_U32, GT_I32, GT_F32, GT_BOOL, GT_STRING, GT_ARRAY, GT_U64, GT_I64, GT_F64 };

static uint64_t scalar_size(uint32_t t) {
    static const uint8_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < sizeof sz ? sz[t] : 0;
}

typedef struct rd {
    const sfm_map *m;
    uint64_t pos;
    char *err;
    size_t errlen;
} rd;

static sf_status truncated(rd *r, const char *what) {
    return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: truncated at byte %llu reading %s",
                    (unsigned long long)r->pos, what);
}
static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static sf_status rd_u(rd *r, int n, uint64_t *v, const char *what) {
    *v = 0;
    const uint8_t *p = sfm_map_view(r->m, r->pos, (uint64_t)n);
    if (!p) return truncated(r, what);
    *v = le(p, n);
    r->pos += (uint64_t)n;
    return SF_OK;
}
static sf_status rd_str(rd *r, const uint8_t **s, uint64_t *len, const char *what) {
    *s = NULL;
    sf_status st = rd_u(r, 8, len, what);
    if (st != SF_OK) return st;
    *s = sfm_map_view(r->m, r->pos, *len);
    if (!*s) return truncated(r, what);
    r->pos += *len;
    return SF_OK;
}
static uint64_t left(const rd *r) { return r->m->size - r->pos; }

#define TRY(x)                         \
    do {                               \
        sf_status s_ = (x);            \
        if (s_ != SF_OK) return s_;    \
    } while (0)

/* One value of type t into kv (arrays: of scalars or strings; an array of
 * arrays is refused). */
static sf_status rd_value(sfm_checkpoint *c, rd *r, uint32_t t, sfm_kv *kv) {
    kv->type = t;
    if (t == GT_STRING) return rd_str(r, &kv->str, &kv->str_len, "a string value");
    if (t == GT_ARRAY) {
        uint64_t et, n;
        TRY(rd_u(r, 4, &et, "an array type"));
        TRY(rd_u(r, 8, &n, "an array length"));
        kv->arr_type = (uint32_t)et;
        kv->arr_n = n;
        kv->arr = r->m->base + r->pos;
        if (et == GT_ARRAY)
            return sfm_fail(r->err, r->errlen, SF_ERR_UNSUPPORTED, "GGUF: key %.*s holds nested arrays",
                            (int)(kv->key_len < 64 ? kv->key_len : 64), kv->key);
        if (et == GT_STRING) {
            if (n > left(r) / 8) return truncated(r, "a string array");
            uint64_t start = r->pos; /* walk once to check, then tabulate */
            for (uint64_t i = 0; i < n; i++) {
                const uint8_t *s;
                uint64_t len;
                TRY(rd_str(r, &s, &len, "a string array element"));
            }
            kv->arr_str = sfm_own(c, (size_t)n * sizeof *kv->arr_str + 1);
            kv->arr_str_len = sfm_own(c, (size_t)n * sizeof *kv->arr_str_len + 1);
            if (!kv->arr_str || !kv->arr_str_len)
                return sfm_fail(r->err, r->errlen, SF_ERR_OUT_OF_MEMORY, "out of memory for GGUF string arrays");
            r->pos = start;
            for (uint64_t i = 0; i < n; i++) TRY(rd_str(r, &kv->arr_str[i], &kv->arr_str_len[i], "a string"));
            return SF_OK;
        }
        uint64_t es = scalar_size((uint32_t)et);
        if (!es)
            return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: array of unknown value type %llu",
                            (unsigned long long)et);
        if (n > left(r) / es) return truncated(r, "an array");
        r->pos += n * es;
        return SF_OK;
    }
    uint64_t sz = scalar_size(t), u;
    if (!sz) return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: unknown value type %u", t);
    TRY(rd_u(r, (int)sz, &u, "a value"));
    switch (t) {
    case GT_I8: kv->v.i = (int8_t)u; break;
    case GT_I16: kv->v.i = (int16_t)u; break;
    case GT_I32: kv->v.i = (int32_t)u; break;
    case GT_I64: kv->v.i = (int64_t)u; break;
    case GT_F32: {
        float f;
        uint32_t b = (uint32_t)u;
        memcpy(&f, &b, 4);
        kv->v.f = f;
        break;
    }
    case GT_F64: memcpy(&kv->v.f, &u, 8); break;
    default: kv->v.u = u; break;
    }
    return SF_OK;
}

/* ---------------------------------------------------------------- metadata */
static const sfm_kv *kv_find(const sfm_checkpoint *c, const char *key) {
    if (!c || !key) return NULL;
    size_t n = strlen(key);
    for (int64_t i = 0; i < c->nkv; i++)
        if (c->kv[i].key_len == n && !memcmp(c->kv[i].key, key, n)) return &c->kv[i];
    return NULL;
}
static int is_int(uint32_t t) {
    return t <= GT_I32 || t == GT_U64 || t == GT_I64;
}
static int is_signed(uint32_t t) { return t == GT_I8 || t == GT_I16 || t == GT_I32 || t == GT_I64; }

sfm_meta_type sfm_meta_get_type(const sfm_checkpoint *c, const char *key) {
    const sfm_kv *kv = kv_find(c, key);
    if (!kv) return SFM_META_NONE;
    if (is_int(kv->type)) return SFM_META_INT;
    if (kv->type == GT_F32 || kv->type == GT_F64) return SFM_META_FLOAT;
    if (kv->type == GT_BOOL) return SFM_META_BOOL;
    if (kv->type == GT_STRING) return SFM_META_STRING;
    return SFM_META_ARRAY;
}

int sfm_meta_int(const sfm_checkpoint *c, const char *key, int64_t *out) {
    const sfm_kv *kv = kv_find(c, key);
    if (!kv || !(is_int(kv->type) || kv->type == GT_BOOL)) return 0;
    if (!is_signed(kv->type) && kv->v.u > (uint64_t)INT64_MAX) return 0;
    *out = kv->v.i;
    return 1;
}

int sfm_meta_float(const sfm_checkpoint *c, const char *key, double *out) {
    const sfm_kv *kv = kv_find(c, key);
    if (!kv || (kv->type != GT_F32 && kv->type != GT_F64)) return 0;
    *out = kv->v.f;
    return 1;
}

int sfm_meta_string(const sfm_checkpoint *c, const char *key, const char **s, size_t *len) {
    const sfm_kv *kv = kv_find(c, key);
    if (!kv || kv->type != GT_STRING) return 0;
    *s = (const char *)kv->str;
    *len = (size_t)kv->str_len;
    return 1;
}

int64_t sfm_meta_array_len(const sfm_checkpoint *c, const char *key) {
    const sfm_kv *kv = kv_find(c, key);
    return kv && kv->type == GT_ARRAY ? (int64_t)kv->arr_n : 0;
}

static const sfm_kv *arr_at(const sfm_checkpoint *c, const char *key, int64_t i) {
    const sfm_kv *kv = kv_find(c, key);
    return kv && kv->type == GT_ARRAY && i >= 0 && (uint64_t)i < kv->arr_n ? kv : NULL;
}

int sfm_meta_array_string(const sfm_checkpoint *c, const char *key, int64_t i, const char **s, size_t *len) {
    const sfm_kv *kv = arr_at(c, key, i);
    if (!kv || kv->arr_type != GT_STRING) return 0;
    *s = (const char *)kv->arr_str[i];
    *len = (size_t)kv->arr_str_len[i];
    return 1;
}

int sfm_meta_array_int(const sfm_checkpoint *c, const char *key, int64_t i, int64_t *out) {
    const sfm_kv *kv = arr_at(c, key, i);
    if (!kv || !(is_int(kv->arr_type) || kv->arr_type == GT_BOOL)) return 0;
    int n = (int)scalar_size(kv->arr_type);
    uint64_t u = le(kv->arr + (uint64_t)i * (uint64_t)n, n);
    switch (kv->arr_type) {
    case GT_I8: *out = (int8_t)u; break;
    case GT_I16: *out = (int16_t)u; break;
    case GT_I32: *out = (int32_t)u; break;
    case GT_I64: *out = (int64_t)u; break;
    default:
        if (u > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)u;
    }
    return 1;
}

int sfm_meta_array_float(const sfm_checkpoint *c, const char *key, int64_t i, double *out) {
    const sfm_kv *kv = arr_at(c, key, i);
    if (!kv || (kv->arr_type != GT_F32 && kv->arr_type != GT_F64)) return 0;
    if (kv->arr_type == GT_F32) {
        uint32_t b = (uint32_t)le(kv->arr + (uint64_t)i * 4, 4);
        float f;
        memcpy(&f, &b, 4);
        *out = f;
    } else {
        uint64_t b = le(kv->arr + (uint64_t)i * 8, 8);
        memcpy(out, &b, 8);
    }
    return 1;
}

/* ---------------------------------------------------------------- tensors */
/* ggml type ids -> ours; the rest are named in the refusal. */
static int ggml_type(uint64_t t, sfm_wtype *w) {
    switch (t) {
    case 0: *w = SFM_W_F32; return 1;
    case 1: *w = SFM_W_F16; return 1;
    case 2: *w = SFM_W_Q4_0; return 1;
    case 3: *w = SFM_W_Q4_1; return 1;
    case 8: *w = SFM_W_Q8_0; return 1;
    case 30: *w = SFM_W_BF16; return 1;
    }
    return 0;
}
static const char *ggml_type_name(uint64_t t) {
    static const char *const names[] = {"F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0",
                                        "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS",
                                        "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",
                                        "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* llama.cpp's tensor names -> Hugging Face's (llama, qwen2); other names are
 * kept as they are. */
static char *hf_name(sfm_checkpoint *c, const char *g, size_t n) {
    static const char *const top[][2] = {{"token_embd.weight", "model.embed_tokens.weight"},
                                         {"output_norm.weight", "model.norm.weight"},
                                         {"output.weight", "lm_head.weight"}};
    static const char *const blk[][2] = {
        {"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"}, {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},   {"attn_v", "self_attn.v_proj"},   {"attn_output", "self_attn.o_proj"},
        {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},        {"ffn_down", "mlp.down_proj"}};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (n == strlen(top[i][0]) && !memcmp(g, top[i][0], n)) return sfm_own_str(c, top[i][1], strlen(top[i][1]));
    if (n > 4 && !memcmp(g, "blk.", 4)) {
        size_t p = 4;
        long layer = 0;
        while (p < n && p < 10 && g[p] >= '0' && g[p] <= '9') layer = layer * 10 + (g[p++] - '0');
        if (p > 4 && p < n && g[p] == '.') {
            const char *rest = g + p + 1;
            size_t rn = n - p - 1;
            for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
                size_t bn = strlen(blk[i][0]);
                const char *suf = rest + bn;
                size_t sn = rn - bn;
                if (rn > bn && !memcmp(rest, blk[i][0], bn) &&
                    ((sn == 7 && !memcmp(suf, ".weight", 7)) || (sn == 5 && !memcmp(suf, ".bias", 5)))) {
                    char buf[96];
                    snprintf(buf, sizeof buf, "model.layers.%ld.%s%.*s", layer, blk[i][1], (int)sn, suf);
                    return sfm_own_str(c, buf, strlen(buf));
                }
            }
        }
    }
    return sfm_own_str(c, g, n);
}

typedef struct extent {
    uint64_t off, nbytes;
    const char *name;
} extent;
static int by_off(const void *a, const void *b) {
    const extent *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static sf_status rd_tensor(sfm_checkpoint *c, rd *r, uint64_t align, extent *ext) {
    const uint8_t *gname;
    uint64_t glen, nd, ty, off;
    TRY(rd_str(r, &gname, &glen, "a tensor name"));
    int nl = (int)(glen < 64 ? glen : 64);
    if (glen == 0 || glen > 256 || memchr(gname, 0, (size_t)glen))
        return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: a tensor name of %llu bytes (or with NUL)",
                        (unsigned long long)glen);
    TRY(rd_u(r, 4, &nd, "a tensor's n_dims"));
    if (nd < 1 || nd > SFM_MAX_DIMS)
        return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: tensor %.*s has %llu dimensions (1 to %d)", nl,
                        gname, (unsigned long long)nd, SFM_MAX_DIMS);
    sfm_tensor t;
    memset(&t, 0, sizeof t);
    t.ndim = (int)nd;
    for (int i = 0; i < t.ndim; i++) {
        uint64_t ne;
        TRY(rd_u(r, 8, &ne, "a tensor extent"));
        if (ne < 1 || ne > ((uint64_t)1 << 62))
            return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: tensor %.*s has extent ne[%d] = %llu", nl,
                            gname, i, (unsigned long long)ne);
        t.shape[t.ndim - 1 - i] = (int64_t)ne; /* ne[0] innermost -> PyTorch order */
    }
    TRY(rd_u(r, 4, &ty, "a tensor type"));
    TRY(rd_u(r, 8, &off, "a tensor offset"));
    if (!ggml_type(ty, &t.type))
        return sfm_fail(r->err, r->errlen, SF_ERR_UNSUPPORTED,
                        "GGUF: tensor %.*s has type %s (%llu); supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1", nl,
                        gname, ggml_type_name(ty), (unsigned long long)ty);
    if (t.type >= SFM_W_Q8_0 && t.shape[t.ndim - 1] % 32)
        return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG,
                        "GGUF: tensor %.*s: ne[0] = %lld is not a multiple of the 32-element block", nl, gname,
                        (long long)t.shape[t.ndim - 1]);
    int64_t nb = sfm_tensor_bytes(t.type, t.ndim, t.shape);
    if (nb < 0)
        return sfm_fail(r->err, r->errlen, SF_ERR_TOO_LARGE, "GGUF: tensor %.*s: element count overflows", nl, gname);
    if (off % align)
        return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG,
                        "GGUF: tensor %.*s: offset %llu is not a multiple of the alignment %llu", nl, gname,
                        (unsigned long long)off, (unsigned long long)align);
    t.nbytes = (uint64_t)nb;
    t.name = hf_name(c, (const char *)gname, (size_t)glen);
    if (!t.name) return sfm_fail(r->err, r->errlen, SF_ERR_OUT_OF_MEMORY, "out of memory for tensor names");
    ext->off = off;
    ext->nbytes = t.nbytes;
    ext->name = t.name;
    return sfm_ck_add(c, &t, r->err, r->errlen);
}

/* llama.cpp's converter reorders the rows of each llama q/k head from
 * [first half; second half] (HF's rotate_half layout) to interleaved pairs:
 * GGUF row h*hd + 2j + i holds HF row h*hd + i*hd/2 + j. Undone here into a
 * copy, since the mapping is read-only; quantisation blocks run along a row,
 * so whole rows move and block types need no decoding. */
static sf_status unpermute(sfm_checkpoint *c, const char *name, int heads, char *err, size_t errlen) {
    const sfm_tensor *ct = sfm_checkpoint_find(c, name);
    if (!ct) return SF_OK; /* validation names what is missing */
    sfm_tensor *t = &c->t[ct - c->t];
    int64_t rows = t->shape[0];
    if (rows % (2 * (int64_t)heads) || (t->ndim == 1 && t->type > SFM_W_BF16) || t->ndim > 2)
        return sfm_fail(err, errlen, SF_ERR_SHAPE, "GGUF: tensor %s (%lld rows) cannot be split into %d heads", name,
                        (long long)rows, heads);
    uint64_t rb = t->nbytes / (uint64_t)rows;
    int64_t hd = rows / heads, half = hd / 2;
    uint8_t *dst = sfm_own(c, (size_t)t->nbytes);
    if (!dst) return sfm_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of memory un-permuting %s", name);
    const uint8_t *src = t->data;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < 2; i++)
            for (int64_t j = 0; j < half; j++)
                memcpy(dst + (uint64_t)(h * hd + i * half + j) * rb, src + (uint64_t)(h * hd + 2 * j + i) * rb,
                       (size_t)rb);
    t->data = dst;
    return SF_OK;
}

static sf_status gguf_parse(sfm_checkpoint *c, rd *r) {
    const sfm_map *m = r->m;
    uint64_t ver, nt, nkv;
    if (m->size < 4 || memcmp(m->base, "GGUF", 4))
        return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: no GGUF magic");
    r->pos = 4;
    TRY(rd_u(r, 4, &ver, "the version"));
    if (ver != 2 && ver != 3)
        return sfm_fail(r->err, r->errlen, SF_ERR_UNSUPPORTED, "GGUF: version %llu (2 and 3 are read)",
                        (unsigned long long)ver);
    TRY(rd_u(r, 8, &nt, "the tensor count"));
    TRY(rd_u(r, 8, &nkv, "the metadata count"));
    /* the smallest entries: a key/value 13 bytes, a tensor info 32 */
    if (nkv > left(r) / 13 || nt > left(r) / 32 || nt > (1u << 24))
        return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG,
                        "GGUF: %llu tensors and %llu metadata entries cannot fit in %llu bytes",
                        (unsigned long long)nt, (unsigned long long)nkv, (unsigned long long)m->size);
    size_t cap = 0;
    for (uint64_t i = 0; i < nkv; i++) {
        if (c->nkv == (int64_t)cap) { /* grows with entries read, not the count */
            size_t nc = cap ? cap * 2 : 64;
            sfm_kv *nk = sfm_own(c, nc * sizeof *nk);
            if (!nk) return sfm_fail(r->err, r->errlen, SF_ERR_OUT_OF_MEMORY, "out of memory for GGUF metadata");
            if (c->nkv) memcpy(nk, c->kv, (size_t)c->nkv * sizeof *nk);
            c->kv = nk;
            cap = nc;
        }
        sfm_kv *kv = &c->kv[c->nkv];
        memset(kv, 0, sizeof *kv);
        const uint8_t *key;
        uint64_t ty;
        TRY(rd_str(r, &key, &kv->key_len, "a metadata key"));
        kv->key = (const char *)key;
        TRY(rd_u(r, 4, &ty, "a value type"));
        TRY(rd_value(c, r, (uint32_t)ty, kv));
        c->nkv++;
    }
    uint64_t align = 32;
    int64_t a;
    if (sfm_meta_get_type(c, "general.alignment") != SFM_META_NONE) {
        if (!sfm_meta_int(c, "general.alignment", &a) || a < 1 || a > (1 << 20) || (a & (a - 1)))
            return sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: general.alignment is not a power of two");
        align = (uint64_t)a;
    }
    extent *ext = malloc((size_t)(nt ? nt : 1) * sizeof *ext); /* nt <= size / 32 */
    if (!ext) return sfm_fail(r->err, r->errlen, SF_ERR_OUT_OF_MEMORY, "out of memory for GGUF tensor infos");
    sf_status s = SF_OK;
    for (uint64_t i = 0; i < nt && s == SF_OK; i++) s = rd_tensor(c, r, align, &ext[i]);
    uint64_t data = (r->pos + align - 1) / align * align;
    if (s == SF_OK && data > m->size)
        s = sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: the data area starts past the end of the file");
    for (uint64_t i = 0; i < nt && s == SF_OK; i++) {
        if (!sfm_map_has(m, data, ext[i].off) || !sfm_map_has(m, data + ext[i].off, ext[i].nbytes))
            s = sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG,
                         "GGUF: tensor %s (%llu bytes at offset %llu) lies past the end of the file", ext[i].name,
                         (unsigned long long)ext[i].nbytes, (unsigned long long)ext[i].off);
        else
            c->t[i].data = m->base + data + ext[i].off;
    }
    if (s == SF_OK && nt > 1) {
        qsort(ext, (size_t)nt, sizeof *ext, by_off);
        for (uint64_t i = 1; i < nt && s == SF_OK; i++)
            if (ext[i].off < ext[i - 1].off + ext[i - 1].nbytes)
                s = sfm_fail(r->err, r->errlen, SF_ERR_INVALID_ARG, "GGUF: tensors %s and %s overlap", ext[i - 1].name,
                             ext[i].name);
    }
    free(ext);
    return s;
}

sf_status sfm_gguf_open_map(const char *path, sfm_map *m, sfm_checkpoint **out, char *err, size_t errlen) {
    sfm_checkpoint *c;
    *out = NULL;
    sf_status s = sfm_ck_new(1, path, 1, &c, err, errlen);
    if (s != SF_OK) {
        sfm_map_close(m);
        return s;
    }
    c->maps[0] = *m;
    c->nmaps = 1;
    memset(m, 0, sizeof *m);
    rd r = {&c->maps[0], 0, err, errlen};
    s = gguf_parse(c, &r);
    if (s == SF_OK) s = sfm_ck_index(c, err, errlen);
    if (s == SF_OK) s = sfm_config_from_gguf(c, err, errlen);
    if (s == SF_OK && c->cfg.arch == SFM_ARCH_LLAMA) {
        char name[96];
        for (int l = 0; l < c->cfg.num_layers && s == SF_OK; l++) {
            static const char *const what[] = {"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias"};
            for (int k = 0; k < 4 && s == SF_OK; k++) {
                snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", l, what[k]);
                s = unpermute(c, name, k < 2 ? c->cfg.num_heads : c->cfg.num_kv_heads, err, errlen);
            }
        }
    }
    if (s == SF_OK) s = sfm_checkpoint_validate(c, err, errlen);
    if (s != SF_OK) {
        sfm_checkpoint_close(c);
        return s;
    }
    *out = c;
    return SF_OK;
}
