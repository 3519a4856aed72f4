/* test_ssd_big.c - sf_ssd_fwd on the GPU with more than 2^31 elements of x
 * (64-bit offsets in every kernel), for each configuration of the
 * autotuner that can serve it.
 *
 * One sequence of L = 524800 tokens, H 64, P 64, G 1, N 128, chunk 256:
 * x holds 2.15e9 elements (4.3 GB in bf16; then the same in f32, 8.6 GB, for
 * the f32 configurations).  x is zero everywhere except the
 * last chunk, so the state entering that chunk is exactly zero and its
 * outputs (and the final state) equal those of the same op run on the last
 * chunk alone, which the CPU reference computes cheaply.  Outputs start
 * poisoned (0xff bytes: NaN); sampled chunks elsewhere must come out 0.
 * dt, B and C are random over the whole sequence.
 * Exit 0: passed; 1: failed; 77: skipped (no CUDA device, or too little
 * device memory). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

enum { H = 64, P = 64, N = 128, Q = 256 };
static const int64_t L = 524800; /* 2050 chunks; L * H * P > 2^31 */

/* Fills `bytes` of device memory with the byte `v` from a host buffer. */
static sf_status dev_fill(sf_ctx *ctx, void *d, size_t bytes, int v) {
    const size_t blk = (size_t)64 << 20;
    unsigned char *h = xmalloc(blk);
    memset(h, v, blk);
    sf_status st = SF_OK;
    for (size_t off = 0; off < bytes && st == SF_OK; off += blk)
        st = sf_memcpy(ctx, (unsigned char *)d + off, h, bytes - off < blk ? bytes - off : blk);
    free(h);
    return st;
}

static sf_tensor tens(void *data, sf_dtype dt, int dev, int rank, int64_t d0, int64_t d1,
                      int64_t d2, int64_t d3) {
    const int64_t sh[4] = {d0, d1, d2, d3};
    return sf_tensor_contiguous(data, dt, dev, rank, sh);
}

/* Element i of a host array of dtype dt (bf16 or f32) as float, and back. */
static float hget(const void *a, sf_dtype dt, int64_t i) {
    return dt == SF_BF16 ? from_bf16(((const uint16_t *)a)[i]) : ((const float *)a)[i];
}
static void hset(void *a, sf_dtype dt, int64_t i, float v) {
    if (dt == SF_BF16)
        ((uint16_t *)a)[i] = to_bf16(v);
    else
        ((float *)a)[i] = v;
}

/* The whole check in one dtype for the configurations `cfgs`; returns the
 * number of failures, or -1 when it had to skip (too little device memory),
 * and sets *ran to the configurations that served. */
static int run_dtype(sf_ctx *gpu, sf_ctx *cpu, sf_dtype dt, const char *const *cfgs, int ncfg, int *ran) {
    const size_t es = dt == SF_BF16 ? 2 : 4;
    const int64_t nx = L * H * P;
    printf("%s: x %lld elements (2^31 = %lld)\n", dt == SF_BF16 ? "bf16" : "f32", (long long)nx, 1LL << 31);
    rng = 0x9e3779b97f4a7c15ULL;

    /* host inputs: dt, B, C over the whole sequence; x of the last chunk */
    const int64_t t_last = L - Q;
    void *hdt = xmalloc((size_t)L * H * es), *hB = xmalloc((size_t)L * N * es),
         *hC = xmalloc((size_t)L * N * es), *hx = xmalloc((size_t)Q * H * P * es);
    for (int64_t i = 0; i < L * H; i++) hset(hdt, dt, i, (float)urand(-3.0, 0.5));
    for (int64_t i = 0; i < L * N; i++) hset(hB, dt, i, (float)urand(-1.0, 1.0));
    for (int64_t i = 0; i < L * N; i++) hset(hC, dt, i, (float)urand(-1.0, 1.0));
    for (int64_t i = 0; i < (int64_t)Q * H * P; i++) hset(hx, dt, i, (float)urand(-1.0, 1.0));
    float hA[H], hD[H], hbias[H];
    for (int h = 0; h < H; h++) {
        hA[h] = -(float)urand(0.5, 4.0);
        hD[h] = (float)urand(0.5, 1.5);
        hbias[h] = (float)urand(-1.0, 0.0);
    }

    void *dx = NULL, *ddt = NULL, *dB = NULL, *dC = NULL, *dout = NULL, *dA = NULL, *dD = NULL,
         *dbias = NULL, *dfin = NULL;
    const size_t xb = (size_t)nx * es, finb = (size_t)H * P * N * 4;
    if (sf_malloc(gpu, &dx, xb) != SF_OK || sf_malloc(gpu, &dout, xb) != SF_OK) {
        printf("SKIP %s: cannot allocate 2 x %.1f GB on the device\n", dt == SF_BF16 ? "bf16" : "f32", xb / 1e9);
        sf_free(gpu, dx);
        free(hdt), free(hB), free(hC), free(hx);
        return -1;
    }
    int fails = 0;
    CK(sf_malloc(gpu, &ddt, (size_t)L * H * es));
    CK(sf_malloc(gpu, &dB, (size_t)L * N * es));
    CK(sf_malloc(gpu, &dC, (size_t)L * N * es));
    CK(sf_malloc(gpu, &dA, H * 4));
    CK(sf_malloc(gpu, &dD, H * 4));
    CK(sf_malloc(gpu, &dbias, H * 4));
    CK(sf_malloc(gpu, &dfin, finb));
    CK(dev_fill(gpu, dx, xb, 0));
    CK(sf_memcpy(gpu, (unsigned char *)dx + (size_t)t_last * H * P * es, hx, (size_t)Q * H * P * es));
    CK(sf_memcpy(gpu, ddt, hdt, (size_t)L * H * es));
    CK(sf_memcpy(gpu, dB, hB, (size_t)L * N * es));
    CK(sf_memcpy(gpu, dC, hC, (size_t)L * N * es));
    CK(sf_memcpy(gpu, dA, hA, sizeof hA));
    CK(sf_memcpy(gpu, dD, hD, sizeof hD));
    CK(sf_memcpy(gpu, dbias, hbias, sizeof hbias));

    /* reference on the last chunk alone */
    void *rout = xmalloc((size_t)Q * H * P * es);
    float *rfin = xmalloc(finb);
    {
        sf_ssd_fwd_params p;
        sf_ssd_fwd_params_init(&p);
        p.x = tens(hx, dt, SF_DEVICE_CPU, 4, 1, Q, H, P);
        p.dt = tens((unsigned char *)hdt + (size_t)t_last * H * es, dt, SF_DEVICE_CPU, 3, 1, Q, H, 0);
        p.A = tens(hA, SF_F32, SF_DEVICE_CPU, 1, H, 0, 0, 0);
        p.B = tens((unsigned char *)hB + (size_t)t_last * N * es, dt, SF_DEVICE_CPU, 4, 1, Q, 1, N);
        p.C = tens((unsigned char *)hC + (size_t)t_last * N * es, dt, SF_DEVICE_CPU, 4, 1, Q, 1, N);
        p.D = tens(hD, SF_F32, SF_DEVICE_CPU, 1, H, 0, 0, 0);
        p.dt_bias = tens(hbias, SF_F32, SF_DEVICE_CPU, 1, H, 0, 0, 0);
        p.out = tens(rout, dt, SF_DEVICE_CPU, 4, 1, Q, H, P);
        p.final_states = tens(rfin, SF_F32, SF_DEVICE_CPU, 4, 1, H, P, N);
        p.chunk_size = Q;
        p.dt_softplus = 1;
        if (sf_ssd_fwd(cpu, &p) != SF_OK) {
            printf("FAIL reference: %s\n", sf_ctx_last_error(cpu));
            exit(1);
        }
    }

    void *gout = xmalloc((size_t)Q * H * P * es);
    float *gfin = xmalloc(finb);
    /* bf16 outputs round to 8 bits; f32 ones carry the TF32 products' error */
    const double tol = dt == SF_BF16 ? 1.5e-2 : 3e-3;
    for (int ci = 0; ci < ncfg; ci++) {
        char env[64];
        snprintf(env, sizeof env, "ssd_fwd:%s", cfgs[ci]);
        setenv("SF_AUTOTUNE_FORCE", env, 1);
        CK(dev_fill(gpu, dout, xb, 0xff));
        CK(dev_fill(gpu, dfin, finb, 0xff));
        sf_ssd_fwd_params p;
        sf_ssd_fwd_params_init(&p);
        p.x = tens(dx, dt, 0, 4, 1, L, H, P);
        p.dt = tens(ddt, dt, 0, 3, 1, L, H, 0);
        p.A = tens(dA, SF_F32, 0, 1, H, 0, 0, 0);
        p.B = tens(dB, dt, 0, 4, 1, L, 1, N);
        p.C = tens(dC, dt, 0, 4, 1, L, 1, N);
        p.D = tens(dD, SF_F32, 0, 1, H, 0, 0, 0);
        p.dt_bias = tens(dbias, SF_F32, 0, 1, H, 0, 0, 0);
        p.out = tens(dout, dt, 0, 4, 1, L, H, P);
        p.final_states = tens(dfin, SF_F32, 0, 4, 1, H, P, N);
        p.chunk_size = Q;
        p.dt_softplus = 1;
        sf_status st = sf_ssd_fwd(gpu, &p);
        if (st == SF_ERR_UNSUPPORTED) {
            printf("  skip %-8s %s\n", cfgs[ci], sf_ctx_last_error(gpu));
            continue;
        }
        if (st != SF_OK || sf_ctx_synchronize(gpu) != SF_OK) {
            printf("  FAIL %-8s %s: %s\n", cfgs[ci], sf_status_string(st), sf_ctx_last_error(gpu));
            fails++;
            continue;
        }
        (*ran)++;
        CK(sf_memcpy(gpu, gout, (unsigned char *)dout + (size_t)t_last * H * P * es, (size_t)Q * H * P * es));
        CK(sf_memcpy(gpu, gfin, dfin, finb));
        double num = 0, den = 0, fnum = 0, fden = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < (int64_t)Q * H * P; i++) {
            const double g = hget(gout, dt, i), r = hget(rout, dt, i);
            if (!isfinite(g)) bad++;
            num += (g - r) * (g - r);
            den += r * r;
        }
        for (int64_t i = 0; i < (int64_t)H * P * N; i++) {
            if (!isfinite(gfin[i])) bad++;
            fnum += ((double)gfin[i] - rfin[i]) * ((double)gfin[i] - rfin[i]);
            fden += (double)rfin[i] * rfin[i];
        }
        /* chunks elsewhere: the first, one in the middle, the last one below
         * element 2^31 of x and the one that starts at it (all-zero bytes is
         * 0 in both dtypes) */
        const int64_t c31 = (1LL << 31) / (H * P) / Q;
        const int64_t probe[] = {0, c31 / 2, c31 - 1, c31};
        int64_t nonzero = 0;
        for (int k = 0; k < 4; k++) {
            CK(sf_memcpy(gpu, gout, (unsigned char *)dout + (size_t)probe[k] * Q * H * P * es,
                         (size_t)Q * H * P * es));
            const unsigned char *gb = gout;
            for (size_t i = 0; i < (size_t)Q * H * P * es; i++) nonzero += gb[i] != 0;
        }
        const double err = sqrt(num / (den > 0 ? den : 1)), ferr = sqrt(fnum / (fden > 0 ? fden : 1));
        const int ok = bad == 0 && nonzero == 0 && err <= tol && ferr <= tol;
        printf("  %s %-8s last chunk err %.2e, final state err %.2e, non-finite %lld, "
               "non-zero elsewhere %lld\n",
               ok ? "ok  " : "FAIL", cfgs[ci], err, ferr, (long long)bad, (long long)nonzero);
        fails += !ok;
    }
    unsetenv("SF_AUTOTUNE_FORCE");
    free(hdt), free(hB), free(hC), free(hx), free(rout), free(rfin), free(gout), free(gfin);
    void *bufs[] = {dx, ddt, dB, dC, dout, dA, dD, dbias, dfin};
    for (int i = 0; i < 9; i++) sf_free(gpu, bufs[i]);
    return fails;
}

int main(void) {
    sf_ctx *gpu = NULL, *cpu = NULL;
    sf_status st = sf_ctx_create(&gpu, 0);
    if (st != SF_OK) {
        printf("SKIP test_ssd_big: no CUDA device (%s)\n", sf_status_string(st));
        return 77;
    }
    if (sf_ctx_create(&cpu, SF_DEVICE_CPU) != SF_OK) return 1;
    sf_ctx_set_backend(cpu, SF_BACKEND_REF);
    /* the configurations checked here (the general path, as before, only
     * through the case table of test_ops) */
    static const char *const c16[] = {"wgq", "fuq", "split"};
    static const char *const c32[] = {"fg32", "split32"};
    int ran = 0;
    const int f16 = run_dtype(gpu, cpu, SF_BF16, c16, 3, &ran);
    const int f32 = f16 < 0 ? -1 : run_dtype(gpu, cpu, SF_F32, c32, 2, &ran);
    sf_ctx_destroy(gpu);
    sf_ctx_destroy(cpu);
    if (f16 < 0 && !ran) return 77; /* too little device memory for either */
    if (!ran) {
        printf("FAIL no configuration ran\n");
        return 1;
    }
    const int fails = (f16 > 0 ? f16 : 0) + (f32 > 0 ? f32 : 0);
    printf("%s\n", fails ? "FAILED" : "passed");
    return fails ? 1 : 0;
}
