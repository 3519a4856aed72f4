/* test_gemm.c - the dense product through the public API: every backend
 * against the reference on seeded random inputs (all dtype pairs, strided
 * rows, bias, beta, the shapes that break blocking: 1, primes, one past a
 * block), outputs poisoned beforehand, a hand-computed product, and the
 * validation errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "split_test.h"

static int checks = 0, failures = 0;
static sf_ctx *ctx = NULL, *gctx = NULL; /* gctx: CUDA device 0, when there is one */

static uint64_t rng_state = 20261204;
static uint32_t rnd(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}
static float unif(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); }

static uint16_t to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
/* f16 through the library's own conversion is what is under test
 * elsewhere; here f16 values are built exactly: small integers / 64 */
static uint16_t f16_of_int64th(int v) { /* v in [-64, 64], value v / 64 */
    if (v == 0) return 0;
    const int s = v < 0;
    int a = s ? -v : v, e = 0;
    while (a >= 2048) a >>= 1, e++; /* never for |v| <= 64 */
    int m = a, ex = 0;              /* normalise m to 1.xxx * 2^ex */
    while (m >= 2) m >>= 1, ex++;
    const int exp = ex - 6 + 15;    /* value a / 64 = 1.f * 2^(ex - 6) */
    const int frac = (a << (10 - ex)) & 1023;
    return (uint16_t)((s << 15) | (exp << 10) | frac);
}
static double f16_val(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}

/* fills n elements of dtype dt with random values; their exact values in val */
static void fill(void *p, sf_dtype dt, int64_t n, double *val) {
    for (int64_t i = 0; i < n; i++) {
        if (dt == SF_F32) {
            ((float *)p)[i] = unif();
            val[i] = ((float *)p)[i];
        } else if (dt == SF_BF16) {
            ((uint16_t *)p)[i] = to_bf16(unif());
            val[i] = from_bf16(((uint16_t *)p)[i]);
        } else {
            ((uint16_t *)p)[i] = f16_of_int64th((int)(rnd() % 129) - 64);
            val[i] = f16_val(((uint16_t *)p)[i]);
        }
    }
}
static double get(const void *p, sf_dtype dt, int64_t i) {
    if (dt == SF_F32) return ((const float *)p)[i];
    if (dt == SF_BF16) return from_bf16(((const uint16_t *)p)[i]);
    return f16_val(((const uint16_t *)p)[i]);
}

/* One random case on `be`: y (M, N) with row strides padded by pad, checked
 * against the product in double of the inputs' exact values. */
static void run_case(sf_backend be, sf_dtype xdt, sf_dtype wdt, int64_t M, int64_t N, int64_t K, int pad,
                     int bias, float beta) {
    const int64_t xs = K + pad, ws = K + 2 * pad, ys = N + pad;
    const size_t xe = sf_dtype_size(xdt), we = sf_dtype_size(wdt);
    void *x = calloc((size_t)(M * xs + 1), xe), *w = calloc((size_t)(N * ws + 1), we);
    void *y = calloc((size_t)(M * ys + 1), xe);
    double *xv = calloc((size_t)(M * xs + 1), sizeof(double)), *wv = calloc((size_t)(N * ws + 1), sizeof(double));
    double *y0 = calloc((size_t)(M * ys + 1), sizeof(double)), *bv = calloc((size_t)N, sizeof(double));
    float *b = calloc((size_t)N, sizeof(float));
    fill(x, xdt, M * xs, xv);
    fill(w, wdt, N * ws, wv);
    fill(y, xdt, M * ys, y0);
    /* poison: with beta 0, y must be overwritten whatever it held */
    if (beta == 0.0f)
        for (int64_t i = 0; i < M * ys; i++) {
            if (xdt == SF_F32) ((float *)y)[i] = NAN;
            else ((uint16_t *)y)[i] = 0x7fc0;
        }
    for (int64_t n = 0; n < N; n++) b[n] = unif(), bv[n] = b[n];
    sf_gemm_params p;
    sf_gemm_params_init(&p);
    p.x = sf_tensor_contiguous(x, xdt, SF_DEVICE_CPU, 2, (int64_t[]){M, K});
    p.x.stride[0] = xs;
    p.w = sf_tensor_contiguous(w, wdt, SF_DEVICE_CPU, 2, (int64_t[]){N, K});
    p.w.stride[0] = ws;
    p.y = sf_tensor_contiguous(y, xdt, SF_DEVICE_CPU, 2, (int64_t[]){M, N});
    p.y.stride[0] = ys;
    if (bias) p.bias = sf_tensor_contiguous(b, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){N});
    p.beta = beta;
    p.backend = be;
    if (be == SF_BACKEND_CUDA) { /* the same call on device copies */
        const size_t xb = (size_t)(M * xs + 1) * xe, wbts = (size_t)(N * ws + 1) * we, yb = (size_t)(M * ys + 1) * xe;
        void *dx = NULL, *dw = NULL, *dy = NULL, *db = NULL;
        sf_status st = sf_malloc(gctx, &dx, xb);
        if (st == SF_OK) st = sf_malloc(gctx, &dw, wbts);
        if (st == SF_OK) st = sf_malloc(gctx, &dy, yb);
        if (st == SF_OK) st = sf_malloc(gctx, &db, (size_t)N * 4);
        if (st == SF_OK) st = sf_memcpy(gctx, dx, x, xb);
        if (st == SF_OK) st = sf_memcpy(gctx, dw, w, wbts);
        if (st == SF_OK) st = sf_memcpy(gctx, dy, y, yb);
        if (st == SF_OK) st = sf_memcpy(gctx, db, b, (size_t)N * 4);
        sf_gemm_params d = p;
        d.x.data = dx, d.w.data = dw, d.y.data = dy, d.x.device = d.w.device = d.y.device = 0;
        if (bias) d.bias.data = db, d.bias.device = 0;
        if (st == SF_OK) st = sf_gemm(gctx, &d);
        if (st == SF_OK) st = sf_ctx_synchronize(gctx);
        if (st == SF_OK) st = sf_memcpy(gctx, y, dy, yb);
        EXPECT(st == SF_OK, "cuda gemm: %s: %s", sf_status_string(st), sf_ctx_last_error(gctx));
        sf_free(gctx, dx), sf_free(gctx, dw), sf_free(gctx, dy), sf_free(gctx, db);
    } else {
        EXPECT_STATUS(sf_gemm(ctx, &p), SF_OK, NULL);
    }
    double err2 = 0, ref2 = 0;
    int nan = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t n = 0; n < N; n++) {
            double r = 0;
            for (int64_t k = 0; k < K; k++) r += xv[i * xs + k] * wv[n * ws + k];
            if (bias) r += bv[n];
            r += beta * y0[i * ys + n];
            const double g = get(y, xdt, i * ys + n);
            if (isnan(g)) nan++;
            err2 += (g - r) * (g - r), ref2 += r * r;
        }
    /* padding between rows untouched: it still holds the poison / y0 */
    int pad_bad = 0;
    if (pad && beta == 0.0f)
        for (int64_t i = 0; i < M; i++) pad_bad += !isnan(get(y, xdt, i * ys + N));
    const double rel = sqrt(err2 / (ref2 > 0 ? ref2 : 1));
    const double tol = xdt == SF_F32 ? 1e-5 : xdt == SF_BF16 ? 8e-3 : 1e-3;
    EXPECT(nan == 0 && rel <= tol && pad_bad == 0,
           "%s x %s w %s M %lld N %lld K %lld pad %d bias %d beta %g: rel err %.3g (tol %.0e), %d NaN, %d pads written",
           sf_backend_name(be), sf_dtype_name(xdt), sf_dtype_name(wdt), (long long)M, (long long)N, (long long)K,
           pad, bias, (double)beta, rel, tol, nan, pad_bad);
    free(x), free(w), free(y), free(xv), free(wv), free(y0), free(bv), free(b);
}

static void test_random(void) {
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 7, 33}, {3, 5, 17}, {5, 257, 40}, {17, 300, 64}, {64, 96, 129}, {2, 513, 576}};
    const sf_dtype dts[3] = {SF_F32, SF_F16, SF_BF16};
    const int ns = (int)(sizeof shapes / sizeof shapes[0]);
    for (int be = SF_BACKEND_REF; be <= SF_BACKEND_CPU; be++)
        for (int s = 0; s < ns; s++)
            for (int xi = 0; xi < 3; xi++)
                for (int wi = 0; wi < 3; wi++) {
                    const int v = (int)(rnd() % 4);
                    run_case((sf_backend)be, dts[xi], dts[wi], shapes[s][0], shapes[s][1], shapes[s][2], v & 1 ? 3 : 0,
                             v >> 1, 0.0f);
                    run_case((sf_backend)be, dts[xi], dts[wi], shapes[s][0], shapes[s][1], shapes[s][2], 2, 1, 1.0f);
                }
    run_case(SF_BACKEND_CPU, SF_F32, SF_F32, 9, 33, 20, 1, 1, -0.5f);
}

/* The CUDA backend (cuBLAS): x and w of one dtype, the same cases, on the
 * context gctx. */
static void test_cuda(void) {
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 7, 33}, {3, 5, 17}, {5, 257, 40}, {17, 300, 64}, {64, 96, 129},
                                 {2, 513, 576}, {130, 1024, 576}};
    const sf_dtype dts[3] = {SF_F32, SF_F16, SF_BF16};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int di = 0; di < 3; di++) {
            run_case(SF_BACKEND_CUDA, dts[di], dts[di], shapes[s][0], shapes[s][1], shapes[s][2], (int)(s & 1) * 3, 0, 0.0f);
            run_case(SF_BACKEND_CUDA, dts[di], dts[di], shapes[s][0], shapes[s][1], shapes[s][2], 2, 1, 1.0f);
        }
}

static void test_hand_and_errors(void) {
    /* x = [[1, 2], [3, 4]], W = [[1, 0], [1, 1], [0, -1]], bias (10, 20, 30) */
    float x[4] = {1, 2, 3, 4}, w[6] = {1, 0, 1, 1, 0, -1}, b[3] = {10, 20, 30}, y[6];
    const float want[6] = {11, 23, 28, 13, 27, 26};
    sf_gemm_params p;
    sf_gemm_params_init(&p);
    EXPECT(p.beta == 0.0f && p.backend == SF_BACKEND_AUTO && !p.x.data, "params_init defaults");
    p.x = sf_tensor_contiguous(x, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){2, 2});
    p.w = sf_tensor_contiguous(w, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){3, 2});
    p.bias = sf_tensor_contiguous(b, SF_F32, SF_DEVICE_CPU, 1, (int64_t[]){3});
    p.y = sf_tensor_contiguous(y, SF_F32, SF_DEVICE_CPU, 2, (int64_t[]){2, 3});
    EXPECT_STATUS(sf_gemm(ctx, &p), SF_OK, NULL);
    for (int i = 0; i < 6; i++) EXPECT_NEAR(y[i], want[i], 0, "hand product");
    p.beta = 1.0f; /* y += x W^T + bias: doubles it */
    EXPECT_STATUS(sf_gemm(ctx, &p), SF_OK, NULL);
    for (int i = 0; i < 6; i++) EXPECT_NEAR(y[i], 2 * want[i], 0, "beta 1");
    p.beta = NAN;
    EXPECT_STATUS(sf_gemm(ctx, &p), SF_ERR_INVALID_ARG, "beta");
    p.beta = 0.0f;
    sf_gemm_params q = p;
    q.w.shape[1] = 3;
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_ERR_SHAPE, "w");
    q = p, q.y.shape[1] = 2;
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_ERR_SHAPE, "y");
    q = p, q.bias.shape[0] = 2;
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_ERR_SHAPE, "bias");
    q = p, q.y.dtype = SF_BF16;
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_ERR_DTYPE, "y");
    q = p, q.w.dtype = SF_I32;
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_ERR_DTYPE, "w");
    q = p, q.x.stride[1] = 2;
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_ERR_STRIDE, "x");
    q = p, q.w.data = NULL;
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_ERR_NULL_POINTER, "w");
    q = p, q.y.data = x; /* the output over an input */
    q.y.shape[1] = 2, q.w.shape[0] = 2, q.bias.data = NULL;
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_ERR_INVALID_ARG, "x");
    q = p, q.x.shape[0] = 0, q.y.shape[0] = 0; /* M = 0: a no-op */
    EXPECT_STATUS(sf_gemm(ctx, &q), SF_OK, NULL);
    EXPECT_STATUS(sf_gemm(ctx, NULL), SF_ERR_NULL_POINTER, NULL);
    /* the CUDA backend: unavailable here, or refuses mixed dtypes */
    q = p, q.backend = SF_BACKEND_CUDA;
    EXPECT(sf_gemm(ctx, &q) != SF_OK, "the CUDA backend on a CPU context must fail");
}

int main(int argc, char **argv) {
    const int cuda = split_cuda_part(argc, argv);
    if (cuda < 0) return 2;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) return 1;
    printf("test_gemm: seed %llu\n", (unsigned long long)rng_state);
    if (cuda) {
        const int rc = split_gpu_ctx(&gctx, "test_gemm");
        if (rc) {
            sf_ctx_destroy(ctx);
            return rc;
        }
        test_cuda();
        sf_ctx_destroy(gctx);
    } else {
        test_hand_and_errors();
        test_random();
    }
    sf_ctx_destroy(ctx);
    printf("test_gemm: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
