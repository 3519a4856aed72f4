// gemv_wq.cu - stand-alone timing of sf_gemm_wq's streaming int4 decode
// kernel (src/cuda/gemm_wq/decode.cuh; symmetric codes, groups of 128, bf16)
// in shapes of its template (m16 tiles a warp, warps, chunks ahead, K split)
// against cuBLAS
// bf16 on weights of the same shape: CUDA-graph replays of 20 calls cycling
// through 160 MB of weight copies (cold L2, both sides) at Llama-8B's
// gate+up, gate, down and q/o, M 1, 4 and 16.  Each variant is checked
// against the library's row (base_m1w8u4), which the tests check against the
// reference.  tile_* / grp8_* / grp16_*: the codes tiled (decode.cuh's LG
// 1 / 8 / 16; the same bytes rearranged by tile_codes, so the outputs match
// the row's; LG 8 is SF_QW_TILED).  *_xg: decode.cuh's XG (x from global
// memory); grp8_m2u2_xg_mb2, two m16 tiles a warp 2 chunks ahead with XG and
// registers capped for two blocks an SM, is the configuration 'streamxg'.
// min_*: with mins (asymmetric codes; the scales serve as the mins), checked
// against the row with mins.  probe_*: the codes read in the row kernel's
// order without the math.
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc/cuda -Isrc -Isrc/core -Iinclude -Ibench --expt-relaxed-constexpr \
//        -o gemv_wq bench/harness/gemv_wq.cu -lcublas
//   ./gemv_wq [once [M]]           (once: one launch each at gate+up M 1, or M, for ncu)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cstring>
#include "gemm_wq/decode.cuh"
#include "harness/harness.cuh"

typedef __nv_bfloat16 T;


/* the weights cycle through ncopy copies, one a call, so that a graph of
 * calls streams them from DRAM (L2 holds 50 MB) */
struct Prob { WqdArgs a; int sms; int ncopy; size_t wstep, sstep; const uint8_t *wt[17]; };
static unsigned g_call;
static WqdArgs cur(const Prob &p) {
    WqdArgs a = p.a;
    const unsigned i = g_call++ % (unsigned)p.ncopy;
    a.w += i * p.wstep;
    a.scales += i * p.sstep;
    if (a.mins) a.mins = a.scales; /* MN variants: the scales serve as the mins too */
    return a;
}
typedef void (*Launch)(const Prob &, cudaStream_t);

/* the codes of each copy with every 16-row tile's chunks (64 bytes of each
 * of its 16 rows) one contiguous kilobyte, in groups of LG tiles whose
 * chunk c lies side by side, each word's nibbles e0 e2 e4 e6 e1 e3 e5 e7
 * (decode.cuh's LG) */
__global__ void tile_codes(const uint8_t *src, uint8_t *dst, int64_t N, int64_t K, int64_t LG) {
    const int64_t rb = K / 2, upr = rb / 16, nchk = K / 128;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < N * upr; u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = u / upr, q = u % upr, ch = q / 4, c = q % 4, t = n / 16;
        const int64_t d = (t / LG) * LG * nchk * 64 + (ch * LG + t % LG) * 64 + (n % 16) * 4 + c;
        uint4 v = ((const uint4 *)src)[u];
        {
            uint32_t *wv = (uint32_t *)&v;
            for (int i = 0; i < 4; i++) {
                uint32_t o = 0;
                for (int j = 0; j < 8; j++) o |= ((wv[i] >> (4 * j)) & 15u) << (4 * ((j & 1) * 4 + j / 2));
                wv[i] = o;
            }
        }
        ((uint4 *)dst)[d] = v;
    }
}

/* a read of the codes alone in the row kernel's order (8 warps x 16 rows a
 * block, U chunks ahead in registers, no math): what the memory system
 * gives each layout (LG 0: row-major) */
template <int U, int LG>
__global__ void __launch_bounds__(256) probe_codes(const uint8_t *w, int N, int K, uint32_t *sink) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane & 3;
    const int nchk = K / 128;
    const int64_t rb = K / 2;
    const int tile = blockIdx.x * 8 + warp;
    if (tile * 16 >= N) return;
    const uint8_t *p[2];
    for (int h = 0; h < 2; h++) {
        const int r = (lane >> 2) + 8 * h;
        p[h] = LG ? w + (int64_t)(tile / LG) * LG * nchk * 1024 + (tile % LG) * 1024 + r * 64 + c * 16
                  : w + ((int64_t)tile * 16 + r) * rb + c * 16;
    }
    const int64_t cs = LG ? LG * 1024 : 64;
    uint4 b[U][2];
    uint32_t acc = 0;
#pragma unroll
    for (int u = 0; u < U; u++)
        for (int h = 0; h < 2; h++) b[u][h] = wqd_ld_stream(p[h] + (int64_t)min(u, nchk - 1) * cs);
    for (int ch0 = 0; ch0 < nchk; ch0 += U)
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (ch0 + u >= nchk) break;
#pragma unroll
            for (int h = 0; h < 2; h++) acc ^= b[u][h].x ^ b[u][h].y ^ b[u][h].z ^ b[u][h].w;
            const int nx = min(ch0 + u + U, nchk - 1);
#pragma unroll
            for (int h = 0; h < 2; h++) b[u][h] = wqd_ld_stream(p[h] + (int64_t)nx * cs);
        }
    if (acc == 0x9e3779b9u) sink[0] = acc; /* keeps the loads */
}
static uint32_t *g_sink;
template <int U, int LG>
static void run_probe(const Prob &p, cudaStream_t s) {
    WqdArgs a = cur(p);
    if (LG) a.w = p.wt[LG] + (a.w - p.a.w);
    probe_codes<U, LG><<<(a.N + 127) / 128, 256, 0, s>>>(a.w, a.N, a.K, g_sink);
    CK(cudaGetLastError());
}

/* F2: the K split aims at F2 / 2 blocks an SM (the library's rule, F2 3);
 * SF > 0 fixes the split at SF blocks (a cluster) instead; LG: the codes
 * tiled (tile_codes); XG: decode.cuh's option */
template <int MT, int WARPS, int U, int F2, int NT, int SF = 0, int LG = 0, bool XG = false, int MB = 0, bool MN = false>
static void run_v(const Prob &p, cudaStream_t s) {
    using Tl = WqdTile<T, true, MN, MT, NT, WARPS, U, LG, XG>;
    auto kern = gemm_wq_decode_kernel<T, true, MN, MT, NT, WARPS, U, LG, XG, MB>;
    Prob q = p;
    q.a.mins = MN ? p.a.scales : nullptr;
    WqdArgs a = cur(q);
    const int BR = Tl::BR;
    const int nchk = (a.K + Tl::CK - 1) / Tl::CK;
    if (LG) a.w = p.wt[LG] + (a.w - p.a.w), a.w_ts = (int64_t)LG * nchk * 1024;
    const int64_t rb = (a.N + BR - 1) / BR;
    int64_t S = ((int64_t)F2 * p.sms / 2 + rb / 2) / rb;
    if (SF > 0) S = SF;
    S = S < 1 ? 1 : S > 8 ? 8 : S;
    if (S > nchk) S = nchk;
    a.cps = (int)((nchk + S - 1) / S);
    while (Tl::smem(a.cps) > 227 * 1024 && S < 8) { S++; a.cps = (int)((nchk + S - 1) / S); }
    S = (nchk + a.cps - 1) / a.cps;
    const size_t smem = Tl::smem(a.cps);
    static bool set = false;
    if (!set) { CK(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024)); set = true; }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)rb, (unsigned)S);
    cfg.blockDim = dim3(Tl::NTHR);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1; at[0].val.clusterDim.y = (unsigned)S; at[0].val.clusterDim.z = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kern, a));
}
template <int MT, int WARPS, int U, int F2, int SF = 0, int LG = 0, bool XG = false, int MB = 0, bool MN = false>
static void run_m(const Prob &p, cudaStream_t s) {
    if (p.a.M <= 8) run_v<MT, WARPS, U, F2, 1, SF, LG, XG, MB, MN>(p, s);
    else run_v<MT, WARPS, U, F2, 2, SF, LG, XG, MB, MN>(p, s);
}

static cublasHandle_t hb;
static uint16_t *g_wb, *g_yb;
static int g_nb; /* copies of the bf16 weights cycled through */
static void run_cublas(const Prob &p, cudaStream_t s) {
    float al = 1, be = 0;
    cublasSetStream(hb, s);
    const uint16_t *wb = g_wb + (size_t)(g_call++ % (unsigned)g_nb) * p.a.N * p.a.K;
    cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, p.a.N, p.a.M, p.a.K, &al, wb, CUDA_R_16BF, p.a.K, p.a.x, CUDA_R_16BF,
                 p.a.K, &be, g_yb, CUDA_R_16BF, p.a.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}


struct V { const char *name; Launch f; };

int main(int argc, char **argv) {
    const bool once = argc > 1;
    const int once_m = argc > 2 ? atoi(argv[2]) : 1;
    cudaStream_t s; CK(cudaStreamCreate(&s));
    cublasCreate(&hb);
    int dev = 0, sms = 0; cudaGetDevice(&dev); cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int shapes[][2] = {{28672, 4096}, {14336, 4096}, {4096, 14336}, {4096, 4096}};
    const size_t maxw = (size_t)28672 * 4096;
    const size_t span = 160000000; /* bytes of weights a graph cycles through */
    const size_t wcap = span + maxw / 2, scap = wcap / 64 + maxw / 64, bcap = span + maxw * 2;
    uint8_t *w, *wt[17] = {}; uint16_t *sc, *x, *y, *yref;
    const int lgs[] = {1, 8, 16};
    CK(cudaMalloc(&w, wcap));
    for (int lg : lgs) CK(cudaMalloc(&wt[lg], wcap)); CK(cudaMalloc(&sc, scap * 2)); CK(cudaMalloc(&x, 16 * 14336 * 2));
    CK(cudaMalloc(&y, 16 * 28672 * 2)); CK(cudaMalloc(&yref, 16 * 28672 * 2));
    CK(cudaMalloc(&g_wb, bcap)); CK(cudaMalloc(&g_sink, 4)); CK(cudaMalloc(&g_yb, 16 * 28672 * 2));
    fill8<<<1024, 256>>>(w, wcap, 3u);
    fill16<<<1024, 256>>>(sc, scap, 5u, 0.01f, 0.0f);
    fill16<<<64, 256>>>(x, 16 * 14336, 7u, 2.0f, 0.5f);
    fill16<<<1024, 256>>>(g_wb, bcap / 2, 9u, 0.04f, 0.5f);
    CK(cudaDeviceSynchronize());
    V vs[] = {
        {"base_m1w8u4", run_m<1, 8, 4, 3>},
        {"tile_m1w8u4", run_m<1, 8, 4, 3, 0, 1>},
        {"grp8_m1w8u4", run_m<1, 8, 4, 3, 0, 8>},
        {"grp16_m1w8u4", run_m<1, 8, 4, 3, 0, 16>},
        {"grp8_xg", run_m<1, 8, 4, 3, 0, 8, true>},
        {"grp8_m2u2_xg_mb2", run_m<2, 8, 2, 3, 0, 8, true, 2>},
        {"min_base", run_m<1, 8, 4, 3, 0, 0, false, 0, true>},
        {"min_grp8", run_m<1, 8, 4, 3, 0, 8, false, 0, true>},
        {"min_m2u2_xg_mb2", run_m<2, 8, 2, 3, 0, 8, true, 2, true>},
        {"cublas_bf16", run_cublas},
        {"probe_rows_u4", run_probe<4, 0>},
        {"probe_tile_u4", run_probe<4, 1>},
        {"probe_grp8_u4", run_probe<4, 8>},
        {"probe_grp16_u4", run_probe<4, 16>},
    };
    printf("%-14s %6s %6s %3s %9s %8s %9s %9s\n", "variant", "N", "K", "M", "us", "TB/s", "cublas/x", "maxrel");
    for (auto &sh : shapes) {
        for (int M : {1, 4, 16}) {
            if (once && (M != once_m || sh[0] != 28672)) continue;
            Prob p;
            memset(&p, 0, sizeof p);
            p.sms = sms;
            p.wstep = (size_t)sh[0] * sh[1] / 2, p.sstep = (size_t)sh[0] * sh[1] / 128;
            p.ncopy = (int)std::max<size_t>(1, (span + p.wstep - 1) / p.wstep);
            g_nb = (int)std::max<size_t>(1, (span + (size_t)sh[0] * sh[1] * 2 - 1) / ((size_t)sh[0] * sh[1] * 2));
            p.a.x = x; p.a.x_rs = sh[1]; p.a.w = w; p.a.scales = sc; p.a.mins = nullptr;
            p.a.w_rb = sh[1] / 2;
            for (int lg : lgs) {
                p.wt[lg] = wt[lg];
                for (int i = 0; i < p.ncopy; i++)
                    tile_codes<<<1024, 256>>>(w + i * p.wstep, wt[lg] + i * p.wstep, sh[0], sh[1], lg);
            }
            CK(cudaDeviceSynchronize());
            p.a.bias = nullptr; p.a.y = y; p.a.y_rs = sh[0]; p.a.M = M; p.a.N = sh[0]; p.a.K = sh[1]; p.a.group = 128;
            const double bytes = (double)sh[0] * sh[1] / 2 + (double)sh[0] * sh[1] / 128 * 2;
            float tcub = graph_ms(run_cublas, p, s);
            // baseline output as reference (the library's row, tested against the C reference)
            p.a.y = yref; g_call = 0; run_m<1, 8, 4, 3>(p, s); CK(cudaStreamSynchronize(s)); p.a.y = y;
            std::vector<uint16_t> hr((size_t)M * sh[0]), hy((size_t)M * sh[0]), hrm((size_t)M * sh[0]);
            CK(cudaMemcpy(hr.data(), yref, hr.size() * 2, cudaMemcpyDeviceToHost));
            /* the mins variants' reference: the row with mins */
            p.a.y = yref; g_call = 0; run_m<1, 8, 4, 3, 0, 0, false, 0, true>(p, s); CK(cudaStreamSynchronize(s)); p.a.y = y;
            CK(cudaMemcpy(hrm.data(), yref, hrm.size() * 2, cudaMemcpyDeviceToHost));
            for (const V &v : vs) {
                double maxerr = 0, maxref = 0;
                const bool probe = !strncmp(v.name, "probe", 5);
                if (probe && M != 1) continue;
                if (v.f != run_cublas && !probe) {
                    CK(cudaMemset(y, 0xff, (size_t)16 * 28672 * 2));
                    g_call = 0;
                    v.f(p, s);
                    CK(cudaStreamSynchronize(s));
                    CK(cudaGetLastError());
                    CK(cudaMemcpy(hy.data(), y, hy.size() * 2, cudaMemcpyDeviceToHost));
                    const std::vector<uint16_t> &rf = strncmp(v.name, "min_", 4) ? hr : hrm;
                    for (size_t i = 0; i < hy.size(); i++) {
                        uint32_t b1 = (uint32_t)hy[i] << 16, b2 = (uint32_t)rf[i] << 16;
                        float g, r; memcpy(&g, &b1, 4); memcpy(&r, &b2, 4);
                        double e = fabs((double)g - r);
                        if (!(e <= 1e30)) e = 1e30;
                        maxerr = std::max(maxerr, e); maxref = std::max(maxref, (double)fabs(r));
                    }
                }
                if (once) { printf("%-14s %6d %6d %3d maxrel %.2e\n", v.name, sh[0], sh[1], M, maxerr / maxref); continue; }
                float ms = v.f == run_cublas ? tcub : graph_ms(v.f, p, s);
                const double b = v.f == run_cublas ? (double)sh[0] * sh[1] * 2 : bytes;
                printf("%-14s %6d %6d %3d %9.2f %8.3f %8.2fx %9.2e\n", v.name, sh[0], sh[1], M, ms * 1e3,
                       b / (ms * 1e-3) / 1e12, tcub / ms, maxerr / (maxref > 0 ? maxref : 1));
            }
        }
    }
    return 0;
}
