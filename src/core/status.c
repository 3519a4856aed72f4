/* status.c - status names, dtype/backend names, build features. */
#include "internal.h"

#include <stdio.h>

const char *sf_status_string(sf_status s) {
    switch (s) {
    case SF_OK: return "SF_OK: success";
    case SF_ERR_INVALID_ARG: return "SF_ERR_INVALID_ARG: invalid argument";
    case SF_ERR_NULL_POINTER: return "SF_ERR_NULL_POINTER: required pointer is NULL";
    case SF_ERR_SHAPE: return "SF_ERR_SHAPE: shape mismatch";
    case SF_ERR_DTYPE: return "SF_ERR_DTYPE: dtype not accepted";
    case SF_ERR_DEVICE: return "SF_ERR_DEVICE: tensor on the wrong device";
    case SF_ERR_STRIDE: return "SF_ERR_STRIDE: stride not supported";
    case SF_ERR_ALIGNMENT: return "SF_ERR_ALIGNMENT: misaligned pointer";
    case SF_ERR_TOO_LARGE: return "SF_ERR_TOO_LARGE: size past the supported range";
    case SF_ERR_UNSUPPORTED: return "SF_ERR_UNSUPPORTED: backend cannot serve these inputs";
    case SF_ERR_OUT_OF_MEMORY: return "SF_ERR_OUT_OF_MEMORY: allocation failed";
    case SF_ERR_CUDA: return "SF_ERR_CUDA: CUDA runtime error";
    case SF_ERR_NO_DEVICE: return "SF_ERR_NO_DEVICE: no such device";
    case SF_ERR_INDEX: return "SF_ERR_INDEX: index out of range";
    case SF_ERR_INTERNAL: return "SF_ERR_INTERNAL: internal error";
    }
    return "unknown sf_status";
}

size_t sf_dtype_size(sf_dtype dt) {
    switch (dt) {
    case SF_F32: return 4;
    case SF_F16: return 2;
    case SF_BF16: return 2;
    case SF_I32: return 4;
    case SF_I64: return 8;
    case SF_U8: return 1;
    case SF_I8: return 1;
    case SF_F8E4M3: return 1;
    }
    return 0;
}

const char *sf_dtype_name(sf_dtype dt) {
    switch (dt) {
    case SF_F32: return "f32";
    case SF_F16: return "f16";
    case SF_BF16: return "bf16";
    case SF_I32: return "i32";
    case SF_I64: return "i64";
    case SF_U8: return "u8";
    case SF_I8: return "i8";
    case SF_F8E4M3: return "f8e4m3";
    }
    return "?";
}

const char *sf_backend_name(sf_backend b) {
    switch (b) {
    case SF_BACKEND_AUTO: return "auto";
    case SF_BACKEND_REF: return "ref";
    case SF_BACKEND_CPU: return "cpu";
    case SF_BACKEND_CUDA: return "cuda";
    }
    return "?";
}

int sf_has_cuda_build(void) {
#ifdef SF_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

int sf_has_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

const char *sf_version_string(void) {
#define SF_STR2(x) #x
#define SF_STR(x) SF_STR2(x)
    return SF_STR(SF_VERSION_MAJOR) "." SF_STR(SF_VERSION_MINOR) "." SF_STR(SF_VERSION_PATCH);
}

sf_status sf_fail(sf_ctx *ctx, sf_status s, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
        va_end(ap);
        /* a call inside a capture failed; a failure that already stands is kept */
        if (ctx->graph_active == 1 && s != SF_OK) {
            ctx->graph_status = s;
            memcpy(ctx->graph_err, ctx->err, sizeof ctx->graph_err);
        }
    }
    return s;
}
