/* layer_ops.c - front ends of the layer ops around SSD: sf_conv1d_fwd,
 * sf_conv1d_update and sf_rmsnorm_gated.  Validate every descriptor,
 * derive the problem (and, for host tensors, the segment list of the
 * conv), dispatch to a backend. */
#include "check.h"
#include "layer_ops.h"

void sf_conv1d_params_init(sf_conv1d_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->backend = SF_BACKEND_AUTO;
}

void sf_conv1d_update_params_init(sf_conv1d_update_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->backend = SF_BACKEND_AUTO;
}

void sf_rmsnorm_gated_params_init(sf_rmsnorm_gated_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->group_size = 0;
    p->norm_before_gate = 0;
    p->eps = 1e-5f;
    p->backend = SF_BACKEND_AUTO;
}

/* The weight (dim, W) and its width: W outside 2..4 has no kernel. */
static sf_status check_weight(sf_ctx *ctx, const char *op, const sf_tensor *w, int64_t dim,
                              int *width) {
    CHK(sf_check_tensor(ctx, op, "weight", w, 1, 2, (int64_t[]){dim, SF_ANY}, SF_F32, 0));
    int64_t W = w->shape[1];
    if (W < 2 || W > 4)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "%s: kernel width %lld (weight dim 1) is not supported; supported: 2, 3, 4",
                       op, (long long)W);
    *width = (int)W;
    return SF_OK;
}

/* Host slot indices: each in range, no slot used twice (a race on the
 * GPU, an order dependence anywhere); negative entries are padding. */

/* Host segment list of the conv: one per batch row, or one per cu_seqlens
 * sequence (the front end has checked cu_seqlens already). */
static sf_status conv_segments(sf_ctx *ctx, sf_conv1d_problem *pr) {
    int64_t n = pr->varlen ? pr->nseq : pr->batch;
    sf_conv1d_segment *seg =
        (sf_conv1d_segment *)sf_host_scratch(ctx, (size_t)(n > 0 ? n : 1) * sizeof *seg);
    if (!seg) return SF_ERR_OUT_OF_MEMORY;
    const sf_tensor *cu = &pr->p->cu_seqlens;
    for (int64_t i = 0; i < n; i++) {
        if (pr->varlen)
            seg[i] = (sf_conv1d_segment){0, sf_ldi(cu->data, cu->dtype, i * cu->stride[0]),
                                         sf_ldi(cu->data, cu->dtype, (i + 1) * cu->stride[0]), i};
        else
            seg[i] = (sf_conv1d_segment){i, 0, pr->seqlen, i};
    }
    pr->seg = seg;
    pr->nseg = n;
    return SF_OK;
}

sf_status sf_conv1d_fwd(sf_ctx *ctx, const sf_conv1d_params *p) {
    static const char *op = "sf_conv1d_fwd";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 3, NULL, SF_DT_FLOAT, 1));
    sf_conv1d_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.batch = p->x.shape[0];
    pr.seqlen = p->x.shape[1];
    pr.dim = p->x.shape[2];
    const int dt = (int)p->x.dtype;
    const int64_t b = pr.batch, L = pr.seqlen, dim = pr.dim;
    CHK(check_weight(ctx, op, &p->weight, dim, &pr.width));
    const int64_t W = pr.width;
    CHK(sf_check_tensor(ctx, op, "bias", &p->bias, 0, 1, (int64_t[]){dim}, SF_F32, 0));
    pr.has_bias = p->bias.data != NULL;
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 3, (int64_t[]){b, L, dim}, dt, 1));

    pr.nseq = b;
    if (p->cu_seqlens.data) {
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
        pr.varlen = 1;
        pr.nseq = p->cu_seqlens.shape[0] - 1;
        if (ctx->device < 0)
            CHK(sf_check_cu_seqlens(ctx, op, "cu_seqlens", &p->cu_seqlens, L, NULL));
    }
    const int64_t ns = pr.nseq;
    CHK(sf_check_tensor(ctx, op, "initial_state", &p->initial_state, 0, 3,
                        (int64_t[]){ns, dim, W - 1}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "final_state", &p->final_state, 0, 3,
                        (int64_t[]){ns, dim, W - 1}, SF_F32, 0));
    pr.has_init = p->initial_state.data != NULL;
    pr.has_final = p->final_state.data != NULL;

    const sf_named_tensor outs[] = {SF_NT("out", &p->out), SF_NT("final_state", &p->final_state)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("weight", &p->weight), SF_NT("bias", &p->bias),
                                   SF_NT("initial_state", &p->initial_state),
                                   SF_NT("cu_seqlens", &p->cu_seqlens)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    CHK(sf_check_flag(ctx, op, "silu", p->silu));
    pr.silu = p->silu;

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF:
        CHK(conv_segments(ctx, &pr));
        s = sf_ref_conv1d_fwd(ctx, &pr);
        break;
    case SF_BACKEND_CPU:
        CHK(conv_segments(ctx, &pr));
        s = sf_cpu_conv1d_fwd(ctx, &pr);
        break;
    default: s = sf_cuda_conv1d_fwd(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

sf_status sf_conv1d_update(sf_ctx *ctx, const sf_conv1d_update_params *p) {
    static const char *op = "sf_conv1d_update";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 2, NULL, SF_DT_FLOAT, 0));
    sf_conv1d_update_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.batch = p->x.shape[0];
    pr.dim = p->x.shape[1];
    const int dt = (int)p->x.dtype;
    const int64_t b = pr.batch, dim = pr.dim;
    CHK(check_weight(ctx, op, &p->weight, dim, &pr.width));
    const int64_t W = pr.width;
    CHK(sf_check_tensor(ctx, op, "bias", &p->bias, 0, 1, (int64_t[]){dim}, SF_F32, 0));
    pr.has_bias = p->bias.data != NULL;
    CHK(sf_check_tensor(ctx, op, "conv_state", &p->conv_state, 1, 3,
                        (int64_t[]){SF_ANY, dim, W - 1}, SF_F32, 0));
    pr.nslots = p->conv_state.shape[0];
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 2, (int64_t[]){b, dim}, dt, 0));
    CHK(sf_check_tensor(ctx, op, "state_idx", &p->state_idx, 0, 1, (int64_t[]){b}, SF_I32, 0));
    pr.has_idx = p->state_idx.data != NULL;
    if (!pr.has_idx && pr.nslots != b)
        return sf_fail(ctx, SF_ERR_SHAPE,
                       "%s: conv_state has %lld slots but the batch is %lld; give state_idx to map "
                       "sequences to slots",
                       op, (long long)pr.nslots, (long long)b);
    const sf_named_tensor outs[] = {SF_NT("conv_state", &p->conv_state), SF_NT("out", &p->out)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("weight", &p->weight), SF_NT("bias", &p->bias),
                                   SF_NT("state_idx", &p->state_idx)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    CHK(sf_check_flag(ctx, op, "silu", p->silu));
    pr.silu = p->silu;
    if (pr.has_idx && ctx->device < 0)
        CHK(sf_check_state_idx(ctx, op, &p->state_idx, b, pr.nslots));

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_conv1d_update(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_conv1d_update(ctx, &pr); break;
    default: s = sf_cuda_conv1d_update(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

sf_status sf_rmsnorm_gated(sf_ctx *ctx, const sf_rmsnorm_gated_params *p) {
    static const char *op = "sf_rmsnorm_gated";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 2, NULL, SF_DT_FLOAT, 1));
    sf_rmsnorm_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.rows = p->x.shape[0];
    pr.dim = p->x.shape[1];
    const int dt = (int)p->x.dtype;
    const int64_t rows = pr.rows, D = pr.dim;
    if (D == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: x has an empty row dimension (%lld, 0)", op,
                       (long long)rows);
    CHK(sf_check_tensor(ctx, op, "z", &p->z, 0, 2, (int64_t[]){rows, D}, dt, 1));
    pr.has_z = p->z.data != NULL;
    CHK(sf_check_tensor(ctx, op, "weight", &p->weight, 1, 1, (int64_t[]){D}, SF_F32, 0));
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 2, (int64_t[]){rows, D}, dt, 1));
    if (p->group_size < 0)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: group_size %d is negative (0 means D)", op,
                       p->group_size);
    pr.group = p->group_size == 0 ? D : p->group_size;
    if (D % pr.group != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: group_size %lld does not divide D = %lld", op,
                       (long long)pr.group, (long long)D);
    if (!(p->eps > 0.0f) || !isfinite(p->eps))
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: eps %g must be positive and finite", op,
                       (double)p->eps);
    pr.eps = p->eps;
    CHK(sf_check_flag(ctx, op, "norm_before_gate", p->norm_before_gate));
    pr.norm_before_gate = p->norm_before_gate;
    const sf_named_tensor outs[] = {SF_NT("out", &p->out)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("z", &p->z), SF_NT("weight", &p->weight)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_rmsnorm_gated(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_rmsnorm_gated(ctx, &pr); break;
    default: s = sf_cuda_rmsnorm_gated(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
