// gemm_swiglu_emu_main.cpp - the decode kernels of sf_gemm_swiglu
// (decode.cuh: gs_dec_kernel, the dec4 row and the element-load fallback) run by the
// host emulator against a double-precision y = silu(x Wg^T) * (x Wu^T) of the
// same bf16 / f16 inputs.  Cases: M 1 / 5 / 16, I not a multiple of 8, K
// not a multiple of 32, row strides wider
// than K; outputs poisoned first.  Built and run by run_gemm_swiglu_emu.sh;
// argument: a case name (default: all).
#include "common/cuda_common.h"
#include "gemm_swiglu/decode.cuh"
#include <random>
#include <string>
#include <vector>

using namespace sf_gs;

struct GsCase { const char *name; int M, I, K, pad; bool f16; };

template <typename T> static uint16_t bits(float v) {
    T h = sf_elem<T>::from_f(v);
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}
template <typename T> static float val(uint16_t b) {
    T h;
    memcpy(&h, &b, 2);
    return sf_elem<T>::to_f(h);
}

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
    GsArgs a{};
    a.x = x; a.wg = wg; a.wu = wu; a.y = y;
    a.x_rs = rs; a.wg_rs = rs; a.wu_rs = rs; a.y_rs = c.I;
    a.M = c.M; a.I = c.I; a.K = c.K; a.y_pair = 1;
    const unsigned nb = (unsigned)((c.I + 7) / 8);
    const std::string w = which;
    if (w == "dec4") {
        emu_launch(gs_dec_kernel<T, 4, 8, true, 4, true, true>, dim3(nb), dim3(128), 0, a);
    } else if (w == "dec_elem") { /* the fallback for unaligned rows or K: element loads */
        emu_launch(gs_dec_kernel<T, 4, 4, false>, dim3(nb), dim3(128), 0, a);
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
            const double r = g / (1.0 + exp(-g)) * u, got = val<T>(y[(int64_t)m * c.I + n]);
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
    const char *kernels[] = {"dec4", "dec_elem"};
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
