// gemm_wq_launch_emu_main.cpp - sf_gemm_wq's CUDA backend as a whole (the
// launcher of src/cuda/gemm_wq/gemm_wq.cu: its checks, the configuration
// choice, the dispatch to each kernel instantiation, the K split and the
// slab row's dequantise-then-cuBLAS loop) run by the host emulator against
// the reference product (sf_gemm_wq, SF_BACKEND_REF) of the same codes.
// Every row of configs.h is pinned in turn (SF_AUTOTUNE_FORCE), and the
// untuned choice runs too; a row that cannot serve a case answers
// SF_ERR_UNSUPPORTED and is counted as skipped.  Cases: int4 / int8,
// symmetric and with mins, groups 32 / 64 / 128 (the stream rows' groups
// smaller than a chunk at M <= 8 / groups a chunk), bias, M 1 to 40, N past
// a block's rows, row-major and SF_QW_TILED codes, bf16 and f16.  The
// emulated device is an sm_80 with 2 SMs (no clusters: one block along K;
// the streamxg rule then holds from 129 rows).  cuBLAS is emulated
// (tests/emu/cublas_v2.h).  Outputs poisoned first.
// Built and run by run_gemm_wq_launch_emu.sh; argument: a case name.
#include "common/cuda_common.h"
#include "emu_bits.h"
#include "gemm_wq.h"
#include "gemm_wq/configs.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

extern "C" sf_status emu_cuda_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr);

// the slab row's cuBLAS handle (any non-null value: the emulated
// cublasGemmEx ignores it)
extern "C" sf_status sf_cuda_blas(sf_ctx *, const char *, void *, size_t, void **handle) {
    *handle = (void *)1;
    return SF_OK;
}

struct Case {
    const char *name;
    int M, N, K, bits, group;
    bool mins, bias, tiled, f16;
};

static sf_tensor t2(void *data, sf_dtype dt, int64_t r, int64_t c) {
    const int64_t shape[2] = {r, c};
    return sf_tensor_contiguous(data, dt, SF_DEVICE_CPU, 2, shape);
}


// runs case c under every configuration; returns the failures
static int run(const Case &c, sf_ctx *ctx) {
    std::mt19937 rng(1234u + (unsigned)c.N * 7u + (unsigned)c.M);
    std::uniform_real_distribution<float> uf(-1.0f, 1.0f);
    const int64_t rb = c.bits == 4 ? c.K / 2 : c.K, G = c.K / c.group;
    const int64_t np = sf_wq_tiled_rows(c.N), bp = sf_wq_tiled_row_bytes(c.bits == 4, c.K);
    Mem codes((size_t)(c.N * rb)), tiled((size_t)(np * bp)), xs((size_t)c.M * c.K * 2), sc((size_t)(G * c.N * 2)),
        mn((size_t)(G * c.N * 2)), bias((size_t)c.N * 2), y((size_t)c.M * c.N * 2);
    for (int64_t i = 0; i < c.N * rb; i++) codes.p[i] = (uint8_t)(rng() >> 24);
    uint16_t *x16 = (uint16_t *)xs.p, *s16 = (uint16_t *)sc.p, *m16 = (uint16_t *)mn.p, *b16 = (uint16_t *)bias.p;
    for (int64_t i = 0; i < (int64_t)c.M * c.K; i++) x16[i] = to16(uf(rng), c.f16);
    for (int64_t i = 0; i < G * c.N; i++) {
        s16[i] = to16(0.01f + 0.02f * (uf(rng) + 1.0f), c.f16);
        m16[i] = to16(0.5f * uf(rng), c.f16);
    }
    for (int i = 0; i < c.N; i++) b16[i] = to16(uf(rng), c.f16);
    const sf_dtype dt = c.f16 ? SF_F16 : SF_BF16;

    sf_qweight q;
    memset(&q, 0, sizeof q);
    q.format = c.bits == 4 ? SF_QW_INT4 : SF_QW_INT8;
    q.n = c.N, q.k = c.K, q.group_size = c.group;
    q.data = t2(codes.p, SF_U8, c.N, rb);
    q.scales = t2(sc.p, dt, G, c.N);
    if (c.mins) q.mins = t2(mn.p, dt, G, c.N);
    if (c.tiled) {
        const sf_tensor tt = t2(tiled.p, SF_U8, np, bp);
        if (sf_tile_qweight(ctx, &q, &tt) != SF_OK) {
            printf("FAIL %s: sf_tile_qweight: %s\n", c.name, sf_ctx_last_error(ctx));
            return 1;
        }
        q.data = tt, q.layout = SF_QW_TILED;
    }
    // the reference (y in x's dtype, as the CUDA backend writes it)
    Mem yref16((size_t)c.M * c.N * 2);
    sf_gemm_wq_params pr16;
    sf_gemm_wq_params_init(&pr16);
    pr16.x = t2(xs.p, dt, c.M, c.K);
    pr16.w = q;
    const int64_t nb[1] = {c.N};
    if (c.bias) pr16.bias = sf_tensor_contiguous(bias.p, dt, SF_DEVICE_CPU, 1, nb);
    pr16.y = t2(yref16.p, dt, c.M, c.N);
    pr16.backend = SF_BACKEND_REF;
    if (sf_gemm_wq(ctx, &pr16) != SF_OK) {
        printf("FAIL %s: reference: %s\n", c.name, sf_ctx_last_error(ctx));
        return 1;
    }
    const uint16_t *yref = (const uint16_t *)yref16.p;
    double maxref = 0;
    for (int64_t i = 0; i < (int64_t)c.M * c.N; i++) maxref = std::max(maxref, (double)std::fabs(from16(yref[i], c.f16)));

    sf_gemm_wq_problem pr;
    memset(&pr, 0, sizeof pr);
    sf_gemm_wq_params pe = pr16;
    pe.y = t2(y.p, dt, c.M, c.N);
    pr.p = &pe;
    pr.M = c.M, pr.N = c.N, pr.K = c.K, pr.group = c.group, pr.G = G, pr.int4 = c.bits == 4;
    pr.has_min = c.mins, pr.has_bias = c.bias;

    int fails = 0;
    for (int r = -1; r < WQ_NCONFIGS; r++) { // -1: the untuned choice
        const char *cfg = r < 0 ? "default" : wq_configs[r].name;
        if (r < 0) unsetenv("SF_AUTOTUNE_FORCE");
        else setenv("SF_AUTOTUNE_FORCE", (std::string("gemm_wq:") + cfg).c_str(), 1);
        memset(y.p, 0xff, (size_t)c.M * c.N * 2); // NaN in both 16-bit types
        const sf_status s = emu_cuda_gemm_wq(ctx, &pr);
        if (s == SF_ERR_UNSUPPORTED && r >= 0) {
            printf("skip %-14s %-9s (%s)\n", c.name, cfg, sf_ctx_last_error(ctx));
            continue;
        }
        if (s != SF_OK) {
            printf("FAIL %-14s %-9s: %s\n", c.name, cfg, sf_ctx_last_error(ctx));
            fails++;
            continue;
        }
        const uint16_t *ye = (const uint16_t *)y.p;
        double maxe = 0;
        for (int64_t i = 0; i < (int64_t)c.M * c.N; i++) {
            const double e = std::fabs((double)from16(ye[i], c.f16) - from16(yref[i], c.f16));
            maxe = std::max(maxe, e == e ? e : INFINITY);
        }
        const double rel = maxe / (maxref > 0 ? maxref : 1.0), tol = c.f16 ? 2e-3 : 1e-2; // a few ulps of y
        const bool ok = rel <= tol;
        fails += !ok;
        printf("%-4s %-14s %-9s M %2d N %3d K %3d int%d g%d%s%s%s %s: max|y - ref| / max|ref| = %.2e (tol %.0e)\n",
               ok ? "ok" : "FAIL", c.name, cfg, c.M, c.N, c.K, c.bits, c.group, c.mins ? " mins" : "",
               c.bias ? " bias" : "", c.tiled ? " tiled" : "", c.f16 ? "f16" : "bf16", rel, tol);
    }
    unsetenv("SF_AUTOTUNE_FORCE");
    return fails;
}

int main(int argc, char **argv) {
    emu_cs.sm_major = 8; // no clusters: one block along K (the kernels are compiled for sm_80)
    const Case cases[] = {
        {"i4_m1", 1, 257, 256, 4, 128, false, false, false, false},
        {"i4_m1_tl", 1, 257, 256, 4, 128, false, true, true, false},
        {"i4_m5_min_tl", 5, 133, 384, 4, 128, true, false, true, true},
        {"i4_m16_g64_tl", 16, 40, 256, 4, 64, false, true, true, false},
        {"i4_m3_g32_min", 3, 70, 96, 4, 32, true, false, false, false},
        {"i8_m9_tl", 9, 300, 128, 8, 64, false, false, true, false},
        {"i8_m2_min", 2, 33, 256, 8, 128, true, true, false, true},
        {"i4_m40_tl", 40, 130, 256, 4, 128, false, false, true, false},
        {"i8_m24_min_tl", 24, 20, 192, 8, 64, true, false, true, true},
        /* groups smaller than a chunk: the stream rows at M <= 8 / (groups a chunk) */
        {"i4_m1_g32_min", 1, 200, 256, 4, 32, true, true, false, true},
        {"i4_m2_g32_tl", 2, 300, 128, 4, 32, false, false, true, false},
        {"i4_m4_g64_min_tl", 4, 130, 256, 4, 64, true, false, true, false},
        {"i8_m4_g32", 4, 70, 192, 8, 32, false, true, false, false},
        {"i4_m1_g32_k96", 1, 50, 96, 4, 32, true, false, false, false}, /* K not whole chunks: the tiles */
    };
    sf_ctx *ctx;
    if (sf_ctx_create(&ctx, SF_DEVICE_CPU) != SF_OK) return 1;
    int failed = 0, ran = 0;
    for (const Case &c : cases) {
        if (argc > 1 && strcmp(argv[1], c.name)) continue;
        failed += run(c, ctx) > 0;
        ran++;
    }
    sf_ctx_destroy(ctx);
    if (!ran) {
        printf("no case named %s\n", argc > 1 ? argv[1] : "");
        return 1;
    }
    printf("%s: %d of %d cases without a failure\n", failed ? "FAIL" : "PASS", ran - failed, ran);
    return failed ? 1 : 0;
}
