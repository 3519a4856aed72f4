/* step.c - the engine's decode step resident on the device (on a CPU
 * context the same calls run on the host, unpadded and without graphs).
 *
 * Everything that changes between steps lives in device buffers at fixed
 * addresses: the host packs the step's token ids, positions, lengths, state
 * slots and block table into one pinned buffer (m->step_h) and sends it
 * with one asynchronous copy; sf_embed looks the ids up on the device, the
 * layers run, the head writes the logits, and sf_sample draws the tokens
 * with each slot's RNG state and seen marks kept on the device.  The
 * tokens come back in one small copy, the step's only synchronisation.
 * Since no pointer or size changes between steps of one row count, the ops
 * from the embedding to the logits can be captured once into a CUDA graph
 * and replayed (sampling stays outside: its parameters are the call's).
 */
#include "model.h"

#include <stdlib.h>
#include <string.h>

#define TRYS(call, what)                                                                             \
    do {                                                                                             \
        sf_status s_ = (call);                                                                       \
        if (s_ != SF_OK)                                                                             \
            return sfm_model_fail(err, errlen, s_, "%s: %s", what, sf_ctx_last_error(m->ctx));       \
    } while (0)

static size_t step_bytes(const sfm_model *m, int rows) {
    return ((size_t)5 * (size_t)m->max_seqs + (size_t)rows * (size_t)m->max_pages_per_seq) * sizeof(int32_t);
}

sf_status sfm_step_create(sfm_model *m, char *err, size_t errlen) {
    const sfm_config *c = m->cfg;
    sf_ctx *ctx = m->ctx;
    const int dev = sf_ctx_device(ctx), MS = m->max_seqs;
    const int64_t V = c->vocab_size, D = c->hidden_size;
    const size_t es = sf_dtype_size(m->act);
    TRYS(sf_malloc_host(ctx, (void **)&m->step_h, step_bytes(m, MS)), "the step's pinned buffer");
    TRYS(sf_malloc_host(ctx, (void **)&m->tok_h, (size_t)MS * 4), "the step's pinned tokens");
    TRYS(sf_malloc_host(ctx, (void **)&m->rng_h, (size_t)MS * 8), "the slots' pinned RNG states");
    memset(m->step_h, 0, step_bytes(m, MS));
    m->step_d = sfm_dev_alloc(m, step_bytes(m, MS));
    m->tok_d = sfm_dev_alloc(m, (size_t)MS * 4);
    m->seen_d = sfm_dev_alloc(m, (size_t)MS * (size_t)V);
    m->rng_d = sfm_dev_alloc(m, (size_t)MS * 8);
    if (!m->step_d || !m->tok_d || !m->seen_d || !m->rng_d)
        return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no device memory for the decode step's buffers");
    if (dev == SF_DEVICE_CPU) {
        m->table = sf_tensor_contiguous((void *)(uintptr_t)m->embed, SF_F32, dev, 2, (int64_t[]){V, D});
    } else if (c->tie_embeddings && !m->lm_head.quant && m->lm_head.w.dtype == m->act) {
        m->table = m->lm_head.w; /* the head's weight is the table */
    } else {
        /* the lookup table once more on the device, in the activation dtype */
        void *h = malloc((size_t)(V * D) * es);
        void *d = sfm_dev_alloc(m, (size_t)(V * D) * es);
        if (!h || !d) {
            free(h);
            return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "no memory for the device embedding table");
        }
        sfm_f32_to(m->act, m->embed, h, V * D);
        const sf_status s = sf_memcpy(ctx, d, h, (size_t)(V * D) * es);
        free(h);
        TRYS(s, "uploading the embedding table");
        m->weight_bytes += V * D * (int64_t)es;
        m->table = sf_tensor_contiguous(d, m->act, dev, 2, (int64_t[]){V, D});
    }
    TRYS(sf_memcpy(ctx, m->step_d, m->step_h, step_bytes(m, MS)), "clearing the step's buffer");
    /* do sf_embed and sf_sample serve this context?  One row each */
    const sf_tensor ids = sf_tensor_contiguous(m->step_d, SF_I32, dev, 1, (int64_t[]){1});
    const sf_tensor out = sf_tensor_contiguous(m->tmp, m->act, dev, 2, (int64_t[]){1, D});
    sf_status s = sf_embed(ctx, &m->table, &ids, &out);
    if (s != SF_OK) {
        m->table = (sf_tensor){0}; /* the host looks the rows up (model.c) */
    } else {
        void *z = calloc((size_t)V, es);
        if (!z) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory");
        s = sf_memcpy(ctx, m->logits, z, (size_t)V * es);
        free(z);
        if (s == SF_OK) {
            sf_sampling sp;
            sf_sampling_init(&sp);
            const sf_status ss = sfm_step_sample(m, 1, (char *)m->step_d + 4 * (size_t)MS * 4, &sp, err, errlen);
            if (ss != SF_OK && ss != SF_ERR_UNSUPPORTED) return ss;
            m->dev_sample = ss == SF_OK;
            err[0] = 0;
        }
    }
    if (s != SF_OK)
        return sfm_model_fail(err, errlen, s, "the device decode step: %s", sf_ctx_last_error(ctx));
    return SF_OK;
}

void sfm_step_destroy(sfm_model *m) {
    if (m->step_h) sf_free_host(m->ctx, m->step_h);
    if (m->tok_h) sf_free_host(m->ctx, m->tok_h);
    if (m->rng_h) sf_free_host(m->ctx, m->rng_h);
    m->step_h = m->tok_h = NULL;
    m->rng_h = NULL;
}

sf_status sfm_step_admit(sfm_model *m, int slot, uint64_t rng, const int32_t *hist, int64_t nhist, int penalty,
                         char *err, size_t errlen) {
    const int64_t V = m->cfg->vocab_size;
    /* asynchronous: the slot's pinned word is not written again before the
     * step that samples it has synchronised */
    m->rng_h[slot] = rng;
    TRYS(sf_memcpy_async(m->ctx, (char *)m->rng_d + (size_t)slot * 8, &m->rng_h[slot], 8), "a slot's RNG state");
    if (!penalty) return SF_OK;
    unsigned char *row = calloc((size_t)V, 1);
    if (!row) return sfm_model_fail(err, errlen, SF_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int64_t j = 0; j < nhist; j++)
        if (hist[j] >= 0 && hist[j] < V) row[hist[j]] = 1;
    const sf_status s = sf_memcpy(m->ctx, (char *)m->seen_d + (size_t)slot * (size_t)V, row, (size_t)V);
    free(row);
    TRYS(s, "a slot's seen tokens");
    return SF_OK;
}

/* The captured part: embedding, layers, head over n rows. */
static sf_status step_ops(sfm_model *m, int n, char *err, size_t errlen) {
    const int dev = sf_ctx_device(m->ctx), MS = m->max_seqs;
    const int64_t D = m->cfg->hidden_size;
    char *b = m->step_d;
    const sfm_index ix = {b + (size_t)MS * 4, NULL, b + 2 * (size_t)MS * 4, b + 3 * (size_t)MS * 4,
                          b + 4 * (size_t)MS * 4, b + 5 * (size_t)MS * 4};
    const sf_tensor ids = sf_tensor_contiguous(b, SF_I32, dev, 1, (int64_t[]){n});
    const sf_tensor out = sf_tensor_contiguous(m->tmp, m->act, dev, 2, (int64_t[]){n, D});
    TRYS(sf_embed(m->ctx, &m->table, &ids, &out), "sf_embed");
    sf_status s = sfm_model_layers(m, n, n, 1, &ix, NULL, NULL, err, errlen);
    if (s != SF_OK) return s;
    TRYS(sfm_linear_apply(m, &m->lm_head, m->h, n, m->logits), "lm_head");
    return SF_OK;
}

sf_status sfm_step_decode(sfm_model *m, int n, sf_graph **graph, char *err, size_t errlen) {
    if (n < 1 || n > m->max_seqs || n > m->cap_rows)
        return sfm_model_fail(err, errlen, SF_ERR_INVALID_ARG, "decode step of %d rows (1 to %d)", n, m->max_seqs);
    TRYS(sf_memcpy_async(m->ctx, m->step_d, m->step_h, step_bytes(m, n)), "uploading the step");
    if (!graph) return step_ops(m, n, err, errlen);
    if (!*graph) {
        TRYS(sf_graph_begin(m->ctx), "starting a capture");
        char cerr[512] = "";
        const sf_status s = step_ops(m, n, cerr, sizeof cerr);
        const sf_status e = sf_graph_end(m->ctx, graph);
        if (s != SF_OK) return sfm_model_fail(err, errlen, s, "capturing the decode step of %d rows: %s", n, cerr);
        TRYS(e, "capturing the decode step");
    }
    TRYS(sf_graph_launch(m->ctx, *graph), "replaying the decode step");
    return SF_OK;
}

sf_status sfm_step_sample(sfm_model *m, int n, const void *slots_d, const sf_sampling *s, char *err, size_t errlen) {
    const int dev = sf_ctx_device(m->ctx), MS = m->max_seqs;
    const int64_t V = m->cfg->vocab_size;
    const sf_tensor lg = sf_tensor_contiguous(m->logits, m->act, dev, 2, (int64_t[]){n, V});
    const sf_tensor sl = sf_tensor_contiguous((void *)(uintptr_t)slots_d, SF_I32, dev, 1, (int64_t[]){n});
    sf_tensor seen = {0};
    if (s->repetition_penalty != 1.0f) seen = sf_tensor_contiguous(m->seen_d, SF_U8, dev, 2, (int64_t[]){MS, V});
    const sf_tensor rng = sf_tensor_contiguous(m->rng_d, SF_I64, dev, 1, (int64_t[]){MS});
    const sf_tensor tok = sf_tensor_contiguous(m->tok_d, SF_I32, dev, 1, (int64_t[]){n});
    TRYS(sf_sample(m->ctx, &lg, s, &sl, &seen, &rng, &tok), "sf_sample");
    TRYS(sf_memcpy_async(m->ctx, m->tok_h, m->tok_d, (size_t)n * 4), "the sampled tokens");
    TRYS(sf_ctx_synchronize(m->ctx), "the decode step");
    return SF_OK;
}
