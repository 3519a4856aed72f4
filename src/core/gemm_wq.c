/* gemm_wq.c - front ends of the weight-only quantised matrix product and of
 * the host conversions of quantised weights: validate every descriptor,
 * derive the problem, dispatch (the conversions run on the host only). */
#include "check.h"
#include "gemm_wq.h"

#include <stdio.h>

void sf_gemm_wq_params_init(sf_gemm_wq_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->w.format = SF_QW_INT4;
    p->w.group_size = 128;
    p->backend = SF_BACKEND_AUTO;
}

/* A tensor of the weight must be exactly row-major: the kernels walk it by
 * its shape alone. */
static sf_status check_contiguous(sf_ctx *ctx, const char *op, const char *name,
                                  const sf_tensor *t) {
    if (!t->data) return SF_OK;
    const int64_t r = t->shape[0], c = t->shape[1];
    if ((c > 1 && t->stride[1] != 1) || (r > 1 && t->stride[0] != c))
        return sf_fail(ctx, SF_ERR_STRIDE,
                       "%s: %s must be contiguous (row-major strides (%lld, 1)), got (%lld, %lld)",
                       op, name, (long long)c, (long long)t->stride[0], (long long)t->stride[1]);
    return SF_OK;
}

/* Validates an sf_qweight whose tensors are named `pre`data, `pre`scales,
 * `pre`mins ("w." or "q."). */
static sf_status check_qweight(sf_ctx *ctx, const char *op, const char *pre, const sf_qweight *q) {
    char nd[32], ns[32], nm[32];
    snprintf(nd, sizeof nd, "%sdata", pre);
    snprintf(ns, sizeof ns, "%sscales", pre);
    snprintf(nm, sizeof nm, "%smins", pre);
    if (q->format != SF_QW_INT4 && q->format != SF_QW_INT8)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %sformat %d is not SF_QW_INT4 (0) or SF_QW_INT8 (1)",
                       op, pre, (int)q->format);
    if (q->group_size != 32 && q->group_size != 64 && q->group_size != 128)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %sgroup_size %d is not 32, 64 or 128", op, pre,
                       q->group_size);
    if (q->n < 1 || q->k < 1)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: %sn = %lld and %sk = %lld must both be at least 1", op,
                       pre, (long long)q->n, pre, (long long)q->k);
    if (q->n > INT32_MAX || q->k > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: %sn = %lld or %sk = %lld is past the int32 range",
                       op, pre, (long long)q->n, pre, (long long)q->k);
    if (q->k % q->group_size != 0)
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: %sk = %lld is not a multiple of group_size %d", op,
                       pre, (long long)q->k, q->group_size);
    if (q->layout != SF_QW_ROWS && q->layout != SF_QW_TILED)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %slayout %d is not SF_QW_ROWS (0) or SF_QW_TILED (1)", op, pre,
                       (int)q->layout);
    const int int4 = q->format == SF_QW_INT4;
    const int64_t G = q->k / q->group_size;
    /* int8 codes without mins are signed: i8 says so, u8 holds the same bytes */
    const int ddt = !int4 && !q->mins.data && q->data.dtype == SF_I8 ? SF_I8 : SF_U8;
    const int tiled = q->layout == SF_QW_TILED;
    CHK(sf_check_tensor(ctx, op, nd, &q->data, 1, 2,
                        (int64_t[]){tiled ? sf_wq_tiled_rows(q->n) : q->n,
                                    tiled ? sf_wq_tiled_row_bytes(int4, q->k) : sf_wq_row_bytes(int4, q->k)},
                        ddt, 1));
    CHK(check_contiguous(ctx, op, nd, &q->data));
    CHK(sf_check_tensor(ctx, op, ns, &q->scales, 1, 2, (int64_t[]){G, q->n}, SF_DT_FLOAT, 1));
    CHK(check_contiguous(ctx, op, ns, &q->scales));
    CHK(sf_check_tensor(ctx, op, nm, &q->mins, 0, 2, (int64_t[]){G, q->n}, (int)q->scales.dtype, 1));
    CHK(check_contiguous(ctx, op, nm, &q->mins));
    return SF_OK;
}

sf_status sf_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_params *p) {
    static const char *op = "sf_gemm_wq";
    sf_backend be;
    SF_OP_BEGIN(ctx, op, p, &be);
    CHK(check_qweight(ctx, op, "w.", &p->w));
    sf_gemm_wq_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.p = p;
    pr.N = p->w.n;
    pr.K = p->w.k;
    pr.group = p->w.group_size;
    pr.G = pr.K / pr.group;
    pr.int4 = p->w.format == SF_QW_INT4;
    CHK(sf_check_tensor(ctx, op, "x", &p->x, 1, 2, (int64_t[]){SF_ANY, pr.K}, SF_DT_FLOAT, 1));
    pr.M = p->x.shape[0];
    const int dt = (int)p->x.dtype;
    CHK(sf_check_tensor(ctx, op, "y", &p->y, 1, 2, (int64_t[]){pr.M, pr.N}, dt, 1));
    CHK(sf_check_tensor(ctx, op, "bias", &p->bias, 0, 1, (int64_t[]){pr.N}, SF_DT_X_OR_F32(dt), 0));
    pr.has_min = p->w.mins.data != NULL;
    pr.has_bias = p->bias.data != NULL;
    const sf_named_tensor outs[] = {SF_NT("y", &p->y)};
    const sf_named_tensor ins[] = {SF_NT("x", &p->x), SF_NT("w.data", &p->w.data),
                                   SF_NT("w.scales", &p->w.scales), SF_NT("w.mins", &p->w.mins),
                                   SF_NT("bias", &p->bias)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    if (pr.M == 0) { /* nothing to compute, on any backend */
        ctx->last_backend = be;
        return SF_OK;
    }

    sf_status s;
    switch (be) {
    case SF_BACKEND_REF: s = sf_ref_gemm_wq(ctx, &pr); break;
    case SF_BACKEND_CPU: s = sf_cpu_gemm_wq(ctx, &pr); break;
    default: s = sf_cuda_gemm_wq(ctx, &pr); break;
    }
    if (s == SF_OK) ctx->last_backend = be;
    return s;
}

/* Quantisation and repacking write the row layout; tiling is a second step. */
static sf_status rows_only(sf_ctx *ctx, const char *op, const sf_qweight *q) {
    if (q->layout != SF_QW_ROWS)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "%s writes q.layout SF_QW_ROWS; tile the result with sf_tile_qweight", op);
    return SF_OK;
}

/* The conversions run on host memory: a CUDA context is refused up front. */
static sf_status host_only(sf_ctx *ctx, const char *op) {
    if (ctx->device >= 0)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "%s runs on the host: use a CPU context and host tensors, then copy the "
                       "result to the device with sf_memcpy",
                       op);
    return SF_OK;
}

sf_status sf_quantize_weights(sf_ctx *ctx, const sf_tensor *w, const sf_qweight *q) {
    static const char *op = "sf_quantize_weights";
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (!w || !q) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: %s is NULL", op, !w ? "w" : "q");
    ctx->err[0] = 0;
    CHK(host_only(ctx, op));
    CHK(check_qweight(ctx, op, "q.", q));
    CHK(rows_only(ctx, op, q));
    CHK(sf_check_tensor(ctx, op, "w", w, 1, 2, (int64_t[]){q->n, q->k}, SF_DT_FLOAT, 1));
    const sf_named_tensor outs[] = {SF_NT("q.data", &q->data), SF_NT("q.scales", &q->scales),
                                    SF_NT("q.mins", &q->mins)};
    const sf_named_tensor ins[] = {SF_NT("w", w)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    return sf_cpu_quantize_weights(ctx, w, q);
}

sf_status sf_dequantize_weights(sf_ctx *ctx, const sf_qweight *q, const sf_tensor *w) {
    static const char *op = "sf_dequantize_weights";
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (!w || !q) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: %s is NULL", op, !q ? "q" : "w");
    ctx->err[0] = 0;
    CHK(host_only(ctx, op));
    CHK(check_qweight(ctx, op, "q.", q));
    CHK(sf_check_tensor(ctx, op, "w", w, 1, 2, (int64_t[]){q->n, q->k}, SF_DT_FLOAT, 1));
    const sf_named_tensor outs[] = {SF_NT("w", w)};
    const sf_named_tensor ins[] = {SF_NT("q.data", &q->data), SF_NT("q.scales", &q->scales),
                                   SF_NT("q.mins", &q->mins)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    return sf_cpu_dequantize_weights(ctx, q, w);
}

sf_status sf_tile_qweight(sf_ctx *ctx, const sf_qweight *q, const sf_tensor *tiled) {
    static const char *op = "sf_tile_qweight";
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (!q || !tiled) return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: %s is NULL", op, !q ? "q" : "tiled");
    ctx->err[0] = 0;
    CHK(host_only(ctx, op));
    CHK(check_qweight(ctx, op, "q.", q));
    if (q->layout != SF_QW_ROWS)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: q.layout must be SF_QW_ROWS (the codes to tile)", op);
    const int int4 = q->format == SF_QW_INT4;
    CHK(sf_check_tensor(ctx, op, "tiled", tiled, 1, 2,
                        (int64_t[]){sf_wq_tiled_rows(q->n), sf_wq_tiled_row_bytes(int4, q->k)},
                        (int)q->data.dtype, 1));
    CHK(check_contiguous(ctx, op, "tiled", tiled));
    const sf_named_tensor outs[] = {SF_NT("tiled", tiled)};
    const sf_named_tensor ins[] = {SF_NT("q.data", &q->data)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    return sf_cpu_tile_qweight(ctx, q, tiled);
}

sf_status sf_repack_gguf(sf_ctx *ctx, sf_gguf_type type, const void *blocks, size_t bytes,
                         const sf_qweight *q) {
    static const char *op = "sf_repack_gguf";
    if (!ctx) return SF_ERR_NULL_POINTER;
    if (!blocks || !q)
        return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: %s is NULL", op, !blocks ? "blocks" : "q");
    ctx->err[0] = 0;
    CHK(host_only(ctx, op));
    int bs, want_int4, want_min;
    const char *tn;
    switch (type) {
    case SF_GGUF_Q4_0: bs = 18, want_int4 = 1, want_min = 0, tn = "Q4_0"; break;
    case SF_GGUF_Q4_1: bs = 20, want_int4 = 1, want_min = 1, tn = "Q4_1"; break;
    case SF_GGUF_Q8_0: bs = 34, want_int4 = 0, want_min = 0, tn = "Q8_0"; break;
    default:
        return sf_fail(ctx, SF_ERR_INVALID_ARG,
                       "%s: GGUF type %d is not Q4_0 (2), Q4_1 (3) or Q8_0 (8)", op, (int)type);
    }
    CHK(check_qweight(ctx, op, "q.", q));
    CHK(rows_only(ctx, op, q));
    if ((q->format == SF_QW_INT4) != want_int4 || q->group_size != 32)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %s repacks into %s with group_size 32, not %s with %d",
                       op, tn, want_int4 ? "SF_QW_INT4" : "SF_QW_INT8",
                       q->format == SF_QW_INT4 ? "SF_QW_INT4" : "SF_QW_INT8", q->group_size);
    if ((q->mins.data != NULL) != want_min)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %s %s q.mins", op, tn,
                       want_min ? "has a min per block: give" : "has no mins: leave absent");
    /* f16 values copied bit for bit, or widened to f32 (exact); bf16 would round */
    if (q->scales.dtype == SF_BF16)
        return sf_fail(ctx, SF_ERR_DTYPE,
                       "%s: q.scales is bf16, which would round GGUF's f16 scales; give f16 or f32", op);
    const int64_t nblk = q->n * (q->k / 32);
    if (bytes / (size_t)bs != (size_t)nblk || bytes % (size_t)bs != 0)
        return sf_fail(ctx, SF_ERR_SHAPE,
                       "%s: %zu bytes of %s blocks, expected %lld (n = %lld rows of k / 32 = %lld blocks of %d bytes)",
                       op, bytes, tn, (long long)nblk * bs, (long long)q->n, (long long)(q->k / 32), bs);
    const sf_tensor src = sf_tensor_contiguous((void *)blocks, SF_U8, SF_DEVICE_CPU, 1,
                                               (int64_t[]){(int64_t)bytes});
    const sf_named_tensor outs[] = {SF_NT("q.data", &q->data), SF_NT("q.scales", &q->scales),
                                    SF_NT("q.mins", &q->mins)};
    const sf_named_tensor ins[] = {SF_NT("blocks", &src)};
    CHK(sf_check_io(ctx, op, outs, SF_NT_COUNT(outs), ins, SF_NT_COUNT(ins)));
    return sf_cpu_repack_gguf(ctx, type, (const uint8_t *)blocks, q);
}
