/* gpu_test.h - host helpers of the stand-alone GPU tests (test_ssd_big,
 * test_ssd_same, test_attn_same, ...): a seeded xorshift generator and the
 * test's start (device check, seed), bf16 and f16 conversions, an
 * allocation that fails the test, and CK, which fails it on any status but
 * SF_OK (it names the call and the error of the context `gpu` in scope). */
#ifndef SF_GPU_TEST_H
#define SF_GPU_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seqfuse.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static inline double urand(double lo, double hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (finite inputs) */
    return (uint16_t)(u >> 16);
}
static inline float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t to_f16(float f) { /* round to nearest even, finite normal range */
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    uint32_t m = u & 0x7fffffu;
    if (e <= 0) return (uint16_t)sign; /* the tests' values never go that small */
    uint32_t h = ((uint32_t)e << 10) | (m >> 13);
    const uint32_t rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
static inline float from_f16(uint16_t h) {
    const int e = (h >> 10) & 0x1f;
    const float m = (float)(h & 0x3ff);
    if (e == 31) return m != 0.0f ? NAN : (h & 0x8000u) ? -INFINITY : INFINITY;
    const float v = e == 0 ? m * 5.9604645e-8f : ldexpf(1.0f + m / 1024.0f, e - 15);
    return (h & 0x8000u) ? -v : v;
}

/* The start of a stand-alone GPU test: 0 with the generator seeded (from
 * SF_SEED, else the clock; the seed printed so a failure can be repeated),
 * or 77 (CTest's skip) after saying so when there is no CUDA device. */
/* The device the test's context is made on: 0, or the host when the test
 * is built into the kernel emulator (tests/emu, SF_TEST_EMU: the launcher
 * and its kernels run on the CPU, on host memory). */
#ifdef SF_TEST_EMU
#define GPU_TEST_DEVICE SF_DEVICE_CPU
#else
#define GPU_TEST_DEVICE 0
#endif

static inline int gpu_test_start(const char *name) {
#ifndef SF_TEST_EMU
    if (sf_cuda_device_count() < 1) {
        printf("SKIP %s: no CUDA device\n", name);
        return 77;
    }
#endif
    const char *se = getenv("SF_SEED");
    const uint64_t seed = se ? strtoull(se, NULL, 0) : (uint64_t)time(NULL);
    rng = seed * 2654435761u + 0x9e3779b97f4a7c15ULL;
    printf("%s: seed %llu (SF_SEED to repeat)\n", name, (unsigned long long)seed);
    return 0;
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        printf("FAIL host out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* v rounded to dt (f16 / bf16) and stored at p[i]; the rounded value */
static inline double put16(sf_dtype dt, uint16_t *p, int64_t i, double v) {
    if (dt == SF_BF16) return from_bf16(p[i] = to_bf16((float)v));
    return from_f16(p[i] = to_f16((float)v));
}
static inline double get16(sf_dtype dt, const uint16_t *p, int64_t i) {
    return dt == SF_BF16 ? from_bf16(p[i]) : from_f16(p[i]);
}

/* A device copy of bytes of host memory (a FAIL and exit if it cannot be made). */
static inline void *dev_copy(sf_ctx *gpu, const void *h, size_t bytes) {
    void *d = NULL;
    if (sf_malloc(gpu, &d, bytes ? bytes : 4) != SF_OK || (bytes && sf_memcpy(gpu, d, h, bytes) != SF_OK)) {
        printf("FAIL: device buffer of %zu bytes\n", bytes);
        exit(1);
    }
    return d;
}

#define CK(call)                                                                                     \
    do {                                                                                             \
        sf_status s_ = (call);                                                                       \
        if (s_ != SF_OK) {                                                                           \
            printf("FAIL %s: %s: %s\n", #call, sf_status_string(s_), sf_ctx_last_error(gpu));        \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

#endif
