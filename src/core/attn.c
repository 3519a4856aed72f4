/* attn.c - front end of sf_attn_fwd: validate, derive the problem,
 * dispatch. */
#include "attn_bwd.h"
#include "check.h"

void sf_attn_fwd_params_init(sf_attn_fwd_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->softmax_scale = 0.0f;
    p->window_left = -1;
    p->window_right = -1;
    p->backend = SF_BACKEND_AUTO;
}


/* Validates the forward's description p (every tensor, mask and modifier)
 * and derives the problem *out; errors are reported under the name `op`
 * (sf_attn_bwd validates its embedded forward description through here). */
sf_status sf_attn_problem_build(sf_ctx *ctx, const char *op, const sf_attn_fwd_params *p,
                                sf_attn_problem *out) {
    sf_attn_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    int varlen = p->cu_seqlens_q.data || p->cu_seqlens_k.data;
    if (varlen && !(p->cu_seqlens_q.data && p->cu_seqlens_k.data))
        return sf_fail(ctx, SF_ERR_NULL_POINTER,
                       "%s: variable length needs both cu_seqlens_q and cu_seqlens_k", op);
    pr.varlen = varlen;
    int r = varlen ? 3 : 4; /* rank of q, k, v, out */
    CHK(sf_check_tensor(ctx, op, "q", &p->q, 1, r, NULL, SF_DT_FLOAT, 1));
    int dt = (int)p->q.dtype;
    int64_t H = p->q.shape[r - 2], d = p->q.shape[r - 1];
    if (H == 0 || d == 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: q has %lld heads of dim %lld; both must be >= 1", op,
                       (long long)H, (long long)d);
    if (d > 256)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: head dim %lld is not supported (at most 256)",
                       op, (long long)d);
    if (varlen) {
        CHK(sf_check_tensor(ctx, op, "cu_seqlens_q", &p->cu_seqlens_q, 1, 1, (int64_t[]){SF_ANY},
                            SF_DT_INDEX, 0));
        int64_t nb = p->cu_seqlens_q.shape[0];
        if (nb < 1)
            return sf_fail(ctx, SF_ERR_SHAPE, "%s: cu_seqlens_q needs at least one entry", op);
        CHK(sf_check_tensor(ctx, op, "cu_seqlens_k", &p->cu_seqlens_k, 1, 1, (int64_t[]){nb},
                            SF_DT_INDEX, 0));
        pr.batch = nb - 1;
        CHK(sf_check_tensor(ctx, op, "k", &p->k, 1, 3, (int64_t[]){SF_ANY, SF_ANY, d}, dt, 1));
        int64_t Hkv = p->k.shape[1];
        CHK(sf_check_tensor(ctx, op, "v", &p->v, 1, 3, (int64_t[]){p->k.shape[0], Hkv, d}, dt, 1));
        CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 3, (int64_t[]){p->q.shape[0], H, d}, dt, 1));
        CHK(sf_check_tensor(ctx, op, "lse", &p->lse, 0, 2, (int64_t[]){H, p->q.shape[0]}, SF_F32, 0));
        pr.nheads_kv = Hkv;
        if (ctx->device < 0) {
            CHK(sf_check_cu_seqlens(ctx, op, "cu_seqlens_q", &p->cu_seqlens_q, p->q.shape[0], &pr.max_lq));
            CHK(sf_check_cu_seqlens(ctx, op, "cu_seqlens_k", &p->cu_seqlens_k, p->k.shape[0], &pr.max_lk));
        } else { /* device arrays: the kernels read the lengths themselves */
            pr.max_lq = p->q.shape[0];
            pr.max_lk = p->k.shape[0];
        }
    } else {
        int64_t b = p->q.shape[0];
        CHK(sf_check_tensor(ctx, op, "k", &p->k, 1, 4, (int64_t[]){b, SF_ANY, SF_ANY, d}, dt, 1));
        int64_t Lk = p->k.shape[1], Hkv = p->k.shape[2];
        CHK(sf_check_tensor(ctx, op, "v", &p->v, 1, 4, (int64_t[]){b, Lk, Hkv, d}, dt, 1));
        CHK(sf_check_tensor(ctx, op, "out", &p->out, 1, 4,
                            (int64_t[]){b, p->q.shape[1], H, d}, dt, 1));
        CHK(sf_check_tensor(ctx, op, "lse", &p->lse, 0, 3, (int64_t[]){b, H, p->q.shape[1]}, SF_F32, 0));
        pr.batch = b;
        pr.nheads_kv = Hkv;
        pr.max_lq = p->q.shape[1];
        pr.max_lk = Lk;
    }
    pr.nheads = H;
    pr.headdim = d;
    if (pr.nheads_kv == 0 || H % pr.nheads_kv != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: nheads_kv %lld does not divide nheads %lld", op,
                       (long long)pr.nheads_kv, (long long)H);
    pr.has_lse = p->lse.data != NULL;
    const sf_named_tensor outs[] = {SF_NT("out", &p->out), SF_NT("lse", &p->lse)};
    const sf_named_tensor ins[] = {SF_NT("q", &p->q), SF_NT("k", &p->k), SF_NT("v", &p->v),
                                   SF_NT("cu_seqlens_q", &p->cu_seqlens_q),
                                   SF_NT("cu_seqlens_k", &p->cu_seqlens_k),
                                   SF_NT("alibi_slopes", &p->alibi_slopes)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    float sc = p->softmax_scale;
    if (!isfinite(sc))
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: softmax_scale %g is not finite", op, (double)sc);
    pr.scale = sc == 0.0f ? 1.0f / sqrtf((float)d) : sc;
    pr.wl = p->window_left < 0 ? -1 : p->window_left;
    pr.wr = p->window_right < 0 ? -1 : p->window_right;
    CHK(sf_check_flag(ctx, op, "causal", p->causal));
    if (p->causal) pr.wr = 0;
    if (!isfinite(p->softcap) || p->softcap < 0.0f)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: softcap %g; give 0 (off) or a finite positive cap",
                       op, (double)p->softcap);
    pr.softcap = p->softcap;
    CHK(sf_check_alibi(ctx, op, &p->alibi_slopes, pr.batch, pr.nheads, &pr.alibi, &pr.alibi_sb, &pr.alibi_sh));
    *out = pr;
    return SF_OK;
}

sf_status sf_attn_fwd(sf_ctx *ctx, const sf_attn_fwd_params *p) {
    static const char *op = "sf_attn_fwd";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);
    sf_attn_problem pr;
    CHK(sf_attn_problem_build(ctx, op, p, &pr));

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_attn_fwd(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_attn_fwd(ctx, &pr); break;
    default: s = sf_cuda_attn_fwd(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
