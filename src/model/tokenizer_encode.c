/* The encoder: added tokens, the pre-tokenizer steps, BPE merges by rank.
 * All scratch memory belongs to one call (a tokenizer is read-only after
 * loading, so threads may share it); words repeat, so each call keeps a
 * cache of the short words it has merged. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

typedef struct range { size_t off, len; } range;

typedef struct sym { int32_t id, prev, next; } sym;   /* id -1: merged away */

typedef struct cache_entry { uint64_t h; uint32_t koff, klen, ioff, in; } cache_entry;

#define CACHE_SLOTS 16384   /* words a call remembers (a 1 MB text has ~20k distinct) */
#define CACHE_MAX_WORD 48   /* longer words are rare and merged each time */
#define CACHE_MIN_TEXT 4096 /* a shorter text repeats too few words to pay for the table */

typedef struct enc {
    const sfm_tokenizer *t;
    int32_t *ids;
    int64_t cap, count;
    char *err;
    size_t errlen;
    range *ra, *rb;                      /* pieces before / after a step */
    size_t na, nb, rcap_a, rcap_b;
    char *pbuf;                          /* text with prefix spaces       */
    size_t pcap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *js;
    sym *sym;                            /* BPE symbols, a linked list    */
    int32_t *out;                        /* a word's ids                  */
    int64_t *heap;                       /* (rank << 32) | position       */
    size_t scap, ocap, hcap;
    char *alpha;                         /* a word in the GPT-2 alphabet  */
    size_t acap;
    cache_entry *cache;
    char *karena;
    int32_t *iarena;
    size_t kuse, kcap, iuse, icap, cused;
} enc;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > (SIZE_MAX / 2) / elem)
            return -1;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int oom(enc *e)
{
    tok_errf(e->err, e->errlen, "tokenizer: out of memory while encoding");
    return -1;
}

static void emit(enc *e, int32_t id)
{
    if (e->count < e->cap)
        e->ids[e->count] = id;
    e->count++;
}

static int push_range(enc *e, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    if (grow((void **)&e->rb, &e->rcap_b, e->nb + 1, sizeof(range)) != 0)
        return oom(e);
    e->rb[e->nb++] = (range){off, len};
    return 0;
}

/* One regex step over one piece: the matches and the gaps between them, then
 * HF's delimiter behaviour. Matching sees the piece alone, as HF's does
 * (a lookahead stops at the piece's end). */
static int split_piece(enc *e, const tok_step *st, const char *base, range r)
{
    const char *s = base + r.off;
    size_t pos = 0, from = 0, pend = (size_t)-1;   /* pend: start of a part held back */
    int pend_is_match = 0;
    for (;;) {
        size_t ms = r.len, me = r.len;
        while (from < r.len) {
            int rc = pcre2_match(st->re, (PCRE2_SPTR)s, r.len, from, 0, e->md, e->mctx);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(st->re, (PCRE2_SPTR)s, r.len, from, PCRE2_NO_JIT, e->md, e->mctx);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                PCRE2_UCHAR msg[120];
                pcre2_get_error_message(rc, msg, sizeof msg);
                tok_errf(e->err, e->errlen, "tokenizer: regex match failed: %s", (const char *)msg);
                return -1;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
            if (ov[1] > ov[0]) {
                ms = ov[0], me = ov[1];
                break;
            }
            /* an empty match splits nothing: search again one character on */
            from = ov[0] + 1;
            while (from < r.len && ((unsigned char)s[from] & 0xC0) == 0x80)
                from++;
        }
        /* parts: gap [pos, ms) then match [ms, me) */
        for (int part = 0; part < 2; part++) {
            size_t a = part ? ms : pos, b = part ? me : ms;
            if (b <= a)
                continue;
            int is_match = part ^ st->invert;
            switch (st->behavior) {
            case TOK_SPLIT_ISOLATED:
                if (push_range(e, r.off + a, b - a) != 0)
                    return -1;
                break;
            case TOK_SPLIT_REMOVED:
                if (!is_match && push_range(e, r.off + a, b - a) != 0)
                    return -1;
                break;
            case TOK_SPLIT_MERGED_PREV:   /* a delimiter closes the part before it */
                if (is_match) {
                    size_t st0 = pend != (size_t)-1 ? pend : a;
                    if (push_range(e, r.off + st0, b - st0) != 0)
                        return -1;
                    pend = (size_t)-1;
                } else {
                    if (pend != (size_t)-1 && push_range(e, r.off + pend, a - pend) != 0)
                        return -1;
                    pend = a;
                }
                break;
            case TOK_SPLIT_MERGED_NEXT:   /* a delimiter opens the part after it */
                if (is_match) {
                    if (pend != (size_t)-1 && push_range(e, r.off + pend, a - pend) != 0)
                        return -1;
                    pend = a;
                } else {
                    size_t st0 = pend != (size_t)-1 ? pend : a;
                    if (push_range(e, r.off + st0, b - st0) != 0)
                        return -1;
                    pend = (size_t)-1;
                }
                break;
            case TOK_SPLIT_CONTIGUOUS:    /* adjacent delimiters form one part */
                if (is_match) {
                    if (pend == (size_t)-1 || !pend_is_match) {
                        if (pend != (size_t)-1 && push_range(e, r.off + pend, a - pend) != 0)
                            return -1;
                        pend = a;
                    }
                    pend_is_match = 1;
                } else {
                    if (pend != (size_t)-1 && push_range(e, r.off + pend, a - pend) != 0)
                        return -1;
                    pend = a;
                    pend_is_match = 0;
                }
                break;
            }
        }
        if (ms >= r.len)
            break;
        pos = from = me;
    }
    if (pend != (size_t)-1 && push_range(e, r.off + pend, r.len - pend) != 0)
        return -1;
    return 0;
}

/* ByteLevel add_prefix_space: a copy of the pieces, each starting with " ". */
static int prefix_space(enc *e, const char **base)
{
    size_t need = 0;
    for (size_t i = 0; i < e->na; i++)
        need += e->ra[i].len + 1;
    char *old = e->pbuf;
    char *nb = malloc(need ? need : 1);
    if (!nb)
        return oom(e);
    size_t o = 0;
    for (size_t i = 0; i < e->na; i++) {
        const char *p = *base + e->ra[i].off;
        size_t start = o;
        if (p[0] != ' ')
            nb[o++] = ' ';
        memcpy(nb + o, p, e->ra[i].len);
        o += e->ra[i].len;
        if (push_range(e, start, o - start) != 0) {
            free(nb);
            return -1;
        }
    }
    free(old);
    e->pbuf = nb;
    e->pcap = need;
    *base = nb;
    return 0;
}

static int heap_less(int64_t a, int64_t b) { return a < b; }

static void heap_push(int64_t *h, size_t *n, int64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(v, h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static int64_t heap_pop(int64_t *h, size_t *n)
{
    int64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && heap_less(h[c + 1], h[c]))
            c++;
        if (!heap_less(h[c], v))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = v;
    return top;
}

/* The merges of one word, lowest rank first, leftmost among equal ranks:
 * heap entries are (rank, position) and stale ones are skipped on pop. */
static int bpe_word(enc *e, const unsigned char *w, size_t n, int32_t *cnt_out)
{
    const sfm_tokenizer *t = e->t;
    if (n >= (size_t)INT32_MAX) {   /* positions are int32 in the heap entries */
        tok_errf(e->err, e->errlen, "tokenizer: a pre-tokenized word of %zu bytes is too long", n);
        return -1;
    }
    if (grow((void **)&e->sym, &e->scap, n, sizeof(sym)) != 0 || grow((void **)&e->out, &e->ocap, n, sizeof(int32_t)) != 0)
        return oom(e);
    if (grow((void **)&e->heap, &e->hcap, 3 * n + 1, sizeof(int64_t)) != 0)
        return oom(e);
    sym *y = e->sym;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id >= 0)   /* a byte without a token is dropped, as HF drops an unknown char */
            y[m++].id = id;
    }
    for (size_t i = 0; i < m; i++) {
        y[i].prev = (int32_t)i - 1;
        y[i].next = i + 1 < m ? (int32_t)(i + 1) : -1;
    }
    size_t hn = 0;
    int32_t nw;
    for (size_t i = 0; i + 1 < m; i++) {
        int rk = tok_merge_rank(t, y[i].id, y[i + 1].id, &nw);
        if (rk >= 0)
            heap_push(e->heap, &hn, ((int64_t)rk << 32) | (int64_t)i);
    }
    while (hn > 0) {
        int64_t top = heap_pop(e->heap, &hn);
        int32_t rk = (int32_t)(top >> 32), pos = (int32_t)(top & 0xFFFFFFFF);
        if (y[pos].id < 0 || y[pos].next < 0)
            continue;
        int32_t nx = y[pos].next;
        if (tok_merge_rank(t, y[pos].id, y[nx].id, &nw) != rk)
            continue;   /* the pair changed since this entry was pushed */
        y[pos].id = nw;
        y[nx].id = -1;
        y[pos].next = y[nx].next;
        if (y[nx].next >= 0)
            y[y[nx].next].prev = pos;
        int32_t pv = y[pos].prev;
        if (pv >= 0 && (rk = tok_merge_rank(t, y[pv].id, y[pos].id, &nw)) >= 0)
            heap_push(e->heap, &hn, ((int64_t)rk << 32) | (int64_t)pv);
        if (y[pos].next >= 0 && (rk = tok_merge_rank(t, y[pos].id, y[y[pos].next].id, &nw)) >= 0)
            heap_push(e->heap, &hn, ((int64_t)rk << 32) | (int64_t)pos);
    }
    /* the survivors, in order, packed into ids_out (symbol 0 always survives) */
    int32_t c = 0;
    for (int32_t i = m ? 0 : -1; i >= 0; i = y[i].next)
        e->out[c++] = y[i].id;
    *cnt_out = c;
    return 0;
}

static int word(enc *e, const unsigned char *w, size_t n)
{
    const sfm_tokenizer *t = e->t;
    if (t->ignore_merges) {   /* a word that is a token is that token, merges or not */
        if (grow((void **)&e->alpha, &e->acap, 2 * n, 1) != 0)
            return oom(e);
        size_t o = 0;
        for (size_t i = 0; i < n; i++)
            o += (size_t)tok_byte_utf8(w[i], e->alpha + o);
        int id = tok_lookup(t, e->alpha, o);
        if (id >= 0) {
            emit(e, id);
            return 0;
        }
    }
    uint64_t h = 0;
    size_t slot = 0;
    int cacheable = n <= CACHE_MAX_WORD && e->cache;
    if (cacheable) {
        h = 1469598103934665603ull;
        for (size_t i = 0; i < n; i++)
            h = (h ^ w[i]) * 1099511628211ull;
        for (slot = (size_t)h & (CACHE_SLOTS - 1);; slot = (slot + 1) & (CACHE_SLOTS - 1)) {
            cache_entry *c = &e->cache[slot];
            if (c->klen == 0)
                break;
            if (c->h == h && c->klen == n && memcmp(e->karena + c->koff, w, n) == 0) {
                for (uint32_t k = 0; k < c->in; k++)
                    emit(e, e->iarena[c->ioff + k]);
                return 0;
            }
        }
    }
    int32_t cnt;
    if (bpe_word(e, w, n, &cnt) != 0)
        return -1;
    for (int32_t k = 0; k < cnt; k++)
        emit(e, e->out[k]);
    if (cacheable && e->cused < CACHE_SLOTS / 2) {
        if (grow((void **)&e->karena, &e->kcap, e->kuse + n, 1) != 0 ||
            grow((void **)&e->iarena, &e->icap, e->iuse + (size_t)cnt, sizeof(int32_t)) != 0)
            return oom(e);
        memcpy(e->karena + e->kuse, w, n);
        if (cnt > 0)   /* a word of bytes without tokens has none */
            memcpy(e->iarena + e->iuse, e->out, (size_t)cnt * sizeof(int32_t));
        e->cache[slot] = (cache_entry){h, (uint32_t)e->kuse, (uint32_t)n, (uint32_t)e->iuse, (uint32_t)cnt};
        e->kuse += n;
        e->iuse += (size_t)cnt;
        e->cused++;
    }
    return 0;
}

/* A stretch of text without added tokens: the pre-tokenizer, then BPE. */
static int segment(enc *e, const char *s, size_t len)
{
    const sfm_tokenizer *t = e->t;
    if (len == 0)
        return 0;
    if (t->nfc_guard) {
        int rc = pcre2_match(t->nfc_guard, (PCRE2_SPTR)s, len, 0, 0, e->md, e->mctx);
        size_t at = rc >= 0 ? pcre2_get_ovector_pointer(e->md)[0] : 0;
        if (rc >= 0) {
            tok_errf(e->err, e->errlen, "tokenizer: the model normalises text to NFC, which is not "
                     "implemented for the character at byte %zu of this text", at);
            return -1;
        }
    }
    const char *base = s;
    e->na = 0;
    if (grow((void **)&e->ra, &e->rcap_a, 1, sizeof(range)) != 0)
        return oom(e);
    e->ra[e->na++] = (range){0, len};
    for (int k = 0; k < t->nsteps; k++) {
        const tok_step *st = &t->steps[k];
        e->nb = 0;
        if (st->kind == TOK_STEP_PREFIX_SPACE) {
            if (prefix_space(e, &base) != 0)
                return -1;
        } else {
            for (size_t i = 0; i < e->na; i++)
                if (split_piece(e, st, base, e->ra[i]) != 0)
                    return -1;
        }
        range *tr = e->ra;
        size_t tc = e->rcap_a;
        e->ra = e->rb, e->rcap_a = e->rcap_b, e->na = e->nb;
        e->rb = tr, e->rcap_b = tc;
    }
    for (size_t i = 0; i < e->na; i++)
        if (word(e, (const unsigned char *)base + e->ra[i].off, e->ra[i].len) != 0)
            return -1;
    return 0;
}

/* Bytes of the White_Space character (Rust's char::is_whitespace, which HF's
 * lstrip / rstrip use) that starts at s[i], or 0. */
static size_t space_at(const unsigned char *s, size_t i, size_t len)
{
    if (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))
        return 1;
    uint32_t c = 0;
    size_t n = 0;
    if (s[i] == 0xC2 && i + 1 < len)
        c = s[i + 1], n = 2;   /* U+0085, U+00A0 */
    else if ((s[i] == 0xE1 || s[i] == 0xE2 || s[i] == 0xE3) && i + 2 < len)
        c = ((uint32_t)(s[i] & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F), n = 3;
    int ws = c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
             c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
    return ws ? n : 0;
}

/* The same for the character that ends just before s[i] (not before lo). */
static size_t space_before(const unsigned char *s, size_t lo, size_t i, size_t len)
{
    for (size_t n = 1; n <= 3 && n <= i - lo; n++)
        if (space_at(s, i - n, len) == n)
            return n;
    return 0;
}
static int is_word(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

static int cmp_added(const void *a, const void *b)
{
    const tok_added *x = a, *y = b;
    unsigned char cx = (unsigned char)x->s[0], cy = (unsigned char)y->s[0];
    if (cx != cy)
        return cx < cy ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int tok_finish(sfm_tokenizer *t, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    if (t->nadded > 1)
        qsort(t->added, (size_t)t->nadded, sizeof *t->added, cmp_added);
    int k = 0;
    for (int b = 0; b < 256; b++) {
        t->added_start[b] = k;
        while (k < t->nadded && (unsigned char)t->added[k].s[0] == b)
            k++;
    }
    t->added_start[256] = k;
    return 0;
}

int64_t sfm_tokenizer_encode(const sfm_tokenizer *t, const char *text, size_t len, int parse_special,
                             int32_t *ids, int64_t cap, char *err, size_t errlen)
{
    if (!t || (!text && len > 0) || cap < 0 || (!ids && cap > 0)) {
        tok_errf(err, errlen, "tokenizer: encode needs a tokenizer, text and an id buffer");
        return -1;
    }
    enc e = {.t = t, .ids = ids, .cap = cap, .err = err, .errlen = errlen};
    int rc = 0;
    e.md = pcre2_match_data_create(4, NULL);
    e.mctx = pcre2_match_context_create(NULL);
    e.js = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (len > CACHE_MIN_TEXT)
        e.cache = calloc(CACHE_SLOTS, sizeof *e.cache);   /* NULL: words are merged each time */
    if (!e.md || !e.mctx) {
        rc = oom(&e);
        goto done;
    }
    if (e.js)
        pcre2_jit_stack_assign(e.mctx, NULL, e.js);
    size_t seg = 0, i = 0;
    while (i < len && rc == 0) {
        unsigned char c = (unsigned char)text[i];
        const tok_added *hit = NULL;
        for (int k = t->added_start[c]; k < t->added_start[c + 1]; k++) {
            const tok_added *a = &t->added[k];
            if ((a->special && !parse_special) || a->len > len - i || memcmp(text + i, a->s, a->len) != 0)
                continue;
            if (a->single_word && ((i > 0 && is_word((unsigned char)text[i - 1])) ||
                                   (i + a->len < len && is_word((unsigned char)text[i + a->len]))))
                continue;
            hit = a;
            break;
        }
        if (!hit) {
            i++;
            continue;
        }
        const unsigned char *u = (const unsigned char *)text;
        size_t start = i, end = i + hit->len, k;
        if (hit->lstrip)
            while (start > seg && (k = space_before(u, seg, start, len)) > 0)
                start -= k;
        if (hit->rstrip)
            while (end < len && (k = space_at(u, end, len)) > 0)
                end += k;
        rc = segment(&e, text + seg, start - seg);
        emit(&e, hit->id);
        seg = i = end;
    }
    if (rc == 0)
        rc = segment(&e, text + seg, len - seg);
done:
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mctx);
    pcre2_jit_stack_free(e.js);
    free(e.ra), free(e.rb), free(e.pbuf), free(e.sym), free(e.out), free(e.heap);
    free(e.alpha), free(e.cache), free(e.karena), free(e.iarena);
    return rc == 0 ? e.count : -1;
}
