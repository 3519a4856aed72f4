/* fused_ops.c - front ends of the fused layer ops: residual add + RMSNorm /
 * LayerNorm, SwiGLU and RoPE.  Validate every descriptor, derive the
 * problem, dispatch to a backend (reference, CPU, or CUDA: src/cuda/fused/). */
#include "check.h"
#include "fused_ops.h"

#include <stdio.h>

void sf_norm_params_init(sf_norm_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->eps = 1e-5f;
    p->backend = SF_BACKEND_AUTO;
}

void sf_swiglu_params_init(sf_swiglu_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->layout = SF_SWIGLU_SEPARATE;
    p->backend = SF_BACKEND_AUTO;
}

void sf_rope_params_init(sf_rope_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->style = SF_ROPE_NEOX;
    p->theta = 10000.0f;
    p->scaling = SF_ROPE_SCALING_NONE;
    p->factor = 8.0f;
    p->low_freq_factor = 1.0f;
    p->high_freq_factor = 4.0f;
    p->original_max_position = 8192;
    p->backend = SF_BACKEND_AUTO;
}

/* Same data, dtype, shape and strides: the one overlap an in-place output
 * may have with its input. */
static int same_view(const sf_tensor *a, const sf_tensor *b) {
    if (!a->data || a->data != b->data || a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->stride[i] != b->stride[i]))
            return 0;
    return 1;
}

static sf_status add_norm(sf_ctx *ctx, const sf_norm_params *p, const char *op, int layer,
                          int allow_residual) {
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 2, NULL, SF_DT_FLOAT, 1));
    sf_norm_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.op = op;
    pr.layer = layer;
    pr.rows = p->x.shape[0];
    pr.dim = p->x.shape[1];
    const int dt = (int)p->x.dtype;
    const int64_t rows = pr.rows, D = pr.dim;
    if (D == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: x has an empty row dimension (%lld, 0)", op,
                       (long long)rows);
    if (!allow_residual && (p->residual.data || p->residual_out.data))
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "%s takes no residual or residual_out; call sf_add_%s for the fused add", op,
                       layer ? "layernorm" : "rmsnorm");
    CHK(sf_check_tensor(ctx, op, "residual", &p->residual, 0, 2, (int64_t[]){rows, D},
                        SF_DT_X_OR_F32(dt), 1));
    CHK(sf_check_tensor(ctx, op, "weight", &p->weight, 1, 1, (int64_t[]){D}, SF_DT_X_OR_F32(dt), 0));
    CHK(sf_check_tensor(ctx, op, "bias", &p->bias, 0, 1, (int64_t[]){D}, SF_DT_X_OR_F32(dt), 0));
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 2, (int64_t[]){rows, D}, dt, 1));
    CHK(sf_check_tensor(ctx, op, "residual_out", &p->residual_out, 0, 2, (int64_t[]){rows, D},
                        SF_DT_X_OR_F32(dt), 1));
    pr.has_res = p->residual.data != NULL;
    pr.has_hout = p->residual_out.data != NULL;
    pr.has_bias = p->bias.data != NULL;
    if (!(p->eps > 0.0f) || !isfinite(p->eps))
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: eps %g must be positive and finite", op,
                       (double)p->eps);
    pr.eps = p->eps;
    /* residual_out may be the residual itself (in place): then the residual
     * is left out of the overlap check, which still covers every other pair */
    const int inplace = pr.has_res && same_view(&p->residual_out, &p->residual);
    const sf_named_tensor outs[] = {SF_NT("out", &p->out), SF_NT("residual_out", &p->residual_out)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("weight", &p->weight),
                                   SF_NT("bias", &p->bias), SF_NT("residual", &p->residual)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins) - (inplace ? 1 : 0)));
    if (inplace) CHK(sf_check_no_alias(ctx, op, "out", &p->out, "residual", &p->residual));

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_add_norm(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_add_norm(ctx, &pr); break;
    default: s = sf_cuda_add_norm(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

sf_status sf_add_rmsnorm(sf_ctx *ctx, const sf_norm_params *p) {
    return add_norm(ctx, p, "sf_add_rmsnorm", 0, 1);
}
sf_status sf_add_layernorm(sf_ctx *ctx, const sf_norm_params *p) {
    return add_norm(ctx, p, "sf_add_layernorm", 1, 1);
}
sf_status sf_rmsnorm(sf_ctx *ctx, const sf_norm_params *p) {
    return add_norm(ctx, p, "sf_rmsnorm", 0, 0);
}
sf_status sf_layernorm(sf_ctx *ctx, const sf_norm_params *p) {
    return add_norm(ctx, p, "sf_layernorm", 1, 0);
}

sf_status sf_swiglu(sf_ctx *ctx, const sf_swiglu_params *p) {
    static const char *op = "sf_swiglu";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);
    if ((int)p->layout < (int)SF_SWIGLU_SEPARATE || (int)p->layout > (int)SF_SWIGLU_INTERLEAVED)
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "%s: layout %d is not one of SEPARATE (0), CONCAT (1), INTERLEAVED (2)", op,
                       (int)p->layout);
    CHK(sf_check_tensor(ctx, op, "gate", &p->gate, 1, 2, NULL, SF_DT_FLOAT, 1));
    sf_swiglu_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.layout = (int)p->layout;
    pr.rows = p->gate.shape[0];
    const int dt = (int)p->gate.dtype;
    const int64_t w = p->gate.shape[1];
    if (pr.layout == SF_SWIGLU_SEPARATE) {
        pr.n = w;
        CHK(sf_check_tensor(ctx, op, "up", &p->up, 1, 2, (int64_t[]){pr.rows, w}, dt, 1));
    } else {
        if (p->up.data)
            return sf_fail(ctx, SF_ERR_INVALID_ARG,
                           "%s: up must be absent with the %s layout (gate holds both halves)", op,
                           pr.layout == SF_SWIGLU_CONCAT ? "CONCAT" : "INTERLEAVED");
        if (w % 2 != 0)
            return sf_fail(ctx, SF_ERR_SHAPE,
                           "%s: gate has %lld columns; the %s layout needs an even count (2n)", op,
                           (long long)w, pr.layout == SF_SWIGLU_CONCAT ? "CONCAT" : "INTERLEAVED");
        pr.n = w / 2;
    }
    if (pr.n == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: gate has no columns (n = 0)", op);
    CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 2, (int64_t[]){pr.rows, pr.n}, dt, 1));
    const sf_named_tensor outs[] = {SF_NT("out", &p->out)};
    const sf_named_tensor ins[] = {SF_NT("gate", &p->gate), SF_NT("up", &p->up)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_swiglu(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_swiglu(ctx, &pr); break;
    default: s = sf_cuda_swiglu(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

static sf_status check_finite_pos(sf_ctx *ctx, const char *op, const char *name, float v) {
    if (!(v > 0.0f) || !isfinite(v))
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %s %g must be positive and finite", op, name,
                       (double)v);
    return SF_OK;
}

sf_status sf_rope_check(sf_ctx *ctx, const char *op, const char *pfx, const sf_rope_params *p,
                        int64_t d, sf_rope_spec *s) {
    char nc[32], ns[32];
    memset(s, 0, sizeof *s);
    s->p = p;
    if (p->rotary_dim < 0 || p->rotary_dim > d || p->rotary_dim % 2 != 0)
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "%s: %srotary_dim %d must be even and in [0, d = %lld] (0 means d)", op, pfx,
                       p->rotary_dim, (long long)d);
    s->R = p->rotary_dim == 0 ? d : p->rotary_dim;
    if (s->R % 2 != 0 || s->R == 0)
        return sf_fail(ctx, SF_ERR_SHAPE,
                       "%s: head dim d = %lld is rotated whole (%srotary_dim 0) but is not a "
                       "positive even number",
                       op, (long long)d, pfx);
    if (p->style != SF_ROPE_NEOX && p->style != SF_ROPE_GPTJ)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %sstyle %d is not NEOX (0) or GPTJ (1)", op,
                       pfx, (int)p->style);
    s->gptj = p->style == SF_ROPE_GPTJ;
    if ((p->cos.data != NULL) != (p->sin.data != NULL))
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "%s: %scos and %ssin are given together or not at all", op, pfx, pfx);
    s->has_tab = p->cos.data != NULL;
    if (s->has_tab) {
        snprintf(nc, sizeof nc, "%scos", pfx);
        snprintf(ns, sizeof ns, "%ssin", pfx);
        CHK(sf_check_tensor(ctx, op, nc, &p->cos, 1, 2, (int64_t[]){SF_ANY, s->R / 2}, SF_F32, 0));
        s->npos = p->cos.shape[0];
        CHK(sf_check_tensor(ctx, op, ns, &p->sin, 1, 2, (int64_t[]){s->npos, s->R / 2}, SF_F32, 0));
        return SF_OK;
    }
    snprintf(nc, sizeof nc, "%stheta", pfx);
    CHK(check_finite_pos(ctx, op, nc, p->theta));
    if (p->scaling != SF_ROPE_SCALING_NONE && p->scaling != SF_ROPE_LLAMA3)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %sscaling %d is not NONE (0) or LLAMA3 (1)",
                       op, pfx, (int)p->scaling);
    if (p->scaling == SF_ROPE_LLAMA3) {
        snprintf(nc, sizeof nc, "%sfactor", pfx);
        CHK(check_finite_pos(ctx, op, nc, p->factor));
        snprintf(nc, sizeof nc, "%slow_freq_factor", pfx);
        CHK(check_finite_pos(ctx, op, nc, p->low_freq_factor));
        snprintf(nc, sizeof nc, "%shigh_freq_factor", pfx);
        CHK(check_finite_pos(ctx, op, nc, p->high_freq_factor));
        if (!(p->low_freq_factor < p->high_freq_factor))
            return sf_fail(ctx, SF_ERR_INVALID_ARG,
                           "%s: llama3 scaling needs %slow_freq_factor (%g) < %shigh_freq_factor (%g)",
                           op, pfx, (double)p->low_freq_factor, pfx, (double)p->high_freq_factor);
        if (p->original_max_position < 1)
            return sf_fail(ctx, SF_ERR_INVALID_ARG,
                           "%s: %soriginal_max_position %d must be at least 1", op, pfx,
                           p->original_max_position);
    }
    return SF_OK;
}

sf_status sf_rope(sf_ctx *ctx, const sf_rope_params *p) {
    static const char *op = "sf_rope";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    CHK(sf_check_tensor(ctx, op, "q", &p->q, 1, 3, NULL, SF_DT_FLOAT, 1));
    sf_rope_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.T = p->q.shape[0];
    pr.H = p->q.shape[1];
    pr.d = p->q.shape[2];
    const int dt = (int)p->q.dtype;
    const int64_t T = pr.T, d = pr.d;
    CHK(sf_check_tensor(ctx, op, "k", &p->k, 0, 3, (int64_t[]){T, SF_ANY, d}, dt, 1));
    pr.has_k = p->k.data != NULL;
    pr.Hkv = pr.has_k ? p->k.shape[1] : 0;
    CHK(sf_check_tensor(ctx, op, "q_out", &p->q_out, 0, 3, (int64_t[]){T, pr.H, d}, dt, 1));
    if (p->k_out.data && !pr.has_k)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: k_out is given without k", op);
    CHK(sf_check_tensor(ctx, op, "k_out", &p->k_out, 0, 3, (int64_t[]){T, pr.Hkv, d}, dt, 1));
    pr.q_inplace = p->q_out.data == NULL;
    pr.k_inplace = pr.has_k && p->k_out.data == NULL;
    CHK(sf_rope_check(ctx, op, "", p, d, &pr.spec));
    pr.R = pr.spec.R;
    pr.gptj = pr.spec.gptj;
    pr.has_tab = pr.spec.has_tab;
    const int64_t npos = pr.spec.npos;
    CHK(sf_check_tensor(ctx, op, "positions", &p->positions, 0, 1, (int64_t[]){T}, SF_DT_INDEX, 0));
    pr.has_pos = p->positions.data != NULL;
    /* in place, q and k are outputs themselves */
    const sf_named_tensor outs[] = {SF_NT(pr.q_inplace ? "q" : "q_out", pr.q_inplace ? &p->q : &p->q_out),
                                    SF_NT(pr.k_inplace ? "k" : "k_out", pr.k_inplace ? &p->k : &p->k_out)};
    const sf_named_tensor ins[] = {SF_NT("q", pr.q_inplace ? &p->q_out : &p->q),
                                   SF_NT("k", pr.k_inplace ? &p->k_out : &p->k),
                                   SF_NT("positions", &p->positions), SF_NT("cos", &p->cos),
                                   SF_NT("sin", &p->sin)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    if (pr.has_pos && ctx->device < 0) {
        const sf_tensor *ps = &p->positions;
        for (int64_t t = 0; t < T; t++) {
            const int64_t v = sf_ldi(ps->data, ps->dtype, t * ps->stride[0]);
            if (v < 0 || (pr.has_tab && v >= npos) || v > (INT64_C(1) << 40))
                return sf_fail(ctx, SF_ERR_INDEX,
                               "%s: positions[%lld] = %lld is outside [0, %lld)", op, (long long)t,
                               (long long)v, (long long)(pr.has_tab ? npos : (INT64_C(1) << 40) + 1));
        }
    } else if (!pr.has_pos && pr.has_tab && T > npos) {
        return sf_fail(ctx, SF_ERR_SHAPE,
                       "%s: %lld tokens at positions 0..T-1 need T rows of cos and sin, which have %lld",
                       op, (long long)T, (long long)npos);
    }

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_rope(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_rope(ctx, &pr); break;
    default: s = sf_cuda_rope(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
