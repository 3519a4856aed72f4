/* attn_bwd.c - front end of sf_attn_bwd: validate (the forward's checks on
 * p->fwd, then the gradients), derive the problem, dispatch. */
#include "attn_bwd.h"
#include "check.h"

void sf_attn_bwd_params_init(sf_attn_bwd_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    sf_attn_fwd_params_init(&p->fwd);
    p->backend = SF_BACKEND_AUTO;
}

sf_status sf_attn_bwd(sf_ctx *ctx, const sf_attn_bwd_params *p) {
    static const char *op = "sf_attn_bwd";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);

    sf_attn_bwd_problem pr;
    memset(&pr, 0, sizeof pr);
    const sf_attn_fwd_params *f = &p->fwd;
    /* out and lse are inputs here, both required (the forward's lse is optional) */
    if (!f->lse.data)
        return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: lse is required (the forward's lse output)", op);
    CHK(sf_attn_problem_build(ctx, op, f, &pr.f));
    pr.p = p;
    CHK(sf_check_flag(ctx, op, "deterministic", p->deterministic));
    pr.deterministic = p->deterministic;

    const int dt = (int)f->q.dtype;
    const int r = f->q.rank;
    int64_t qs[4], ks[4];
    for (int i = 0; i < r; i++) {
        qs[i] = f->q.shape[i];
        ks[i] = f->k.shape[i];
    }
    CHK(sf_check_tensor(ctx, op, "dout", &p->dout, 1, r, qs, dt, 1));
    CHK(sf_check_tensor(ctx, op, "dq", &p->dq, 1, r, qs, dt, 1));
    CHK(sf_check_tensor(ctx, op, "dk", &p->dk, 1, r, ks, dt, 1));
    CHK(sf_check_tensor(ctx, op, "dv", &p->dv, 1, r, ks, dt, 1));
    const sf_named_tensor outs[] = {SF_NT("dq", &p->dq), SF_NT("dk", &p->dk), SF_NT("dv", &p->dv)};
    const sf_named_tensor ins[] = {SF_NT("q", &f->q), SF_NT("k", &f->k), SF_NT("v", &f->v),
                                   SF_NT("out", &f->out), SF_NT("lse", &f->lse),
                                   SF_NT("dout", &p->dout),
                                   SF_NT("cu_seqlens_q", &f->cu_seqlens_q),
                                   SF_NT("cu_seqlens_k", &f->cu_seqlens_k),
                                   SF_NT("alibi_slopes", &f->alibi_slopes)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_attn_bwd(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_attn_bwd(ctx, &pr); break;
    default: s = sf_cuda_attn_bwd(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
