/* ssd.c - front end of sf_ssd_fwd and sf_ssd_step: validate every
 * descriptor, derive the problem (and, for host tensors, the list of
 * segments through which the state flows), dispatch to a backend. */
#include "check.h"
#include "ssd_bwd.h"

#include <stdio.h>

void sf_ssd_fwd_params_init(sf_ssd_fwd_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->chunk_size = 256;
    p->dt_min = 0.0f;
    p->dt_max = INFINITY;
    p->backend = SF_BACKEND_AUTO;
}

void sf_ssd_step_params_init(sf_ssd_step_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->dt_min = 0.0f;
    p->dt_max = INFINITY;
    p->backend = SF_BACKEND_AUTO;
}

static sf_status check_dt_limits(sf_ctx *ctx, const char *op, float lo, float hi) {
    if (isnan(lo) || isnan(hi) || lo > hi)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: dt limits [%g, %g] are not an interval", op,
                       (double)lo, (double)hi);
    return SF_OK;
}

/* A, D and dt_bias must be finite: a NaN decay would otherwise read as no
 * decay (min(dt A, 0) drops the NaN).  Checked where the values are on the
 * host (CPU contexts: H or H x P floats); on a GPU they are device memory
 * the call does not copy back, and the documented contract stands. */
static sf_status check_finite_params(sf_ctx *ctx, const char *op, const sf_tensor *A, const sf_tensor *D,
                                     const sf_tensor *dt_bias) {
    if (ctx->device >= 0) return SF_OK;
    const sf_tensor *ts[] = {A, D, dt_bias};
    const char *names[] = {"A", "D", "dt_bias"};
    for (int k = 0; k < 3; k++) {
        const sf_tensor *t = ts[k];
        if (!t->data) continue;
        const int64_t n0 = t->shape[0], n1 = t->rank == 2 ? t->shape[1] : 1;
        for (int64_t i = 0; i < n0; i++)
            for (int64_t j = 0; j < n1; j++) {
                const float v = ((const float *)t->data)[i * t->stride[0] + (t->rank == 2 ? j * t->stride[1] : 0)];
                if (!isfinite(v))
                    return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %s[%lld] is %g; it must be finite", op, names[k],
                                   (long long)(i * n1 + j), (double)v);
            }
    }
    return SF_OK;
}

/* Cuts the host problem into segments: rows, cu_seqlens sequences, or
 * runs of equal seq_idx. */
sf_status sf_ssd_build_segments(sf_ctx *ctx, const char *op, sf_ssd_problem *pr) {
    const sf_ssd_fwd_params *p = pr->p;
    int64_t cap = pr->varlen == 2 ? pr->nseq : pr->batch;
    if (pr->varlen == 1) { /* count the runs first */
        cap = 0;
        const sf_tensor *si = &p->seq_idx;
        for (int64_t b = 0; b < pr->batch; b++) {
            cap++;
            for (int64_t t = 1; t < pr->seqlen; t++) {
                int64_t cur = sf_ldi(si->data, si->dtype, sf_off2(si, b, t));
                int64_t prev = sf_ldi(si->data, si->dtype, sf_off2(si, b, t - 1));
                if (cur < prev)
                    return sf_fail(ctx, SF_ERR_INDEX,
                                   "%s: seq_idx[%lld, %lld] = %lld is less than the "
                                   "previous %lld (seq_idx must not decrease along L)",
                                   op, (long long)b, (long long)t, (long long)cur, (long long)prev);
                if (cur != prev) cap++;
            }
        }
    }
    sf_ssd_segment *seg = (sf_ssd_segment *)sf_host_scratch(ctx, (size_t)cap * sizeof *seg);
    if (!seg) return SF_ERR_OUT_OF_MEMORY;
    int64_t n = 0;
    if (pr->varlen == 0) {
        for (int64_t b = 0; b < pr->batch; b++)
            seg[n++] = (sf_ssd_segment){b, 0, pr->seqlen, pr->has_init ? b : -1,
                                        pr->has_final ? b : -1};
    } else if (pr->varlen == 2) {
        const sf_tensor *cu = &p->cu_seqlens;
        for (int64_t i = 0; i < pr->nseq; i++) {
            int64_t s = sf_ldi(cu->data, cu->dtype, i * cu->stride[0]);
            int64_t e = sf_ldi(cu->data, cu->dtype, (i + 1) * cu->stride[0]);
            seg[n++] = (sf_ssd_segment){0, s, e, pr->has_init ? i : -1, pr->has_final ? i : -1};
        }
    } else {
        const sf_tensor *si = &p->seq_idx;
        for (int64_t b = 0; b < pr->batch; b++) {
            int64_t start = 0;
            for (int64_t t = 1; t <= pr->seqlen; t++) {
                if (t < pr->seqlen && sf_ldi(si->data, si->dtype, sf_off2(si, b, t)) ==
                                          sf_ldi(si->data, si->dtype, sf_off2(si, b, t - 1)))
                    continue;
                seg[n++] = (sf_ssd_segment){b, start, t, (start == 0 && pr->has_init) ? b : -1,
                                            (t == pr->seqlen && pr->has_final) ? b : -1};
                start = t;
            }
        }
    }
    pr->seg = seg;
    pr->nseg = n;
    return SF_OK;
}

/* No tokens (b or L 0) or no outputs (H or P 0), on the host: each
 * sequence's final state is its initial state, or zeros without one. */
static void ssd_fwd_empty_host(const sf_ssd_fwd_params *p, int64_t ns, int64_t H, int64_t P, int64_t N) {
    const sf_tensor *fi = &p->final_states, *in = &p->initial_states;
    if (!fi->data) return;
    for (int64_t s = 0; s < ns; s++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < P; i++)
                for (int64_t n = 0; n < N; n++) {
                    const float v = in->data ? ((const float *)in->data)[s * in->stride[0] + h * in->stride[1] +
                                                                        i * in->stride[2] + n * in->stride[3]]
                                             : 0.0f;
                    ((float *)fi->data)[s * fi->stride[0] + h * fi->stride[1] + i * fi->stride[2] +
                                        n * fi->stride[3]] = v;
                }
}

sf_status sf_ssd_validate(sf_ctx *ctx, const sf_ssd_fwd_params *p, const char *op, const char *out_name,
                          const char *final_name, int check_io, sf_ssd_problem *prp) {
    sf_ssd_problem pr;
    memset(&pr, 0, sizeof pr);
    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 4, NULL, SF_DT_FLOAT, 1));
    pr.p = p;
    pr.batch = p->x.shape[0];
    pr.seqlen = p->x.shape[1];
    pr.nheads = p->x.shape[2];
    pr.headdim = p->x.shape[3];
    int dt = (int)p->x.dtype;
    int64_t b = pr.batch, L = pr.seqlen, H = pr.nheads, P = pr.headdim;
    /* empty is valid, as in attention: no tokens (b or L 0) leave out empty
     * and the final states equal to the initial ones (zeros without them) */

    /* dt, B and C: each x's dtype or f32 (mamba_ssm's mixed inputs) */
    const int dt_bc = SF_DT_X_OR_F32(dt);
    CHK(sf_check_tensor(ctx, op, "B", &p->B, 1, 4, (int64_t[]){b, L, SF_ANY, SF_ANY}, dt_bc, 1));
    pr.ngroups = p->B.shape[2];
    pr.dstate = p->B.shape[3];
    int64_t G = pr.ngroups, N = pr.dstate;
    if (G == 0 || N == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: B has an empty group or state dimension", op);
    if (H % G != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: ngroups %lld (B dim 2) does not divide nheads %lld",
                       op, (long long)G, (long long)H);
    pr.heads_per_group = H / G;
    CHK(sf_check_tensor(ctx, op, "C", &p->C, 1, 4, (int64_t[]){b, L, G, N}, dt_bc, 1));
    CHK(sf_check_tensor(ctx, op, "dt", &p->dt, 1, 3, (int64_t[]){b, L, H}, dt_bc, 0));
    CHK(sf_check_tensor(ctx, op, "A", &p->A, 1, 1, (int64_t[]){H}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, out_name, &p->out, 1, 4, (int64_t[]){b, L, H, P}, dt, 1));
    if (p->D.data) {
        if (p->D.rank == 1)
            CHK(sf_check_tensor(ctx, op, "D", &p->D, 1, 1, (int64_t[]){H}, SF_F32, 0));
        else
            CHK(sf_check_tensor(ctx, op, "D", &p->D, 1, 2, (int64_t[]){H, P}, SF_F32, 0));
        pr.has_D = 1;
        pr.D_per_channel = p->D.rank == 2;
    }
    CHK(sf_check_tensor(ctx, op, "z", &p->z, 0, 4, (int64_t[]){b, L, H, P}, dt, 1));
    pr.has_z = p->z.data != NULL;
    CHK(sf_check_tensor(ctx, op, "dt_bias", &p->dt_bias, 0, 1, (int64_t[]){H}, SF_F32, 0));
    pr.has_dt_bias = p->dt_bias.data != NULL;

    if (p->seq_idx.data && p->cu_seqlens.data)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: give seq_idx or cu_seqlens, not both", op);
    pr.nseq = b;
    if (p->seq_idx.data) {
        CHK(sf_check_tensor(ctx, op, "seq_idx", &p->seq_idx, 1, 2, (int64_t[]){b, L}, SF_I32, 0));
        pr.varlen = 1;
    } else if (p->cu_seqlens.data) {
        CHK(sf_check_tensor(ctx, op, "cu_seqlens", &p->cu_seqlens, 1, 1, (int64_t[]){SF_ANY},
                            SF_DT_INDEX, 0));
        if (p->cu_seqlens.shape[0] < 2)
            return sf_fail(ctx, SF_ERR_SHAPE, "%s: cu_seqlens needs at least 2 entries, got %lld",
                           op, (long long)p->cu_seqlens.shape[0]);
        if (b != 1)
            return sf_fail(ctx, SF_ERR_SHAPE,
                           "%s: with cu_seqlens the batch must be 1 (sequences packed along L), "
                           "got batch %lld",
                           op, (long long)b);
        pr.varlen = 2;
        pr.nseq = p->cu_seqlens.shape[0] - 1;
        if (ctx->device < 0) CHK(sf_check_cu_seqlens(ctx, op, "cu_seqlens", &p->cu_seqlens, L, NULL));
    }
    int64_t ns = pr.varlen == 2 ? pr.nseq : b;
    CHK(sf_check_tensor(ctx, op, "initial_states", &p->initial_states, 0, 4,
                        (int64_t[]){ns, H, P, N}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, final_name, &p->final_states, 0, 4,
                        (int64_t[]){ns, H, P, N}, SF_F32, 0));
    pr.has_init = p->initial_states.data != NULL;
    pr.has_final = p->final_states.data != NULL;

    const sf_named_tensor outs[] = {SF_NT(out_name, &p->out), SF_NT(final_name, &p->final_states)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("dt", &p->dt), SF_NT("A", &p->A),
                                   SF_NT("B", &p->B), SF_NT("C", &p->C), SF_NT("D", &p->D),
                                   SF_NT("z", &p->z), SF_NT("dt_bias", &p->dt_bias),
                                   SF_NT("initial_states", &p->initial_states),
                                   SF_NT("seq_idx", &p->seq_idx), SF_NT("cu_seqlens", &p->cu_seqlens)};
    if (check_io) CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    if (p->chunk_size != 64 && p->chunk_size != 128 && p->chunk_size != 256)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: chunk_size %d; supported: 64, 128, 256", op,
                       p->chunk_size);
    pr.chunk = p->chunk_size;
    CHK(check_dt_limits(ctx, op, p->dt_min, p->dt_max));
    CHK(sf_check_flag(ctx, op, "dt_softplus", p->dt_softplus));
    CHK(check_finite_params(ctx, op, &p->A, &p->D, &p->dt_bias));
    *prp = pr;
    return SF_OK;
}

static sf_status ssd_fwd_impl(sf_ctx *ctx, const sf_ssd_fwd_params *p, const char *op, int states_only) {
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);
    sf_ssd_problem pr;
    CHK(sf_ssd_validate(ctx, p, op, "out", "final_states", 1, &pr));
    const int64_t b = pr.batch, L = pr.seqlen, H = pr.nheads, P = pr.headdim, N = pr.dstate;
    const int64_t ns = pr.varlen == 2 ? pr.nseq : b;
    pr.states_only = states_only;
    if (states_only && (be != SF_BACKEND_CUDA || !pr.has_final))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: the CUDA backend and final_states are needed", op);

    if ((b == 0 || L == 0 || H == 0 || P == 0) && be != SF_BACKEND_CUDA) {
        ssd_fwd_empty_host(p, ns, H, P, N);
        ctx->last_backend = be;
        return SF_OK;
    }
    sf_status s;
    switch (be) {
    case SF_BACKEND_REF:
        CHK(sf_ssd_build_segments(ctx, op, &pr));
        s = sf_ref_ssd_fwd(ctx, &pr);
        break;
    case SF_BACKEND_CPU:
        CHK(sf_ssd_build_segments(ctx, op, &pr));
        s = sf_cpu_ssd_fwd(ctx, &pr);
        break;
    default:
        s = sf_cuda_ssd_fwd(ctx, &pr);
        break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

sf_status sf_ssd_fwd(sf_ctx *ctx, const sf_ssd_fwd_params *p) { return ssd_fwd_impl(ctx, p, "sf_ssd_fwd", 0); }

sf_status sf_ssd_states_only(sf_ctx *ctx, const sf_ssd_fwd_params *p) {
    return ssd_fwd_impl(ctx, p, "sf_ssd_states_only", 1);
}

sf_status sf_ssd_step(sf_ctx *ctx, const sf_ssd_step_params *p) {
    static const char *op = "sf_ssd_step";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 3, NULL, SF_DT_FLOAT, 1));
    sf_ssd_step_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.batch = p->x.shape[0];
    pr.nheads = p->x.shape[1];
    pr.headdim = p->x.shape[2];
    int dt = (int)p->x.dtype;
    int64_t b = pr.batch, H = pr.nheads, P = pr.headdim;
    if (H == 0 || P == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: x has an empty head dimension", op);
    /* dt, B and C: each x's dtype or f32, as in the forward */
    const int dt_bc = SF_DT_X_OR_F32(dt);
    CHK(sf_check_tensor(ctx, op, "B", &p->B, 1, 3, (int64_t[]){b, SF_ANY, SF_ANY}, dt_bc, 1));
    pr.ngroups = p->B.shape[1];
    pr.dstate = p->B.shape[2];
    int64_t G = pr.ngroups, N = pr.dstate;
    if (G == 0 || N == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: B has an empty group or state dimension", op);
    if (H % G != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: ngroups %lld (B dim 1) does not divide nheads %lld",
                       op, (long long)G, (long long)H);
    pr.heads_per_group = H / G;
    CHK(sf_check_tensor(ctx, op, "C", &p->C, 1, 3, (int64_t[]){b, G, N}, dt_bc, 1));
    CHK(sf_check_tensor(ctx, op, "dt", &p->dt, 1, 2, (int64_t[]){b, H}, dt_bc, 0));
    CHK(sf_check_tensor(ctx, op, "A", &p->A, 1, 1, (int64_t[]){H}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 3, (int64_t[]){b, H, P}, dt, 1));
    /* the state cache in f32, f16 or bf16, whatever x's dtype */
    CHK(sf_check_tensor(ctx, op, "state", &p->state, 1, 4, (int64_t[]){SF_ANY, H, P, N}, SF_DT_FLOAT, 1));
    pr.nslots = p->state.shape[0];
    if (p->D.data) {
        if (p->D.rank == 1)
            CHK(sf_check_tensor(ctx, op, "D", &p->D, 1, 1, (int64_t[]){H}, SF_F32, 0));
        else
            CHK(sf_check_tensor(ctx, op, "D", &p->D, 1, 2, (int64_t[]){H, P}, SF_F32, 0));
        pr.has_D = 1;
        pr.D_per_channel = p->D.rank == 2;
    }
    CHK(sf_check_tensor(ctx, op, "z", &p->z, 0, 3, (int64_t[]){b, H, P}, dt, 1));
    pr.has_z = p->z.data != NULL;
    CHK(sf_check_tensor(ctx, op, "dt_bias", &p->dt_bias, 0, 1, (int64_t[]){H}, SF_F32, 0));
    pr.has_dt_bias = p->dt_bias.data != NULL;
    CHK(sf_check_tensor(ctx, op, "state_idx", &p->state_idx, 0, 1, (int64_t[]){b}, SF_I32, 0));
    pr.has_idx = p->state_idx.data != NULL;
    if (!pr.has_idx && pr.nslots != b)
        return sf_fail(ctx, SF_ERR_SHAPE,
                       "%s: state has %lld slots but the batch is %lld; give state_idx to map "
                       "sequences to slots",
                       op, (long long)pr.nslots, (long long)b);
    const sf_named_tensor outs[] = {SF_NT("state", &p->state), SF_NT("out", &p->out)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("dt", &p->dt), SF_NT("A", &p->A),
                                   SF_NT("B", &p->B), SF_NT("C", &p->C), SF_NT("D", &p->D),
                                   SF_NT("z", &p->z), SF_NT("dt_bias", &p->dt_bias),
                                   SF_NT("state_idx", &p->state_idx)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    CHK(check_dt_limits(ctx, op, p->dt_min, p->dt_max));
    CHK(sf_check_flag(ctx, op, "dt_softplus", p->dt_softplus));
    CHK(check_finite_params(ctx, op, &p->A, &p->D, &p->dt_bias));

    if (pr.has_idx && ctx->device < 0) { /* device indices: see seqfuse.h */
        CHK(sf_check_state_idx(ctx, op, &p->state_idx, b, pr.nslots));
    }

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_ssd_step(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_ssd_step(ctx, &pr); break;
    default: s = sf_cuda_ssd_step(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
