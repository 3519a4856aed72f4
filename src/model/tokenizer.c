/* Byte-level BPE: the builder the front ends fill (tokenizer_load.c) and the
 * encoder. Encoding follows HF `tokenizers`: added tokens are cut out first
 * (leftmost, then longest), every other stretch goes through the
 * pre-tokenizer steps (regex splits, PCRE2 in UTF + UCP mode), and each
 * resulting word is merged by rank from its single bytes, the lowest rank
 * first and the leftmost among equals (a binary heap over a linked list of
 * symbols, so a long word costs n log n). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "tokenizer_nfc.h"

/* HF ByteLevel's regex (GPT-2's with a final \s+ for lone whitespace). */
const char tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void tok_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 (0..32, 127..160, 173) for U+0100.. in byte order. */
static uint32_t byte_cp(int b)
{
    if (b <= 32)
        return 256u + (uint32_t)b;
    if (b >= 127 && b <= 160)
        return 256u + 33u + (uint32_t)(b - 127);
    if (b == 173)
        return 256u + 67u;
    return (uint32_t)b;
}

/* Its inverse: the byte a code point stands for, -1 if none. */
static int cp_byte(uint32_t cp)
{
    if (cp >= 256 && cp < 256 + 68) {
        uint32_t k = cp - 256;
        return k <= 32 ? (int)k : k <= 66 ? (int)(127 + k - 33) : 173;
    }
    if (cp < 256 && byte_cp((int)cp) == cp)
        return (int)cp;
    return -1;
}

/* UTF-8 of the byte's alphabet character (1 or 2 bytes); returns the length. */
int tok_byte_utf8(int b, char out[2])
{
    uint32_t cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_pair(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

sfm_tokenizer *tok_new(int n, char *err, size_t errlen)
{
    if (n <= 0 || n > (1 << 24)) {
        tok_errf(err, errlen, "tokenizer: vocabulary size %d out of range (1..16777216)", n);
        return NULL;
    }
    sfm_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        goto oom;
    t->n = n;
    t->bos = t->eos = -1;
    t->text = calloc((size_t)n, sizeof *t->text);
    t->text_len = calloc((size_t)n, sizeof *t->text_len);
    t->piece = calloc((size_t)n, sizeof *t->piece);
    t->piece_len = calloc((size_t)n, sizeof *t->piece_len);
    t->special = calloc((size_t)n, 1);
    t->is_added = calloc((size_t)n, 1);
    if (!t->text || !t->text_len || !t->piece || !t->piece_len || !t->special || !t->is_added)
        goto oom;
    return t;
oom:
    sfm_tokenizer_free(t);
    tok_errf(err, errlen, "tokenizer: out of memory for %d tokens", n);
    return NULL;
}

int tok_set_token(sfm_tokenizer *t, int id, const char *s, size_t len, char *err, size_t errlen)
{
    if (id < 0 || id >= t->n) {
        tok_errf(err, errlen, "tokenizer: token id %d outside the vocabulary (%d)", id, t->n);
        return -1;
    }
    if (len == 0 || len > 65535) {
        tok_errf(err, errlen, "tokenizer: token %d has length %zu (1..65535)", id, len);
        return -1;
    }
    if (t->text[id]) {
        if (t->text_len[id] == len && memcmp(t->text[id], s, len) == 0)
            return 0;
        tok_errf(err, errlen, "tokenizer: token id %d given twice with different strings", id);
        return -1;
    }
    char *c = malloc(len + 1);
    if (!c) {
        tok_errf(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    memcpy(c, s, len);
    c[len] = 0;
    t->text[id] = c;
    t->text_len[id] = (uint32_t)len;
    return 0;
}

int tok_lookup(const sfm_tokenizer *t, const char *s, size_t len)
{
    if (!t->str_slot)
        return -1;
    size_t mask = t->str_cap - 1;
    for (size_t i = (size_t)hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int32_t id = t->str_slot[i];
        if (id < 0)
            return -1;
        if (t->text_len[id] == len && memcmp(t->text[id], s, len) == 0)
            return id;
    }
}

/* The bytes a vocabulary token stands for: its characters read back through
 * the alphabet; a token with a character outside it decodes to its own text. */
static int token_piece(sfm_tokenizer *t, int id)
{
    const unsigned char *s = (const unsigned char *)t->text[id];
    size_t len = t->text_len[id], o = 0;
    char *p = malloc(len + 1);
    if (!p)
        return -1;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        if (s[i] < 0x80) {
            cp = s[i];
            i++;
        } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < len && (s[i + 1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else {
            cp = 0xFFFFFFFFu;
        }
        int b = cp_byte(cp);
        if (b < 0) {   /* not a byte-level token: its text as it is */
            memcpy(p, s, len);
            o = len;
            break;
        }
        p[o++] = (char)b;
    }
    p[o] = 0;
    t->piece[id] = p;
    t->piece_len[id] = (uint32_t)o;
    return 0;
}

int tok_index(sfm_tokenizer *t, char *err, size_t errlen)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)t->n)
        cap *= 2;
    t->str_slot = malloc(cap * sizeof *t->str_slot);
    if (!t->str_slot) {
        tok_errf(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    memset(t->str_slot, 0xFF, cap * sizeof *t->str_slot);
    t->str_cap = cap;
    for (int id = 0; id < t->n; id++) {
        if (!t->text[id])
            continue;
        if (tok_lookup(t, t->text[id], t->text_len[id]) < 0) {   /* a repeated string keeps its first id */
            size_t i = (size_t)hash_bytes(t->text[id], t->text_len[id]) & (cap - 1);
            while (t->str_slot[i] >= 0)
                i = (i + 1) & (cap - 1);
            t->str_slot[i] = id;
        }
        if (token_piece(t, id) != 0) {
            tok_errf(err, errlen, "tokenizer: out of memory");
            return -1;
        }
    }
    for (int b = 0; b < 256; b++) {
        char u[2];
        int ul = tok_byte_utf8(b, u);
        t->byte_id[b] = tok_lookup(t, u, (size_t)ul);
    }
    return 0;
}

static int merge_find(const sfm_tokenizer *t, int32_t a, int32_t b, size_t *slot)
{
    if (!t->mkey)
        return 0;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = t->mcap - 1;
    for (size_t i = (size_t)hash_pair(key) & mask;; i = (i + 1) & mask) {
        if (t->mrank[i] < 0) {
            *slot = i;
            return 0;
        }
        if (t->mkey[i] == key) {
            *slot = i;
            return 1;
        }
    }
}

int tok_merge_rank(const sfm_tokenizer *t, int32_t a, int32_t b, int32_t *merged)
{
    size_t slot;
    if (!merge_find(t, a, b, &slot))
        return -1;
    *merged = t->mnew[slot];
    return t->mrank[slot];
}

static int merge_grow(sfm_tokenizer *t)
{
    size_t cap = t->mcap ? t->mcap * 2 : 1024;
    uint64_t *k = malloc(cap * sizeof *k);
    int32_t *r = malloc(cap * sizeof *r), *nw = malloc(cap * sizeof *nw);
    if (!k || !r || !nw) {
        free(k), free(r), free(nw);
        return -1;
    }
    memset(r, 0xFF, cap * sizeof *r);
    for (size_t i = 0; i < t->mcap; i++) {
        if (t->mrank[i] < 0)
            continue;
        size_t j = (size_t)hash_pair(t->mkey[i]) & (cap - 1);
        while (r[j] >= 0)
            j = (j + 1) & (cap - 1);
        k[j] = t->mkey[i], r[j] = t->mrank[i], nw[j] = t->mnew[i];
    }
    free(t->mkey), free(t->mrank), free(t->mnew);
    t->mkey = k, t->mrank = r, t->mnew = nw, t->mcap = cap;
    return 0;
}

int tok_add_merge(sfm_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                  char *err, size_t errlen)
{
    int ia = tok_lookup(t, a, alen), ib = tok_lookup(t, b, blen);
    char small[256], *buf = alen + blen <= sizeof small ? small : malloc(alen + blen);
    if (!buf) {
        tok_errf(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    memcpy(buf, a, alen);
    memcpy(buf + alen, b, blen);
    int iab = tok_lookup(t, buf, alen + blen);
    if (buf != small)
        free(buf);
    if (ia < 0 || ib < 0 || iab < 0) {
        tok_errf(err, errlen, "tokenizer: merge %zu (\"%.*s\" \"%.*s\") names a token not in the vocabulary",
                 t->nmerges, (int)(alen > 40 ? 40 : alen), a, (int)(blen > 40 ? 40 : blen), b);
        return -1;
    }
    if ((t->nmerges + 1) * 2 > t->mcap && merge_grow(t) != 0) {
        tok_errf(err, errlen, "tokenizer: out of memory for the merges");
        return -1;
    }
    size_t slot = 0;
    merge_find(t, ia, ib, &slot);
    /* a repeated pair takes the later rank, as HF's merge map does */
    t->mkey[slot] = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
    t->mrank[slot] = (int32_t)t->nmerges;
    t->mnew[slot] = iab;
    t->nmerges++;
    return 0;
}

int tok_add_added(sfm_tokenizer *t, int id, int special, int lstrip, int rstrip, int single_word,
                  char *err, size_t errlen)
{
    if (id < 0 || id >= t->n || !t->text[id]) {
        tok_errf(err, errlen, "tokenizer: added token id %d has no string", id);
        return -1;
    }
    if (t->is_added[id])
        return 0;
    tok_added *a = realloc(t->added, (size_t)(t->nadded + 1) * sizeof *a);
    if (!a) {
        tok_errf(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    t->added = a;
    a[t->nadded++] = (tok_added){id, t->text[id], t->text_len[id], (unsigned char)(special != 0),
                                 (unsigned char)(lstrip != 0), (unsigned char)(rstrip != 0),
                                 (unsigned char)(single_word != 0)};
    t->is_added[id] = 1;
    t->special[id] = (unsigned char)(special != 0);
    /* an added token decodes to its text, never through the alphabet */
    free(t->piece[id]);
    t->piece[id] = malloc(t->text_len[id] + 1);
    if (!t->piece[id]) {
        tok_errf(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    memcpy(t->piece[id], t->text[id], t->text_len[id] + 1);
    t->piece_len[id] = t->text_len[id];
    return 0;
}

/* Unicode White_Space, which is what Oniguruma's \s (HF's regex engine)
 * matches; PCRE2's \s also takes U+180E (through \h), so patterns are
 * rewritten with this class. */
static const char ws_class[] =
    "\\t\\n\\x0b\\f\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}";

/* The pattern with \s and \S spelled as ws_class; NULL (err set) when it
 * cannot be (\S inside a character class, or no memory). */
static char *rewrite_space(const char *p, size_t len, size_t *out_len, char *err, size_t errlen)
{
    size_t wl = sizeof ws_class - 1, cap = len + 1, o = 0;
    for (size_t i = 0; i + 1 < len; i++)
        if (p[i] == '\\' && (p[i + 1] == 's' || p[i + 1] == 'S'))
            cap += wl + 3;
    char *q = malloc(cap);
    if (!q) {
        tok_errf(err, errlen, "tokenizer: out of memory");
        return NULL;
    }
    int in_class = 0;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < len) {
            char d = p[++i];
            if (d == 's' || d == 'S') {
                if (in_class && d == 'S') {
                    free(q);
                    tok_errf(err, errlen, "tokenizer: \\S inside a character class is not supported");
                    return NULL;
                }
                if (!in_class)
                    q[o++] = '[';
                if (d == 'S')
                    q[o++] = '^';
                memcpy(q + o, ws_class, wl);
                o += wl;
                if (!in_class)
                    q[o++] = ']';
            } else {
                q[o++] = c;
                q[o++] = d;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            q[o++] = c;
            if (i + 1 < len && p[i + 1] == '^')
                q[o++] = p[++i];
            if (i + 1 < len && p[i + 1] == ']')   /* a leading ] is a member */
                q[o++] = p[++i];
            continue;
        }
        if (in_class && c == ']')
            in_class = 0;
        q[o++] = c;
    }
    q[o] = 0;
    *out_len = o;
    return q;
}

static pcre2_code *compile(const char *pattern, size_t len, uint32_t extra, char *err, size_t errlen)
{
    int code;
    PCRE2_SIZE at;
    uint32_t opt = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | extra;
    char *rw = NULL;
    if (!(extra & PCRE2_LITERAL)) {
        opt |= PCRE2_UCP;
        if (!(rw = rewrite_space(pattern, len, &len, err, errlen)))
            return NULL;
        pattern = rw;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opt, &code, &at, NULL);
    free(rw);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        tok_errf(err, errlen, "tokenizer: pre-tokenizer regex does not compile at offset %zu: %s",
                 (size_t)at, (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* the interpreter serves if JIT is absent */
    return re;
}

int tok_add_split(sfm_tokenizer *t, const char *pattern, size_t len, int literal,
                  tok_split_behavior behavior, int invert, char *err, size_t errlen)
{
    if (t->nsteps >= TOK_MAX_STEPS) {
        tok_errf(err, errlen, "tokenizer: more than %d pre-tokenizer steps", TOK_MAX_STEPS);
        return -1;
    }
    pcre2_code *re = compile(pattern, len, literal ? PCRE2_LITERAL : 0, err, errlen);
    if (!re)
        return -1;
    t->steps[t->nsteps++] = (tok_step){TOK_STEP_SPLIT, re, behavior, invert != 0};
    return 0;
}

int tok_add_prefix_space(sfm_tokenizer *t, char *err, size_t errlen)
{
    if (t->nsteps >= TOK_MAX_STEPS) {
        tok_errf(err, errlen, "tokenizer: more than %d pre-tokenizer steps", TOK_MAX_STEPS);
        return -1;
    }
    t->steps[t->nsteps++] = (tok_step){TOK_STEP_PREFIX_SPACE, NULL, TOK_SPLIT_ISOLATED, 0};
    return 0;
}

/* NFC is not implemented: text passes unchanged when NFC cannot change it
 * (no character whose NFC_Quick_Check is No or Maybe, no two non-starters
 * in a row that canonical ordering could swap), else encoding fails with a
 * message instead of guessing. */
int tok_set_nfc(sfm_tokenizer *t, char *err, size_t errlen)
{
    static const char guard[] = "[" TOK_NFC_QC_CLASS "]|[" TOK_NFC_CCC_CLASS "]{2}";
    t->nfc_guard = compile(guard, sizeof guard - 1, 0, err, errlen);
    return t->nfc_guard ? 0 : -1;
}

int tok_set_chat_template(sfm_tokenizer *t, const char *tmpl, size_t len, char *err, size_t errlen)
{
    /* the first literal "<|im_start|>system\n...<|im_end|>" in the template:
     * the message a ChatML template adds when the caller gives none */
    static const char head[] = "<|im_start|>system";
    for (size_t i = 0; i + sizeof head - 1 <= len; i++) {
        if (memcmp(tmpl + i, head, sizeof head - 1) != 0)
            continue;
        size_t p = i + sizeof head - 1;
        if (p < len && tmpl[p] == '\n')
            p += 1;
        else if (p + 1 < len && tmpl[p] == '\\' && tmpl[p + 1] == 'n')
            p += 2;
        else
            continue;
        size_t e = p;
        while (e + 10 <= len && memcmp(tmpl + e, "<|im_end|>", 10) != 0)
            e++;
        if (e + 10 > len)
            return 0;
        int literal = e > p;
        for (size_t k = p; k < e && literal; k++)
            if (tmpl[k] == '\'' || tmpl[k] == '"' || tmpl[k] == '{' || tmpl[k] == '}')
                literal = 0;
        if (!literal)
            continue;
        char *s = malloc(e - p + 1);
        if (!s) {
            tok_errf(err, errlen, "tokenizer: out of memory");
            return -1;
        }
        size_t o = 0;
        for (size_t k = p; k < e; k++) {
            if (tmpl[k] == '\\' && k + 1 < e && tmpl[k + 1] == 'n') {
                s[o++] = '\n';
                k++;
            } else {
                s[o++] = tmpl[k];
            }
        }
        s[o] = 0;
        free(t->system_default);
        t->system_default = s;
        return 0;
    }
    return 0;
}

void sfm_tokenizer_free(sfm_tokenizer *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n; i++) {
        if (t->piece && t->piece[i])
            free(t->piece[i]);
        if (t->text && t->text[i])
            free(t->text[i]);
    }
    free(t->text), free(t->text_len), free(t->piece), free(t->piece_len);
    free(t->special), free(t->is_added), free(t->str_slot);
    free(t->mkey), free(t->mrank), free(t->mnew);
    for (int i = 0; i < t->nsteps; i++)
        pcre2_code_free(t->steps[i].re);
    pcre2_code_free(t->nfc_guard);
    free(t->added);
    free(t->system_default);
    free(t);
}

int sfm_tokenizer_vocab_size(const sfm_tokenizer *t) { return t ? t->n : 0; }
int sfm_tokenizer_bos(const sfm_tokenizer *t) { return t ? t->bos : -1; }
int sfm_tokenizer_eos(const sfm_tokenizer *t) { return t ? t->eos : -1; }
int sfm_tokenizer_add_bos(const sfm_tokenizer *t) { return t && t->bos >= 0 && t->add_bos; }

int sfm_tokenizer_is_special(const sfm_tokenizer *t, int id)
{
    return t && id >= 0 && id < t->n && t->special[id];
}

int sfm_tokenizer_token_id(const sfm_tokenizer *t, const char *token)
{
    if (!t || !token)
        return -1;
    return tok_lookup(t, token, strlen(token));
}

const char *sfm_tokenizer_piece(const sfm_tokenizer *t, int id, size_t *len)
{
    if (!t || id < 0 || id >= t->n || !t->piece[id])
        return NULL;
    if (len)
        *len = t->piece_len[id];
    return t->piece[id];
}

/* Appends s to buf (cap bytes) at *o; counts what does not fit. */
static void put(char *buf, size_t cap, size_t *o, const char *s, size_t len)
{
    if (buf && *o < cap) {
        size_t room = cap - *o, k = len < room ? len : room;
        memcpy(buf + *o, s, k);
    }
    *o += len;
}

size_t sfm_tokenizer_chat_prompt(const sfm_tokenizer *t, const char *user, char *buf, size_t cap)
{
    size_t o = 0;
    if (!user)
        user = "";
    if (t && tok_lookup(t, "<|im_start|>", 12) >= 0 && tok_lookup(t, "<|im_end|>", 10) >= 0) {
        if (t->system_default) {
            put(buf, cap, &o, "<|im_start|>system\n", 19);
            put(buf, cap, &o, t->system_default, strlen(t->system_default));
            put(buf, cap, &o, "<|im_end|>\n", 11);
        }
        put(buf, cap, &o, "<|im_start|>user\n", 17);
        put(buf, cap, &o, user, strlen(user));
        put(buf, cap, &o, "<|im_end|>\n<|im_start|>assistant\n", 33);
    } else if (t && tok_lookup(t, "<|start_header_id|>", 19) >= 0) {
        put(buf, cap, &o, "<|start_header_id|>user<|end_header_id|>\n\n", 42);
        put(buf, cap, &o, user, strlen(user));
        put(buf, cap, &o, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", 57);
    } else {
        put(buf, cap, &o, user, strlen(user));
    }
    if (buf && cap > 0)
        buf[o < cap ? o : cap - 1] = 0;
    return o;
}
