/* gemm_swiglu.c - front end of the gate/up projection with SwiGLU fused in:
 * validate every descriptor, derive the problem, dispatch. */
#include "check.h"
#include "gemm_swiglu.h"

void sf_gemm_swiglu_params_init(sf_gemm_swiglu_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->backend = SF_BACKEND_AUTO;
}

sf_status sf_gemm_swiglu(sf_ctx *ctx, const sf_gemm_swiglu_params *p) {
    static const char *op = "sf_gemm_swiglu";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);
    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 2, NULL, SF_DT_FLOAT, 1));
    sf_gemm_swiglu_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.M = p->x.shape[0];
    pr.K = p->x.shape[1];
    const int dt = (int)p->x.dtype;
    CHK(sf_check_tensor(ctx, op, "w_gate", &p->w_gate, 1, 2, (int64_t[]){SF_ANY, pr.K}, dt, 1));
    pr.I = p->w_gate.shape[0];
    CHK(sf_check_tensor(ctx, op, "w_up", &p->w_up, 1, 2, (int64_t[]){pr.I, pr.K}, dt, 1));
    if (pr.K < 1 || pr.I < 1)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: K = %lld (columns of x) and I = %lld (rows of w_gate) must both be at least 1",
                       op, (long long)pr.K, (long long)pr.I);
    CHK(sf_check_tensor(ctx, op, "y", &p->y, 1, 2, (int64_t[]){pr.M, pr.I}, dt, 1));
    const sf_named_tensor outs[] = {SF_NT("y", &p->y)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("w_gate", &p->w_gate), SF_NT("w_up", &p->w_up)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    if (pr.M == 0) { /* nothing to compute, on any backend */
        ctx->last_backend = be;
        return SF_OK;
    }

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_gemm_swiglu(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_gemm_swiglu(ctx, &pr); break;
    default: s = sf_cuda_gemm_swiglu(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
