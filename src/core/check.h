/* check.h - descriptor validation shared by the op front ends in src/core. */
#ifndef SF_CHECK_H
#define SF_CHECK_H

#include "internal.h"

/* Dtype sets accepted by a check. */
#define SF_DT_FLOAT (-1) /* f32, f16 or bf16 */
#define SF_DT_INDEX (-2) /* i32 or i64 */
/* The dtype of x, or f32 (the SSD ops' dt, B and C): -16 - x's dtype. */
#define SF_DT_X_OR_F32(x) (-16 - (int)(x))

#define SF_ANY (-1) /* wildcard extent */

/* Returns from the enclosing function when `expr` is not SF_OK. */
#define CHK(expr)                       \
    do {                                \
        sf_status s_ = (expr);          \
        if (s_ != SF_OK) return s_;     \
    } while (0)

/* Inside a CUDA graph capture: a failure recorded by sf_fail whose sentence
 * is still in ctx->err when the next call begins was not forgiven (internal
 * declines clear the sentence), so it stands until sf_graph_end (graph.c). */
void sf_graph_settle(sf_ctx *ctx);

/* The opening of every op's front end: a NULL context or params is
 * SF_ERR_NULL_POINTER, the context's last error is cleared, and *be_out
 * gets the backend the call runs on (sf_resolve_backend); returns from the
 * enclosing function on any failure. */
#define SF_OP_BEGIN(ctx, op, p, be_out)                                                     \
    do {                                                                                    \
        if (!(ctx)) return SF_ERR_NULL_POINTER;                                             \
        if (!(p)) return sf_fail((ctx), SF_ERR_NULL_POINTER, "%s: params is NULL", (op));   \
        sf_graph_settle(ctx);                                                               \
        (ctx)->err[0] = 0;                                                                  \
        CHK(sf_resolve_backend((ctx), (op), (p)->backend, (be_out)));                       \
    } while (0)

/* Validates a tensor named `name` of op `op`:
 *   required: absent -> SF_ERR_NULL_POINTER (an absent optional tensor passes);
 *   rank and each extent of `shape` (SF_ANY matches anything) -> SF_ERR_SHAPE;
 *   dtype (a dtype, SF_DT_FLOAT, SF_DT_INDEX or SF_DT_X_OR_F32) -> SF_ERR_DTYPE;
 *   device equal to the context's -> SF_ERR_DEVICE;
 *   strides >= 0, unit innermost stride when unit_inner -> SF_ERR_STRIDE;
 *   data aligned to the element size -> SF_ERR_ALIGNMENT;
 *   extents < 2^31 and byte extent within int64 -> SF_ERR_TOO_LARGE. */
/* alibi_slopes of an attention op: absent (*slopes = NULL), (nheads) or
 * (batch, nheads) f32, any strides (*sb = 0 for the 1-D form); every slope
 * finite when the context is the host's (SF_ERR_INVALID_ARG naming it). */
sf_status sf_check_alibi(sf_ctx *ctx, const char *op, const sf_tensor *a, int64_t batch, int64_t nheads,
                         const float **slopes, int64_t *sb, int64_t *sh);
sf_status sf_check_tensor(sf_ctx *ctx, const char *op, const char *name, const sf_tensor *t,
                          int required, int rank, const int64_t *shape, int dtype,
                          int unit_inner);

/* The backend a call runs on: the call's choice, else the context's, else
 * the best for the context's device; SF_ERR_UNSUPPORTED when the choice
 * cannot reach the context's memory. */
sf_status sf_resolve_backend(sf_ctx *ctx, const char *op, sf_backend req, sf_backend *out);

/* An output whose bytes overlap an input's (their spans intersect):
 * SF_ERR_INVALID_ARG. */
sf_status sf_check_no_alias(sf_ctx *ctx, const char *op, const char *out_name,
                            const sf_tensor *out, const char *in_name, const sf_tensor *in);

/* An output (or in-place tensor) whose elements overlap one another, e.g.
 * a zero stride on a dimension longer than 1: SF_ERR_STRIDE. */
sf_status sf_check_output_layout(sf_ctx *ctx, const char *op, const char *name,
                                 const sf_tensor *t);

/* A boolean parameter: 0 or 1, anything else SF_ERR_INVALID_ARG. */
sf_status sf_check_flag(sf_ctx *ctx, const char *op, const char *name, int v);

/* Every output against every input and every other output (no shared
 * bytes), and each output's own layout (no two elements at one address):
 * the one aliasing check an op's front-end makes.  Absent tensors (NULL
 * data) are skipped. */
typedef struct sf_named_tensor {
    const char *name;
    const sf_tensor *t;
} sf_named_tensor;
sf_status sf_check_io(sf_ctx *ctx, const char *op, const sf_named_tensor *outs, int nout,
                      const sf_named_tensor *ins, int nin);
#define SF_NT(name, t) ((sf_named_tensor){(name), (t)})
#define SF_NT_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Host state_idx of n entries: each negative (padding) or in [0, nslots),
 * no slot twice (two updates of one slot race on a GPU).  SF_ERR_INDEX. */
sf_status sf_check_state_idx(sf_ctx *ctx, const char *op, const sf_tensor *si, int64_t n,
                             int64_t nslots);

/* Reads a host cu_seqlens array of n+1 entries and checks cu[0] = 0,
 * non-decreasing, cu[n] = total; stores the largest length in *max_len. */
sf_status sf_check_cu_seqlens(sf_ctx *ctx, const char *op, const char *name,
                              const sf_tensor *cu, int64_t total, int64_t *max_len);

#endif
