// gemm_wq_emu_main.cpp - the streaming decode kernel of sf_gemm_wq
// (src/cuda/gemm_wq/decode.cuh: gemm_wq_decode_kernel, the library's
// "stream" row: 8 warps of one m16 tile, 4 chunks ahead) run by the host
// emulator against a double-precision x W^T of the dequantised weights:
// int4 and int8, symmetric and with mins, bf16 and f16, M 1 / 5 / 16, N not
// a multiple of the block's 128 rows, groups of 128 (and 64 for int8), bias.
// Each case runs as the row and with the template option LG (the codes
// tiled, one tile and eight tiles a group, tiles past N zero), and as the
// row 'streamxg' (LG 8, XG: x from global memory, two m16 tiles a warp, 2
// chunks ahead).
// Compiled for sm_80 (one block along K: the sm_90 cluster split is not
// emulated).  Outputs poisoned first.  Built and run by
// run_gemm_wq_emu.sh; argument: a case name (default: all).
#include "common/cuda_common.h"
#include "emu_bits.h"
#include "gemm_wq/decode.cuh"
#include <random>
#include <string>
#include <vector>

struct WqCase { const char *name; int M, N, K, bits, group; bool mins, f16, bias; };


template <typename T, bool I4, bool MN, int NT, int GP, int LG, bool XG = false, int MT = 1, int U = 4>
static void launch(const WqdArgs &a) {
    using Tl = WqdTile<T, I4, MN, MT, NT, 8, U, LG, XG>;
    emu_launch(gemm_wq_decode_kernel<T, I4, MN, MT, NT, 8, U, LG, XG, 0, GP>,
               dim3((unsigned)((a.N + Tl::BR - 1) / Tl::BR), 1u), dim3(Tl::NTHR), Tl::smem(a.cps), a);
}
/* modes: the tiles a group of the layout (0: row-major; 8: the library's
 * SF_QW_TILED), and XG with two m16 tiles a warp, 2 chunks ahead
 * (configuration 'streamxg') */
struct Mode { const char *name; int lg; bool xg; };
static const Mode modes[] = {{"row", 0, false}, {"LG1", 1, false}, {"LG8", 8, false}, {"LG8XG", 8, true}};
template <typename T, bool I4, bool MN, int NT, int GP = 1> static void launch_mode(const WqdArgs &a, const Mode &md) {
    if (md.xg) launch<T, I4, MN, NT, GP, 8, true, 2, 2>(a);
    else md.lg == 0 ? launch<T, I4, MN, NT, GP, 0>(a) : md.lg == 1 ? launch<T, I4, MN, NT, GP, 1>(a)
                                                               : launch<T, I4, MN, NT, GP, 8>(a);
}
/* groups smaller than a chunk: decode.cuh's GP (one tile of x rows) */
template <typename T, bool I4, bool MN> static void launch_gp(const WqdArgs &a, const Mode &md, int gp) {
    if (gp == 4) {
        if constexpr (I4) launch_mode<T, I4, MN, 1, 4>(a, md);
    } else if (gp == 2) launch_mode<T, I4, MN, 1, 2>(a, md);
    else a.M <= 8 ? launch_mode<T, I4, MN, 1>(a, md) : launch_mode<T, I4, MN, 2>(a, md);
}

template <typename T> static int run_t(const WqCase &c) {
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<int> ud(0, 255);
    std::normal_distribution<float> nd;
    const int64_t rb = c.bits == 4 ? c.K / 2 : c.K, ng = c.K / c.group;
    std::vector<uint4> xb((size_t)c.M * c.K * 2 / 16 + 2), wb((size_t)c.N * rb / 16 + 2), yb((size_t)c.M * c.N * 2 / 16 + 2);
    uint16_t *x = (uint16_t *)xb.data(), *y = (uint16_t *)yb.data();
    uint8_t *w = (uint8_t *)wb.data();
    std::vector<uint16_t> sc(ng * c.N), mn(ng * c.N), bias(c.N);
    for (int64_t i = 0; i < (int64_t)c.M * c.K; i++) x[i] = bits<T>(nd(rng));
    for (int64_t i = 0; i < c.N * rb; i++) w[i] = (uint8_t)ud(rng);
    for (auto &v : sc) v = bits<T>(0.005f + 0.01f * (ud(rng) / 255.0f));
    for (auto &v : mn) v = bits<T>(-0.05f + 0.1f * (ud(rng) / 255.0f));
    for (auto &v : bias) v = bits<T>(0.1f * nd(rng));
    /* the tiled copies: 16-row tiles of rb / 64 one-kilobyte chunks, in
     * groups of lg tiles (chunk c of a group's tiles side by side), each 8
     * elements' codes as e0 e2 e4 e6 e1 e3 e5 e7 */
    const int64_t nck = rb / 64, ntile = (c.N + 15) / 16;
    std::vector<uint4> tb1((size_t)ntile * nck * 64), tb8((size_t)(ntile + 7) / 8 * 8 * nck * 64);
    auto tile = [&](uint8_t *wt, int64_t lg) {
        for (int64_t n = 0; n < c.N; n++)
            for (int64_t b = 0; b < rb; b++) {
                const int64_t t = n / 16;
                uint8_t v;
                if (c.bits == 4) { /* byte b holds slots 2(b%4), +1 of its word */
                    v = 0;
                    for (int h = 0; h < 2; h++) {
                        const int slot = (int)(b % 4) * 2 + h, e = slot < 4 ? 2 * slot : 2 * (slot - 4) + 1;
                        v |= (uint8_t)(((w[n * rb + (b / 4) * 4 + e / 2] >> (4 * (e & 1))) & 15) << (4 * h));
                    }
                } else {
                    const int slot = (int)(b % 8), e = slot < 4 ? 2 * slot : 2 * (slot - 4) + 1;
                    v = w[n * rb + (b / 8) * 8 + e];
                }
                wt[(t / lg) * lg * nck * 1024 + ((b / 64) * lg + t % lg) * 1024 + (n % 16) * 64 + b % 64] = v;
            }
    };
    tile((uint8_t *)tb1.data(), 1);
    tile((uint8_t *)tb8.data(), 8);
    WqdArgs a{};
    a.x = x; a.x_rs = c.K; a.w = w; a.w_rb = rb; a.scales = sc.data(); a.mins = c.mins ? mn.data() : nullptr;
    a.bias = c.bias ? bias.data() : nullptr; a.bias_s = 1; a.bias_f32 = 0; a.y = y; a.y_rs = c.N;
    a.M = c.M; a.N = c.N; a.K = c.K; a.group = c.group;
    a.cps = (c.K + (c.bits == 4 ? 128 : 64) - 1) / (c.bits == 4 ? 128 : 64);
    const int chunk = c.bits == 4 ? 128 : 64, gp = c.group < chunk ? chunk / c.group : 1;
    int bad = 0;
    for (const Mode &md : modes) {
        memset(y, 0xff, (size_t)c.M * c.N * 2);
        a.w = md.lg == 0 ? w : md.lg == 1 ? (uint8_t *)tb1.data() : (uint8_t *)tb8.data();
        a.w_ts = md.lg * nck * 1024;
        if (c.bits == 4) c.mins ? launch_gp<T, true, true>(a, md, gp) : launch_gp<T, true, false>(a, md, gp);
        else c.mins ? launch_gp<T, false, true>(a, md, gp) : launch_gp<T, false, false>(a, md, gp);
        double maxe = 0, maxr = 0;
        for (int m = 0; m < c.M; m++)
            for (int n = 0; n < c.N; n++) {
                double r = c.bias ? val<T>(bias[n]) : 0.0;
                for (int k = 0; k < c.K; k++) {
                    int u;
                    if (c.bits == 4) u = (w[(int64_t)n * rb + k / 2] >> (4 * (k & 1))) & 15;
                    else u = c.mins ? w[(int64_t)n * rb + k] : (int8_t)w[(int64_t)n * rb + k];
                    const int64_t j = (int64_t)(k / c.group) * c.N + n;
                    const double s = val<T>(sc[j]);
                    const double wv = c.mins ? s * u + val<T>(mn[j]) : s * (c.bits == 4 ? u - 8 : u);
                    r += (double)val<T>(x[(int64_t)m * c.K + k]) * wv;
                }
                const double got = val<T>(y[(int64_t)m * c.N + n]);
                maxe = std::max(maxe, std::isfinite(got) ? fabs(got - r) : INFINITY);
                maxr = std::max(maxr, fabs(r));
            }
        const double rel = maxe / maxr, tol = c.f16 ? 2e-3 : 1e-2;
        const bool ok = rel <= tol;
        printf("%-4s %-12s %-5s M %2d N %3d K %4d int%d g%d%s%s: max|y - ref| / max|ref| = %.2e (tol %.0e)\n",
               ok ? "ok" : "FAIL", c.name, md.name, c.M, c.N, c.K, c.bits, c.group, c.mins ? " mins" : "",
               c.bias ? " bias" : "", rel, tol);
        bad |= !ok;
    }
    return bad;
}

int main(int argc, char **argv) {
    const WqCase cases[] = {
        {"i4_m1", 1, 40, 512, 4, 128, false, false, false},   {"i4_m5_min", 5, 133, 384, 4, 128, true, false, true},
        {"i4_m16_f16", 16, 24, 256, 4, 128, false, true, false}, {"i4_m9_g256", 9, 17, 512, 4, 256, true, true, false},
        {"i8_m3", 3, 20, 256, 8, 64, false, false, true},     {"i8_m16_min", 16, 9, 256, 8, 128, true, true, false},
        {"i4_m12_n300", 12, 300, 256, 4, 128, false, false, true}, /* two blocks of 256 rows */
        /* groups smaller than a chunk (GP 4 / 2), GGUF's 32 among them */
        {"i4_m1_g32", 1, 40, 384, 4, 32, false, false, true},   {"i4_m2_g32_min", 2, 133, 256, 4, 32, true, true, false},
        {"i4_m4_g64", 4, 20, 256, 4, 64, false, false, false},  {"i8_m3_g32_min", 3, 24, 192, 8, 32, true, false, true},
        {"i8_m1_g32", 1, 300, 128, 8, 32, false, true, false},
    };
    int rc = 0, ran = 0;
    for (const WqCase &c : cases) {
        if (argc > 1 && strcmp(argv[1], c.name)) continue;
        rc |= c.f16 ? run_t<__half>(c) : run_t<__nv_bfloat16>(c);
        ran++;
    }
    if (!ran) { printf("no case named %s\n", argv[1]); return 1; }
    return rc;
}
