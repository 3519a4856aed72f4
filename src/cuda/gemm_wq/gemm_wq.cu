/* gemm_wq.cu - the CUDA backend of sf_gemm_wq: y = x W^T with W in integer
 * codes, dequantised in registers inside the main loop.
 *
 * One kernel template, tiled by configs.h.  The product is computed as
 * y^T = W x^T on mma.sync m16n8k16: W is the A operand (16 rows of W per
 * tile, so a decode step with M <= 8 rows of x fills the n8 side and no
 * tensor-core work is wasted on padding rows of W), x the B operand.
 *
 * Main loop, per stage of BK elements of K (cp.async, STAGES deep):
 *   - the x tile (BM x BK, 16-bit) and the W tile (BN rows x BK codes, 4 or 8
 *     bits) land in shared memory by 16-byte cp.async (zero-filled past M,
 *     N and K); the stage's scales (and mins) are read by plain loads one
 *     iteration ahead into registers and stored the next iteration (their
 *     rows are N values apart with no alignment to lean on);
 *   - each warp takes 32-element sub-blocks of its K range: its lanes read 8
 *     codes of each of their W rows (4 or 8 bytes) and 8 values of their x
 *     row (16 bytes) from shared memory, turn both into the pairs of
 *     dequant.cuh (exact integers on the W side) and issue two mma steps per
 *     tile into a per-group f32 accumulator;
 *   - at the end of each group the group's scale (and min, times the
 *     group's sum of x, which one more mma against a tile of ones gives in
 *     the accumulator layout) is applied in f32:
 *         acc += s * sum(x q) + m * sum(x).
 *     The weights are never rounded: y differs from the reference only by
 *     the order of the f32 sums and its final rounding.
 * Epilogue: the warps' partial sums (several when warps split K) meet in
 * shared memory, bias added, y written in 16-byte stores when aligned.
 * No workspace, no host synchronisation: graph capturable.  Offsets are
 * 64-bit; blocks beyond grid.y's 65535 loop over row tiles.
 * Decode steps (M <= 16) with groups of whole chunks run the streaming
 * kernel of decode.cuh instead (launch_stream below), and many rows of x
 * without a bias the slabs of slab.cuh with cuBLAS (launch_slab).
 * SF_QW_TILED codes (gemm_wq.h) are read at their tiled offsets, 16 bytes
 * of one row at a time in every path; their pairs come out in k order, so
 * x is not permuted.
 */
#include "common/config_table.h"
#include "common/cuda_common.h"
#include "common/ptx.cuh"
#include "gemm_wq.h"
#include "gemm_wq/configs.h"
#include "gemm_wq/decode.cuh"
#include "gemm_wq/dequant.cuh"
#include "gemm_wq/slab.cuh"
#include "autotune.h"
#include "gemm.h"

#include <cublas_v2.h>

#include <stdint.h>

namespace {

struct WqArgs {
    const void *x;
    int64_t x_rs;          /* row stride of x (elements)                   */
    const uint8_t *w;
    int64_t w_rb;          /* bytes per row of codes                        */
    int tiled;             /* the codes are SF_QW_TILED (gemm_wq.h)         */
    int64_t w_bp;          /* tiled: bytes of a padded row                  */
    const uint16_t *scales, *mins;
    const void *bias;
    int64_t bias_s;
    int bias_f32;
    void *y;
    int64_t y_rs;
    int y_vec;             /* 16-byte stores of y: aligned rows, N % 8 == 0 */
    int64_t M, N, K, G;
    int group;
};

template <int BM_, int BN_, int WM_, int WN_, int WK_, int BK_, int ST_, bool INT4_>
struct WqTile {
    static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, WK = WK_, BK = BK_, STAGES = ST_;
    static constexpr int NTHR = 32 * WM * WN * WK;
    static constexpr int WTM = BM / WM, WTN = BN / WN; /* a warp's rows of x, of W */
    static constexpr int MT = WTN / 16, NT = WTM / 8;  /* its m16 (W) and n8 (x) tiles */
    static constexpr int KS = BK / WK;                  /* its K per stage */
    static constexpr int BKB = INT4_ ? BK / 2 : BK;     /* code bytes per row per stage */
    /* padded rows: 16-byte x reads of 8 lanes (2 rows) and 4- / 8-byte code
     * reads of a whole warp (8 rows) hit distinct banks */
    static constexpr int XS = BK + 32;                  /* elements */
    static constexpr int WS = BKB + (INT4_ ? 16 : 32);  /* bytes */
    static constexpr int SG = BK / 32;                  /* most groups a stage touches */
    static constexpr int X_BYTES = BM * XS * 2, W_BYTES = BN * WS, S_BYTES = 2 * SG * BN * 2;
    static constexpr int STAGE = X_BYTES + W_BYTES + S_BYTES;
    static constexpr int RS = BN + 4;                   /* epilogue row (floats) */
    static constexpr int EPI = WK * BM * RS * 4;
    static constexpr int SMEM = STAGES * STAGE > EPI ? STAGES * STAGE : EPI;
    static_assert(WTN % 16 == 0 && WTM % 8 == 0 && KS % 32 == 0, "warp tiles");
    static_assert(WK == 1 || KS % 128 == 0, "a warp's K range holds whole groups");
    static_assert(BK % 64 == 0 && STAGES >= 3, "padding and pipelining");
    static_assert(X_BYTES % 16 == 0 && W_BYTES % 16 == 0 && S_BYTES % 16 == 0, "16-byte stage parts");
};

template <typename T, typename Tl, bool INT4, bool MIN>
__global__ void __launch_bounds__(Tl::NTHR) gemm_wq_kernel(const WqArgs a) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int BM = Tl::BM, BN = Tl::BN, BK = Tl::BK, ST = Tl::STAGES, NTHR = Tl::NTHR;
    constexpr int MT = Tl::MT, NT = Tl::NT, XS = Tl::XS, WS = Tl::WS, SG = Tl::SG, BKB = Tl::BKB;
    constexpr int SR = (2 * SG * BN + NTHR - 1) / NTHR; /* scale (and min) values per thread */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % Tl::WM, wn = (warp / Tl::WM) % Tl::WN, wk = warp / (Tl::WM * Tl::WN);
    const int64_t M = a.M, N = a.N, K = a.K;
    const int group = a.group;
    const int gps = BK >= group ? BK / group : 1; /* groups a stage holds */
    const int nkt = (int)((K + BK - 1) / BK);
    const int64_t n0 = (int64_t)blockIdx.x * BN;
    const T *xg = (const T *)a.x;

    for (int64_t mb = blockIdx.y; mb * BM < M; mb += gridDim.y) {
        const int64_t m0 = mb * BM;
        auto xs_of = [&](int s) { return (T *)(smem + (size_t)s * Tl::STAGE); };
        auto ws_of = [&](int s) { return smem + (size_t)s * Tl::STAGE + Tl::X_BYTES; };
        auto ss_of = [&](int s) { return (uint16_t *)(smem + (size_t)s * Tl::STAGE + Tl::X_BYTES + Tl::W_BYTES); };

        /* Rows of x past M are zero in every slot, written once here (the
         * previous row tile ended with a barrier; the main loop's first
         * barrier orders these stores before any read), so the loads below
         * move only the rows that exist: a decode step (M = 1 in an 8-row
         * tile) issues 64 cp.async a stage for x instead of 512. */
        const int xrows = M - m0 < BM ? (int)(M - m0) : BM;
        if (xrows < BM) {
            for (int c = tid; c < ST * (BM - xrows) * (BK / 8); c += NTHR) {
                const int s = c / ((BM - xrows) * (BK / 8)), e = c % ((BM - xrows) * (BK / 8));
                const int r = xrows + e / (BK / 8), q = e % (BK / 8);
                *(uint4 *)(xs_of(s) + r * XS + q * 8) = make_uint4(0u, 0u, 0u, 0u);
            }
        }

        /* x and W tiles of stage kt into slot s (zeros past M, N, K) */
        auto load_tiles = [&](int kt, int s) {
            const int64_t k0 = (int64_t)kt * BK;
            T *xs = xs_of(s);
            for (int c = tid; c < xrows * (BK / 8); c += NTHR) {
                const int r = c / (BK / 8), q = c % (BK / 8);
                const int64_t m = m0 + r, k = k0 + q * 8;
                const bool ok = m < M && k < K;
                sf_cp_async16_zfill(xs + r * XS + q * 8, ok ? xg + m * a.x_rs + k : xg, ok ? 16 : 0);
            }
            unsigned char *ws = ws_of(s);
            for (int c = tid; c < BN * (BKB / 16); c += NTHR) {
                const int r = c / (BKB / 16), q = c % (BKB / 16);
                const int64_t n = n0 + r, b = (int64_t)kt * BKB + q * 16;
                const bool ok = n < N && b < a.w_rb;
                const uint8_t *src = a.tiled ? a.w + sf_wq_tiled_off(n, b, a.w_bp) : a.w + n * a.w_rb + b;
                sf_cp_async16_zfill(ws + r * WS + q * 16, ok ? src : a.w, ok ? 16 : 0);
            }
        };
        /* scales [SG][BN] then mins [SG][BN] of stage kt, through registers */
        uint16_t sreg[SR];
        auto load_scales = [&](int kt) {
            const int64_t j0 = (int64_t)kt * BK / group;
#pragma unroll
            for (int i = 0; i < SR; i++) {
                const int e = tid + i * NTHR;
                const int which = e / (SG * BN), gl = (e % (SG * BN)) / BN, nl = e % BN;
                const int64_t j = j0 + gl, n = n0 + nl;
                const uint16_t *src = which ? a.mins : a.scales;
                sreg[i] = (e < 2 * SG * BN && (MIN || which == 0) && kt < nkt && gl < gps && j < a.G && n < N)
                              ? src[j * N + n] : (uint16_t)0;
            }
        };
        auto store_scales = [&](int s) {
            uint16_t *ss = ss_of(s);
#pragma unroll
            for (int i = 0; i < SR; i++) {
                const int e = tid + i * NTHR;
                if (e < 2 * SG * BN) ss[e] = sreg[i];
            }
        };

        float acc[MT][NT][4], tmp[MT][NT][4], sx[NT][4];
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] = tmp[i][j][e] = 0.0f;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) sx[j][e] = 0.0f;
        const uint32_t ones[4] = {wq_bits<T>::ONE2, wq_bits<T>::ONE2, wq_bits<T>::ONE2, wq_bits<T>::ONE2};

        /* prologue: stages 0 .. ST-2 in flight; scales of 0 .. ST-3 stored,
         * those of ST-2 in registers (stored by the first iteration) */
#pragma unroll
        for (int s = 0; s < ST - 1; s++) {
            if (s < nkt) load_tiles(s, s);
            sf_cp_async_commit();
        }
#pragma unroll
        for (int s = 0; s < ST - 2; s++) {
            load_scales(s);
            store_scales(s);
        }
        load_scales(ST - 2);

        for (int kt = 0; kt < nkt; kt++) {
            sf_cp_async_wait<ST - 2>();
            __syncthreads(); /* stage kt landed; every warp is done with stage kt - 1 */
            store_scales((kt + ST - 2) % ST);
            const int nk = kt + ST - 1;
            if (nk < nkt) load_tiles(nk, nk % ST);
            sf_cp_async_commit();
            load_scales(nk);

            const int slot = kt % ST;
            const T *xs = xs_of(slot);
            const unsigned char *ws = ws_of(slot);
            const uint16_t *ss = ss_of(slot);
            const int64_t k0 = (int64_t)kt * BK;
#pragma unroll
            for (int sb = 0; sb < Tl::KS / 32; sb++) {
                const int kk = wk * Tl::KS + sb * 32;
                if (k0 + kk >= K) break; /* a partial last stage: whole groups */
                uint32_t bx[NT][4];
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const uint4 q = *(const uint4 *)(xs + (wm * Tl::WTM + j * 8 + (lane >> 2)) * XS + kk + 8 * (lane & 3));
                    if (a.tiled) /* the tiled codes' pairs are in k order already */
                        bx[j][0] = q.x, bx[j][1] = q.y, bx[j][2] = q.z, bx[j][3] = q.w;
                    else
                        wq_x_pairs(q, bx[j]);
                }
                uint32_t aw[MT][2][4];
#pragma unroll
                for (int i = 0; i < MT; i++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int row = wn * Tl::WTN + i * 16 + (lane >> 2) + 8 * h;
                        if (INT4) {
                            const uint32_t v = *(const uint32_t *)(ws + row * WS + kk / 2 + 4 * (lane & 3));
                            wq_int4_pairs<T>(v, MIN ? 0 : 8, aw[i][h]);
                        } else {
                            const uint2 v = *(const uint2 *)(ws + row * WS + kk + 8 * (lane & 3));
                            wq_int8_pairs<T>(v.x, v.y, !MIN, aw[i][h]);
                        }
                    }
#pragma unroll
                for (int st = 0; st < 2; st++) {
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        const uint32_t af[4] = {aw[i][0][2 * st], aw[i][1][2 * st], aw[i][0][2 * st + 1],
                                                aw[i][1][2 * st + 1]};
#pragma unroll
                        for (int j = 0; j < NT; j++) sf_mma16<T>::run(tmp[i][j], af, bx[j][2 * st], bx[j][2 * st + 1]);
                    }
                    if (MIN)
#pragma unroll
                        for (int j = 0; j < NT; j++) sf_mma16<T>::run(sx[j], ones, bx[j][2 * st], bx[j][2 * st + 1]);
                }
                if ((k0 + kk + 32) % group == 0) { /* the group ends: scale, min, fold */
                    const int gl = BK >= group ? kk / group : 0;
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        const int nl = wn * Tl::WTN + i * 16 + (lane >> 2);
                        const float s0 = wq_bits<T>::tof(ss[gl * BN + nl]), s1 = wq_bits<T>::tof(ss[gl * BN + nl + 8]);
                        const float mn0 = MIN ? wq_bits<T>::tof(ss[(SG + gl) * BN + nl]) : 0.0f;
                        const float mn1 = MIN ? wq_bits<T>::tof(ss[(SG + gl) * BN + nl + 8]) : 0.0f;
#pragma unroll
                        for (int j = 0; j < NT; j++) {
                            acc[i][j][0] += s0 * tmp[i][j][0] + mn0 * sx[j][0];
                            acc[i][j][1] += s0 * tmp[i][j][1] + mn0 * sx[j][1];
                            acc[i][j][2] += s1 * tmp[i][j][2] + mn1 * sx[j][0];
                            acc[i][j][3] += s1 * tmp[i][j][3] + mn1 * sx[j][1];
#pragma unroll
                            for (int e = 0; e < 4; e++) tmp[i][j][e] = 0.0f;
                        }
                    }
#pragma unroll
                    for (int j = 0; j < NT; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) sx[j][e] = 0.0f;
                }
            }
        }
        sf_cp_async_wait<0>();
        __syncthreads(); /* the pipeline's memory becomes the epilogue's */

        /* partial sums [WK][BM][RS] (f32): C row = W row n, column = x row m */
        float *red = (float *)smem;
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int n = wn * Tl::WTN + i * 16 + (lane >> 2), m = wm * Tl::WTM + j * 8 + 2 * (lane & 3);
                float *r0 = red + ((size_t)wk * BM + m) * Tl::RS;
                r0[n] = acc[i][j][0];
                r0[Tl::RS + n] = acc[i][j][1];
                r0[n + 8] = acc[i][j][2];
                r0[Tl::RS + n + 8] = acc[i][j][3];
            }
        __syncthreads();
        auto out_val = [&](int m, int n) {
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < Tl::WK; w++) v += red[((size_t)w * BM + m) * Tl::RS + n];
            if (a.bias) {
                const int64_t off = (n0 + n) * a.bias_s;
                v += a.bias_f32 ? ((const float *)a.bias)[off] : wq_bits<T>::tof(((const uint16_t *)a.bias)[off]);
            }
            return v;
        };
        T *yg = (T *)a.y;
        if (a.y_vec) {
            for (int e = tid; e < BM * (BN / 8); e += NTHR) {
                const int m = e / (BN / 8), n = (e % (BN / 8)) * 8;
                if (m0 + m >= M || n0 + n >= N) continue;
                uint4 o;
                uint32_t *op = (uint32_t *)&o;
#pragma unroll
                for (int u = 0; u < 4; u++) op[u] = sf_mma16<T>::pack(out_val(m, n + 2 * u), out_val(m, n + 2 * u + 1));
                *(uint4 *)(yg + (m0 + m) * a.y_rs + n0 + n) = o;
            }
        } else {
            for (int e = tid; e < BM * BN; e += NTHR) {
                const int m = e / BN, n = e % BN;
                if (m0 + m >= M || n0 + n >= N) continue;
                yg[(m0 + m) * a.y_rs + n0 + n] = wq_bits<T>::fromf(out_val(m, n));
            }
        }
        __syncthreads(); /* before the next row tile reuses shared memory */
    }
}

template <typename T, typename Tl, bool INT4, bool MIN>
sf_status launch_one(sf_ctx *ctx, const WqArgs &a) {
    auto kern = gemm_wq_kernel<T, Tl, INT4, MIN>;
    const sf_cuda_state *st = sf_cuda_st(ctx);
    const size_t optin = st ? st->smem_optin : 227 * 1024;
    if ((size_t)Tl::SMEM > optin)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_gemm_wq: the tile needs %d bytes of shared memory, this GPU gives %zu",
                       Tl::SMEM, optin);
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Tl::SMEM));
    const int64_t nb = (a.N + Tl::BN - 1) / Tl::BN, mb = (a.M + Tl::BM - 1) / Tl::BM;
    if (nb > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_gemm_wq: N = %lld needs more than 2^31 blocks", (long long)a.N);
    const dim3 grid((unsigned)nb, (unsigned)(mb < 65535 ? mb : 65535));
    kern<<<grid, Tl::NTHR, Tl::SMEM, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

template <typename T, typename Tl>
sf_status launch_fmt(sf_ctx *ctx, const WqArgs &a, int int4, int has_min) {
    if (int4) return has_min ? launch_one<T, Tl, true, true>(ctx, a) : launch_one<T, Tl, true, false>(ctx, a);
    return has_min ? launch_one<T, Tl, false, true>(ctx, a) : launch_one<T, Tl, false, false>(ctx, a);
}

/* Row `cfg` of wq_configs, instantiated for both code widths. */
template <typename T>
sf_status launch_cfg(sf_ctx *ctx, int cfg, const WqArgs &a, int int4, int has_min) {
#define WQ_ROW(i, BM, BN, WM, WN, WK, BK, S)                                                                     \
    case i:                                                                                                       \
        return int4 ? launch_fmt<T, WqTile<BM, BN, WM, WN, WK, BK, S, true>>(ctx, a, 1, has_min)                  \
                    : launch_fmt<T, WqTile<BM, BN, WM, WN, WK, BK, S, false>>(ctx, a, 0, has_min);
    switch (cfg) {
        /* the rows of configs.h, in order (checked below) */
        WQ_ROW(1, 8, 16, 1, 1, 4, 512, 4)
        WQ_ROW(2, 16, 32, 1, 1, 4, 512, 3)
        WQ_ROW(3, 64, 32, 2, 1, 2, 256, 4)
        WQ_ROW(4, 128, 128, 4, 2, 1, 64, 4)
    default: return sf_fail(ctx, SF_ERR_INTERNAL, "sf_gemm_wq: no kernel for configuration %d", cfg);
    }
#undef WQ_ROW
}

/* The streaming decode rows: 8 warps a block; 'stream' one m16 tile a warp
 * (128 rows of W a block), 4 chunks ahead; 'streamxg' two tiles a warp
 * sharing x's fragments (256 rows), 2 chunks ahead, x from global memory,
 * registers capped for two blocks an SM (at M > 8 it took 177-183 and ran
 * one: gate+up M 16 40.6 us against 35.0 capped, H100). */
constexpr int WQD_WARPS = 8;
constexpr int WQD_MT = 1, WQD_U = 4, WQD_BR = WQD_MT * WQD_WARPS * 16;
constexpr int WQX_MT = 2, WQX_U = 2, WQX_BR = WQX_MT * WQD_WARPS * 16, WQX_MINB = 2;
constexpr int WQD_CLUSTER = 8; /* portable cluster size: the K split's limit */

/* SF_QW_TILED codes (TL) run decode.cuh's LG 8 (bench/harness/gemv_wq.cu,
 * H100, int4 M 1: gate+up 28.9 us against the rows' 32.1), with XG and two
 * tiles a warp in the row 'streamxg'. */
template <typename T, bool INT4, bool MIN, int NT, bool TL, bool XG, int GP>
sf_status stream_one(sf_ctx *ctx, const WqdArgs &a0, int sms, size_t optin, int most_s, bool *fits) {
    static_assert(TL || !XG, "XG reads x in its own order: tiled codes only");
    constexpr int MT = XG ? WQX_MT : WQD_MT, U = XG ? WQX_U : WQD_U;
    using Tl = WqdTile<T, INT4, MIN, MT, NT, WQD_WARPS, U, TL ? 8 : 0, XG>;
    auto kern = gemm_wq_decode_kernel<T, INT4, MIN, MT, NT, WQD_WARPS, U, TL ? 8 : 0, XG, XG ? WQX_MINB : 0, GP>;
    WqdArgs a = a0;
    const int nchk = (int)(((int64_t)a.K + Tl::CK - 1) / Tl::CK);
    const int64_t rb = ((int64_t)a.N + Tl::BR - 1) / Tl::BR;
    /* about 1.5 blocks an SM: fewer leaves SMs idle, more adds blocks whose
     * start (x into shared memory) and end (the cluster's sum) do not
     * stream codes */
    int64_t S = (3 * (int64_t)sms / 2 + rb / 2) / rb;
    S = S < 1 ? 1 : S > most_s ? most_s : S;
    if (S > nchk) S = nchk;
    a.cps = (int)((nchk + S - 1) / S);
    while (Tl::smem(a.cps) > optin && S < most_s && S < nchk) { /* x of a long K */
        S++;
        a.cps = (int)((nchk + S - 1) / S);
    }
    S = (nchk + a.cps - 1) / a.cps; /* no block without K */
    *fits = Tl::smem(a.cps) <= optin && rb <= INT32_MAX;
    if (!*fits) return SF_OK;
    const size_t smem = Tl::smem(a.cps);
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)rb, (unsigned)S);
    cfg.blockDim = dim3(Tl::NTHR);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = sf_cuda_stream(ctx);
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1;
    at[0].val.clusterDim.y = (unsigned)S;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = most_s > 1 ? 1 : 0;
    SF_CUDA_CHECK(ctx, cudaLaunchKernelEx(&cfg, kern, a));
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* stream_one for the groups a chunk gp (decode.cuh's GP: one tile of x
 * rows) or, gp 1, the x tiles M needs. */
template <typename T, bool I4, bool MN, bool TL, bool XG>
sf_status stream_gp(sf_ctx *ctx, const WqdArgs &a, int gp, int sms, size_t optin, int most_s, bool *fits) {
    if (gp == 4) {
        if constexpr (I4) return stream_one<T, I4, MN, 1, TL, XG, 4>(ctx, a, sms, optin, most_s, fits);
        return sf_fail(ctx, SF_ERR_INTERNAL, "sf_gemm_wq: int8 codes with 4 groups a chunk");
    }
    if (gp == 2) return stream_one<T, I4, MN, 1, TL, XG, 2>(ctx, a, sms, optin, most_s, fits);
    return a.M <= 8 ? stream_one<T, I4, MN, 1, TL, XG, 1>(ctx, a, sms, optin, most_s, fits)
                    : stream_one<T, I4, MN, 2, TL, XG, 1>(ctx, a, sms, optin, most_s, fits);
}

/* The streaming decode kernel (xg: row 'streamxg', tiled codes only);
 * *fits false (nothing launched) when x's K range does not fit shared
 * memory even split 8 ways (1 before sm_90). */
template <typename T>
sf_status launch_stream(sf_ctx *ctx, const WqArgs &t, int int4, int has_min, bool xg, bool *fits) {
    WqdArgs a;
    a.x = t.x, a.x_rs = t.x_rs, a.w = t.w, a.w_rb = t.w_rb, a.scales = t.scales, a.mins = t.mins;
    a.w_ts = t.tiled ? t.w_bp * 128 : 0; /* a band of 8 tiles: 128 rows of w_bp bytes */
    a.bias = t.bias, a.bias_s = t.bias_s, a.bias_f32 = t.bias_f32, a.y = t.y, a.y_rs = t.y_rs;
    a.M = (int)t.M, a.N = (int)t.N, a.K = (int)t.K, a.group = t.group, a.cps = 0;
    const sf_cuda_state *st = sf_cuda_st(ctx);
    const int sms = st && st->sm_count > 0 ? st->sm_count : 132;
    const size_t optin = st ? st->smem_optin : 227 * 1024;
    const int most_s = st && st->sm_major < 9 ? 1 : WQD_CLUSTER; /* clusters: sm_90 on */
    if (xg && !t.tiled) return sf_fail(ctx, SF_ERR_INTERNAL, "sf_gemm_wq: configuration 'streamxg' given row-major codes");
    const int gp = wq_chunk_groups(int4, t.group);
#define WQD_NT(I4, MN, TL, XG) stream_gp<T, I4, MN, TL, XG>(ctx, a, gp, sms, optin, most_s, fits)
#define WQD_GO(I4, MN) \
    return xg ? WQD_NT(I4, MN, true, true) : t.tiled ? WQD_NT(I4, MN, true, false) : WQD_NT(I4, MN, false, false)
    if (int4) {
        if (has_min) WQD_GO(true, true);
        WQD_GO(true, false);
    }
    if (has_min) WQD_GO(false, true);
    WQD_GO(false, false);
#undef WQD_GO
#undef WQD_NT
}

/* The slab row: for each slab of W's rows, dequantise it into the
 * workspace (behind cuBLAS's own), then y[:, n0 .. n0 + ns) = x slab^T by
 * cublasGemmEx (column-major view as in src/cuda/gemm/gemm.cu). */
template <typename T>
sf_status launch_slab(sf_ctx *ctx, const WqArgs &a, int int4, int has_min) {
    const int64_t M = a.M, N = a.N, K = a.K;
    int64_t ns = (int64_t)(WQ_SLAB_BYTES / ((size_t)K * sizeof(T)));
    ns = ns < WQ_SLAB_MIN_ROWS ? WQ_SLAB_MIN_ROWS : ns / 128 * 128;
    if (ns > N) ns = N;
    if (K > INT32_MAX || a.x_rs > INT32_MAX || a.y_rs > INT32_MAX || a.x_rs < K || a.y_rs < N)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_gemm_wq: configuration 'slab' needs row strides between the row length and 2^31 (x %lld, y %lld)",
                       (long long)a.x_rs, (long long)a.y_rs);
    const size_t slab_bytes = (size_t)ns * (size_t)K * sizeof(T);
    char *ws = (char *)sf_ws_get(ctx, SF_CUBLAS_WS_BYTES + slab_bytes);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    T *slab = (T *)(ws + SF_CUBLAS_WS_BYTES);
    void *hv = NULL;
    const sf_status hs = sf_cuda_blas(ctx, "sf_gemm_wq", ws, SF_CUBLAS_WS_BYTES, &hv);
    if (hs != SF_OK) return hs;
    cublasHandle_t h = (cublasHandle_t)hv;
    const cudaDataType_t t = wqs_cuda_type<T>::value;
    const int glog = a.group == 32 ? 5 : a.group == 64 ? 6 : 7;
    const float one = 1.0f, zero = 0.0f;
    const int64_t ldx = M == 1 ? K : a.x_rs;
    for (int64_t n0 = 0; n0 < N; n0 += ns) {
        const int64_t nr = N - n0 < ns ? N - n0 : ns;
        const int64_t per_row = (K / 8 + 255) / 256;
        const dim3 grid((unsigned)per_row, (unsigned)(nr < 65535 ? nr : 65535));
        cudaStream_t s = sf_cuda_stream(ctx);
#define WQS_GO(I4, MN) \
    wq_slab_dequant<T, I4, MN><<<grid, 256, 0, s>>>(a.w, a.w_rb, a.tiled ? a.w_bp : 0, a.scales, a.mins, N, (int)K, \
                                                    glog, n0, nr, slab)
        if (int4) {
            if (has_min) WQS_GO(true, true);
            else WQS_GO(true, false);
        } else {
            if (has_min) WQS_GO(false, true);
            else WQS_GO(false, false);
        }
#undef WQS_GO
        SF_CUDA_CHECK_LAUNCH(ctx);
        const cublasStatus_t b = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)M, (int)K, &one, slab, t,
                                              (int)K, a.x, t, (int)ldx, &zero, (T *)a.y + n0, t,
                                              (int)(M == 1 ? N : a.y_rs), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (b != CUBLAS_STATUS_SUCCESS)
            return sf_fail(ctx, SF_ERR_CUDA, "sf_gemm_wq: slab: cublasGemmEx: %s", cublasGetStatusString(b));
    }
    return SF_OK;
}

/* The instantiations above follow the table. */
static bool rows_match() {
    static const int want[][9] = {{1, 16, WQD_BR, WQD_MT, WQD_WARPS, 1, 0, WQD_U, 0},
                                  {0, 8, 16, 1, 1, 4, 512, 4, 0}, {0, 16, 32, 1, 1, 4, 512, 3, 0},
                                  {0, 64, 32, 2, 1, 2, 256, 4, 0}, {0, 128, 128, 4, 2, 1, 64, 4, 0},
                                  {2, 17, 0, 0, 0, 0, 0, 0, 0},    {1, 16, WQX_BR, WQX_MT, WQD_WARPS, 1, 0, WQX_U, 1}};
    if ((int)(sizeof want / sizeof want[0]) != WQ_NCONFIGS) return false;
    for (int i = 0; i < WQ_NCONFIGS; i++) {
        const wq_config &c = wq_configs[i];
        const int got[9] = {c.kind, c.bm, c.bn, c.wm, c.wn, c.wk, c.bk, c.stages, c.xg};
        for (int f = 0; f < 9; f++)
            if (got[f] != want[i][f]) return false;
    }
    return true;
}

} // namespace

extern "C" sf_status sf_cuda_gemm_wq(sf_ctx *ctx, const sf_gemm_wq_problem *pr) {
    static const char *op = "sf_gemm_wq";
    const sf_gemm_wq_params *p = pr->p;
    const sf_qweight *q = &p->w;
    const sf_dtype dt = p->x.dtype;
    if (dt != SF_F16 && dt != SF_BF16)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: the CUDA backend takes f16 or bf16 x, not %s (f32 runs on the host backends)",
                       op, sf_dtype_name(dt));
    if (q->scales.dtype != dt)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: the CUDA backend needs w.scales (and w.mins) in x's dtype %s, got %s",
                       op, sf_dtype_name(dt), sf_dtype_name(q->scales.dtype));
    if (((uintptr_t)q->data.data & 15) != 0)
        return sf_fail(ctx, SF_ERR_ALIGNMENT, "%s: the CUDA backend needs w.data 16-byte aligned (%p)", op, q->data.data);
    if (((uintptr_t)p->x.data & 15) != 0 || (p->x.stride[0] % 8 != 0 && pr->M > 1))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "%s: the CUDA backend reads x in 16-byte pieces: its data must be 16-byte aligned and its row "
                       "stride a multiple of 8 elements (got %p, %lld)",
                       op, p->x.data, (long long)p->x.stride[0]);
    if (!rows_match())
        return sf_fail(ctx, SF_ERR_INTERNAL, "%s: configs.h and the kernel instantiations disagree", op);
    WqArgs a;
    a.x = p->x.data;
    a.x_rs = p->x.stride[0];
    a.w = (const uint8_t *)q->data.data;
    a.w_rb = sf_wq_row_bytes(pr->int4, pr->K);
    a.tiled = q->layout == SF_QW_TILED;
    a.w_bp = sf_wq_tiled_row_bytes(pr->int4, pr->K);
    a.scales = (const uint16_t *)q->scales.data;
    a.mins = (const uint16_t *)q->mins.data;
    a.bias = p->bias.data;
    a.bias_s = pr->has_bias ? p->bias.stride[0] : 0;
    a.bias_f32 = pr->has_bias && p->bias.dtype == SF_F32;
    a.y = p->y.data;
    a.y_rs = p->y.stride[0];
    a.y_vec = ((uintptr_t)p->y.data & 15) == 0 && (p->y.stride[0] % 8 == 0 || pr->M == 1) && pr->N % 8 == 0;
    a.M = pr->M, a.N = pr->N, a.K = pr->K, a.G = pr->G;
    a.group = pr->group;

    const sf_cuda_state *st = sf_cuda_st(ctx);
    const int sms = st && st->sm_count > 0 ? st->sm_count : 132;
    int cfg = wq_pick(pr->M, pr->N, pr->K, sms, pr->int4, pr->group, pr->has_bias, a.tiled);
    char fb[64];
    const bool forced = sf_autotune_forced_name("gemm_wq", fb, sizeof fb);
    if (forced) {
        cfg = -1;
        for (int i = 0; i < WQ_NCONFIGS; i++)
            if (!strcmp(fb, wq_configs[i].name)) cfg = i;
        if (cfg < 0)
            return sf_fail(ctx, SF_ERR_INVALID_ARG, "%s: SF_AUTOTUNE_FORCE names gemm_wq configuration '%s', which does not exist",
                           op, fb);
        if (!wq_supports(cfg, pr->M, pr->K, pr->int4, pr->group, pr->has_bias, a.tiled)) {
            if (wq_configs[cfg].xg && !a.tiled)
                return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                               "%s: configuration '%s' serves SF_QW_TILED codes only (sf_tile_qweight)", op, fb);
            if (wq_configs[cfg].kind == WQ_SLAB)
                return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: configuration 'slab' serves M >= %d without a bias, not M = %lld%s",
                               op, wq_configs[cfg].bm, (long long)pr->M, pr->has_bias ? " with one" : "");
            return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                           "%s: configuration '%s' serves M <= %d with groups of whole chunks (128 int4 / 64 int8 codes) "
                           "and M <= 8 / (groups a chunk) with smaller groups and K whole chunks, not M = %lld, K = %lld with int%d "
                           "group_size %d",
                           op, fb, wq_configs[cfg].bm, (long long)pr->M, (long long)pr->K, pr->int4 ? 4 : 8, pr->group);
        }
    }
    if (wq_configs[cfg].kind == WQ_SLAB)
        return dt == SF_F16 ? launch_slab<__half>(ctx, a, pr->int4, pr->has_min)
                            : launch_slab<__nv_bfloat16>(ctx, a, pr->int4, pr->has_min);
    if (wq_configs[cfg].kind == WQ_STREAM) {
        bool fits = false;
        const bool xg = wq_configs[cfg].xg != 0;
        const sf_status s = dt == SF_F16 ? launch_stream<__half>(ctx, a, pr->int4, pr->has_min, xg, &fits)
                                         : launch_stream<__nv_bfloat16>(ctx, a, pr->int4, pr->has_min, xg, &fits);
        if (s != SF_OK || fits) return s;
        if (forced)
            return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: configuration '%s' cannot hold x's K = %lld in shared memory",
                           op, wq_configs[cfg].name, (long long)pr->K);
        cfg = wq_row(pr->M <= 8 ? "dec8" : "dec16"); /* the decode tiles take any K */
    }
    return dt == SF_F16 ? launch_cfg<__half>(ctx, cfg, a, pr->int4, pr->has_min)
                        : launch_cfg<__nv_bfloat16>(ctx, cfg, a, pr->int4, pr->has_min);
}
