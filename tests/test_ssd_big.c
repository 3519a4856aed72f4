/* test_ssd_big.c - sf_ssd_fwd on the GPU with more than 2^31 elements of x
 * (64-bit offsets in every kernel), for each configuration of the
 * autotuner that can serve it.
 *
 * One sequence of L = 524800 tokens, H 64, P 64, G 1, N 128, chunk 256,
 * bf16: x holds 2.15e9 elements (4.3 GB).  x is zero everywhere except the
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

#include "seqfuse.h"

enum { H = 64, P = 64, N = 128, Q = 256 };
static const int64_t L = 524800; /* 2050 chunks; L * H * P > 2^31 */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double urand(double lo, double hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (finite inputs) */
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        printf("FAIL host out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

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

int main(void) {
    sf_ctx *gpu = NULL, *cpu = NULL;
    sf_status st = sf_ctx_create(&gpu, 0);
    if (st != SF_OK) {
        printf("SKIP test_ssd_big: no CUDA device (%s)\n", sf_status_string(st));
        return 77;
    }
    if (sf_ctx_create(&cpu, SF_DEVICE_CPU) != SF_OK) return 1;
    sf_ctx_set_backend(cpu, SF_BACKEND_REF);
    const int64_t nx = L * H * P;
    printf("x: %lld elements (2^31 = %lld)\n", (long long)nx, 1LL << 31);

    /* host inputs: dt, B, C over the whole sequence; x of the last chunk */
    const int64_t t_last = L - Q;
    uint16_t *hdt = xmalloc((size_t)L * H * 2), *hB = xmalloc((size_t)L * N * 2),
             *hC = xmalloc((size_t)L * N * 2), *hx = xmalloc((size_t)Q * H * P * 2);
    for (int64_t i = 0; i < L * H; i++) hdt[i] = to_bf16((float)urand(-3.0, 0.5));
    for (int64_t i = 0; i < L * N; i++) hB[i] = to_bf16((float)urand(-1.0, 1.0));
    for (int64_t i = 0; i < L * N; i++) hC[i] = to_bf16((float)urand(-1.0, 1.0));
    for (int64_t i = 0; i < (int64_t)Q * H * P; i++) hx[i] = to_bf16((float)urand(-1.0, 1.0));
    float hA[H], hD[H], hbias[H];
    for (int h = 0; h < H; h++) {
        hA[h] = -(float)urand(0.5, 4.0);
        hD[h] = (float)urand(0.5, 1.5);
        hbias[h] = (float)urand(-1.0, 0.0);
    }

    void *dx = NULL, *ddt = NULL, *dB = NULL, *dC = NULL, *dout = NULL, *dA = NULL, *dD = NULL,
         *dbias = NULL, *dfin = NULL;
    const size_t xb = (size_t)nx * 2, finb = (size_t)H * P * N * 4;
    if (sf_malloc(gpu, &dx, xb) != SF_OK || sf_malloc(gpu, &dout, xb) != SF_OK) {
        printf("SKIP test_ssd_big: cannot allocate 2 x %.1f GB on the device\n", xb / 1e9);
        sf_free(gpu, dx);
        sf_ctx_destroy(gpu);
        sf_ctx_destroy(cpu);
        return 77;
    }
    int fails = 0;
#define CK(call)                                                                        \
    do {                                                                                \
        sf_status s_ = (call);                                                          \
        if (s_ != SF_OK) {                                                              \
            printf("FAIL %s: %s: %s\n", #call, sf_status_string(s_), sf_ctx_last_error(gpu)); \
            return 1;                                                                   \
        }                                                                               \
    } while (0)
    CK(sf_malloc(gpu, &ddt, (size_t)L * H * 2));
    CK(sf_malloc(gpu, &dB, (size_t)L * N * 2));
    CK(sf_malloc(gpu, &dC, (size_t)L * N * 2));
    CK(sf_malloc(gpu, &dA, H * 4));
    CK(sf_malloc(gpu, &dD, H * 4));
    CK(sf_malloc(gpu, &dbias, H * 4));
    CK(sf_malloc(gpu, &dfin, finb));
    CK(dev_fill(gpu, dx, xb, 0));
    CK(sf_memcpy(gpu, (uint16_t *)dx + t_last * H * P, hx, (size_t)Q * H * P * 2));
    CK(sf_memcpy(gpu, ddt, hdt, (size_t)L * H * 2));
    CK(sf_memcpy(gpu, dB, hB, (size_t)L * N * 2));
    CK(sf_memcpy(gpu, dC, hC, (size_t)L * N * 2));
    CK(sf_memcpy(gpu, dA, hA, sizeof hA));
    CK(sf_memcpy(gpu, dD, hD, sizeof hD));
    CK(sf_memcpy(gpu, dbias, hbias, sizeof hbias));

    /* reference on the last chunk alone */
    uint16_t *rout = xmalloc((size_t)Q * H * P * 2);
    float *rfin = xmalloc(finb);
    {
        sf_ssd_fwd_params p;
        sf_ssd_fwd_params_init(&p);
        p.x = tens(hx, SF_BF16, SF_DEVICE_CPU, 4, 1, Q, H, P);
        p.dt = tens(hdt + t_last * H, SF_BF16, SF_DEVICE_CPU, 3, 1, Q, H, 0);
        p.A = tens(hA, SF_F32, SF_DEVICE_CPU, 1, H, 0, 0, 0);
        p.B = tens(hB + t_last * N, SF_BF16, SF_DEVICE_CPU, 4, 1, Q, 1, N);
        p.C = tens(hC + t_last * N, SF_BF16, SF_DEVICE_CPU, 4, 1, Q, 1, N);
        p.D = tens(hD, SF_F32, SF_DEVICE_CPU, 1, H, 0, 0, 0);
        p.dt_bias = tens(hbias, SF_F32, SF_DEVICE_CPU, 1, H, 0, 0, 0);
        p.out = tens(rout, SF_BF16, SF_DEVICE_CPU, 4, 1, Q, H, P);
        p.final_states = tens(rfin, SF_F32, SF_DEVICE_CPU, 4, 1, H, P, N);
        p.chunk_size = Q;
        p.dt_softplus = 1;
        if (sf_ssd_fwd(cpu, &p) != SF_OK) {
            printf("FAIL reference: %s\n", sf_ctx_last_error(cpu));
            return 1;
        }
    }

    const char *cfgs[] = {"wg8", "wgp8", "fu40", "split", "general"};
    uint16_t *gout = xmalloc((size_t)Q * H * P * 2);
    float *gfin = xmalloc(finb);
    int ran = 0;
    for (int ci = 0; ci < 4; ci++) {
        char env[64];
        snprintf(env, sizeof env, "ssd_fwd:%s", cfgs[ci]);
        setenv("SF_AUTOTUNE_FORCE", env, 1);
        CK(dev_fill(gpu, dout, xb, 0xff));
        CK(dev_fill(gpu, dfin, finb, 0xff));
        sf_ssd_fwd_params p;
        sf_ssd_fwd_params_init(&p);
        p.x = tens(dx, SF_BF16, 0, 4, 1, L, H, P);
        p.dt = tens(ddt, SF_BF16, 0, 3, 1, L, H, 0);
        p.A = tens(dA, SF_F32, 0, 1, H, 0, 0, 0);
        p.B = tens(dB, SF_BF16, 0, 4, 1, L, 1, N);
        p.C = tens(dC, SF_BF16, 0, 4, 1, L, 1, N);
        p.D = tens(dD, SF_F32, 0, 1, H, 0, 0, 0);
        p.dt_bias = tens(dbias, SF_F32, 0, 1, H, 0, 0, 0);
        p.out = tens(dout, SF_BF16, 0, 4, 1, L, H, P);
        p.final_states = tens(dfin, SF_F32, 0, 4, 1, H, P, N);
        p.chunk_size = Q;
        p.dt_softplus = 1;
        st = sf_ssd_fwd(gpu, &p);
        if (st == SF_ERR_UNSUPPORTED) {
            printf("  skip %-8s %s\n", cfgs[ci], sf_ctx_last_error(gpu));
            continue;
        }
        if (st != SF_OK || sf_ctx_synchronize(gpu) != SF_OK) {
            printf("  FAIL %-8s %s: %s\n", cfgs[ci], sf_status_string(st), sf_ctx_last_error(gpu));
            fails++;
            continue;
        }
        ran++;
        CK(sf_memcpy(gpu, gout, (uint16_t *)dout + t_last * H * P, (size_t)Q * H * P * 2));
        CK(sf_memcpy(gpu, gfin, dfin, finb));
        double num = 0, den = 0, fnum = 0, fden = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < (int64_t)Q * H * P; i++) {
            const double g = from_bf16(gout[i]), r = from_bf16(rout[i]);
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
         * element 2^31 of x and the one that starts at it */
        const int64_t c31 = (1LL << 31) / (H * P) / Q;
        const int64_t probe[] = {0, c31 / 2, c31 - 1, c31};
        int64_t nonzero = 0;
        for (int k = 0; k < 4; k++) {
            CK(sf_memcpy(gpu, gout, (uint16_t *)dout + probe[k] * Q * H * P, (size_t)Q * H * P * 2));
            for (int64_t i = 0; i < (int64_t)Q * H * P; i++) nonzero += gout[i] != 0;
        }
        const double err = sqrt(num / (den > 0 ? den : 1)), ferr = sqrt(fnum / (fden > 0 ? fden : 1));
        const int ok = bad == 0 && nonzero == 0 && err <= 1.5e-2 && ferr <= 1.5e-2;
        printf("  %s %-8s last chunk err %.2e, final state err %.2e, non-finite %lld, "
               "non-zero elsewhere %lld\n",
               ok ? "ok  " : "FAIL", cfgs[ci], err, ferr, (long long)bad, (long long)nonzero);
        fails += !ok;
    }
    unsetenv("SF_AUTOTUNE_FORCE");
    free(hdt), free(hB), free(hC), free(hx), free(rout), free(rfin), free(gout), free(gfin);
    void *bufs[] = {dx, ddt, dB, dC, dout, dA, dD, dbias, dfin};
    for (int i = 0; i < 9; i++) sf_free(gpu, bufs[i]);
    sf_ctx_destroy(gpu);
    sf_ctx_destroy(cpu);
    if (!ran) {
        printf("FAIL no configuration ran\n");
        return 1;
    }
    printf("%s\n", fails ? "FAILED" : "passed");
    return fails ? 1 : 0;
}
