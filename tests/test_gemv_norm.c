/* test_gemv_norm.c - the engine's fused decode product + residual add +
 * RMSNorm (src/cuda/layer/gemv_norm.h) against a double reference:
 *     res += x W^T;  out = res * rstd * nw,  rstd = 1 / sqrt(mean(res^2) + eps)
 * f32 / f16 / bf16, 1-8 rows, shapes of the engine's layers and odd ones,
 * padded row strides; outputs poisoned (NaN) first; each shape run twice
 * (the block counter must come back to zero); rows past 8 and misaligned
 * rows refused.  --quick: small shapes only (for compute-sanitizer).
 * Skipped (77) without a device. */
#include "gpu_test.h"
#include "layer/gemv_norm.h"

#include <math.h>

/* v rounded to dt, stored at p[i]; returns the rounded value */
static double put(sf_dtype dt, void *p, int64_t i, double v) {
    if (dt == SF_F32) return ((float *)p)[i] = (float)v;
    if (dt == SF_BF16) return from_bf16(((uint16_t *)p)[i] = to_bf16((float)v));
    return from_f16(((uint16_t *)p)[i] = to_f16((float)v));
}
static double get(sf_dtype dt, const void *p, int64_t i) {
    if (dt == SF_F32) return ((const float *)p)[i];
    if (dt == SF_BF16) return from_bf16(((const uint16_t *)p)[i]);
    return from_f16(((const uint16_t *)p)[i]);
}

static int run_case(sf_ctx *gpu, sf_dtype dt, int M, int N, int K, int pad, void *scratch) {
    const size_t es = sf_dtype_size(dt);
    const int64_t ldx = K + pad, ldw = K + pad, ldr = N + 3, ldo = N + 5;
    double *xd = xmalloc(sizeof(double) * (size_t)(M * ldx)), *wd = xmalloc(sizeof(double) * (size_t)N * ldw);
    void *xh = xmalloc(es * (size_t)(M * ldx)), *wh = xmalloc(es * (size_t)N * ldw);
    float *rh = xmalloc(4 * (size_t)(M * ldr)), *nwh = xmalloc(4 * (size_t)N), *rout = xmalloc(4 * (size_t)(M * ldr));
    void *oh = xmalloc(es * (size_t)(M * ldo));
    int failures = 0;
    for (int round = 0; round < 2; round++) {
        for (int64_t i = 0; i < M * ldx; i++) xd[i] = put(dt, xh, i, urand(-1, 1));
        for (int64_t i = 0; i < (int64_t)N * ldw; i++) wd[i] = put(dt, wh, i, urand(-1, 1) / sqrt((double)K));
        for (int64_t i = 0; i < M * ldr; i++) rh[i] = (float)urand(-2, 2);
        for (int i = 0; i < N; i++) nwh[i] = (float)urand(0.5, 1.5);
        memset(oh, 0xff, es * (size_t)(M * ldo)); /* NaN in every dtype */
        void *x, *w, *r, *nw, *o;
        CK(sf_malloc(gpu, &x, es * (size_t)(M * ldx)));
        CK(sf_malloc(gpu, &w, es * (size_t)N * ldw));
        CK(sf_malloc(gpu, &r, 4 * (size_t)(M * ldr)));
        CK(sf_malloc(gpu, &nw, 4 * (size_t)N));
        CK(sf_malloc(gpu, &o, es * (size_t)(M * ldo)));
        CK(sf_memcpy(gpu, x, xh, es * (size_t)(M * ldx)));
        CK(sf_memcpy(gpu, w, wh, es * (size_t)N * ldw));
        CK(sf_memcpy(gpu, r, rh, 4 * (size_t)(M * ldr)));
        CK(sf_memcpy(gpu, nw, nwh, 4 * (size_t)N));
        CK(sf_memcpy(gpu, o, oh, es * (size_t)(M * ldo)));
        sf_gemv_norm_args a = {0};
        a.dt = dt, a.x = x, a.w = w, a.res = r, a.nw = nw, a.out = o;
        a.ldx = ldx, a.ldw = ldw, a.ldr = ldr, a.ldo = ldo, a.M = M, a.N = N, a.K = K, a.eps = 1e-5f;
        a.scratch = scratch;
        CK(sf_cuda_gemv_add_rmsnorm(gpu, &a));
        CK(sf_ctx_synchronize(gpu));
        CK(sf_memcpy(gpu, rout, r, 4 * (size_t)(M * ldr)));
        CK(sf_memcpy(gpu, oh, o, es * (size_t)(M * ldo)));
        double worst_r = 0, worst_o = 0;
        const double eps_dt = dt == SF_F32 ? 1.2e-7 : dt == SF_F16 ? 4.9e-4 : 3.9e-3;
        for (int m = 0; m < M; m++) {
            double ss = 0, *rr = xmalloc(sizeof(double) * (size_t)N);
            for (int n = 0; n < N; n++) {
                double y = 0, ay = 0;
                for (int k = 0; k < K; k++) {
                    y += xd[m * ldx + k] * wd[(int64_t)n * ldw + k];
                    ay += fabs(xd[m * ldx + k] * wd[(int64_t)n * ldw + k]);
                }
                rr[n] = (double)rh[m * ldr + n] + y;
                ss += rr[n] * rr[n];
                /* f32 products and sums: a few ulp of the terms' magnitude */
                const double e = fabs((double)rout[m * ldr + n] - rr[n]) / (1e-6 * (ay + fabs(rr[n])) + 1e-30);
                if (!(e <= 1.0)) worst_r = e > worst_r || e != e ? (e != e ? INFINITY : e) : worst_r;
            }
            const double rs = 1.0 / sqrt(ss / N + 1e-5);
            for (int n = 0; n < N; n++) {
                const double want = rr[n] * rs * nwh[n], got = get(dt, oh, m * ldo + n);
                const double e = fabs(got - want) / (2 * eps_dt * fabs(want) + 1e-5);
                if (!(e <= 1.0)) worst_o = e > worst_o || e != e ? (e != e ? INFINITY : e) : worst_o;
            }
            /* the padding of out stays poisoned */
            for (int n = N; n < ldo; n++)
                if (get(dt, oh, m * ldo + n) == get(dt, oh, m * ldo + n)) worst_o = INFINITY;
            free(rr);
        }
        if (worst_r > 0 || worst_o > 0) {
            printf("FAIL %s M %d N %d K %d pad %d round %d: residual error %.2f, out error %.2f (x tolerance)\n",
                   sf_dtype_name(dt), M, N, K, pad, round, worst_r, worst_o);
            failures++;
        }
        sf_free(gpu, x), sf_free(gpu, w), sf_free(gpu, r), sf_free(gpu, nw), sf_free(gpu, o);
    }
    free(xd), free(wd), free(xh), free(wh), free(rh), free(nwh), free(rout), free(oh);
    return failures;
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0; /* two shapes (for the sanitizers) */
    const int start = gpu_test_start("test_gemv_norm");
    if (start) return start;
    sf_ctx *gpu;
    CK(sf_ctx_create(&gpu, GPU_TEST_DEVICE));
    const int shapes[][2] = {{2048, 2048}, {2048, 8192}, {576, 576}, {576, 1536}, {37, 64}, {1, 16}, {1000, 40}};
    const int rows[] = {1, 2, 3, 5, 8};
    const sf_dtype dts[] = {SF_BF16, SF_F16, SF_F32};
    const size_t sb = sf_gemv_norm_scratch_bytes(2048);
    void *scratch;
    CK(sf_malloc(gpu, &scratch, sb));
    void *zero = calloc(1, sb);
    CK(sf_memcpy(gpu, scratch, zero, sb));
    free(zero);
    int failures = 0, cases = 0;
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int r = 0; r < 5; r++) {
                if (shapes[s][0] * shapes[s][1] > 2048 * 2048 && rows[r] > 2) continue; /* keep the reference short */
                if (quick && (s < 3 || (r != 0 && r != 4))) continue;
                const int pad = (s % 2) ? 8 : 0;
                failures += run_case(gpu, dts[d], rows[r], shapes[s][0], shapes[s][1], pad, scratch);
                cases++;
            }
    /* refusals: 9 rows, a misaligned x, K not a whole number of 16 bytes */
    sf_gemv_norm_args a = {0};
    a.dt = SF_BF16, a.x = scratch, a.w = scratch, a.res = scratch, a.nw = scratch, a.out = scratch;
    a.scratch = scratch, a.M = 9, a.N = 8, a.K = 8, a.ldx = a.ldw = 8, a.ldr = a.ldo = 8;
    const char *why9 = sf_gemv_norm_supports(&a);
    a.M = 1, a.x = (char *)scratch + 2;
    const char *whyal = sf_gemv_norm_supports(&a);
    a.x = scratch, a.K = 12, a.ldx = a.ldw = 12;
    const char *whyk = sf_gemv_norm_supports(&a);
    const sf_status st = sf_cuda_gemv_add_rmsnorm(gpu, &a);
    if (!why9 || !whyal || !whyk || st != SF_ERR_UNSUPPORTED) {
        printf("FAIL refusals: 9 rows '%s', misaligned '%s', K 12 '%s', call %s\n", why9 ? why9 : "(served)",
               whyal ? whyal : "(served)", whyk ? whyk : "(served)", sf_status_string(st));
        failures++;
    }
    sf_free(gpu, scratch);
    sf_ctx_destroy(gpu);
    printf("%s test_gemv_norm: %d cases (x 2 rounds), refusals\n", failures ? "FAIL" : "PASS", cases);
    return failures ? 1 : 0;
}
