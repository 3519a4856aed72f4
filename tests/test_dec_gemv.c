/* test_dec_gemv.c - the engine's decode-step products (src/cuda/layer/
 * dec_gemv.h) against a double reference, every configuration row:
 *     plain   y = x W^T (+ bias)          res   res += x W^T (f32)
 *     swiglu  y = silu(x W^T) * (x W_up^T)
 * with x given or made in the prologue as RMSNorm(nres) * nw; f16 / bf16,
 * 1-16 rows, the engine's shapes (1B-class and SmolLM2) and odd ones,
 * padded row strides (normed calls: bf16, up to 4 rows; f16 and more rows
 * refused); outputs poisoned (NaN) first and their padding
 * checked still poisoned; refusals (5 normed rows, the norm in f16, K not a multiple of 8,
 * misaligned x, an output over an input, the norm with the residual
 * output, a bias with it, no such row); half the calls launched as
 * programmatic dependents.  --quick: small shapes only (for
 * compute-sanitizer).  Skipped (77) without a device. */
#include "dec_test.h"

#include <math.h>

typedef struct {
    sf_dec_out out;
    int norm, bias;
    const char *name;
} mode;

static int run_case(sf_ctx *gpu, sf_dtype dt, mode md, int config, int M, int N, int K, int pad) {
    const int64_t ldx = K + pad, ldw = K + pad, ldn = K + 4 * (pad != 0), ldy = N + 5, ldr = N + 3;
    const int sw = md.out == SF_DEC_SWIGLU;
    const double eps_dt = dt == SF_F16 ? 4.9e-4 : 3.9e-3, neps = 1e-5;
    double *xd = xmalloc(sizeof(double) * (size_t)(M * ldx)), *wd = xmalloc(sizeof(double) * (size_t)N * ldw);
    double *ud = xmalloc(sizeof(double) * (size_t)N * ldw), *bd = xmalloc(sizeof(double) * (size_t)N);
    uint16_t *xh = xmalloc(2 * (size_t)(M * ldx)), *wh = xmalloc(2 * (size_t)N * ldw), *uh = xmalloc(2 * (size_t)N * ldw);
    uint16_t *bh = xmalloc(2 * (size_t)N), *yh = xmalloc(2 * (size_t)(M * ldy));
    float *nres = xmalloc(4 * (size_t)(M * ldn)), *nw = xmalloc(4 * (size_t)K), *rh = xmalloc(4 * (size_t)(M * ldr));
    float *rout = xmalloc(4 * (size_t)(M * ldr));
    for (int64_t i = 0; i < (int64_t)N * ldw; i++) {
        wd[i] = put16(dt, wh, i, urand(-1, 1) / sqrt((double)K));
        ud[i] = put16(dt, uh, i, urand(-1, 1) / sqrt((double)K));
    }
    for (int n = 0; n < N; n++) bd[n] = put16(dt, bh, n, urand(-0.5, 0.5));
    for (int64_t i = 0; i < M * ldr; i++) rh[i] = (float)urand(-2, 2);
    for (int k = 0; k < K; k++) nw[k] = (float)urand(0.5, 1.5);
    for (int64_t i = 0; i < M * ldn; i++) nres[i] = (float)urand(-3, 3);
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int k = 0; k < K; k++) ss += (double)nres[m * ldn + k] * nres[m * ldn + k];
        const double rs = 1.0 / sqrt(ss / K + neps);
        for (int k = 0; k < ldx; k++)
            xd[m * ldx + k] = put16(dt, xh, m * ldx + k, md.norm ? (k < K ? nres[m * ldn + k] * rs * nw[k] : 0) : urand(-1, 1));
    }
    memset(yh, 0xff, 2 * (size_t)(M * ldy)); /* NaN in both dtypes */
    void *x = dev_copy(gpu, xh, 2 * (size_t)(M * ldx)), *w = dev_copy(gpu, wh, 2 * (size_t)N * ldw);
    void *u = dev_copy(gpu, uh, 2 * (size_t)N * ldw), *b = dev_copy(gpu, bh, 2 * (size_t)N);
    void *y = dev_copy(gpu, yh, 2 * (size_t)(M * ldy)), *r = dev_copy(gpu, rh, 4 * (size_t)(M * ldr));
    void *nr = dev_copy(gpu, nres, 4 * (size_t)(M * ldn)), *nwd = dev_copy(gpu, nw, 4 * (size_t)K);
    sf_dec_gemv_args a;
    memset(&a, 0, sizeof a);
    a.dt = dt, a.out = md.out, a.config = config;
    if (md.norm) a.nres = nr, a.nw = nwd, a.ldn = ldn, a.eps = (float)neps;
    else a.x = x, a.ldx = ldx;
    a.w = w, a.ldw = ldw;
    if (sw) a.w_up = u, a.ldu = ldw;
    if (md.bias) a.bias = b;
    if (md.out == SF_DEC_RES) a.res = r, a.ldr = ldr;
    else a.y = y, a.ldy = ldy;
    a.M = M, a.N = N, a.K = K;
    a.pdl = (N + K) % 2; /* both launches */
    int failures = 0;
    if (md.norm && (M > SF_DEC_NORM_MAX_ROWS || dt != SF_BF16)) { /* refused, not run */
        if (!sf_dec_gemv_supports(&a) || sf_cuda_dec_gemv(gpu, &a) == SF_OK) {
            printf("FAIL %s %s M %d: a normed call past 4 rows or in f16 served\n", md.name, sf_dtype_name(dt), M);
            failures = 1;
        }
        M = 0; /* nothing to compare */
    }
    const sf_status st = M ? sf_cuda_dec_gemv(gpu, &a) : SF_OK;
    if (!M) {
    } else if (st != SF_OK || sf_ctx_synchronize(gpu) != SF_OK) {
        printf("FAIL %s %s row %s M %d N %d K %d: %s\n", md.name, sf_dtype_name(dt), sf_dec_gemv_config_name(config), M,
               N, K, sf_ctx_last_error(gpu));
        failures = 1;
    } else {
        CK(sf_memcpy(gpu, yh, y, 2 * (size_t)(M * ldy)));
        CK(sf_memcpy(gpu, rout, r, 4 * (size_t)(M * ldr)));
        double worst = 0;
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < N; n++) {
                double g = 0, up = 0, ag = 0, au = 0;
                for (int k = 0; k < K; k++) {
                    g += xd[m * ldx + k] * wd[(int64_t)n * ldw + k];
                    ag += fabs(xd[m * ldx + k] * wd[(int64_t)n * ldw + k]);
                    up += xd[m * ldx + k] * ud[(int64_t)n * ldw + k];
                    au += fabs(xd[m * ldx + k] * ud[(int64_t)n * ldw + k]);
                }
                double want, got, tol;
                if (md.out == SF_DEC_RES) {
                    want = rh[m * ldr + n] + g, got = rout[m * ldr + n];
                    tol = 2e-5 * (ag + fabs(want)) + 1e-6;
                } else if (sw) {
                    const double sg = g / (1 + exp(-g));
                    want = sg * up, got = get16(dt, yh, m * ldy + n);
                    /* the normed x may round one ulp the other way: a term's worth of the dtype */
                    tol = 2 * eps_dt * (fabs(want) + 1.1 * ag * fabs(up) + au * fabs(sg)) + 1e-5;
                } else {
                    want = g + (md.bias ? bd[n] : 0), got = get16(dt, yh, m * ldy + n);
                    tol = 2 * eps_dt * (fabs(want) + ag) + 1e-5;
                }
                const double e = fabs(got - want) / tol;
                if (!(e <= 1.0)) worst = e != e ? INFINITY : e > worst ? e : worst;
            }
            /* the padding of y and of res stays as it was */
            for (int n = N; n < ldy; n++)
                if (get16(dt, yh, m * ldy + n) == get16(dt, yh, m * ldy + n)) worst = INFINITY;
            for (int n = N; n < ldr; n++)
                if (rout[m * ldr + n] != rh[m * ldr + n]) worst = INFINITY;
            if (md.out == SF_DEC_RES)
                for (int n = 0; n < N; n++)
                    if (get16(dt, yh, m * ldy + n) == get16(dt, yh, m * ldy + n)) worst = INFINITY; /* y untouched */
        }
        if (worst > 0) {
            printf("FAIL %s %s row %s M %d N %d K %d pad %d: error %.2f x tolerance\n", md.name, sf_dtype_name(dt),
                   sf_dec_gemv_config_name(config), M, N, K, pad, worst);
            failures = 1;
        }
    }
    sf_free(gpu, x), sf_free(gpu, w), sf_free(gpu, u), sf_free(gpu, b), sf_free(gpu, y), sf_free(gpu, r);
    sf_free(gpu, nr), sf_free(gpu, nwd);
    free(xd), free(wd), free(ud), free(bd), free(xh), free(wh), free(uh), free(bh), free(yh);
    free(nres), free(nw), free(rh), free(rout);
    return failures;
}

static int refusals(sf_ctx *gpu) {
    void *buf;
    CK(sf_malloc(gpu, &buf, 1 << 20));
    char *p = buf;
    sf_dec_gemv_args a;
    memset(&a, 0, sizeof a);
    a.dt = SF_BF16, a.out = SF_DEC_PLAIN, a.x = p, a.ldx = 64, a.w = p + 4096, a.ldw = 64, a.y = p + 65536, a.ldy = 64;
    a.M = 4, a.N = 64, a.K = 64;
    int failures = 0;
    const char *ok = sf_dec_gemv_supports(&a);
    if (ok) printf("FAIL refusals: a good call refused: %s\n", ok), failures++;
    dec_bad bad[10];
    int nb = 0;
    bad[nb].what = "5 normed rows", bad[nb].a = a, bad[nb].a.x = NULL, bad[nb].a.nres = (float *)(p + 131072),
    bad[nb].a.nw = (float *)(p + 262144), bad[nb].a.ldn = 64, bad[nb].a.M = 5, nb++;
    bad[nb].what = "K 12", bad[nb].a = a, bad[nb].a.K = 12, bad[nb].a.ldx = bad[nb].a.ldw = 16, nb++;
    bad[nb].what = "misaligned x", bad[nb].a = a, bad[nb].a.x = p + 2, nb++;
    bad[nb].what = "y over W", bad[nb].a = a, bad[nb].a.y = p + 4096 + 128, nb++;
    bad[nb].what = "the norm with res", bad[nb].a = bad[0].a, bad[nb].a.M = 4, bad[nb].a.out = SF_DEC_RES,
    bad[nb].a.res = (float *)(p + 524288), bad[nb].a.ldr = 64, nb++;
    bad[nb].what = "a bias with res", bad[nb].a = a, bad[nb].a.out = SF_DEC_RES, bad[nb].a.res = (float *)(p + 524288),
    bad[nb].a.ldr = 64, bad[nb].a.bias = p + 393216, nb++;
    bad[nb].what = "row 99", bad[nb].a = a, bad[nb].a.config = 99, nb++;
    bad[nb].what = "f16 with the norm", bad[nb].a = bad[0].a, bad[nb].a.M = 1, bad[nb].a.dt = SF_F16, nb++;
    bad[nb].what = "f32", bad[nb].a = a, bad[nb].a.dt = SF_F32, nb++;
    failures += dec_all_refused(gpu, bad, nb);
    sf_free(gpu, buf);
    return failures;
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int start = gpu_test_start("test_dec_gemv");
    if (start) return start;
    sf_ctx *gpu;
    CK(sf_ctx_create(&gpu, GPU_TEST_DEVICE));
    const mode modes[] = {{SF_DEC_PLAIN, 0, 0, "plain"}, {SF_DEC_PLAIN, 1, 1, "plain+norm+bias"},
                          {SF_DEC_PLAIN, 0, 1, "plain+bias"}, {SF_DEC_RES, 0, 0, "res"},
                          {SF_DEC_SWIGLU, 1, 0, "swiglu+norm"}, {SF_DEC_SWIGLU, 0, 0, "swiglu"}};
    /* (N, K): 1B-class qkv / o / down, SmolLM2's, odd */
    const int shapes[][2] = {{3072, 2048}, {2048, 8192}, {576, 576}, {1536, 576}, {37, 64}, {1000, 40}, {8, 16}, {21, 1544}};
    const int rows[] = {1, 3, 8, 16};
    const sf_dtype dts[] = {SF_BF16, SF_F16};
    const int nconf = sf_dec_gemv_nconfig();
    int failures = 0, cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t md = 0; md < sizeof modes / sizeof modes[0]; md++)
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < nconf; c++) {
                    const int N = shapes[s][0], K = shapes[s][1], M = rows[r];
                    if (quick && (s < 4 || (r != 0 && r != 3))) continue;
                    /* the big shapes: fewer combinations (the reference is long) */
                    if ((int64_t)N * K > 1 << 20 && (r == 1 || r == 2 || (c > 0 && r == 3))) continue;
                    const sf_dtype dt = dts[(s + md + r + c) % 2];
                    const int pad = (s + r) % 2 ? 8 : 0;
                    failures += run_case(gpu, dt, modes[md], c, M, N, K, pad);
                    cases++;
                }
    failures += refusals(gpu);
    sf_ctx_destroy(gpu);
    printf("%s test_dec_gemv: %d cases, refusals\n", failures ? "FAIL" : "PASS", cases);
    return failures ? 1 : 0;
}
