/* test_fused.c - the fused layer ops' front ends (every validation error
 * with its status and a piece of its message), hand-computed values that
 * check the reference independently of the case table, in-place residual
 * and RoPE against out-of-place, and on a GPU the CUDA backend against the
 * CPU one.
 * Public API only. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"
#include "split_test.h"
#include "worst.h"

static int failures, checks;

static sf_tensor t2(void *d, sf_dtype dt, int64_t a, int64_t b) {
    return sf_tensor_contiguous(d, dt, SF_DEVICE_CPU, 2, (int64_t[]){a, b});
}
static sf_tensor t1(void *d, sf_dtype dt, int64_t a) {
    return sf_tensor_contiguous(d, dt, SF_DEVICE_CPU, 1, (int64_t[]){a});
}
static sf_tensor t3(void *d, sf_dtype dt, int64_t a, int64_t b, int64_t c) {
    return sf_tensor_contiguous(d, dt, SF_DEVICE_CPU, 3, (int64_t[]){a, b, c});
}

static const sf_backend host_be[2] = {SF_BACKEND_REF, SF_BACKEND_CPU};

/* ---- norms ---- */
static float nx[4 * 8], nr[4 * 8], nw[8], nb[8], no[4 * 8], nh[4 * 8];

static void norm_valid(sf_norm_params *p) {
    sf_norm_params_init(p);
    p->x = t2(nx, SF_F32, 4, 8);
    p->residual = t2(nr, SF_F32, 4, 8);
    p->weight = t1(nw, SF_F32, 8);
    p->bias = t1(nb, SF_F32, 8);
    p->out = t2(no, SF_F32, 4, 8);
    p->residual_out = t2(nh, SF_F32, 4, 8);
}

static void test_norms(sf_ctx *ctx) {
    for (int i = 0; i < 32; i++) nx[i] = 0.1f * (float)(i % 7) - 0.2f, nr[i] = 0.05f * (float)(i % 5);
    for (int i = 0; i < 8; i++) nw[i] = 1.0f + 0.1f * (float)i, nb[i] = 0.01f * (float)i;
    sf_norm_params p;
    norm_valid(&p);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_OK, NULL);
    EXPECT_STATUS(sf_add_layernorm(ctx, &p), SF_OK, NULL);
    EXPECT_STATUS(sf_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "sf_add_rmsnorm");
    EXPECT_STATUS(sf_layernorm(ctx, &p), SF_ERR_INVALID_ARG, "sf_add_layernorm");
    p.residual.data = NULL, p.residual_out.data = NULL;
    EXPECT_STATUS(sf_rmsnorm(ctx, &p), SF_OK, NULL);
    norm_valid(&p), p.eps = -1e-5f;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "eps");
    p.eps = NAN;
    EXPECT_STATUS(sf_add_layernorm(ctx, &p), SF_ERR_INVALID_ARG, "eps");
    p.eps = 0.0f;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "eps");
    p.eps = INFINITY;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "eps");
    norm_valid(&p), p.weight = t1(nw, SF_F32, 7);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_SHAPE, "weight");
    norm_valid(&p), p.weight.data = NULL;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_NULL_POINTER, "weight");
    norm_valid(&p), p.residual = t2(nr, SF_F32, 4, 7);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_SHAPE, "residual");
    norm_valid(&p), p.out = t2(no, SF_F16, 4, 8);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_DTYPE, "out");
    norm_valid(&p), p.x = t2(nx, SF_F16, 4, 8), p.out = t2(no, SF_F16, 4, 8);
    p.residual = t2(nr, SF_BF16, 4, 8);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_DTYPE, "residual");
    norm_valid(&p), p.x = t3(nx, SF_F32, 4, 2, 4);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_SHAPE, "x");
    norm_valid(&p), p.x.dtype = SF_I32;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_DTYPE, "x");
    norm_valid(&p), p.x = t2(nx, SF_F32, 4, 0);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_SHAPE, "empty");
    norm_valid(&p), p.x.stride[1] = 2, p.x.shape[1] = 4;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_STRIDE, "x");
    /* overlaps: out over x, h over out, h over half of the residual */
    norm_valid(&p), p.out = t2(nx, SF_F32, 4, 8);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    norm_valid(&p), p.residual_out = t2(no, SF_F32, 4, 8);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    norm_valid(&p), p.residual_out = t2(nr + 4, SF_F32, 3, 8);
    p.residual_out.shape[0] = 4, p.residual_out.data = nr + 4;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    /* exact aliasing of residual_out and residual is in place */
    norm_valid(&p), p.residual_out = p.residual;
    p.out = t2(no, SF_F32, 4, 8);
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_OK, NULL);
    norm_valid(&p), p.out = p.residual, p.residual_out = p.residual;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    norm_valid(&p), p.backend = (sf_backend)9;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_INVALID_ARG, "backend");
    norm_valid(&p), p.backend = SF_BACKEND_CUDA;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_ERR_UNSUPPORTED, "cuda");

    /* independent values: a constant row c of length 5 gives rmsnorm
     * c / sqrt(c^2 + eps) * w and layernorm exactly the bias */
    for (int bi = 0; bi < 2; bi++) {
        float x[5] = {3, 3, 3, 3, 3}, r[5] = {1, 1, 1, 1, 1}, w[5] = {1, 2, 3, 4, 5}, b[5] = {5, 4, 3, 2, 1};
        float y[5], h[5];
        sf_norm_params q;
        sf_norm_params_init(&q);
        q.x = t2(x, SF_F32, 1, 5), q.residual = t2(r, SF_F32, 1, 5), q.weight = t1(w, SF_F32, 5);
        q.out = t2(y, SF_F32, 1, 5), q.residual_out = t2(h, SF_F32, 1, 5);
        q.eps = 1e-3f, q.backend = host_be[bi];
        EXPECT_STATUS(sf_add_rmsnorm(ctx, &q), SF_OK, NULL);
        for (int c = 0; c < 5; c++) {
            EXPECT_NEAR(y[c], 4.0 / sqrt(16.0 + 1e-3) * w[c], 1e-6 * w[c], "rmsnorm of a constant row");
            EXPECT_NEAR(h[c], 4.0, 0.0, "h = x + residual");
        }
        q.bias = t1(b, SF_F32, 5);
        EXPECT_STATUS(sf_add_layernorm(ctx, &q), SF_OK, NULL);
        for (int c = 0; c < 5; c++) EXPECT_NEAR(y[c], b[c], 0.0, "layernorm of a constant row");
        /* layernorm of (1, 2, 3, 4, 5): mean 3, biased variance 2 */
        float x2[5] = {1, 2, 3, 4, 5};
        q.x = t2(x2, SF_F32, 1, 5), q.residual.data = NULL, q.residual_out.data = NULL, q.bias.data = NULL;
        EXPECT_STATUS(sf_layernorm(ctx, &q), SF_OK, NULL);
        for (int c = 0; c < 5; c++)
            EXPECT_NEAR(y[c], (x2[c] - 3.0) / sqrt(2.0 + 1e-3) * w[c], 2e-6 * w[c], "layernorm of 1..5");
    }
    /* in place (residual_out = residual) equals out of place, both backends */
    for (int bi = 0; bi < 2; bi++) {
        float r1[3 * 9], r2[3 * 9], h1[3 * 9], y1[3 * 9], y2[3 * 9], x[3 * 9], w[9];
        for (int i = 0; i < 27; i++) x[i] = sinf((float)i), r1[i] = r2[i] = cosf(0.3f * (float)i);
        for (int i = 0; i < 9; i++) w[i] = 0.5f + 0.1f * (float)i;
        sf_norm_params q;
        sf_norm_params_init(&q);
        q.x = t2(x, SF_F32, 3, 9), q.weight = t1(w, SF_F32, 9), q.backend = host_be[bi];
        q.residual = t2(r1, SF_F32, 3, 9), q.residual_out = t2(h1, SF_F32, 3, 9), q.out = t2(y1, SF_F32, 3, 9);
        EXPECT_STATUS(sf_add_layernorm(ctx, &q), SF_OK, NULL);
        q.residual = t2(r2, SF_F32, 3, 9), q.residual_out = q.residual, q.out = t2(y2, SF_F32, 3, 9);
        EXPECT_STATUS(sf_add_layernorm(ctx, &q), SF_OK, NULL);
        checks++;
        if (memcmp(h1, r2, sizeof h1) || memcmp(y1, y2, sizeof y1))
            printf("FAIL in-place residual differs from out of place on %s\n", sf_backend_name(host_be[bi])), failures++;
    }
}

/* ---- swiglu ---- */
static float sg[5 * 6], su[4 * 6], so[4 * 6];

static void swiglu_valid(sf_swiglu_params *p) {
    sf_swiglu_params_init(p);
    p->gate = t2(sg, SF_F32, 4, 6), p->up = t2(su, SF_F32, 4, 6), p->out = t2(so, SF_F32, 4, 6);
}

static double silu(double v) { return v / (1.0 + exp(-v)); }

static void test_swiglu(sf_ctx *ctx) {
    sf_swiglu_params p;
    swiglu_valid(&p);
    EXPECT_STATUS(sf_swiglu(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_OK, NULL);
    p.layout = (sf_swiglu_layout)3;
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_INVALID_ARG, "layout 3");
    p.layout = (sf_swiglu_layout)-1;
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_INVALID_ARG, "layout -1");
    swiglu_valid(&p), p.layout = SF_SWIGLU_CONCAT;
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_INVALID_ARG, "up must be absent");
    p.up.data = NULL, p.out = t2(so, SF_F32, 4, 3);
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_OK, NULL);
    p.gate = t2(sg, SF_F32, 4, 5);
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_SHAPE, "even");
    p.gate = t2(sg, SF_F32, 4, 6), p.out = t2(so, SF_F32, 4, 6);
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_SHAPE, "out");
    swiglu_valid(&p), p.up = t2(su, SF_F32, 4, 5);
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_SHAPE, "up");
    swiglu_valid(&p), p.up.data = NULL;
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_NULL_POINTER, "up");
    swiglu_valid(&p), p.up = t2(su, SF_F16, 4, 6);
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_DTYPE, "up");
    swiglu_valid(&p), p.out = p.up;
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    swiglu_valid(&p), p.out = t2(sg + 6, SF_F32, 4, 6); /* rows 1..3 of gate */
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    swiglu_valid(&p), p.gate = t2(sg, SF_F32, 4, 0), p.up = t2(su, SF_F32, 4, 0), p.out = t2(so, SF_F32, 4, 0);
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_SHAPE, "n = 0");
    swiglu_valid(&p), p.backend = SF_BACKEND_CUDA;
    EXPECT_STATUS(sf_swiglu(ctx, &p), SF_ERR_UNSUPPORTED, "cuda");

    /* known values: silu(0) = 0, silu(1) = 1 / (1 + e^-1), silu(-2) = -2 / (1 + e^2) */
    const double gv[3] = {0.0, 1.0, -2.0}, uv[3] = {5.0, 3.0, 0.5};
    for (int bi = 0; bi < 2; bi++)
        for (int lay = 0; lay < 3; lay++) {
            float g[6], u[3], y[3];
            for (int j = 0; j < 3; j++) {
                if (lay == 0) g[j] = (float)gv[j], u[j] = (float)uv[j];
                if (lay == 1) g[j] = (float)gv[j], g[3 + j] = (float)uv[j];
                if (lay == 2) g[2 * j] = (float)gv[j], g[2 * j + 1] = (float)uv[j];
            }
            sf_swiglu_params q;
            sf_swiglu_params_init(&q);
            q.layout = (sf_swiglu_layout)lay, q.backend = host_be[bi];
            q.gate = t2(g, SF_F32, 1, lay ? 6 : 3), q.up = lay ? t2(NULL, SF_F32, 1, 3) : t2(u, SF_F32, 1, 3);
            q.out = t2(y, SF_F32, 1, 3);
            EXPECT_STATUS(sf_swiglu(ctx, &q), SF_OK, NULL);
            const double want[3] = {0.0, 3.0 / (1.0 + exp(-1.0)), 0.5 * -2.0 / (1.0 + exp(2.0))};
            for (int j = 0; j < 3; j++) {
                EXPECT_NEAR(y[j], want[j], 1e-6, "swiglu known value");
                EXPECT_NEAR(want[j], silu(gv[j]) * uv[j], 1e-15, "silu definition");
            }
        }
}

/* ---- rope ---- */
static float rq[5 * 4 * 8], rk[5 * 2 * 8], rqo[5 * 4 * 8], rko[5 * 2 * 8], rc[16 * 4], rs[16 * 4];
static int32_t rpos[5] = {3, 0, 15, 7, 7};

static void rope_valid(sf_rope_params *p) {
    sf_rope_params_init(p);
    p->q = t3(rq, SF_F32, 5, 4, 8), p->k = t3(rk, SF_F32, 5, 2, 8);
    p->q_out = t3(rqo, SF_F32, 5, 4, 8), p->k_out = t3(rko, SF_F32, 5, 2, 8);
    p->positions = t1(rpos, SF_I32, 5);
}

static void test_rope(sf_ctx *ctx) {
    sf_rope_params p;
    rope_valid(&p);
    EXPECT_STATUS(sf_rope(ctx, NULL), SF_ERR_NULL_POINTER, "params");
    EXPECT_STATUS(sf_rope(ctx, &p), SF_OK, NULL);
    p.rotary_dim = 3;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "rotary_dim 3");
    p.rotary_dim = 10;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "rotary_dim 10");
    p.rotary_dim = -2;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "rotary_dim -2");
    rope_valid(&p), p.q = t3(rq, SF_F32, 5, 4, 7), p.k.data = NULL, p.k_out.data = NULL, p.q_out.data = NULL;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_SHAPE, "even");
    rope_valid(&p), p.style = (sf_rope_style)2;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "style");
    rope_valid(&p), p.scaling = (sf_rope_scaling)5;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "scaling");
    rope_valid(&p), p.theta = 0.0f;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "theta");
    p.theta = NAN;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "theta");
    rope_valid(&p), p.scaling = SF_ROPE_LLAMA3, p.low_freq_factor = 4.0f, p.high_freq_factor = 1.0f;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "low_freq_factor");
    rope_valid(&p), p.scaling = SF_ROPE_LLAMA3, p.factor = -1.0f;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "factor");
    rope_valid(&p), p.scaling = SF_ROPE_LLAMA3, p.original_max_position = 0;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "original_max_position");
    rope_valid(&p), p.k = t3(rk, SF_F32, 5, 2, 6);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_SHAPE, "k");
    rope_valid(&p), p.k = t3(rk, SF_F16, 5, 2, 8);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_DTYPE, "k");
    rope_valid(&p), p.q_out = t3(rqo, SF_F32, 5, 3, 8);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_SHAPE, "q_out");
    rope_valid(&p), p.k.data = NULL;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "k_out is given without k");
    rope_valid(&p), p.positions = t1(rpos, SF_F32, 5);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_DTYPE, "positions");
    rope_valid(&p), p.positions = t1(rpos, SF_I32, 4);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_SHAPE, "positions");
    rope_valid(&p), p.cos = t2(rc, SF_F32, 16, 4);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "together");
    p.sin = t2(rs, SF_F32, 16, 3);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_SHAPE, "sin");
    p.sin = t2(rs, SF_F32, 16, 4);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_OK, NULL);
    p.cos = t2(rc, SF_F32, 15, 4), p.sin = t2(rs, SF_F32, 15, 4); /* position 15 is past the tables */
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INDEX, "positions[2] = 15");
    p.positions.data = NULL, p.cos = t2(rc, SF_F32, 4, 4), p.sin = t2(rs, SF_F32, 4, 4);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_SHAPE, "T rows");
    rope_valid(&p);
    rpos[1] = -1;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INDEX, "positions[1] = -1");
    rpos[1] = 0;
    /* overlaps: q_out over k, in-place q over k, k_out over q_out */
    rope_valid(&p), p.q_out = t3(rk, SF_F32, 5, 4, 8);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    rope_valid(&p), p.q_out.data = NULL, p.k_out.data = NULL, p.k = t3(rq + 8, SF_F32, 5, 2, 8);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    rope_valid(&p), p.k_out = t3(rqo + 16, SF_F32, 5, 2, 8);
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_INVALID_ARG, "overlaps");
    rope_valid(&p), p.backend = SF_BACKEND_CUDA;
    EXPECT_STATUS(sf_rope(ctx, &p), SF_ERR_UNSUPPORTED, "cuda");

    /* one vector by hand: d = 6, R = 4, position 2, theta 100:
     * f = (1, 100^-1/2 = 0.1), angles (2, 0.2) */
    for (int bi = 0; bi < 2; bi++)
        for (int gptj = 0; gptj < 2; gptj++) {
            const float x[6] = {1, 2, 3, 4, 5, 6};
            float q[6], o[6];
            memcpy(q, x, sizeof q);
            int32_t pos[1] = {2};
            sf_rope_params r;
            sf_rope_params_init(&r);
            r.q = t3(q, SF_F32, 1, 1, 6), r.q_out = t3(o, SF_F32, 1, 1, 6), r.positions = t1(pos, SF_I32, 1);
            r.rotary_dim = 4, r.theta = 100.0f, r.style = gptj ? SF_ROPE_GPTJ : SF_ROPE_NEOX;
            r.backend = host_be[bi];
            EXPECT_STATUS(sf_rope(ctx, &r), SF_OK, NULL);
            double want[6] = {0, 0, 0, 0, 5, 6};
            const double a[2] = {2.0, 0.2};
            for (int i = 0; i < 2; i++) {
                const int c1 = gptj ? 2 * i : i, c2 = gptj ? 2 * i + 1 : i + 2;
                want[c1] = x[c1] * cos(a[i]) - x[c2] * sin(a[i]);
                want[c2] = x[c2] * cos(a[i]) + x[c1] * sin(a[i]);
            }
            for (int c = 0; c < 6; c++) EXPECT_NEAR(o[c], want[c], 2e-6, gptj ? "rope gptj by hand" : "rope neox by hand");
            /* in place: the same values, the pass-through untouched */
            r.q_out.data = NULL;
            EXPECT_STATUS(sf_rope(ctx, &r), SF_OK, NULL);
            checks++;
            if (memcmp(q, o, sizeof q)) printf("FAIL rope in place differs from out of place\n"), failures++;
        }
    /* llama3 frequencies by hand: R = 8, theta 10000 -> f = 1, 0.1, 0.01,
     * 0.001 (wavelengths 6.3, 63, 628, 6283); L = 1000, low 1, high 8:
     * lo = 1000, hi = 125: f0 and f1 kept, f3 / 4 (factor 4), f2 smoothed
     * with s = (1000 / 628.3 - 1) / 7 */
    for (int bi = 0; bi < 2; bi++) {
        float q[8] = {1, 1, 1, 1, 0, 0, 0, 0}, o[8];
        int32_t pos[1] = {100};
        sf_rope_params r;
        sf_rope_params_init(&r);
        r.q = t3(q, SF_F32, 1, 1, 8), r.q_out = t3(o, SF_F32, 1, 1, 8), r.positions = t1(pos, SF_I32, 1);
        r.scaling = SF_ROPE_LLAMA3, r.factor = 4.0f, r.low_freq_factor = 1.0f, r.high_freq_factor = 8.0f;
        r.original_max_position = 1000, r.backend = host_be[bi];
        EXPECT_STATUS(sf_rope(ctx, &r), SF_OK, NULL);
        const double pi = 3.14159265358979323846, w2 = 2 * pi / 0.01, s = (1000.0 / w2 - 1.0) / 7.0;
        const double f[4] = {1.0, 0.1, (1 - s) * 0.01 / 4 + s * 0.01, 0.001 / 4};
        for (int i = 0; i < 4; i++) {
            EXPECT_NEAR(o[i], cos(100 * f[i]), 2e-6, "llama3 rope: x1' = cos");
            EXPECT_NEAR(o[i + 4], sin(100 * f[i]), 2e-6, "llama3 rope: x2' = sin");
        }
    }
}

/* max |a - b| over n floats */
static double max_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = worst_of(m, abs_diff(a[i], b[i]));
    return m;
}

/* dev: a device buffer of 4096 floats; host: 4 arrays of 256 floats.
 * Runs one op on the GPU (inputs copied in, outputs back) and on the CPU. */
static void test_cuda(sf_ctx *ctx) {
    sf_ctx *cctx = NULL;
    void *dev = NULL;
    if (sf_ctx_create(&cctx, SF_DEVICE_CPU) != SF_OK || sf_malloc(ctx, &dev, 4096 * sizeof(float)) != SF_OK) {
        EXPECT(0, "cannot set up the CUDA check");
        sf_ctx_destroy(cctx);
        return;
    }
    float *d = (float *)dev;
    static float in[1024], cpu[1024], gpu[1024];
    for (int i = 0; i < 1024; i++) in[i] = 0.37f * (float)((i * 7919) % 23) - 3.1f;
    /* add + RMSNorm, rows 4 x 24 (16-byte vectors), weight strided, h in place */
    sf_norm_params p;
    sf_norm_params_init(&p);
    memcpy(cpu, in, sizeof cpu);
    p.x = t2(cpu, SF_F32, 4, 24), p.residual = t2(cpu + 128, SF_F32, 4, 24);
    p.weight = t1(cpu + 256, SF_F32, 12), p.weight.shape[0] = 24, p.weight.stride[0] = 2;
    p.out = t2(cpu + 512, SF_F32, 4, 24), p.residual_out = p.residual;
    EXPECT(sf_add_rmsnorm(cctx, &p) == SF_OK, "CPU add_rmsnorm");
    sf_memcpy(ctx, d, in, sizeof in);
    p.x.data = d, p.residual.data = d + 128, p.weight.data = d + 256, p.out.data = d + 512;
    p.residual_out = p.residual;
    p.x.device = p.residual.device = p.weight.device = p.out.device = p.residual_out.device = 0;
    EXPECT_STATUS(sf_add_rmsnorm(ctx, &p), SF_OK, NULL);
    EXPECT_STATUS(sf_ctx_synchronize(ctx), SF_OK, NULL);
    sf_memcpy(ctx, gpu, d, sizeof gpu);
    EXPECT(max_diff(cpu + 512, gpu + 512, 96) < 1e-5, "CUDA add_rmsnorm: y as on the CPU");
    EXPECT(max_diff(cpu + 128, gpu + 128, 96) < 1e-6, "CUDA add_rmsnorm: h in place as on the CPU");
    /* SwiGLU CONCAT, rows 3 x (2 x 20) */
    sf_swiglu_params sp;
    sf_swiglu_params_init(&sp);
    memcpy(cpu, in, sizeof cpu);
    sp.gate = t2(cpu, SF_F32, 3, 40), sp.out = t2(cpu + 512, SF_F32, 3, 20), sp.layout = SF_SWIGLU_CONCAT;
    EXPECT(sf_swiglu(cctx, &sp) == SF_OK, "CPU swiglu");
    sf_memcpy(ctx, d, in, sizeof in);
    sp.gate.data = d, sp.out.data = d + 512;
    sp.gate.device = sp.out.device = 0;
    EXPECT_STATUS(sf_swiglu(ctx, &sp), SF_OK, NULL);
    EXPECT_STATUS(sf_ctx_synchronize(ctx), SF_OK, NULL);
    sf_memcpy(ctx, gpu, d, sizeof gpu);
    EXPECT(max_diff(cpu + 512, gpu + 512, 60) < 1e-5, "CUDA swiglu: as on the CPU");
    /* RoPE in place, q (5, 3, 16) and k (5, 1, 16), rotary dim 12, position t */
    sf_rope_params rp;
    sf_rope_params_init(&rp);
    memcpy(cpu, in, sizeof cpu);
    rp.q = t3(cpu, SF_F32, 5, 3, 16), rp.k = t3(cpu + 512, SF_F32, 5, 1, 16), rp.rotary_dim = 12;
    EXPECT(sf_rope(cctx, &rp) == SF_OK, "CPU rope");
    sf_memcpy(ctx, d, in, sizeof in);
    rp.q.data = d, rp.k.data = d + 512;
    rp.q.device = rp.k.device = 0;
    EXPECT_STATUS(sf_rope(ctx, &rp), SF_OK, NULL);
    EXPECT_STATUS(sf_ctx_synchronize(ctx), SF_OK, NULL);
    sf_memcpy(ctx, gpu, d, sizeof gpu);
    EXPECT(max_diff(cpu, gpu, 240) < 1e-5 && max_diff(cpu + 512, gpu + 512, 80) < 1e-5,
           "CUDA rope: q and k as on the CPU");
    sf_free(ctx, dev);
    sf_ctx_destroy(cctx);
}

int main(int argc, char **argv) {
    const int cuda = split_cuda_part(argc, argv);
    if (cuda < 0) return 2;
    sf_ctx *ctx = NULL;
    if (cuda) {
        /* the CUDA backend: the same small calls on a GPU context (in-place
         * h, the three layouts' CONCAT, in-place RoPE with theta) agree with
         * the CPU backend to f32 rounding; the case table (test_ops) has the
         * rest */
        const int code = split_gpu_ctx(&ctx, "test_fused");
        if (code) return code;
        test_cuda(ctx);
        sf_ctx_destroy(ctx);
    } else {
        if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
            printf("FAIL cannot create a CPU context\n");
            return 1;
        }
        test_norms(ctx);
        test_swiglu(ctx);
        test_rope(ctx);
        sf_ctx_destroy(ctx);
    }
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
