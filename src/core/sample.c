/* sample.c - front ends of sf_embed and sf_sample: validate every tensor,
 * normalise the sampling settings, check host index tensors, dispatch to a
 * backend (reference, CPU, or CUDA: src/cuda/sample/). */
#include "check.h"
#include "sample_ops.h"

static sf_status run_embed(sf_ctx *ctx, sf_backend be, const sf_embed_problem *pr) {
    switch (be) {
    case SF_BACKEND_REF: return sf_ref_embed(ctx, pr);
    case SF_BACKEND_CPU: return sf_cpu_embed(ctx, pr);
    default: return sf_cuda_embed(ctx, pr);
    }
}

sf_status sf_embed(sf_ctx *ctx, const sf_tensor *table, const sf_tensor *ids, const sf_tensor *out) {
    static const char *op = "sf_embed";
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    if (!table || !ids || !out)
        return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: %s is NULL", op, !table ? "table" : !ids ? "ids" : "out");
    sf_backend be;
    CHK(sf_resolve_backend(ctx, op, SF_BACKEND_AUTO, &be));
    CHK(sf_check_tensor(ctx, op, "table", table, 1, 2, NULL, SF_DT_FLOAT, 1));
    sf_embed_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.table = table, pr.ids = ids, pr.out = out;
    pr.V = table->shape[0], pr.D = table->shape[1];
    if (pr.V == 0 || pr.D == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: table is (%lld, %lld); it needs at least one row and column", op,
                       (long long)pr.V, (long long)pr.D);
    CHK(sf_check_tensor(ctx, op, "ids", ids, 1, 1, NULL, SF_I32, 0));
    pr.n = ids->shape[0];
    CHK(sf_check_tensor(ctx, op, "out", out, 1, 2, (int64_t[]){pr.n, pr.D}, SF_DT_FLOAT, 0));
    const sf_named_tensor outs[] = {SF_NT("out", out)};
    const sf_named_tensor ins[] = {SF_NT("table", table), SF_NT("ids", ids)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    if (ctx->device < 0) {
        const int32_t *id = (const int32_t *)ids->data;
        for (int64_t i = 0; i < pr.n; i++) {
            const int32_t v = id[i * ids->stride[0]];
            if (v < 0 || v >= pr.V)
                return sf_fail(ctx, SF_ERR_INDEX, "%s: ids[%lld] = %d is outside the table's %lld rows", op,
                               (long long)i, v, (long long)pr.V);
        }
    }
    if (pr.n == 0) return SF_OK;
    const sf_status s = run_embed(ctx, be, &pr);
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

/* Host slots: each in [0, S), none twice (two rows of one slot would race
 * on its RNG state and seen row). */
static sf_status check_slots(sf_ctx *ctx, const char *op, const sf_tensor *sl, int64_t n, int64_t S) {
    unsigned char *used = (unsigned char *)sf_host_scratch(ctx, (size_t)S);
    if (!used) return SF_ERR_OUT_OF_MEMORY;
    memset(used, 0, (size_t)S);
    const int32_t *p = (const int32_t *)sl->data;
    for (int64_t i = 0; i < n; i++) {
        const int32_t s = p[i * sl->stride[0]];
        if (s < 0 || s >= S)
            return sf_fail(ctx, SF_ERR_INDEX, "%s: slots[%lld] = %d is outside the %lld slots of rng", op,
                           (long long)i, s, (long long)S);
        if (used[s])
            return sf_fail(ctx, SF_ERR_INDEX, "%s: slot %d appears twice in slots", op, s);
        used[s] = 1;
    }
    return SF_OK;
}

sf_status sf_sample(sf_ctx *ctx, const sf_tensor *logits, const sf_sampling *s, const sf_tensor *slots,
                    const sf_tensor *seen, const sf_tensor *rng, const sf_tensor *tokens) {
    static const char *op = "sf_sample";
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    if (!logits || !s || !rng || !tokens)
        return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: %s is NULL", op,
                       !logits ? "logits" : !s ? "the sampling settings s" : !rng ? "rng" : "tokens");
    sf_backend be;
    CHK(sf_resolve_backend(ctx, op, SF_BACKEND_AUTO, &be));
    const sf_tensor none = {0};
    if (!slots) slots = &none;
    if (!seen) seen = &none;
    CHK(sf_check_tensor(ctx, op, "logits", logits, 1, 2, NULL, SF_DT_FLOAT, 1));
    sf_sample_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.logits = logits, pr.slots = slots, pr.seen = seen, pr.rng = rng, pr.tokens = tokens;
    pr.n = logits->shape[0], pr.V = logits->shape[1];
    if (pr.V == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: logits is (%lld, 0); the vocabulary is empty", op, (long long)pr.n);
    CHK(sf_check_tensor(ctx, op, "rng", rng, 1, 1, NULL, SF_I64, 0));
    pr.S = rng->shape[0];
    if (pr.S == 0) return sf_fail(ctx, SF_ERR_SHAPE, "%s: rng has no slots (shape (0))", op);
    CHK(sf_check_tensor(ctx, op, "slots", slots, 0, 1, (int64_t[]){pr.n}, SF_I32, 0));
    CHK(sf_check_tensor(ctx, op, "seen", seen, 0, 2, (int64_t[]){pr.S, pr.V}, SF_U8, 1));
    CHK(sf_check_tensor(ctx, op, "tokens", tokens, 1, 1, (int64_t[]){pr.n}, SF_I32, 0));
    if (!slots->data && pr.n > pr.S)
        return sf_fail(ctx, SF_ERR_SHAPE,
                       "%s: without slots row i uses slot i, but logits has %lld rows and rng %lld slots", op,
                       (long long)pr.n, (long long)pr.S);
    const sf_named_tensor outs[] = {SF_NT("tokens", tokens), SF_NT("seen", seen), SF_NT("rng", rng)};
    const sf_named_tensor ins[] = {SF_NT("logits", logits), SF_NT("slots", slots)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    if (slots->data && ctx->device < 0) CHK(check_slots(ctx, op, slots, pr.n, pr.S));

    /* the settings, switched off where the engine's sampler skips a step */
    pr.greedy = !(s->temperature > 0.0f);
    pr.temperature = pr.greedy ? 1.0f : s->temperature;
    pr.penalize = seen->data != NULL && s->repetition_penalty != 1.0f && s->repetition_penalty > 0.0f;
    pr.penalty = pr.penalize ? s->repetition_penalty : 1.0f;
    pr.top_k = s->top_k > 0 ? s->top_k : 0;
    pr.top_p = s->top_p > 0.0f && s->top_p < 1.0f ? s->top_p : 1.0f;
    pr.min_p = s->min_p > 0.0f ? s->min_p : 0.0f;
    if (pr.n == 0) return SF_OK;

    sf_status st;
    switch (be) {
    case SF_BACKEND_REF: st = sf_ref_sample(ctx, &pr); break;
    case SF_BACKEND_CPU: st = sf_cpu_sample(ctx, &pr); break;
    default: st = sf_cuda_sample(ctx, &pr); break;
    }
    if (st == SF_OK) ctx->last_backend = be;
    return st;
}
