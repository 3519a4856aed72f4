/* cp.c - context parallelism: front ends of the building blocks
 * (sf_ssd_cp_local / _combine / _correct, sf_attn_merge) and the two
 * drivers over an abstract transport (cp.h), so the scan over ranks and
 * the ring schedule are the same code under NCCL and under the threaded
 * simulation of tests/test_cp.c.
 *
 * Ring schedule (load-balanced layout, rank r holds query/key chunks
 * a = r and b = 2R-1-r, R ranks).  At step s rank r holds the K/V of rank
 * src = (r - s) mod R, i.e. key chunks src and 2R-1-src:
 *   s = 0:        one causal call on the local 2 Lc tokens: in local
 *                 order the causal mask is exactly (a,a) causal, (b,a)
 *                 full, (b,b) causal, (a,b) hidden;
 *   src < r:      both query chunks see key chunk src fully, neither sees
 *                 2R-1-src: q (2 Lc) x first half of the held K/V;
 *   src > r:      only query chunk b sees anything, and both key chunks
 *                 fully: second half of q x all held K/V.
 * Each step is two chunk pairs of work on every rank (the balance).  Not
 * causal: every step is q x all held K/V.  A query half gets its merges
 * in step order; the first reads the step-0 result from out, the last
 * writes out, the ones between go through an f32 accumulator (f16/bf16
 * outputs), so the output is rounded once more than a single call. */
#include "check.h"
#include "cp.h"

/* ------------------------------------------------------------------ */
/* Validation shared by the SSD building blocks and the SSD driver       */
/* ------------------------------------------------------------------ */

/* The tensors the CP pieces read besides sf_ssd_fwd's own checks: x for
 * the shape, C, dt, A, z, dt_bias, out, final_states. */
static sf_status ssd_cp_check(sf_ctx *ctx, const char *op, const sf_ssd_fwd_params *p,
                              sf_cp_ssd_problem *pr, sf_backend *be) {
    if (!p) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: params is NULL", op);
    CHK(sf_resolve_backend(ctx, op, p->backend, be));
    if (p->seq_idx.data || p->cu_seqlens.data)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "%s: seq_idx / cu_seqlens are not supported with the sequence split "
                       "across ranks",
                       op);
    memset(pr, 0, sizeof *pr);
    pr->p = p;
    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 4, NULL, SF_DT_FLOAT, 1));
    const int64_t b = p->x.shape[0], L = p->x.shape[1], H = p->x.shape[2], P = p->x.shape[3];
    const int dt = (int)p->x.dtype;
    if (b == 0 || L == 0 || H == 0 || P == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: x has an empty dimension (%lld, %lld, %lld, %lld)",
                       op, (long long)b, (long long)L, (long long)H, (long long)P);
    CHK(sf_check_tensor(ctx, op, "C", &p->C, 1, 4, (int64_t[]){b, L, SF_ANY, SF_ANY}, dt, 1));
    const int64_t G = p->C.shape[2], N = p->C.shape[3];
    if (G == 0 || N == 0 || H % G != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: C has %lld groups of state size %lld; need N >= 1 "
                       "and groups dividing nheads %lld",
                       op, (long long)G, (long long)N, (long long)H);
    CHK(sf_check_tensor(ctx, op, "dt", &p->dt, 1, 3, (int64_t[]){b, L, H}, dt, 0));
    CHK(sf_check_tensor(ctx, op, "A", &p->A, 1, 1, (int64_t[]){H}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 4, (int64_t[]){b, L, H, P}, dt, 1));
    CHK(sf_check_tensor(ctx, op, "z", &p->z, 0, 4, (int64_t[]){b, L, H, P}, dt, 1));
    CHK(sf_check_tensor(ctx, op, "dt_bias", &p->dt_bias, 0, 1, (int64_t[]){H}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "final_states", &p->final_states, 0, 4,
                        (int64_t[]){b, H, P, N}, SF_F32, 0));
    if (isnan(p->dt_min) || isnan(p->dt_max) || p->dt_min > p->dt_max)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: dt limits [%g, %g] are not an interval", op,
                       (double)p->dt_min, (double)p->dt_max);
    const sf_tensor *ins[] = {&p->dt, &p->C, &p->z};
    const char *names[] = {"dt", "C", "z"};
    for (int i = 0; i < 3; i++) {
        CHK(sf_check_no_alias(ctx, op, "out", &p->out, names[i], ins[i]));
        CHK(sf_check_no_alias(ctx, op, "final_states", &p->final_states, names[i], ins[i]));
    }
    pr->batch = b;
    pr->seqlen = L;
    pr->nheads = H;
    pr->headdim = P;
    pr->ngroups = G;
    pr->dstate = N;
    pr->heads_per_group = H / G;
    pr->has_z = p->z.data != NULL;
    pr->has_dt_bias = p->dt_bias.data != NULL;
    pr->has_final = p->final_states.data != NULL;
    return SF_OK;
}

static sf_status run_logdecay(sf_ctx *ctx, sf_backend be, const sf_cp_ssd_problem *pr) {
    switch (be) {
    case SF_BACKEND_REF: return sf_ref_cp_logdecay(ctx, pr);
    case SF_BACKEND_CPU: return sf_cpu_cp_logdecay(ctx, pr);
    default: return sf_cuda_cp_logdecay(ctx, pr);
    }
}

sf_status sf_ssd_cp_local(sf_ctx *ctx, const sf_ssd_fwd_params *p, sf_tensor state_out,
                          sf_tensor logdecay_out) {
    static const char *op = "sf_ssd_cp_local";
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    sf_cp_ssd_problem pr;
    sf_backend be;
    CHK(ssd_cp_check(ctx, op, p, &pr, &be));
    const int64_t b = pr.batch, H = pr.nheads;
    CHK(sf_check_tensor(ctx, op, "state_out", &state_out, 1, 4,
                        (int64_t[]){b, H, pr.headdim, pr.dstate}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "logdecay_out", &logdecay_out, 1, 2, (int64_t[]){b, H}, SF_F32, 0));
    const sf_named_tensor outs[] = {SF_NT("state_out", &state_out), SF_NT("logdecay_out", &logdecay_out)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("dt", &p->dt), SF_NT("B", &p->B),
                                   SF_NT("C", &p->C), SF_NT("z", &p->z), SF_NT("out", &p->out),
                                   SF_NT("A", &p->A), SF_NT("D", &p->D), SF_NT("dt_bias", &p->dt_bias),
                                   SF_NT("initial_states", &p->initial_states),
                                   SF_NT("final_states", &p->final_states)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    /* The slice's final state is the one sf_ssd_fwd writes; it validates
     * everything else (B, D, initial_states, chunk size). */
    sf_ssd_fwd_params q = *p;
    q.final_states = state_out;
    q.backend = be;
    CHK(sf_ssd_fwd(ctx, &q));
    pr.logdecay = logdecay_out;
    sf_status s = run_logdecay(ctx, be, &pr);
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

static sf_status run_combine(sf_ctx *ctx, sf_backend be, const sf_cp_combine_problem *pr) {
    switch (be) {
    case SF_BACKEND_REF: return sf_ref_cp_combine(ctx, pr);
    case SF_BACKEND_CPU: return sf_cpu_cp_combine(ctx, pr);
    default: return sf_cuda_cp_combine(ctx, pr);
    }
}

static sf_status combine_be(sf_ctx *ctx, sf_backend be, sf_tensor states_all,
                            sf_tensor logdecay_all, int rank, sf_tensor h_in) {
    static const char *op = "sf_ssd_cp_combine";
    CHK(sf_check_tensor(ctx, op, "states_all", &states_all, 1, 5, NULL, SF_F32, 0));
    const int64_t R = states_all.shape[0], b = states_all.shape[1], H = states_all.shape[2];
    const int64_t P = states_all.shape[3], N = states_all.shape[4];
    if (R < 1)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: states_all holds no rank (dim 0 is 0)", op);
    if (rank < 0 || rank >= R)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: rank %d is outside [0, %lld)", op, rank,
                       (long long)R);
    CHK(sf_check_tensor(ctx, op, "logdecay_all", &logdecay_all, 1, 3, (int64_t[]){R, b, H},
                        SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "h_in", &h_in, 1, 4, (int64_t[]){b, H, P, N}, SF_F32, 0));
    const sf_named_tensor outs[] = {SF_NT("h_in", &h_in)};
    const sf_named_tensor ins[] = {SF_NT("states_all", &states_all), SF_NT("logdecay_all", &logdecay_all)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    sf_cp_combine_problem pr = {states_all, logdecay_all, h_in, rank, b, H, P, N};
    if (b * H * P * N == 0) return SF_OK;
    return run_combine(ctx, be, &pr);
}

sf_status sf_ssd_cp_combine(sf_ctx *ctx, sf_tensor states_all, sf_tensor logdecay_all, int rank,
                            sf_tensor h_in) {
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    sf_backend be;
    CHK(sf_resolve_backend(ctx, "sf_ssd_cp_combine", SF_BACKEND_AUTO, &be));
    sf_status s = combine_be(ctx, be, states_all, logdecay_all, rank, h_in);
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

sf_status sf_ssd_cp_correct(sf_ctx *ctx, const sf_ssd_fwd_params *p, sf_tensor h_in,
                            sf_tensor state_local, sf_tensor logdecay_local) {
    static const char *op = "sf_ssd_cp_correct";
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    sf_cp_ssd_problem pr;
    sf_backend be;
    CHK(ssd_cp_check(ctx, op, p, &pr, &be));
    const int64_t st[4] = {pr.batch, pr.nheads, pr.headdim, pr.dstate};
    CHK(sf_check_tensor(ctx, op, "h_in", &h_in, 1, 4, st, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "state_local", &state_local, pr.has_final, 4, st, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "logdecay_local", &logdecay_local, pr.has_final, 2,
                        (int64_t[]){pr.batch, pr.nheads}, SF_F32, 0));
    /* out is updated in place: an output here, like final_states */
    const sf_named_tensor outs[] = {SF_NT("out", &p->out), SF_NT("final_states", &p->final_states)};
    const sf_named_tensor ins[] = {SF_NT("h_in", &h_in), SF_NT("state_local", &state_local),
                                   SF_NT("logdecay_local", &logdecay_local), SF_NT("dt", &p->dt),
                                   SF_NT("A", &p->A), SF_NT("C", &p->C), SF_NT("z", &p->z),
                                   SF_NT("dt_bias", &p->dt_bias)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    pr.h_in = h_in;
    pr.state_local = state_local;
    pr.logdecay = logdecay_local;
    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_cp_correct(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_cp_correct(ctx, &pr); break;
    default: s = sf_cuda_cp_correct(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

/* ------------------------------------------------------------------ */
/* Merge                                                               */
/* ------------------------------------------------------------------ */

sf_status sf_cp_merge_into(sf_ctx *ctx, sf_backend be, const sf_tensor *a_out,
                           const sf_tensor *a_lse, const sf_tensor *b_out, const sf_tensor *b_lse,
                           const sf_tensor *dst_out, const sf_tensor *dst_lse) {
    sf_cp_merge_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.a_out = *a_out;
    pr.a_lse = *a_lse;
    if (b_out) pr.b_out = *b_out;
    if (b_lse) pr.b_lse = *b_lse;
    pr.dst_out = *dst_out;
    pr.dst_lse = *dst_lse;
    pr.batch = a_out->shape[0];
    pr.seqlen = a_out->shape[1];
    pr.nheads = a_out->shape[2];
    pr.headdim = a_out->shape[3];
    if (pr.batch * pr.seqlen * pr.nheads * pr.headdim == 0) return SF_OK;
    switch (be) {
    case SF_BACKEND_REF: return sf_ref_cp_merge(ctx, &pr);
    case SF_BACKEND_CPU: return sf_cpu_cp_merge(ctx, &pr);
    default: return sf_cuda_cp_merge(ctx, &pr);
    }
}

sf_status sf_attn_merge(sf_ctx *ctx, sf_tensor out_acc, sf_tensor lse_acc, sf_tensor out_part,
                        sf_tensor lse_part) {
    static const char *op = "sf_attn_merge";
    if (!ctx) return SF_ERR_NULL_POINTER;
    ctx->err[0] = 0;
    sf_backend be;
    CHK(sf_resolve_backend(ctx, op, SF_BACKEND_AUTO, &be));
    CHK(sf_check_tensor(ctx, op, "out_acc", &out_acc, 1, 4, NULL, SF_DT_FLOAT, 1));
    const int64_t b = out_acc.shape[0], L = out_acc.shape[1], H = out_acc.shape[2];
    const int64_t d = out_acc.shape[3];
    CHK(sf_check_tensor(ctx, op, "out_part", &out_part, 1, 4, (int64_t[]){b, L, H, d}, SF_DT_FLOAT,
                        1));
    CHK(sf_check_tensor(ctx, op, "lse_acc", &lse_acc, 1, 3, (int64_t[]){b, H, L}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "lse_part", &lse_part, 1, 3, (int64_t[]){b, H, L}, SF_F32, 0));
    const sf_named_tensor outs[] = {SF_NT("out_acc", &out_acc), SF_NT("lse_acc", &lse_acc)};
    const sf_named_tensor ins[] = {SF_NT("out_part", &out_part), SF_NT("lse_part", &lse_part)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    sf_status s = sf_cp_merge_into(ctx, be, &out_acc, &lse_acc, &out_part, &lse_part, &out_acc,
                                   &lse_acc);
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

/* ------------------------------------------------------------------ */
/* SSD driver: local scan, all-gather of the summaries, combine, correct */
/* ------------------------------------------------------------------ */

static sf_tensor dense(void *data, sf_dtype dt, int device, int rank, const int64_t *shape) {
    return sf_tensor_contiguous(data, dt, device, rank, shape);
}

sf_status sf_cp_ssd_run(sf_ctx *ctx, const sf_ssd_fwd_params *p, const sf_cp_transport *t) {
    static const char *op = "sf_ssd_fwd_cp";
    sf_cp_ssd_problem pr;
    sf_backend be;
    CHK(ssd_cp_check(ctx, op, p, &pr, &be));
    const int R = t->nranks, r = t->rank;
    if (R == 1) {
        /* one rank: the slice is the whole sequence */
        sf_ssd_fwd_params q = *p;
        q.backend = be;
        return sf_ssd_fwd(ctx, &q);
    }
    const int64_t b = pr.batch, H = pr.nheads, P = pr.headdim, N = pr.dstate;
    /* One slot per rank: the state then the log-decay, so a single
     * all-gather moves both; the entering state after the R slots. */
    const int64_t nst = b * H * P * N, slot = nst + b * H;
    float *buf = (float *)t->buffer(t->user, ctx, (size_t)(R * slot + nst) * sizeof(float));
    if (!buf) return SF_ERR_OUT_OF_MEMORY;
    const int dev = ctx->device;
    sf_tensor st = dense(buf + (int64_t)r * slot, SF_F32, dev, 4, (int64_t[]){b, H, P, N});
    sf_tensor ld = dense(buf + (int64_t)r * slot + nst, SF_F32, dev, 2, (int64_t[]){b, H});
    sf_tensor h_in = dense(buf + (int64_t)R * slot, SF_F32, dev, 4, (int64_t[]){b, H, P, N});

    sf_ssd_fwd_params q = *p;
    if (r > 0) memset(&q.initial_states, 0, sizeof q.initial_states);
    memset(&q.final_states, 0, sizeof q.final_states);
    q.backend = be;
    /* CUDA: two passes.  The slice's final state alone first (the state
     * kernels of the chunked scan, without the output), then, once the
     * entering state is known, the whole forward from it: no correction
     * pass over the output.  The correction (an L x N by N x P product per
     * head on the CUDA cores, and a second pass over out and z) made two
     * H200s slower than one (2.7B layer, 128k tokens: 10.1 ms against
     * 4.0; bench/RESULTS.md, tried and lost).  The other backends, and shapes
     * the state kernels do not take, keep local + correct. */
    int two_pass = 0;
    if (be == SF_BACKEND_CUDA) {
        q.final_states = st;
        sf_status s = sf_ssd_states_only(ctx, &q);
        if (s == SF_OK) {
            pr.logdecay = ld;
            CHK(run_logdecay(ctx, be, &pr));
            two_pass = 1;
        } else if (s != SF_ERR_UNSUPPORTED) {
            return s;
        } else {
            ctx->err[0] = 0;
        }
        memset(&q.final_states, 0, sizeof q.final_states);
    }
    if (!two_pass) CHK(sf_ssd_cp_local(ctx, &q, st, ld));
    CHK(t->allgather(t->user, ctx, buf, (size_t)slot * sizeof(float)));

    sf_tensor sall = dense(buf, SF_F32, dev, 5, (int64_t[]){R, b, H, P, N});
    sall.stride[0] = slot;
    sf_tensor lall = dense(buf + nst, SF_F32, dev, 3, (int64_t[]){R, b, H});
    lall.stride[0] = slot;
    /* (two passes: rank 0 starts from its own initial state, if any, and
     * needs no entering state) */
    if (!two_pass || r > 0) CHK(combine_be(ctx, be, sall, lall, r, h_in));
    if (two_pass) {
        q = *p;
        q.backend = be;
        if (r > 0) q.initial_states = h_in;
        return sf_ssd_fwd(ctx, &q);
    }
    /* Rank 0 enters with a zero state (its initial state is already in the
     * local scan): its outputs need no correction, which on one H200 cost as
     * much as the scan itself (1.97 ms + 1.98 ms at the 2.7B shape, L 16384).
     * Only a requested final state still goes through the correction. */
    if (r == 0 && !p->final_states.data) return SF_OK;
    q = *p;
    q.backend = be;
    CHK(sf_ssd_cp_correct(ctx, &q, h_in, st, ld));
    return SF_OK;
}

/* ------------------------------------------------------------------ */
/* Ring attention driver                                                */
/* ------------------------------------------------------------------ */

/* Rows [r0, r0 + n) of a (b, L, H, d) tensor; columns of a (b, H, L) lse. */
static sf_tensor rows(sf_tensor t, int64_t r0, int64_t n) {
    t.data = (char *)t.data + r0 * t.stride[1] * (int64_t)sf_dtype_size(t.dtype);
    t.shape[1] = n;
    return t;
}
static sf_tensor lcols(sf_tensor t, int64_t c0, int64_t n) {
    t.data = (char *)t.data + c0 * t.stride[2] * (int64_t)sizeof(float);
    t.shape[2] = n;
    return t;
}

static int is_contiguous(const sf_tensor *t) {
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        if (t->shape[i] > 1 && t->stride[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

typedef struct ring_state {
    sf_ctx *ctx;
    sf_backend be;
    sf_tensor out, acc, lse, part, part_lse;
} ring_state;

/* One merge of a query half: the k-th of its n merges. */
static sf_status ring_merge(ring_state *rs, int64_t r0, int64_t n, int *k, int total) {
    ++*k;
    const sf_tensor a = rows(*k == 1 ? rs->out : rs->acc, r0, n);
    const sf_tensor dst = rows(*k == total ? rs->out : rs->acc, r0, n);
    const sf_tensor lse = lcols(rs->lse, r0, n);
    const sf_tensor part = rows(rs->part, r0, n), plse = lcols(rs->part_lse, r0, n);
    return sf_cp_merge_into(rs->ctx, rs->be, &a, &lse, &part, &plse, &dst, &lse);
}

static sf_status pack(sf_ctx *ctx, sf_backend be, void *dst, const sf_tensor *src) {
    return be == SF_BACKEND_CUDA ? sf_cuda_cp_pack(ctx, dst, src) : sf_cpu_cp_pack(ctx, dst, src);
}

sf_status sf_cp_attn_ring_run(sf_ctx *ctx, const sf_attn_fwd_params *p, const sf_cp_transport *t) {
    static const char *op = "sf_attn_fwd_ring";
    if (!p) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: params is NULL", op);
    sf_backend be;
    CHK(sf_resolve_backend(ctx, op, p->backend, &be));
    if (p->cu_seqlens_q.data || p->cu_seqlens_k.data)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: variable length (cu_seqlens) is not supported "
                       "by ring attention", op);
    /* (-1, 0) with causal is flash_attn's spelling of plain causal */
    if (p->window_left >= 0 || (p->window_right >= 0 && !(p->causal && p->window_right == 0)))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: sliding windows (%d, %d) are not supported by "
                       "ring attention", op, p->window_left, p->window_right);
    if (p->alibi_slopes.data)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: ALiBi is not supported by ring attention (its "
                       "distances would need each chunk's offset)", op);
    CHK(sf_check_tensor(ctx, op, "q", &p->q, 1, 4, NULL, SF_DT_FLOAT, 1));
    const int64_t b = p->q.shape[0], L = p->q.shape[1], H = p->q.shape[2], d = p->q.shape[3];
    const int dt = (int)p->q.dtype;
    CHK(sf_check_tensor(ctx, op, "k", &p->k, 1, 4, (int64_t[]){b, L, SF_ANY, d}, dt, 1));
    const int64_t Hkv = p->k.shape[2];
    CHK(sf_check_tensor(ctx, op, "v", &p->v, 1, 4, (int64_t[]){b, L, Hkv, d}, dt, 1));
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 4, (int64_t[]){b, L, H, d}, dt, 1));
    CHK(sf_check_tensor(ctx, op, "lse", &p->lse, 0, 3, (int64_t[]){b, H, L}, SF_F32, 0));
    if (L == 0 || L % 2 != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: the local sequence (q dim 1, %lld) must hold two "
                       "equal chunks (even, >= 2)", op, (long long)L);
    if (Hkv == 0 || H % Hkv != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: nheads_kv %lld does not divide nheads %lld", op,
                       (long long)Hkv, (long long)H);
    const int R = t->nranks, r = t->rank;
    const int64_t Lc = L / 2;
    sf_attn_fwd_params a;
    sf_attn_fwd_params_init(&a);
    a.softmax_scale = p->softmax_scale;
    a.softcap = p->softcap;
    a.backend = be;
    a.q = p->q;
    a.k = p->k;
    a.v = p->v;
    a.out = p->out;
    a.lse = p->lse;
    a.causal = p->causal;
    if (R == 1) return sf_attn_fwd(ctx, &a); /* the whole sequence is here */

    const size_t es = sf_dtype_size(p->q.dtype);
    const size_t kvb = (size_t)(b * L * Hkv * d) * es;
    const int pk = !is_contiguous(&p->k), pv = !is_contiguous(&p->v);
    const int need_lse = !p->lse.data, need_acc = p->q.dtype != SF_F32;

    /* Buffer: K/V slots 0 and 1 (slot 1 first holds the packed local K/V
     * when they are strided), the partial result, lse and accumulator. */
    const size_t b_kv = align256(kvb);
    const size_t b_part = align256((size_t)(b * L * H * d) * es);
    const size_t b_plse = align256((size_t)(b * H * L) * 4);
    const size_t b_lse = need_lse ? align256((size_t)(b * H * L) * 4) : 0;
    const size_t b_acc = need_acc ? align256((size_t)(b * L * H * d) * 4) : 0;
    const size_t total = 4 * b_kv + b_part + b_plse + b_lse + b_acc;
    char *buf = (char *)t->buffer(t->user, ctx, total);
    if (!buf) return SF_ERR_OUT_OF_MEMORY;
    const int dev = ctx->device;
    const sf_dtype dty = p->q.dtype;
    const int64_t kvshape[4] = {b, L, Hkv, d};
    sf_tensor slot_k[2], slot_v[2];
    for (int i = 0; i < 2; i++) {
        slot_k[i] = dense(buf + (2 * i) * b_kv, dty, dev, 4, kvshape);
        slot_v[i] = dense(buf + (2 * i + 1) * b_kv, dty, dev, 4, kvshape);
    }
    char *cur = buf + 4 * b_kv;
    ring_state rs;
    rs.ctx = ctx;
    rs.be = be;
    rs.out = p->out;
    rs.part = dense(cur, dty, dev, 4, (int64_t[]){b, L, H, d});
    cur += b_part;
    rs.part_lse = dense(cur, SF_F32, dev, 3, (int64_t[]){b, H, L});
    cur += b_plse;
    rs.lse = need_lse ? dense(cur, SF_F32, dev, 3, (int64_t[]){b, H, L}) : p->lse;
    cur += b_lse;
    rs.acc = need_acc ? dense(cur, SF_F32, dev, 4, (int64_t[]){b, L, H, d}) : p->out;

    /* Step 0: the local block, causal on the local order. */
    sf_tensor k0 = p->k, v0 = p->v;
    if (pk) {
        CHK(pack(ctx, be, slot_k[1].data, &p->k));
        k0 = slot_k[1];
    }
    if (pv) {
        CHK(pack(ctx, be, slot_v[1].data, &p->v));
        v0 = slot_v[1];
    }
    a.k = k0;
    a.v = v0;
    a.lse = rs.lse;
    CHK(t->mark(t->user, ctx));
    CHK(sf_attn_fwd(ctx, &a));

    const int nA = p->causal ? r : R - 1, nB = R - 1;
    int kA = 0, kB = 0;
    sf_tensor held_k = k0, held_v = v0;
    for (int s = 0; s < R; s++) {
        if (s > 0) {
            /* the block received during step s-1, now complete */
            CHK(t->ring_wait(t->user, ctx));
            held_k = slot_k[(s - 1) % 2];
            held_v = slot_v[(s - 1) % 2];
            if (s < R - 1) CHK(t->mark(t->user, ctx));
            const int src = (r - s + R) % R;
            a.causal = 0;
            a.lse = rs.part_lse;
            if (!p->causal || src < r) {
                a.q = p->q;
                a.k = p->causal ? rows(held_k, 0, Lc) : held_k;
                a.v = p->causal ? rows(held_v, 0, Lc) : held_v;
                a.out = rs.part;
            } else {
                a.q = rows(p->q, Lc, Lc);
                a.k = held_k;
                a.v = held_v;
                a.out = rows(rs.part, Lc, Lc);
                a.lse = lcols(rs.part_lse, Lc, Lc);
            }
            CHK(sf_attn_fwd(ctx, &a));
        }
        /* Pass the held block on while it is being used (the last one
         * stays: every rank has seen every block). */
        if (s < R - 1) {
            const void *send[2] = {held_k.data, held_v.data};
            void *recv[2] = {slot_k[s % 2].data, slot_v[s % 2].data};
            CHK(t->ring_start(t->user, ctx, send, recv, 2, kvb));
        }
        if (s > 0) {
            const int src = (r - s + R) % R;
            if (!p->causal || src < r) CHK(ring_merge(&rs, 0, Lc, &kA, nA));
            CHK(ring_merge(&rs, Lc, Lc, &kB, nB));
        }
    }
    return SF_OK;
}
