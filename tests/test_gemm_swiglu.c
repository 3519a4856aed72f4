/* test_gemm_swiglu.c - the gate/up projection with SwiGLU (sf_gemm_swiglu)
 * through the public API: a product worked out by hand; the CPU backend and
 * every CUDA configuration (SF_AUTOTUNE_FORCE=gemm_swiglu:NAME, each row of
 * src/cuda/gemm_swiglu/configs.h) against the double reference on seeded
 * random inputs, at shapes that are not multiples of any tile, strided
 * rows, [gate; up] as two views of one (2I, K) weight, outputs poisoned
 * with NaN beforehand and guard elements checked after; and every
 * validation error with the tensor it names.  The CUDA part says so and is
 * skipped without a device. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "split_test.h"

static int checks = 0, failures = 0;
static sf_ctx *ctx = NULL;

static uint64_t rng_state = 0x5eed0001ULL;
static double unif(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* f32 <-> the stored dtype (round to nearest even; finite values) */
static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f2h(float f) {
    /* through the exact double path: sign, exponent, 10-bit significand */
    const uint16_t s = f < 0 ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a < ldexp(1.0, -24)) return s;
    int e;
    double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    if (e - 1 < -14) return (uint16_t)(s | (uint16_t)nearbyint(ldexp(a, 24)));
    uint32_t q = (uint32_t)nearbyint(ldexp(m, 11)); /* 1024 .. 2048 */
    if (q == 2048) q = 1024, e++;
    return (uint16_t)(s | (uint16_t)((e - 1 + 15) << 10) | (q & 1023));
}
static float h2f(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024.0 + m, e - 25);
    return (float)(s ? -v : v);
}
static void st(void *p, sf_dtype dt, int64_t i, float v) {
    if (dt == SF_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == SF_BF16 ? f2bf(v) : f2h(v);
}
static float ld(const void *p, sf_dtype dt, int64_t i) {
    if (dt == SF_F32) return ((const float *)p)[i];
    return dt == SF_BF16 ? bf2f(((const uint16_t *)p)[i]) : h2f(((const uint16_t *)p)[i]);
}
static void poison(void *p, sf_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (dt == SF_F32) ((float *)p)[i] = NAN;
        else ((uint16_t *)p)[i] = 0x7fc1;
    }
}

static sf_tensor view2(void *data, sf_dtype dt, int dev, int64_t r, int64_t c, int64_t rs) {
    sf_tensor t = sf_tensor_contiguous(data, dt, dev, 2, (int64_t[]){r, c});
    t.stride[0] = rs;
    return t;
}

/* One problem: x (M, K) with row stride K + xp; the weights either two
 * tensors with row stride K + wp, or (cat) the two halves of one (2I, K + wp)
 * buffer; y (M, I) with row stride I + yp and a guard row after it. */
typedef struct shape {
    int64_t M, I, K, xp, wp, yp;
    int cat;
} shape;

typedef struct host_case {
    shape s;
    sf_dtype dt;
    size_t es;
    int64_t nx, nw, ny;
    void *x, *w, *y, *ref;
} host_case;

static void make_case(host_case *c, shape s, sf_dtype dt) {
    c->s = s;
    c->dt = dt;
    c->es = sf_dtype_size(dt);
    c->nx = s.M * (s.K + s.xp);
    c->nw = 2 * s.I * (s.K + s.wp);
    c->ny = (s.M + 1) * (s.I + s.yp); /* one guard row */
    c->x = malloc((size_t)c->nx * c->es);
    c->w = malloc((size_t)c->nw * c->es);
    c->y = malloc((size_t)c->ny * c->es);
    c->ref = malloc((size_t)c->ny * c->es);
    /* x ~ U(-1, 1), weights ~ U(-1, 1) / sqrt(K): g and u of order one */
    const double ws = 1.0 / sqrt((double)s.K);
    for (int64_t i = 0; i < c->nx; i++) st(c->x, dt, i, (float)(2.0 * unif() - 1.0));
    for (int64_t i = 0; i < c->nw; i++) st(c->w, dt, i, (float)((2.0 * unif() - 1.0) * ws * 2.0));
}
static void free_case(host_case *c) {
    free(c->x);
    free(c->w);
    free(c->y);
    free(c->ref);
}

/* params over the buffers xd, wd, yd (on device dev) */
static sf_gemm_swiglu_params params_of(const host_case *c, void *xd, void *wd, void *yd, int dev) {
    const shape s = c->s;
    sf_gemm_swiglu_params p;
    sf_gemm_swiglu_params_init(&p);
    const int64_t wrs = s.K + s.wp;
    p.x = view2(xd, c->dt, dev, s.M, s.K, s.K + s.xp);
    /* cat: rows [0, I) gate and [I, 2I) up of one buffer; else the gate and
     * up matrices interleaved by halves the other way round (up first) */
    char *w = (char *)wd;
    if (s.cat) {
        p.w_gate = view2(w, c->dt, dev, s.I, s.K, wrs);
        p.w_up = view2(w + (size_t)(s.I * wrs) * c->es, c->dt, dev, s.I, s.K, wrs);
    } else {
        p.w_up = view2(w, c->dt, dev, s.I, s.K, wrs);
        p.w_gate = view2(w + (size_t)(s.I * wrs) * c->es, c->dt, dev, s.I, s.K, wrs);
    }
    p.y = view2(yd, c->dt, dev, s.M, s.I, s.I + s.yp);
    return p;
}

static double tol_of(sf_dtype dt) { return dt == SF_F32 ? 2e-5 : dt == SF_F16 ? 2e-3 : 1e-2; }

/* y against ref: every output within tol (relative to max |ref|, plus
 * |ref| tol), finite; padding and the guard row still poisoned. */
static void compare(const host_case *c, const void *y, const char *what) {
    const shape s = c->s;
    const int64_t yrs = s.I + s.yp;
    double mx = 0.0;
    for (int64_t m = 0; m < s.M; m++)
        for (int64_t i = 0; i < s.I; i++) mx = fmax(mx, fabs(ld(c->ref, c->dt, m * yrs + i)));
    const double tol = tol_of(c->dt);
    int64_t bad = 0, unwritten = 0, guard = 0;
    double worst = 0.0;
    for (int64_t m = 0; m <= s.M; m++)
        for (int64_t i = 0; i < yrs; i++) {
            const float v = ld(y, c->dt, m * yrs + i);
            if (m == s.M || i >= s.I) {
                if (!isnan(v)) guard++;
                continue;
            }
            const double r = ld(c->ref, c->dt, m * yrs + i);
            if (isnan(v)) {
                unwritten++;
                continue;
            }
            const double e = fabs(v - r);
            worst = fmax(worst, e / (mx + 1e-30));
            if (!(e <= tol * (mx * 0.25 + fabs(r)))) bad++;
        }
    EXPECT(bad == 0 && unwritten == 0 && guard == 0,
           "%s %s M=%lld I=%lld K=%lld pads (%lld,%lld,%lld) cat=%d: %lld outside tolerance (worst %.3g of max), "
           "%lld unwritten, %lld guard elements written",
           what, sf_dtype_name(c->dt), (long long)s.M, (long long)s.I, (long long)s.K, (long long)s.xp,
           (long long)s.wp, (long long)s.yp, s.cat, (long long)bad, worst, (long long)unwritten, (long long)guard);
}

static void run_ref(host_case *c) {
    poison(c->ref, c->dt, c->ny);
    sf_gemm_swiglu_params p = params_of(c, c->x, c->w, c->ref, SF_DEVICE_CPU);
    p.backend = SF_BACKEND_REF;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &p), SF_OK, NULL);
}

static const shape shapes[] = {
    {1, 77, 264, 0, 0, 0, 0},     {3, 50, 100, 3, 5, 1, 1},     {16, 136, 520, 8, 8, 2, 1},
    {37, 250, 100, 1, 3, 3, 0},   {64, 128, 64, 0, 0, 0, 1},    {129, 333, 1032, 8, 16, 6, 0},
    {200, 257, 520, 0, 8, 0, 1},  {2, 1, 7, 0, 0, 0, 0},      {6, 45, 1544, 8, 8, 0, 1},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* ------------------------------------------------------------------ */

static void test_hand(void) {
    /* x = [1, 2], w_gate = [[1, 0], [0, -1]], w_up = [[3, 3], [1, 1]]:
     * g = [1, -2], u = [9, 3], y = [silu(1) 9, silu(-2) 3] */
    float x[2] = {1, 2}, wg[4] = {1, 0, 0, -1}, wu[4] = {3, 3, 1, 1}, y[2] = {NAN, NAN};
    sf_gemm_swiglu_params p;
    sf_gemm_swiglu_params_init(&p);
    EXPECT(p.backend == SF_BACKEND_AUTO && p.x.data == NULL, "params_init defaults");
    p.x = sf_tensor_contiguous(x, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){1, 2});
    p.w_gate = sf_tensor_contiguous(wg, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){2, 2});
    p.w_up = sf_tensor_contiguous(wu, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){2, 2});
    p.y = sf_tensor_contiguous(y, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){1, 2});
    const double want0 = 1.0 / (1.0 + exp(-1.0)) * 9.0, want1 = -2.0 / (1.0 + exp(2.0)) * 3.0;
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++) {
        p.backend = (sf_backend)be;
        y[0] = y[1] = NAN;
        EXPECT_STATUS(sf_gemm_swiglu(ctx, &p), SF_OK, NULL);
        EXPECT_NEAR(y[0], want0, 1e-5, "hand y[0]");
        EXPECT_NEAR(y[1], want1, 1e-5, "hand y[1]");
    }
}

static void test_cpu(void) {
    const sf_dtype dts[3] = {SF_F32, SF_F16, SF_BF16};
    for (int d = 0; d < 3; d++)
        for (int si = 0; si < NSHAPES; si++) {
            host_case c;
            make_case(&c, shapes[si], dts[d]);
            run_ref(&c);
            poison(c.y, c.dt, c.ny);
            sf_gemm_swiglu_params p = params_of(&c, c.x, c.w, c.y, SF_DEVICE_CPU);
            p.backend = SF_BACKEND_CPU;
            EXPECT_STATUS(sf_gemm_swiglu(ctx, &p), SF_OK, NULL);
            compare(&c, c.y, "cpu");
            free_case(&c);
        }
}

static void test_errors(void) {
    float x[12], wg[12], wu[12], y[12];
    sf_gemm_swiglu_params p;
    sf_gemm_swiglu_params_init(&p);
    p.x = sf_tensor_contiguous(x, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){2, 3});
    p.w_gate = sf_tensor_contiguous(wg, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){4, 3});
    p.w_up = sf_tensor_contiguous(wu, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){4, 3});
    p.y = sf_tensor_contiguous(y, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){2, 4});
    for (int i = 0; i < 12; i++) x[i] = wg[i] = wu[i] = 0.25f * (float)(i % 5);
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &p), SF_OK, NULL);
    EXPECT(sf_gemm_swiglu(NULL, &p) == SF_ERR_NULL_POINTER, "NULL context");
    EXPECT_STATUS(sf_gemm_swiglu(ctx, NULL), SF_ERR_NULL_POINTER, "params");

    sf_gemm_swiglu_params q = p;
    q.x.data = NULL;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_NULL_POINTER, "x");
    q = p;
    q.w_up.data = NULL;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_NULL_POINTER, "w_up");
    q = p;
    q.y.data = NULL;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_NULL_POINTER, "y");
    q = p;
    q.w_gate.shape[1] = 2;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_SHAPE, "w_gate");
    q = p;
    q.w_up.shape[0] = 3;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_SHAPE, "w_up");
    q = p;
    q.y.shape[1] = 3;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_SHAPE, "y");
    q = p;
    q.x.rank = 3;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_SHAPE, "x");
    q = p;
    q.w_up.dtype = SF_F16;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_DTYPE, "w_up");
    q = p;
    q.y.dtype = SF_BF16;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_DTYPE, "y");
    q = p;
    q.x.dtype = SF_I32;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_DTYPE, "x");
    q = p;
    q.w_gate.stride[1] = 2;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_STRIDE, "w_gate");
    q = p;
    q.y.stride[0] = 0; /* two rows of y on one address */
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_STRIDE, "y");
    q = p;
    q.y.data = x; /* y over x */
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_INVALID_ARG, "y");
    q = p;
    q.y.data = wu + 1;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_INVALID_ARG, "w_up");
    q = p;
    q.x.shape[1] = 0, q.w_gate.shape[1] = 0, q.w_up.shape[1] = 0;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_SHAPE, "K = 0");
    q = p;
    q.w_gate.shape[0] = 0, q.w_up.shape[0] = 0, q.y.shape[1] = 0;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_SHAPE, "I = 0");
    q = p;
    q.x.device = 0;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_ERR_DEVICE, "x");
    q = p;
    q.backend = SF_BACKEND_CUDA;
    EXPECT(sf_gemm_swiglu(ctx, &q) == SF_ERR_UNSUPPORTED, "the CUDA backend on a CPU context");
    /* M = 0: nothing to do, y untouched */
    q = p;
    q.x.shape[0] = 0, q.y.shape[0] = 0;
    y[0] = 123.0f;
    EXPECT_STATUS(sf_gemm_swiglu(ctx, &q), SF_OK, NULL);
    EXPECT(y[0] == 123.0f, "M = 0 wrote y");
}

/* ------------------------------------------------------------------ */
/* CUDA: every configuration against the reference                     */
/* ------------------------------------------------------------------ */

/* the rows of src/cuda/gemm_swiglu/configs.h */
static const char *const cuda_configs[] = {"auto", "dec4", "ws128", "ws64", "ws128c2"};
#define NCFG ((int)(sizeof cuda_configs / sizeof cuda_configs[0]))

static void test_cuda(sf_ctx *gpu) {
    const sf_dtype dts[2] = {SF_BF16, SF_F16};
    int served[NCFG];
    memset(served, 0, sizeof served);
    for (int d = 0; d < 2; d++)
        for (int si = 0; si < NSHAPES; si++) {
            host_case c;
            make_case(&c, shapes[si], dts[d]);
            run_ref(&c);
            void *xd = NULL, *wd = NULL, *yd = NULL;
            if (sf_malloc(gpu, &xd, (size_t)c.nx * c.es) != SF_OK || sf_malloc(gpu, &wd, (size_t)c.nw * c.es) != SF_OK ||
                sf_malloc(gpu, &yd, (size_t)c.ny * c.es) != SF_OK) {
                EXPECT(0, "device allocation: %s", sf_ctx_last_error(gpu));
                free_case(&c);
                return;
            }
            sf_memcpy(gpu, xd, c.x, (size_t)c.nx * c.es);
            sf_memcpy(gpu, wd, c.w, (size_t)c.nw * c.es);
            for (int ci = 0; ci < NCFG; ci++) {
                char env[64];
                snprintf(env, sizeof env, "gemm_swiglu:%s", cuda_configs[ci]);
                setenv("SF_AUTOTUNE_FORCE", env, 1);
                poison(c.y, c.dt, c.ny);
                sf_memcpy(gpu, yd, c.y, (size_t)c.ny * c.es);
                sf_gemm_swiglu_params p = params_of(&c, xd, wd, yd, 0);
                const sf_status s = sf_gemm_swiglu(gpu, &p);
                if (s == SF_ERR_UNSUPPORTED) continue; /* the row does not serve this shape */
                checks++;
                if (s != SF_OK || sf_ctx_synchronize(gpu) != SF_OK) {
                    printf("FAIL cuda %s: %s\n", cuda_configs[ci], sf_ctx_last_error(gpu));
                    failures++;
                    continue;
                }
                served[ci]++;
                sf_memcpy(gpu, c.y, yd, (size_t)c.ny * c.es);
                char what[48];
                snprintf(what, sizeof what, "cuda %s", cuda_configs[ci]);
                compare(&c, c.y, what);
            }
            unsetenv("SF_AUTOTUNE_FORCE");
            sf_free(gpu, xd);
            sf_free(gpu, wd);
            sf_free(gpu, yd);
            free_case(&c);
        }
    /* f32 is the host backends' */
    void *b[4] = {NULL, NULL, NULL, NULL};
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= sf_malloc(gpu, &b[i], 256) == SF_OK;
    if (ok) {
        sf_gemm_swiglu_params p;
        sf_gemm_swiglu_params_init(&p);
        p.x = sf_tensor_contiguous(b[0], SF_F32, 0, 2, (int64_t[]){2, 8});
        p.w_gate = sf_tensor_contiguous(b[1], SF_F32, 0, 2, (int64_t[]){4, 8});
        p.w_up = sf_tensor_contiguous(b[2], SF_F32, 0, 2, (int64_t[]){4, 8});
        p.y = sf_tensor_contiguous(b[3], SF_F32, 0, 2, (int64_t[]){2, 4});
        sf_ctx *keep = ctx;
        ctx = gpu;
        EXPECT_STATUS(sf_gemm_swiglu(gpu, &p), SF_ERR_UNSUPPORTED, "f32");
        ctx = keep;
    }
    for (int i = 0; i < 4; i++) sf_free(gpu, b[i]);
    for (int ci = 0; ci < NCFG; ci++) {
        printf("cuda %s served %d of %d cases\n", cuda_configs[ci], served[ci], 2 * NSHAPES);
        EXPECT(served[ci] > 0, "configuration %s served no case", cuda_configs[ci]);
    }
}

int main(int argc, char **argv) {
    const int cuda = split_cuda_part(argc, argv);
    if (cuda < 0) return 2;
    printf("seed %#llx\n", (unsigned long long)rng_state);
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) {
        printf("FAIL cannot create a CPU context\n");
        return 1;
    }
    setenv("SF_AUTOTUNE_CACHE", "", 1);
    if (cuda) {
        sf_ctx *gpu = NULL;
        const int rc = split_gpu_ctx(&gpu, "test_gemm_swiglu");
        if (rc) {
            sf_ctx_destroy(ctx);
            return rc;
        }
        test_cuda(gpu);
        sf_ctx_destroy(gpu);
    } else {
        test_hand();
        test_cpu();
        test_errors();
    }
    sf_ctx_destroy(ctx);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
