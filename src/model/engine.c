/* engine.c - the public engine (seqfuse.h, "The engine"): checkpoint,
 * tokenizer, model and paged KV cache, and the generation loop.
 *
 * The loop, until every prompt has finished:
 *   1. admit waiting prompts while a sequence slot and the pages of their
 *      prompt are free, and prefill them together (one forward pass); each
 *      gets its first token from the prefill's logits;
 *   2. decode every live sequence one token (one forward pass), a page
 *      taken whenever a sequence crosses into a new one.
 * A sequence that finishes gives back its slot and pages at once, so a
 * waiting prompt joins at the next step (continuous batching).
 *
 * On a CUDA device the decode step stays on the device (step.c): the batch
 * is padded to a bucket (1, 2, 4, ... max_seqs) with harmless rows (length
 * 0, a scratch page, a free state slot; their tokens are not sampled), the
 * step's arrays go up in one copy, sampling runs there too (sf_sample with
 * each slot's RNG state and seen marks), and only the tokens come back.
 * With use_graphs, each bucket's step is captured into a CUDA graph the
 * second time the bucket runs (the first, direct run makes cuBLAS's handle,
 * sizes the workspace and settles the autotuner's choices) and replayed
 * after.  The CPU runs the same step unpadded and without graphs.  Where
 * sf_embed cannot serve (sfm_step_create says so) the host looks the
 * embeddings up; where sf_sample cannot, the host samples from the logits
 * copied back (src/model/sample.c).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "graph.h"
#include "model.h"
#include "sample.h"
#include "tokenizer.h"

struct sf_engine {
    sf_ctx *ctx;
    sfm_checkpoint *ck;
    sfm_tokenizer *tok;          /* NULL when the checkpoint has none */
    sfm_model *m;
    sf_engine_options o;
    int V, page_size, max_pages;
    int64_t num_pages;
    int32_t *free_pages;         /* stack of free page numbers */
    int64_t nfree;
    float *logits;               /* host (max_seqs, V) */
    sfm_sampler sm;
    int dev_step;                /* the decode step on the device (step.c)   */
    int dev_sample;              /* ... its sampling too (else on the host)  */
    void *stream;                /* the context's stream on CUDA (owned)     */
    sf_graph *graphs[32];        /* per bucket min(2^k, max_seqs)             */
    unsigned char warmed[32];    /* the bucket ran once directly              */
    int graphs_gen;              /* the model's rows_gen they were captured at */
    char desc[256];
    char err[512];
};

static sf_status efail(sf_engine *e, sf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    return s;
}

void sf_engine_options_init(sf_engine_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->device = SF_DEVICE_CPU;
    o->use_graphs = 1;
}

void sf_sampling_init(sf_sampling *s) {
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
    s->max_new_tokens = 64;
}

static void drop_graphs(sf_engine *e) {
    for (int k = 0; k < 32; k++) {
        sf_graph_destroy(e->graphs[k]);
        e->graphs[k] = NULL;
        e->warmed[k] = 0;
    }
}

void sf_engine_destroy(sf_engine *e) {
    if (!e) return;
    drop_graphs(e);
    sfm_model_destroy(e->m);
    sfm_tokenizer_free(e->tok);
    sfm_checkpoint_close(e->ck);
    if (e->ctx && e->stream) sf_ctx_synchronize(e->ctx);
    sf_ctx_destroy(e->ctx);
    sf_cuda_stream_delete(e->stream);
    sfm_sampler_free(&e->sm);
    free(e->free_pages);
    free(e->logits);
    free(e);
}

sf_status sf_engine_create(const char *path, const sf_engine_options *opts, sf_engine **out, char *err,
                           size_t errlen) {
    char tmp[512];
    if (!err || !errlen) err = tmp, errlen = sizeof tmp;
    err[0] = 0;
    if (!out) return SF_ERR_NULL_POINTER;
    *out = NULL;
    if (!path) {
        snprintf(err, errlen, "sf_engine_create: path is NULL");
        return SF_ERR_NULL_POINTER;
    }
    sf_engine *e = calloc(1, sizeof *e);
    if (!e) return SF_ERR_OUT_OF_MEMORY;
    if (opts) e->o = *opts;
    else sf_engine_options_init(&e->o);
    sf_engine_options *o = &e->o;
    sf_status st;
    if (o->max_seqs < 0 || o->max_seq_len < 0 || o->page_size < 0 || o->threads < 0) {
        snprintf(err, errlen, "sf_engine_create: negative option (max_seqs %d, max_seq_len %d, page_size %d, threads %d)",
                 o->max_seqs, o->max_seq_len, o->page_size, o->threads);
        st = SF_ERR_INVALID_ARG;
        goto bad;
    }
    if ((st = sf_ctx_create(&e->ctx, o->device)) != SF_OK) {
        snprintf(err, errlen, "sf_engine_create: no context on device %d: %s", o->device, sf_status_string(st));
        goto bad;
    }
    if (o->threads > 0 && (st = sf_ctx_set_threads(e->ctx, o->threads)) != SF_OK) {
        snprintf(err, errlen, "sf_engine_create: %s", sf_ctx_last_error(e->ctx));
        goto bad;
    }
    /* a stream of its own: the legacy one cannot be captured into a graph */
    if (o->device >= 0 && ((st = sf_cuda_stream_new(e->ctx, &e->stream)) != SF_OK ||
                           (st = sf_ctx_set_stream(e->ctx, e->stream)) != SF_OK)) {
        snprintf(err, errlen, "sf_engine_create: %s", sf_ctx_last_error(e->ctx));
        goto bad;
    }
    if ((st = sfm_checkpoint_open(path, &e->ck, err, errlen)) != SF_OK) goto bad;
    const sfm_config *c = sfm_checkpoint_config(e->ck);
    e->V = c->vocab_size;
    if (!o->max_seqs) o->max_seqs = 8;
    if (!o->max_seq_len) o->max_seq_len = c->max_position > 0 && c->max_position < 2048 ? c->max_position : 2048;
    if (!o->page_size) o->page_size = 16;
    if (o->page_size > 256 || (o->page_size & (o->page_size - 1))) {
        snprintf(err, errlen, "sf_engine_create: page_size %d is not a power of two up to 256", o->page_size);
        st = SF_ERR_INVALID_ARG;
        goto bad;
    }
    if (o->max_seq_len < 2) {
        snprintf(err, errlen, "sf_engine_create: max_seq_len %d leaves no room to generate", o->max_seq_len);
        st = SF_ERR_INVALID_ARG;
        goto bad;
    }
    e->page_size = o->page_size;
    e->max_pages = (o->max_seq_len + o->page_size - 1) / o->page_size;
    e->num_pages = (int64_t)o->max_seqs * e->max_pages;
    if ((st = sfm_model_create(e->ctx, e->ck, o->dtype, o->dequantize, e->page_size, e->num_pages, o->max_seqs, e->max_pages,
                               &e->m, err, errlen)) != SF_OK)
        goto bad;
    /* a checkpoint without a tokenizer still runs on ids */
    char terr[256];
    if (sfm_tokenizer_open(e->ck, &e->tok, terr, sizeof terr) != SF_OK) e->tok = NULL;
    e->free_pages = malloc((size_t)e->num_pages * sizeof(int32_t));
    e->logits = malloc((size_t)o->max_seqs * (size_t)e->V * sizeof(float));
    if (!e->free_pages || !e->logits || !sfm_sampler_init(&e->sm, e->V)) {
        snprintf(err, errlen, "sf_engine_create: out of host memory");
        st = SF_ERR_OUT_OF_MEMORY;
        goto bad;
    }
    {
        st = sfm_step_create(e->m, err, errlen);
        if (st == SF_ERR_UNSUPPORTED) { /* sf_embed / sf_sample cannot serve here: the host path */
            err[0] = 0;
            st = SF_OK;
        } else if (st != SF_OK) {
            goto bad;
        } else {
            e->dev_step = 1;
            e->dev_sample = e->m->dev_sample;
        }
    }
    for (int64_t i = 0; i < e->num_pages; i++) e->free_pages[i] = (int32_t)(e->num_pages - 1 - i);
    e->nfree = e->num_pages;
    snprintf(e->desc, sizeof e->desc, "%s, %d layers, hidden %d, heads %d/%d, ffn %d, vocab %d, %s%s, %s",
             sfm_arch_name(c->arch), c->num_layers, c->hidden_size, c->num_heads, c->num_kv_heads,
             c->intermediate_size, c->vocab_size, sfm_checkpoint_is_gguf(e->ck) ? "gguf" : "safetensors",
             sfm_checkpoint_is_gguf(e->ck) && o->dequantize ? " (dequantised)" : "", sf_dtype_name(o->dtype));
    *out = e;
    return SF_OK;
bad:
    sf_engine_destroy(e);
    return st;
}

const char *sf_engine_last_error(const sf_engine *e) { return e ? e->err : "engine is NULL"; }
int sf_engine_vocab_size(const sf_engine *e) { return e ? e->V : 0; }
int sf_engine_bos(const sf_engine *e) {
    if (!e) return -1;
    return e->tok ? sfm_tokenizer_bos(e->tok) : sfm_checkpoint_config(e->ck)->bos_token_id;
}
int sf_engine_eos(const sf_engine *e) {
    if (!e) return -1;
    return sfm_checkpoint_config(e->ck)->eos_token_id >= 0 ? sfm_checkpoint_config(e->ck)->eos_token_id
           : e->tok                                         ? sfm_tokenizer_eos(e->tok)
                                                            : -1;
}
const char *sf_engine_describe(const sf_engine *e) { return e ? e->desc : ""; }
int64_t sf_engine_weight_bytes(const sf_engine *e) { return e ? e->m->weight_bytes : 0; }
int64_t sf_engine_kv_bytes(const sf_engine *e) { return e ? e->m->kv_bytes : 0; }

int64_t sf_engine_tokenize(sf_engine *e, const char *text, int chat, int add_bos, int32_t *ids, int64_t cap) {
    if (!e) return -1;
    if (!text || (cap > 0 && !ids) || cap < 0) return efail(e, SF_ERR_NULL_POINTER, "sf_engine_tokenize: NULL text or ids"), -1;
    if (!e->tok) return efail(e, SF_ERR_UNSUPPORTED, "sf_engine_tokenize: the checkpoint has no tokenizer"), -1;
    char *buf = NULL;
    const char *src = text;
    size_t len = strlen(text);
    if (chat) {
        const size_t need = sfm_tokenizer_chat_prompt(e->tok, text, NULL, 0);
        buf = malloc(need + 1);
        if (!buf) return efail(e, SF_ERR_OUT_OF_MEMORY, "sf_engine_tokenize: out of memory"), -1;
        sfm_tokenizer_chat_prompt(e->tok, text, buf, need + 1);
        src = buf, len = need;
    }
    const int bos = add_bos ? sfm_tokenizer_bos(e->tok) : -1;
    const int64_t off = bos >= 0 ? 1 : 0;
    if (bos >= 0 && cap > 0) ids[0] = bos;
    const int64_t n = sfm_tokenizer_encode(e->tok, src, len, chat, cap > off ? ids + off : NULL,
                                           cap > off ? cap - off : 0, e->err, sizeof e->err);
    free(buf);
    return n < 0 ? -1 : n + off;
}

const char *sf_engine_token_piece(const sf_engine *e, int id, size_t *len) {
    if (!e || !e->tok || !len) return NULL;
    return sfm_tokenizer_piece(e->tok, id, len);
}

/* ------------------------------------------------------------------ */
/* generation                                                          */
/* ------------------------------------------------------------------ */

enum { ST_WAIT = 0, ST_LIVE, ST_DONE };

typedef struct seq {
    int state, slot;
    int64_t cached;           /* tokens in the KV cache              */
    int32_t *hist;            /* prompt then output                  */
    int64_t nhist;
    int32_t *pages;           /* max_pages                           */
    int npages;
    uint64_t rng;
    char *text;               /* output text (stop strings)         */
    size_t ntext, captext;
} seq;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Pages for `tokens` tokens of q; 0 when too few are free (nothing taken). */
static int grow_pages(sf_engine *e, seq *q, int64_t tokens) {
    const int want = (int)((tokens + e->page_size - 1) / e->page_size);
    if (want > e->max_pages || want - q->npages > e->nfree) return 0;
    while (q->npages < want) q->pages[q->npages++] = e->free_pages[--e->nfree];
    return 1;
}

static void leave(sf_engine *e, seq *q, sf_generation *g, sf_finish why, int *slot_used) {
    while (q->npages > 0) e->free_pages[e->nfree++] = q->pages[--q->npages];
    slot_used[q->slot] = 0;
    q->state = ST_DONE;
    g->finish = why;
}

/* Records token t of sequence i; returns 1 when the sequence has ended. */
static int emit(sf_engine *e, seq *q, sf_generation *g, int i, int32_t t, const float *logits,
                const sf_sampling *s, sf_token_fn cb, void *user, int *slot_used) {
    q->hist[q->nhist++] = t;
    if (g->tokens) g->tokens[g->ntokens] = t;
    g->ntokens++;
    int stop_cb = cb ? cb(user, i, t, logits, e->V) : 0;
    if (!s->ignore_eos && t == sf_engine_eos(e)) return leave(e, q, g, SF_FINISH_EOS, slot_used), 1;
    if (s->nstop > 0 && e->tok) {
        size_t pl = 0;
        const char *pc = sfm_tokenizer_piece(e->tok, t, &pl);
        if (pc && pl) {
            if (q->ntext + pl + 1 > q->captext) {
                size_t nc = (q->captext ? q->captext * 2 : 256) + pl;
                char *nt = realloc(q->text, nc);
                if (nt) q->text = nt, q->captext = nc;
            }
            if (q->ntext + pl + 1 <= q->captext) {
                memcpy(q->text + q->ntext, pc, pl);
                q->ntext += pl;
                q->text[q->ntext] = 0;
            }
        }
        for (int k = 0; k < s->nstop; k++) {
            const size_t sl = strlen(s->stop[k]);
            if (!sl || !q->text) continue;
            const size_t from = q->ntext > sl + pl ? q->ntext - sl - pl : 0;
            if (strstr(q->text + from, s->stop[k])) return leave(e, q, g, SF_FINISH_STOP, slot_used), 1;
        }
    }
    if (stop_cb) return leave(e, q, g, SF_FINISH_CALLBACK, slot_used), 1;
    if (g->ntokens >= s->max_new_tokens || q->nhist >= e->o.max_seq_len)
        return leave(e, q, g, SF_FINISH_LENGTH, slot_used), 1;
    return 0;
}

static int o_cpu(const sf_engine *e) { return e->o.device == SF_DEVICE_CPU; }

/* One decode step of the nb live sequences batch[] on the device: the step
 * arrays of the live rows, then padding rows up to the bucket (token 0 at
 * length 0 in the scratch page, each in a distinct free state slot: what
 * they append and update nobody reads), the step directly or through the
 * bucket's graph, and the live rows' tokens into m->tok_h (with
 * want_logits, their logits into e->logits first; without dev_sample only
 * those, for the host's sampler). */
static sf_status decode_device(sf_engine *e, seq *qs, const int *batch, int nb, const int *slot_used,
                               const sf_sampling *s, int want_logits) {
    sfm_model *m = e->m;
    const int MS = e->o.max_seqs, MP = e->max_pages;
    int k = 0;
    while ((1 << k) < nb) k++;
    const int rows = o_cpu(e) ? nb : (1 << k) < MS ? (1 << k) : MS; /* the CPU pads nothing */
    int32_t *ids = sfm_step_ids(m), *pos = sfm_step_pos(m), *len = sfm_step_len(m), *clen = sfm_step_clen(m);
    int32_t *sl = sfm_step_slots(m), *bt = sfm_step_bt(m);
    for (int b = 0; b < nb; b++) {
        const seq *q = &qs[batch[b]];
        ids[b] = q->hist[q->nhist - 1];
        pos[b] = clen[b] = (int32_t)q->cached;
        len[b] = (int32_t)q->cached + 1;
        sl[b] = q->slot;
        for (int j = 0; j < MP; j++) bt[(size_t)b * MP + j] = j < q->npages ? q->pages[j] : m->scratch_page;
    }
    for (int b = nb, free_slot = 0; b < rows; b++) {
        while (slot_used[free_slot]) free_slot++; /* rows <= MS: enough free slots */
        ids[b] = pos[b] = len[b] = clen[b] = 0;
        sl[b] = free_slot++;
        for (int j = 0; j < MP; j++) bt[(size_t)b * MP + j] = m->scratch_page;
    }
    sf_graph **g = NULL;
    if (e->o.use_graphs && !o_cpu(e)) {
        if (e->graphs_gen != m->rows_gen) { /* the activations moved: the graphs point at freed buffers */
            drop_graphs(e);
            e->graphs_gen = m->rows_gen;
        }
        if (e->warmed[k]) g = &e->graphs[k];
        e->warmed[k] = 1;
    }
    sf_status st = sfm_step_decode(m, rows, g, e->err, sizeof e->err);
    if (st == SF_OK && want_logits) st = sfm_model_logits_host(m, nb, e->logits, e->err, sizeof e->err);
    if (st == SF_OK && e->dev_sample)
        st = sfm_step_sample(m, nb, (char *)m->step_d + 4 * (size_t)MS * 4, s, e->err, sizeof e->err);
    return st;
}

sf_status sf_engine_generate(sf_engine *e, sf_generation *gens, int n, const sf_sampling *sp, sf_token_fn cb,
                             void *user, sf_engine_stats *stats) {
    if (!e) return SF_ERR_NULL_POINTER;
    e->err[0] = 0;
    if (n < 0 || (n > 0 && !gens)) return efail(e, SF_ERR_INVALID_ARG, "sf_engine_generate: %d prompts, gens %p", n, (void *)gens);
    sf_sampling s;
    if (sp) s = *sp;
    else sf_sampling_init(&s);
    if (s.max_new_tokens < 1) return efail(e, SF_ERR_INVALID_ARG, "sf_engine_generate: max_new_tokens %d < 1", s.max_new_tokens);
    if (!(s.temperature >= 0) || s.top_k < 0 || !(s.top_p > 0 && s.top_p <= 1) || !(s.min_p >= 0 && s.min_p <= 1) ||
        !(s.repetition_penalty > 0))
        return efail(e, SF_ERR_INVALID_ARG,
                     "sf_engine_generate: sampling out of range (temperature %g >= 0, top_k %d >= 0, top_p %g in (0, 1], "
                     "min_p %g in [0, 1], repetition_penalty %g > 0)",
                     (double)s.temperature, s.top_k, (double)s.top_p, (double)s.min_p, (double)s.repetition_penalty);
    if (s.nstop < 0 || (s.nstop > 0 && !s.stop)) return efail(e, SF_ERR_INVALID_ARG, "sf_engine_generate: nstop %d without stop strings", s.nstop);
    for (int k = 0; k < s.nstop; k++)
        if (!s.stop[k]) return efail(e, SF_ERR_NULL_POINTER, "sf_engine_generate: stop[%d] is NULL", k);
    if (s.nstop > 0 && !e->tok) return efail(e, SF_ERR_UNSUPPORTED, "sf_engine_generate: stop strings need a tokenizer");
    for (int i = 0; i < n; i++) {
        gens[i].ntokens = 0, gens[i].finish = SF_FINISH_LENGTH;
        if (!gens[i].prompt || gens[i].prompt_len < 1)
            return efail(e, SF_ERR_INVALID_ARG, "sf_engine_generate: prompt %d is empty", i);
        if (gens[i].prompt_len > e->o.max_seq_len - 1)
            return efail(e, SF_ERR_INVALID_ARG, "sf_engine_generate: prompt %d has %lld tokens, more than max_seq_len - 1 = %d", i,
                         (long long)gens[i].prompt_len, e->o.max_seq_len - 1);
        for (int64_t j = 0; j < gens[i].prompt_len; j++)
            if (gens[i].prompt[j] < 0 || gens[i].prompt[j] >= e->V)
                return efail(e, SF_ERR_INDEX, "sf_engine_generate: prompt %d token %lld = %d is outside the vocabulary (%d)", i,
                             (long long)j, gens[i].prompt[j], e->V);
    }
    sf_engine_stats stx;
    memset(&stx, 0, sizeof stx);
    const int MS = e->o.max_seqs, MP = e->max_pages;
    seq *qs = calloc((size_t)(n > 0 ? n : 1), sizeof *qs);
    int *slot_used = calloc((size_t)MS, sizeof(int));
    int *batch = malloc((size_t)MS * sizeof(int));
    int64_t *lens = malloc((size_t)MS * sizeof(int64_t)), *start = malloc((size_t)MS * sizeof(int64_t));
    int32_t *bt = malloc((size_t)MS * MP * sizeof(int32_t)), *slots = malloc((size_t)MS * sizeof(int32_t));
    int64_t maxp = 0;
    for (int i = 0; i < n; i++) maxp += gens[i].prompt_len;
    int32_t *ids = malloc((size_t)(maxp > MS ? maxp : MS) * sizeof(int32_t));
    sf_status st = SF_OK;
    if (!qs || !slot_used || !batch || !lens || !start || !bt || !slots || !ids) {
        st = efail(e, SF_ERR_OUT_OF_MEMORY, "sf_engine_generate: out of host memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        seq *q = &qs[i];
        q->hist = malloc((size_t)(gens[i].prompt_len + s.max_new_tokens + 1) * sizeof(int32_t));
        q->pages = malloc((size_t)MP * sizeof(int32_t));
        if (!q->hist || !q->pages) {
            st = efail(e, SF_ERR_OUT_OF_MEMORY, "sf_engine_generate: out of host memory");
            goto done;
        }
        memcpy(q->hist, gens[i].prompt, (size_t)gens[i].prompt_len * sizeof(int32_t));
        q->nhist = gens[i].prompt_len;
        q->rng = s.seed + (uint64_t)i;
        stx.prompt_tokens += gens[i].prompt_len;
    }
    int next_wait = 0;
    for (;;) {
        /* 1. admit and prefill */
        int nb = 0;
        int64_t nid = 0;
        while (next_wait < n) {
            int slot = -1;
            for (int k = 0; k < MS && slot < 0; k++)
                if (!slot_used[k]) slot = k;
            seq *q = &qs[next_wait];
            if (slot < 0 || !grow_pages(e, q, q->nhist)) break;
            slot_used[slot] = 1;
            q->slot = slot, q->state = ST_LIVE;
            batch[nb] = next_wait;
            lens[nb] = q->nhist, start[nb] = 0;
            memcpy(ids + nid, q->hist, (size_t)q->nhist * sizeof(int32_t));
            nid += q->nhist;
            nb++, next_wait++;
        }
        if (nb > 0) {
            for (int b = 0; b < nb; b++) {
                seq *q = &qs[batch[b]];
                for (int k = 0; k < MP; k++) bt[b * MP + k] = k < q->npages ? q->pages[k] : 0;
                slots[b] = q->slot;
                if (e->dev_sample &&
                    (st = sfm_step_admit(e->m, q->slot, q->rng, q->hist, q->nhist, s.repetition_penalty != 1.0f,
                                         e->err, sizeof e->err)) != SF_OK)
                    goto done;
            }
            const double t0 = now_ms();
            st = sfm_model_forward(e->m, nb, ids, lens, start, bt, slots, e->dev_sample ? NULL : e->logits, e->err,
                                   sizeof e->err);
            if (st == SF_OK && e->dev_sample) {
                if (cb) st = sfm_model_logits_host(e->m, nb, e->logits, e->err, sizeof e->err);
                if (st == SF_OK) st = sfm_step_sample(e->m, nb, e->m->slots_d, &s, e->err, sizeof e->err);
            }
            if (st != SF_OK) goto done;
            for (int b = 0; b < nb; b++) {
                const int i = batch[b];
                seq *q = &qs[i];
                q->cached = q->nhist;
                const float *lg = e->logits + (size_t)b * e->V;
                const int32_t t = e->dev_sample ? e->m->tok_h[b] : sfm_sample(&e->sm, lg, &s, q->hist, q->nhist, &q->rng);
                emit(e, q, &gens[i], i, t, lg, &s, cb, user, slot_used);
            }
            stx.prefill_ms += now_ms() - t0;
            stx.prefill_steps++;
        }
        /* 2. decode every live sequence one token */
        nb = 0;
        for (int i = 0; i < n; i++) {
            seq *q = &qs[i];
            if (q->state != ST_LIVE) continue;
            if (!grow_pages(e, q, q->cached + 1)) { /* no page left: it ends here */
                leave(e, q, &gens[i], SF_FINISH_LENGTH, slot_used);
                continue;
            }
            batch[nb] = i;
            if (!e->dev_step) { /* the host path's arrays (decode_device packs its own) */
                lens[nb] = 1, start[nb] = q->cached;
                ids[nb] = q->hist[q->nhist - 1];
                for (int k = 0; k < MP; k++) bt[nb * MP + k] = k < q->npages ? q->pages[k] : 0;
                slots[nb] = q->slot;
            }
            nb++;
        }
        if (nb == 0) {
            if (next_wait >= n) break;
            int live = 0;
            for (int i = 0; i < n; i++) live += qs[i].state == ST_LIVE;
            if (!live) { /* nothing runs and the next prompt cannot be admitted */
                st = efail(e, SF_ERR_OUT_OF_MEMORY, "sf_engine_generate: prompt %d does not fit in the KV cache", next_wait);
                goto done;
            }
            continue;
        }
        if (nb > stx.max_live) stx.max_live = nb;
        const double t0 = now_ms();
        if (e->dev_step)
            st = decode_device(e, qs, batch, nb, slot_used, &s, cb != NULL || !e->dev_sample);
        else
            st = sfm_model_forward(e->m, nb, ids, lens, start, bt, slots, e->logits, e->err, sizeof e->err);
        if (st != SF_OK) goto done;
        for (int b = 0; b < nb; b++) {
            const int i = batch[b];
            seq *q = &qs[i];
            q->cached++;
            const float *lg = e->logits + (size_t)b * e->V;
            const int32_t t = e->dev_sample ? e->m->tok_h[b] : sfm_sample(&e->sm, lg, &s, q->hist, q->nhist, &q->rng);
            emit(e, q, &gens[i], i, t, lg, &s, cb, user, slot_used);
        }
        stx.decode_ms += now_ms() - t0;
        stx.decode_steps++;
    }
done:
    for (int i = 0; i < n && qs; i++) {
        if (qs[i].state == ST_LIVE) leave(e, &qs[i], &gens[i], gens[i].finish, slot_used);
        stx.generated_tokens += gens[i].ntokens;
        free(qs[i].hist);
        free(qs[i].pages);
        free(qs[i].text);
    }
    if (stats) *stats = stx;
    free(qs), free(slot_used), free(batch), free(lens), free(start), free(bt), free(slots), free(ids);
    return st;
}
