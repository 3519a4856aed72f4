/* check.c - descriptor validation: every distinct fault gets its own status
 * and a sentence naming the op, the tensor and the offending value. */
#include "check.h"

#include <math.h>
#include <stdio.h>

static void shape_str(char *buf, size_t len, int rank, const int64_t *shape) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, len - n, "(");
    for (int i = 0; i < rank && n < len; i++) {
        if (!shape || shape[i] == SF_ANY)
            n += (size_t)snprintf(buf + n, len - n, "%s*", i ? ", " : "");
        else
            n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (n < len) snprintf(buf + n, len - n, ")");
}

sf_status sf_check_tensor(sf_ctx *ctx, const char *op, const char *name, const sf_tensor *t,
                          int required, int rank, const int64_t *shape, int dtype,
                          int unit_inner) {
    if (!t->data) {
        if (!required) return SF_OK;
        return sf_fail(ctx, SF_ERR_NULL_POINTER, "%s: %s is required but its data pointer is NULL",
                       op, name);
    }
    if (t->rank != rank) {
        char want[128];
        shape_str(want, sizeof want, rank, shape);
        return sf_fail(ctx, SF_ERR_SHAPE, "%s: %s has rank %d, expected rank %d %s", op, name,
                       t->rank, rank, want);
    }
    for (int i = 0; i < rank; i++) {
        if (t->shape[i] < 0)
            return sf_fail(ctx, SF_ERR_SHAPE, "%s: %s has negative extent %lld in dim %d", op,
                           name, (long long)t->shape[i], i);
        if (t->shape[i] > INT32_MAX)
            return sf_fail(ctx, SF_ERR_TOO_LARGE,
                           "%s: %s dim %d is %lld, past the int32 limit of one dimension", op,
                           name, i, (long long)t->shape[i]);
        if (shape && shape[i] != SF_ANY && t->shape[i] != shape[i]) {
            char want[128], got[128];
            shape_str(want, sizeof want, rank, shape);
            shape_str(got, sizeof got, rank, t->shape);
            return sf_fail(ctx, SF_ERR_SHAPE, "%s: %s has shape %s, expected %s", op, name, got,
                           want);
        }
    }
    int dt = (int)t->dtype;
    if (dt < SF_F32 || dt > SF_F8E4M3)
        return sf_fail(ctx, SF_ERR_DTYPE, "%s: %s has unknown dtype %d", op, name, dt);
    if (dtype <= SF_DT_X_OR_F32(SF_F32)) {
        const sf_dtype xd = (sf_dtype)(SF_DT_X_OR_F32(SF_F32) - dtype);
        if (dt != SF_F32 && dt != (int)xd) {
            if (xd == SF_F32)
                return sf_fail(ctx, SF_ERR_DTYPE, "%s: %s has dtype %s, expected f32 (the dtype of x)", op,
                               name, sf_dtype_name(t->dtype));
            return sf_fail(ctx, SF_ERR_DTYPE, "%s: %s has dtype %s, expected %s (the dtype of x) or f32", op,
                           name, sf_dtype_name(t->dtype), sf_dtype_name(xd));
        }
    } else if (dtype == SF_DT_FLOAT ? !(dt == SF_F32 || dt == SF_F16 || dt == SF_BF16)
               : dtype == SF_DT_INDEX ? !(dt == SF_I32 || dt == SF_I64)
                                      : dt != dtype)
        return sf_fail(ctx, SF_ERR_DTYPE, "%s: %s has dtype %s, expected %s", op, name,
                       sf_dtype_name(t->dtype),
                       dtype == SF_DT_FLOAT   ? "f32, f16 or bf16"
                       : dtype == SF_DT_INDEX ? "i32 or i64"
                                              : sf_dtype_name((sf_dtype)dtype));
    if (t->device < SF_DEVICE_CPU)
        return sf_fail(ctx, SF_ERR_DEVICE, "%s: %s has device %d: give SF_DEVICE_CPU (-1) or a CUDA ordinal",
                       op, name, t->device);
    if (t->device != ctx->device) {
        char a[32], b[32];
        snprintf(a, sizeof a, t->device < 0 ? "the CPU" : "CUDA device %d", t->device);
        snprintf(b, sizeof b, ctx->device < 0 ? "the CPU" : "CUDA device %d", ctx->device);
        return sf_fail(ctx, SF_ERR_DEVICE, "%s: %s is on %s but the context is on %s", op, name,
                       a, b);
    }
    size_t es = sf_dtype_size(t->dtype);
    int64_t numel = 1; /* exact once the double check below has passed */
    int numel_overflow = 0;
    double extent = 1.0; /* in elements, checked in floating point to avoid overflow */
    for (int i = 0; i < rank; i++) {
        if (t->stride[i] < 0)
            return sf_fail(ctx, SF_ERR_STRIDE, "%s: %s has negative stride %lld in dim %d", op,
                           name, (long long)t->stride[i], i);
        numel_overflow |= __builtin_mul_overflow(numel, t->shape[i], &numel);
        if (t->shape[i] > 0) extent += (double)(t->shape[i] - 1) * (double)t->stride[i];
    }
    double dnumel = 1.0;
    for (int i = 0; i < rank; i++) dnumel *= (double)t->shape[i];
    if (numel_overflow || dnumel * (double)es > 9.0e18)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: %s holds %.3g elements, past the int64 range",
                       op, name, dnumel);
    if (extent * (double)es > 9.0e18)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: %s spans %.3g bytes, past the int64 range", op,
                       name, extent * (double)es);
    if (unit_inner && rank > 0 && t->shape[rank - 1] > 1 && t->stride[rank - 1] != 1 && numel > 0)
        return sf_fail(ctx, SF_ERR_STRIDE,
                       "%s: %s needs a unit innermost stride (contiguous last dim), got %lld", op,
                       name, (long long)t->stride[rank - 1]);
    if (((uintptr_t)t->data) % es != 0)
        return sf_fail(ctx, SF_ERR_ALIGNMENT, "%s: %s data %p is not aligned to its %zu-byte elements",
                       op, name, t->data, es);
    return SF_OK;
}

sf_status sf_resolve_backend(sf_ctx *ctx, const char *op, sf_backend req, sf_backend *out) {
    if (req < SF_BACKEND_AUTO || req > SF_BACKEND_CUDA)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: unknown backend %d", op, (int)req);
    if (req == SF_BACKEND_AUTO) req = ctx->backend;
    if (req == SF_BACKEND_AUTO) req = ctx->device >= 0 ? SF_BACKEND_CUDA : SF_BACKEND_CPU;
    if ((req == SF_BACKEND_REF || req == SF_BACKEND_CPU) && ctx->device >= 0)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "%s: the %s backend works on host memory, but this context is on CUDA "
                       "device %d (use a CPU context with host tensors)",
                       op, sf_backend_name(req), ctx->device);
    if (req == SF_BACKEND_CUDA && ctx->device < 0)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "%s: the cuda backend needs a CUDA context (sf_ctx_create with a device "
                       "ordinal) and device tensors; this context is on the CPU",
                       op);
    if (req == SF_BACKEND_CUDA) {
        /* kernels launch on the calling thread's current device: make it
         * the context's, whatever the caller (or torch) last selected */
        sf_status s = sf_cuda_activate(ctx);
        if (s != SF_OK) return s;
    }
    *out = req;
    return SF_OK;
}

/* First and one-past-last byte of a present tensor's elements. */
static void byte_span(const sf_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t ext = 0;
    for (int i = 0; i < t->rank; i++)
        if (t->shape[i] > 0) ext += (t->shape[i] - 1) * t->stride[i];
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)((ext + 1) * (int64_t)sf_dtype_size(t->dtype));
}

sf_status sf_check_no_alias(sf_ctx *ctx, const char *op, const char *out_name,
                            const sf_tensor *out, const char *in_name, const sf_tensor *in) {
    if (!out->data || !in->data || sf_tensor_numel(out) == 0 || sf_tensor_numel(in) == 0)
        return SF_OK;
    uintptr_t a0, a1, b0, b1;
    byte_span(out, &a0, &a1);
    byte_span(in, &b0, &b1);
    if (a0 < b1 && b0 < a1)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: output %s overlaps input %s in memory", op,
                       out_name, in_name);
    return SF_OK;
}

sf_status sf_check_flag(sf_ctx *ctx, const char *op, const char *name, int v) {
    if (v != 0 && v != 1)
        return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: %s is %d, expected 0 or 1", op, name, v);
    return SF_OK;
}

sf_status sf_check_io(sf_ctx *ctx, const char *op, const sf_named_tensor *outs, int nout,
                      const sf_named_tensor *ins, int nin) {
    for (int o = 0; o < nout; o++) {
        for (int i = 0; i < nin; i++) {
            sf_status s = sf_check_no_alias(ctx, op, outs[o].name, outs[o].t, ins[i].name, ins[i].t);
            if (s != SF_OK) return s;
        }
        for (int u = 0; u < o; u++) {
            sf_status s = sf_check_no_alias(ctx, op, outs[o].name, outs[o].t, outs[u].name, outs[u].t);
            if (s != SF_OK) return s;
        }
        sf_status s = sf_check_output_layout(ctx, op, outs[o].name, outs[o].t);
        if (s != SF_OK) return s;
    }
    return SF_OK;
}

sf_status sf_check_output_layout(sf_ctx *ctx, const char *op, const char *name,
                                 const sf_tensor *t) {
    if (!t->data || sf_tensor_numel(t) == 0) return SF_OK; /* no elements, no overlap */
    /* Dims longer than 1, by increasing stride: each stride must step past
     * everything the inner dims span, or two elements share an address. */
    int idx[SF_MAX_RANK], n = 0;
    for (int i = 0; i < t->rank; i++)
        if (t->shape[i] > 1) idx[n++] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t->stride[idx[j]] < t->stride[idx[j - 1]]; j--) {
            int tmp = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = tmp;
        }
    int64_t span = 0; /* elements spanned by the inner dims, minus one */
    for (int k = 0; k < n; k++) {
        int d = idx[k];
        if (t->stride[d] <= span)
            return sf_fail(ctx, SF_ERR_STRIDE,
                           "%s: output %s has overlapping elements (dim %d of extent %lld has "
                           "stride %lld)",
                           op, name, d, (long long)t->shape[d], (long long)t->stride[d]);
        span += (t->shape[d] - 1) * t->stride[d];
    }
    return SF_OK;
}

sf_status sf_check_cu_seqlens(sf_ctx *ctx, const char *op, const char *name,
                              const sf_tensor *cu, int64_t total, int64_t *max_len) {
    int64_t n = cu->shape[0] - 1;
    int64_t prev = sf_ldi(cu->data, cu->dtype, 0);
    if (prev != 0)
        return sf_fail(ctx, SF_ERR_INDEX, "%s: %s[0] is %lld, must be 0", op, name, (long long)prev);
    int64_t mx = 0;
    for (int64_t i = 1; i <= n; i++) {
        int64_t v = sf_ldi(cu->data, cu->dtype, i * cu->stride[0]);
        if (v < prev)
            return sf_fail(ctx, SF_ERR_INDEX, "%s: %s[%lld] = %lld is less than %s[%lld] = %lld", op,
                           name, (long long)i, (long long)v, name, (long long)(i - 1),
                           (long long)prev);
        if (v - prev > mx) mx = v - prev;
        prev = v;
    }
    if (prev != total)
        return sf_fail(ctx, SF_ERR_INDEX, "%s: %s[%lld] = %lld but the packed length is %lld", op,
                       name, (long long)n, (long long)prev, (long long)total);
    if (max_len) *max_len = mx;
    return SF_OK;
}

sf_status sf_check_state_idx(sf_ctx *ctx, const char *op, const sf_tensor *si, int64_t n,
                                 int64_t nslots) {
    unsigned char *seen = (unsigned char *)sf_host_scratch(ctx, (size_t)nslots + 1);
    if (!seen) return SF_ERR_OUT_OF_MEMORY;
    memset(seen, 0, (size_t)nslots + 1);
    for (int64_t i = 0; i < n; i++) {
        int64_t s = sf_ldi(si->data, si->dtype, i * si->stride[0]);
        if (s < 0) continue;
        if (s >= nslots)
            return sf_fail(ctx, SF_ERR_INDEX, "%s: state_idx[%lld] = %lld is outside the %lld state slots",
                           op, (long long)i, (long long)s, (long long)nslots);
        if (seen[s])
            return sf_fail(ctx, SF_ERR_INDEX, "%s: state slot %lld is used twice in state_idx", op,
                           (long long)s);
        seen[s] = 1;
    }
    return SF_OK;
}

sf_status sf_check_alibi(sf_ctx *ctx, const char *op, const sf_tensor *a, int64_t batch, int64_t nheads,
                         const float **slopes, int64_t *sb, int64_t *sh) {
    *slopes = NULL, *sb = 0, *sh = 0;
    if (!a->data) return SF_OK;
    sf_status st;
    if (a->rank == 1) {
        if ((st = sf_check_tensor(ctx, op, "alibi_slopes", a, 1, 1, (int64_t[]){nheads}, SF_F32, 0)) != SF_OK) return st;
        *sh = a->stride[0];
    } else {
        if ((st = sf_check_tensor(ctx, op, "alibi_slopes", a, 1, 2, (int64_t[]){batch, nheads}, SF_F32, 0)) != SF_OK)
            return st;
        *sb = a->stride[0], *sh = a->stride[1];
    }
    const float *s = (const float *)a->data;
    if (ctx->device < 0) {
        const int64_t nb = a->rank == 1 ? 1 : batch;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t h = 0; h < nheads; h++) {
                const float v = s[b * *sb + h * *sh];
                if (!isfinite(v))
                    return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: alibi_slopes[%lld, %lld] is %g", op, (long long)b,
                                   (long long)h, (double)v);
            }
    }
    *slopes = s;
    return SF_OK;
}
