/* gemm.c - front end of the dense matrix product: validate every
 * descriptor, derive the problem, dispatch. */
#include "check.h"
#include "gemm.h"

#include <math.h>

void sf_gemm_params_init(sf_gemm_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->backend = SF_BACKEND_AUTO;
}

sf_status sf_gemm(sf_ctx *ctx, const sf_gemm_params *p) {
    static const char *op = "sf_gemm";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);
    sf_gemm_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 2, (int64_t[]){SF_ANY, SF_ANY}, SF_DT_FLOAT, 1));
    pr.M = p->x.shape[0];
    pr.K = p->x.shape[1];
    CHK(sf_check_tensor(ctx, op, "w", &p->w, 1, 2, (int64_t[]){SF_ANY, pr.K}, SF_DT_FLOAT, 1));
    pr.N = p->w.shape[0];
    if (pr.K < 1 || pr.N < 1)
        return sf_fail(ctx, SF_ERR_SHAPE, "sf_gemm: K = %lld and N = %lld must both be at least 1",
                       (long long)pr.K, (long long)pr.N);
    const int dt = (int)p->x.dtype;
    CHK(sf_check_tensor(ctx, op, "y", &p->y, 1, 2, (int64_t[]){pr.M, pr.N}, dt, 1));
    CHK(sf_check_tensor(ctx, op, "bias", &p->bias, 0, 1, (int64_t[]){pr.N}, SF_DT_X_OR_F32(dt), 0));
    if (!isfinite(p->beta))
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "sf_gemm: beta = %g is not finite", (double)p->beta);
    pr.has_bias = p->bias.data != NULL;
    const sf_named_tensor outs[] = {SF_NT("y", &p->y)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("w", &p->w), SF_NT("bias", &p->bias)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    if (pr.M == 0) {
        ctx->last_backend = be;
        return SF_OK;
    }
    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_gemm(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_gemm(ctx, &pr); break;
    default:
        if (p->w.dtype != p->x.dtype)
            return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                           "sf_gemm: the CUDA backend needs w in x's dtype (x %s, w %s)",
                           sf_dtype_name(p->x.dtype), sf_dtype_name(p->w.dtype));
        s = sf_cuda_gemm(ctx, &pr);
        break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}
