// gemm_swiglu_emu_main.cpp - the decode kernels of sf_gemm_swiglu
// (decode.cuh: gs_dec_kernel, the dec4 row and the element-load fallback) run by the
// host emulator against a double-precision y = silu(x Wg^T) * (x Wu^T) of the
// same bf16 / f16 inputs; and the same kernel's modes for the engine's layer
// products (layer/dec_gemv.h): plain y = x W^T + bias, res += x W^T, and x
// made in the prologue as RMSNorm(nres) * nw (against the same norm in
// double, rounded to the dtype as the kernel rounds it), and the qkv output
// (rotary pairs and the paged-cache append, run_qkv).  Cases: M 1 / 5 / 16, I not a multiple of 8, K
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


/* x = RMSNorm(nres) * nw rounded to T, as the kernel's prologue rounds it (rows of stride rs) */
template <typename T> static void norm_rows(uint16_t *x, const float *nres, const float *nw, int M, int K, int64_t rs) {
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int k = 0; k < K; k++) ss += (double)nres[m * rs + k] * nres[m * rs + k];
        const float rstd = (float)(1.0 / sqrt(ss / K + 1e-5));
        for (int k = 0; k < K; k++) x[m * rs + k] = bits<T>(nres[m * rs + k] * rstd * nw[k]);
    }
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
    if (norm) norm_rows<T>(x, nres.data(), nw.data(), c.M, c.K, rs);
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

/* The qkv output (DecOut::qkv): H 2 q heads and 1 kv head of hd 8 (N 32),
 * R = rdim rotated channels of each, rows m at positions 1000 m + 7 and
 * cache lengths (5 m + 1) mod 16 in pages of 4 (table row m: pages 4 m + 2, 4 m +
 * 1, 4 m, 4 m + 3), row 1's length past its table when M > 1; x given or
 * normed; q and both pools poisoned, every pool element but the appended
 * ones checked still poisoned, row 1's k and v skipped and recorded. */
template <typename T> static int run_qkv(const GsCase &c, bool norm, int rdim) {
    std::mt19937_64 rng(13);
    std::normal_distribution<float> nd;
    const int H = 2, hd = 8, qd = H * hd, kd = hd, N = qd + 2 * kd, ps = 4, MP = 4, NP = 4 * c.M + 4;
    const int64_t rs = c.K + c.pad, csr = kd, csp = ps * csr, pool = NP * csp;
    std::vector<uint4> xb((c.M * rs * 2 + 15) / 16 + 1), wb((N * rs * 2 + 15) / 16 + 1);
    uint16_t *x = (uint16_t *)xb.data(), *w = (uint16_t *)wb.data();
    std::vector<uint16_t> q((size_t)c.M * qd, 0xffff), kc(pool, 0xffff), vc(pool, 0xffff), biasb(N);
    std::vector<float> nres((size_t)c.M * rs), nw(c.K);
    std::vector<int32_t> pos(c.M), lens(c.M), bt((size_t)c.M * MP);
    std::vector<double> turns(hd / 2);
    for (int64_t i = 0; i < c.M * rs; i++) x[i] = bits<T>(nd(rng));
    for (int64_t i = 0; i < N * rs; i++) w[i] = bits<T>(0.05f * nd(rng));
    for (int n = 0; n < N; n++) biasb[n] = bits<T>(0.1f * nd(rng));
    for (auto &v : nres) v = 2.0f * nd(rng);
    for (auto &v : nw) v = 1.0f + 0.2f * nd(rng);
    for (int i = 0; i < hd / 2; i++) turns[i] = pow(10000.0, -2.0 * i / hd) / 6.283185307179586;
    for (int m = 0; m < c.M; m++) {
        pos[m] = 1000 * m + 7, lens[m] = (5 * m + 1) % (MP * ps);
        const int pg[4] = {4 * m + 2, 4 * m + 1, 4 * m, 4 * m + 3};
        for (int p = 0; p < MP; p++) bt[m * MP + p] = pg[p];
    }
    if (c.M > 1) lens[1] = MP * ps; /* past the table */
    if (norm) norm_rows<T>(x, nres.data(), nw.data(), c.M, c.K, rs);
    unsigned int err = 0;
    GsArgsX a{};
    a.x = x; a.wg = w; a.wu = w; a.x_rs = rs; a.wg_rs = rs; a.wu_rs = rs;
    a.M = c.M; a.I = N; a.K = c.K;
    a.nres = nres.data(); a.nw = nw.data(); a.nres_rs = rs; a.eps = 1e-5f;
    a.bias = biasb.data();
    GsRope &r = a.rope;
    r.q = q.data(); r.kc = kc.data(); r.vc = vc.data(); r.c_sp = csp; r.c_sr = csr;
    r.pos = pos.data(); r.lens = lens.data(); r.bt = bt.data(); r.bt_rs = MP; r.turns = turns.data(); r.err = &err;
    r.qd = qd; r.kd = kd; r.hd = hd; r.R = rdim; r.page_shift = 2; r.max_pages = MP; r.num_pages = NP;
    const size_t smem = norm ? (size_t)c.M * (c.K + 8) * 2 : 0;
    if (norm)
        emu_launch(gs_dec_kernel<T, 8, 8, true, 2, true, true, DecOut::qkv, true, GsArgsX>, dim3(N / 16), dim3(256), smem, a);
    else
        emu_launch(gs_dec_kernel<T, 4, 8, true, 4, true, true, DecOut::qkv, false, GsArgsX>, dim3(N / 16), dim3(128), 0, a);
    double maxe = 0, maxr = 0;
    int64_t written = 0;
    for (int m = 0; m < c.M; m++) {
        std::vector<double> s(N);
        for (int n = 0; n < N; n++) {
            double t = val<T>(biasb[n]);
            for (int k = 0; k < c.K; k++) t += (double)val<T>(x[m * rs + k]) * val<T>(w[(int64_t)n * rs + k]);
            s[n] = t;
        }
        const bool skip = m == 1;
        const int64_t off = skip ? 0 : (int64_t)bt[m * MP + lens[m] / ps] * csp + (lens[m] % ps) * csr;
        for (int n = 0; n < N; n += 2) {
            const bool isq = n < qd, isv = n >= qd + kd;
            const int col = isq ? n : isv ? n - qd - kd : n - qd, p = col % hd;
            double y0 = s[n], y1 = s[n + 1];
            if (!isv && p < rdim) {
                const double ang = 6.283185307179586 * pos[m] * turns[p / 2];
                y0 = s[n] * cos(ang) - s[n + 1] * sin(ang), y1 = s[n + 1] * cos(ang) + s[n] * sin(ang);
            }
            if (!isq && skip) continue;
            const uint16_t *o = isq ? q.data() + (int64_t)m * qd + col : (isv ? vc.data() : kc.data()) + off + col;
            for (int j = 0; j < 2; j++) {
                const double want = j ? y1 : y0, got = val<T>(o[j]);
                maxe = std::max(maxe, std::isfinite(got) ? fabs(got - want) : INFINITY);
                maxr = std::max(maxr, fabs(want));
            }
            written += isq ? 0 : 2;
        }
    }
    int64_t poisoned = 0;
    for (int64_t i = 0; i < pool; i++) poisoned += (kc[i] == 0xffff) + (vc[i] == 0xffff);
    const double rel = maxe / maxr, tol = c.f16 ? 2e-3 : 1e-2;
    const bool ok = rel <= tol && poisoned == 2 * pool - written && err == (c.M > 1 ? 2u : 0u);
    printf("%-4s qkv%s R %d %-10s M %2d K %4d: max|y - ref| / max|ref| = %.2e (tol %.0e), %lld pool elements written (want %lld), error word %u\n",
           ok ? "ok" : "FAIL", norm ? "_norm8" : "4", rdim, c.name, c.M, c.K, rel, tol, (long long)(2 * pool - poisoned),
           (long long)written, err);
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
        for (int v = 0; v < 2; v++) {
            if (v == 0 && c.M > 4) continue; /* the engine's normed rows */
            rc |= c.f16 ? run_qkv<__half>(c, v == 0, v ? 4 : 8) : run_qkv<__nv_bfloat16>(c, v == 0, v ? 4 : 8);
            ran++;
        }
    }
    if (!ran) { printf("no case named %s\n", argv[1]); return 1; }
    return rc;
}
