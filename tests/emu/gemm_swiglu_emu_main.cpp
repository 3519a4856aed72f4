// gemm_swiglu_emu_main.cpp - the decode kernels of sf_gemm_swiglu
// (decode.cuh: gs_dec_kernel, the dec4 row and the element-load fallback) run by the
// host emulator against a double-precision y = silu(x Wg^T) * (x Wu^T) of the
// same bf16 / f16 inputs; and the same kernel's modes for the engine's layer
// products (layer/dec_gemv.h): plain y = x W^T + bias, res += x W^T, and x
// made in the prologue as RMSNorm(nres) * nw (against the same norm in
// double, rounded to the dtype as the kernel rounds it).  Cases: M 1 / 5 / 16, I not a multiple of 8, K
// not a multiple of 32, row strides wider
// than K; outputs poisoned first.  Built and run by run_gemm_swiglu_emu.sh;
// argument: a case name (default: all).
#include "common/cuda_common.h"
#include "emu_bits.h"
#include "gemm_swiglu/decode.cuh"
#include <random>
#include <string>
#include <vector>

using namespace sf_gs;

struct GsCase { const char *name; int M, I, K, pad; bool f16; };


template <typename T> static int run_t(const GsCase &c, const char *which) {
    std::mt19937_64 rng(11);
    std::normal_distribution<float> nd;
    const int64_t rs = c.K + c.pad; // row stride of x and the weights (a multiple of 8)
    // 16-byte aligned buffers
    std::vector<uint4> xb((c.M * rs * 2 + 15) / 16 + 1), gb((c.I * rs * 2 + 15) / 16 + 1), ub(gb.size()),
        yb((c.M * (int64_t)c.I * 2 + 15) / 16 + 1);
    uint16_t *x = (uint16_t *)xb.data(), *wg = (uint16_t *)gb.data(), *wu = (uint16_t *)ub.data(), *y = (uint16_t *)yb.data();
    for (int64_t i = 0; i < c.M * rs; i++) x[i] = bits<T>(nd(rng));
    for (int64_t i = 0; i < c.I * rs; i++) { wg[i] = bits<T>(0.05f * nd(rng)); wu[i] = bits<T>(0.05f * nd(rng)); }
    memset(y, 0xff, (size_t)c.M * c.I * 2); // poison (NaN)
    const std::string w = which;
    const bool norm = w.find("norm") != std::string::npos, plain = w.rfind("plain", 0) == 0, res = w.rfind("res", 0) == 0;
    // the norm's input (f32 rows of K, stride rs) and weight; x then holds the normed rows rounded to T
    std::vector<float> nres((size_t)c.M * rs), nw(c.K), resv((size_t)c.M * c.I), bias(c.I);
    std::vector<uint16_t> biasb(c.I);
    for (auto &v : nres) v = 2.0f * nd(rng);
    for (auto &v : nw) v = 1.0f + 0.2f * nd(rng);
    for (auto &v : resv) v = nd(rng);
    for (int n = 0; n < c.I; n++) { biasb[n] = bits<T>(0.1f * nd(rng)); bias[n] = val<T>(biasb[n]); }
    const std::vector<float> res0 = resv;
    if (norm)
        for (int m = 0; m < c.M; m++) {
            double ss = 0;
            for (int k = 0; k < c.K; k++) ss += (double)nres[m * rs + k] * nres[m * rs + k];
            const float rstd = (float)(1.0 / sqrt(ss / c.K + 1e-5));
            for (int k = 0; k < c.K; k++) x[m * rs + k] = bits<T>(nres[m * rs + k] * rstd * nw[k]);
        }
    GsArgsX a{};
    a.x = x; a.wg = wg; a.wu = wu; a.y = y;
    a.x_rs = rs; a.wg_rs = rs; a.wu_rs = rs; a.y_rs = c.I;
    a.M = c.M; a.I = c.I; a.K = c.K; a.y_pair = 1;
    a.nres = nres.data(); a.nw = nw.data(); a.nres_rs = rs; a.eps = 1e-5f;
    a.bias = plain ? biasb.data() : nullptr; a.res = resv.data(); a.res_rs = c.I;
    const unsigned nb = (unsigned)((c.I + 7) / 8), nb16 = (unsigned)((c.I + 15) / 16);
    const size_t smem = norm ? (size_t)c.M * (c.K + 8) * 2 : 0;
    if (w == "dec4") {
        emu_launch(gs_dec_kernel<T, 4, 8, true, 4, true, true>, dim3(nb), dim3(128), 0, (const GsArgs &)a);
    } else if (w == "dec_elem") { /* the fallback for unaligned rows or K: element loads */
        emu_launch(gs_dec_kernel<T, 4, 4, false>, dim3(nb), dim3(128), 0, (const GsArgs &)a);
    } else if (w == "swiglu_norm") {
        emu_launch(gs_dec_kernel<T, 4, 8, true, 4, true, true, DecOut::swiglu, true, GsArgsX>, dim3(nb), dim3(128), smem, a);
    } else if (w == "plain16") {
        emu_launch(gs_dec_kernel<T, 16, 8, true, 1, true, true, DecOut::plain, false, GsArgsX>, dim3(nb16), dim3(512), 0, a);
    } else if (w == "plain_norm8") {
        emu_launch(gs_dec_kernel<T, 8, 8, true, 2, true, true, DecOut::plain, true, GsArgsX>, dim3(nb16), dim3(256), smem, a);
    } else if (w == "res8") {
        emu_launch(gs_dec_kernel<T, 8, 8, true, 2, true, true, DecOut::res, false, GsArgsX>, dim3(nb16), dim3(256), 0, a);
    } else {
        printf("unknown kernel %s\n", which);
        return 1;
    }
    double maxe = 0, maxr = 0;
    for (int m = 0; m < c.M; m++)
        for (int n = 0; n < c.I; n++) {
            double g = 0, u = 0;
            for (int k = 0; k < c.K; k++) {
                const double xv = val<T>(x[m * rs + k]);
                g += xv * val<T>(wg[(int64_t)n * rs + k]);
                u += xv * val<T>(wu[(int64_t)n * rs + k]);
            }
            const double r = plain ? g + bias[n] : res ? res0[(int64_t)m * c.I + n] + g : g / (1.0 + exp(-g)) * u;
            const double got = res ? (double)resv[(int64_t)m * c.I + n] : (double)val<T>(y[(int64_t)m * c.I + n]);
            const double e = std::isfinite(got) ? fabs(got - r) : INFINITY;
            maxe = std::max(maxe, e);
            maxr = std::max(maxr, fabs(r));
        }
    const double rel = maxe / maxr, tol = c.f16 ? 2e-3 : 1e-2;
    const bool ok = rel <= tol;
    printf("%-4s %-7s %-10s M %2d I %3d K %4d: max|y - ref| / max|ref| = %.2e (tol %.0e)\n", ok ? "ok" : "FAIL", which,
           c.name, c.M, c.I, c.K, rel, tol);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    const GsCase cases[] = {
        {"m1", 1, 24, 1024, 0, false},        {"m5_tail", 5, 21, 1544, 8, false},
        {"m16", 16, 16, 600, 0, false},       {"m9_f16", 9, 13, 520, 16, true},
        {"m16_stride", 16, 8, 2056, 24, false}, {"m8_stride", 8, 11, 2056, 24, true},
    };
    const char *kernels[] = {"dec4", "dec_elem", "swiglu_norm", "plain16", "plain_norm8", "res8"};
    int rc = 0, ran = 0;
    for (const GsCase &c : cases) {
        if (argc > 1 && strcmp(argv[1], c.name)) continue;
        for (const char *k : kernels) {
            rc |= c.f16 ? run_t<__half>(c, k) : run_t<__nv_bfloat16>(c, k);
            ran++;
        }
    }
    if (!ran) { printf("no case named %s\n", argv[1]); return 1; }
    return rc;
}
