/* ssd_sc32_emu.cpp - runs the ssd_out_sc32 kernel (src/cuda/ssd/out_f32.cuh)
 * on the CPU (both variants: split32 and split32l), one block at a time, with one std::thread per CUDA thread:
 * __syncthreads is a 256-thread barrier, ldmatrix and mma.sync are
 * emulated per warp through a 32-thread exchange (the PTX fragment layouts),
 * cp.async is a plain copy.  It checks the kernel's index and fragment
 * mapping against a float64 sequential recurrence, that every mma operand
 * is TF32 (low 13 bits zero: nothing unrounded reaches the tensor cores)
 * and that ldmatrix rows are 16-byte aligned.  Under -fsanitize=thread it is
 * also a race check at thread granularity (stricter than racecheck: lanes
 * of one warp are separate threads), under -fsanitize=address a bounds
 * check of the global tensors.  Not built by CMake (C++20, host only):
 *
 *   g++ -std=c++20 -O1 -g -pthread -Wno-unknown-pragmas -I src/cuda \
 *       tests/emu/ssd_sc32_emu.cpp -o /tmp/sc32_emu && /tmp/sc32_emu
 *   (add -fsanitize=thread or -fsanitize=address; "quick" as argument runs
 *   the small shapes only)
 *
 * It says nothing about timing, bank conflicts or the real cp.async /
 * ldmatrix hardware: the pinned GPU tests and compute-sanitizer do.
 */
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

/* ---- the CUDA surface the kernel uses ---- */
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define SF_SSD_CHUNK_CUH /* the real header (and its CUDA includes) is skipped */

struct emu_dim {
    int x, y, z;
};
static thread_local emu_dim threadIdx, blockIdx;

struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
struct uint4 {
    uint32_t x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

static std::barrier<> *g_block_bar;
static inline void __syncthreads() { g_block_bar->arrive_and_wait(); }

struct emu_warp {
    std::barrier<> bar{32};
    const void *addr[32];
    uint32_t a[32][4], b[32][2];
};
static emu_warp *g_warps;
static std::atomic<long> g_not_tf32{0}, g_misaligned{0}, g_mma{0};

/* ---- the pieces of ssd_chunk.cuh / ssd_mma.cuh the kernel uses ---- */
#include "ssd_args.h"

static inline float ssd_tf32(float x) { /* cvt.rna.tf32.f32 for finite x */
    uint32_t u = __float_as_uint(x);
    u = (u + 0x1000u) & 0xffffe000u;
    return __uint_as_float(u);
}

static inline void ssd_ldsm_x4(uint32_t r[4], const void *p) {
    const int lane = threadIdx.x & 31;
    emu_warp &w = g_warps[threadIdx.x >> 5];
    if ((uintptr_t)p & 15) g_misaligned++;
    w.addr[lane] = p;
    w.bar.arrive_and_wait();
    for (int i = 0; i < 4; i++)
        r[i] = reinterpret_cast<const uint32_t *>(w.addr[8 * i + (lane >> 2)])[lane & 3];
    w.bar.arrive_and_wait();
}

template <typename T> struct ssd_mma;
template <> struct ssd_mma<float> {
    static constexpr int K = 8;
    static void mma(float c[4], const uint32_t a[4], const uint32_t *b) {
        const int lane = threadIdx.x & 31;
        emu_warp &w = g_warps[threadIdx.x >> 5];
        for (int i = 0; i < 4; i++) w.a[lane][i] = a[i];
        w.b[lane][0] = b[0];
        w.b[lane][1] = b[1];
        w.bar.arrive_and_wait();
        float A[16][8], B[8][8];
        for (int l = 0; l < 32; l++) {
            const int g = l >> 2, t = l & 3;
            A[g][t] = __uint_as_float(w.a[l][0]);
            A[g + 8][t] = __uint_as_float(w.a[l][1]);
            A[g][t + 4] = __uint_as_float(w.a[l][2]);
            A[g + 8][t + 4] = __uint_as_float(w.a[l][3]);
            B[t][g] = __uint_as_float(w.b[l][0]);
            B[t + 4][g] = __uint_as_float(w.b[l][1]);
        }
        const int g = lane >> 2, t = lane & 3;
        float d[4];
        for (int e = 0; e < 4; e++) {
            const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
            float s = c[e];
            for (int k = 0; k < 8; k++) s += A[row][k] * B[k][col];
            d[e] = s;
        }
        for (int i = 0; i < 4; i++)
            if (a[i] & 0x1fffu) g_not_tf32++;
        if ((b[0] | b[1]) & 0x1fffu) g_not_tf32++;
        if (lane == 0) g_mma++;
        w.bar.arrive_and_wait();
        for (int e = 0; e < 4; e++) c[e] = d[e];
    }
};

static inline void ssd_cp_commit() {}
template <int N> static inline void ssd_cp_wait() {}
template <int N> static inline void ssd_cp_wait_mem() {}

/* ssd_stage_async with the copy done at once (same chunk walk) */
template <typename T, int NT>
static inline void ssd_stage_async(T *s, int ld, const T *g, int64_t gstride, int rows, int cols,
                                   int rows_valid, int cols_valid, bool vec) {
    constexpr int V = 16 / sizeof(T);
    const int vpr = cols / V;
    for (int idx = threadIdx.x; idx < rows * vpr; idx += NT) {
        const int r = idx / vpr, cv = (idx - r * vpr) * V;
        T *d = s + r * ld + cv;
        const T *src = g + (int64_t)r * gstride + cv;
        if (r < rows_valid && vec && cv + V <= cols_valid) {
            memcpy(d, src, 16);
        } else {
            T e[V] = {};
            if (r < rows_valid)
                for (int k = 0; k < V; k++)
                    if (cv + k < cols_valid) e[k] = src[k];
            memcpy(d, e, 16);
        }
    }
}

#include "ssd_out_f32.cuh"

/* ---- the harness ---- */
alignas(16) unsigned char ssd_sc32_smem[SsdSc32<128>::SMEM];

template <int NP, bool RL> static void run_kernel(const ssd_fwd_args &a) {
    const int64_t grid = (int64_t)a.batch * a.nc * (a.P / 64) * a.H;
    for (int64_t bid = 0; bid < grid; bid++) {
        std::barrier<> bb(256);
        std::vector<emu_warp> warps(8);
        g_block_bar = &bb;
        g_warps = warps.data();
        memset(ssd_sc32_smem, 0xff, sizeof ssd_sc32_smem); /* NaN */
        std::vector<std::thread> th;
        for (int i = 0; i < 256; i++)
            th.emplace_back([&a, i, bid] {
                threadIdx = {i, 0, 0};
                blockIdx = {(int)bid, 0, 0};
                ssd_out_sc32<NP, RL>(a);
            });
        for (auto &x : th) x.join();
    }
}

struct shape {
    int b, L, H, G, P, N, Q, D_pc, has_D, has_z, vec;
};

static int run_case(const shape &s, uint64_t seed, bool rl) {
    const int nc = (s.L + s.Q - 1) / s.Q, hpg = s.H / s.G;
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    std::uniform_real_distribution<double> ud(0.0, 1.0);
    const size_t nx = (size_t)s.b * s.L * s.H * s.P, nb = (size_t)s.b * s.L * s.G * s.N;
    std::vector<float> x(nx), z(nx), out(nx, NAN), B(nb), C(nb), A(s.H), D(s.H * s.P);
    std::vector<float> dt((size_t)s.b * s.L * s.H), init((size_t)s.b * s.H * s.P * s.N);
    for (auto &v : x) v = (float)nd(rng);
    for (auto &v : z) v = (float)nd(rng);
    for (auto &v : B) v = (float)(0.5 * nd(rng));
    for (auto &v : C) v = (float)(0.5 * nd(rng));
    for (auto &v : A) v = (float)-(0.5 + 7.5 * ud(rng));
    for (auto &v : D) v = (float)nd(rng);
    for (auto &v : dt) v = (float)(0.001 + 0.3 * ud(rng));
    for (auto &v : init) v = (float)(0.5 * nd(rng));
    /* workspace as the split path leaves it */
    const size_t nv = (size_t)s.b * s.H * nc * s.Q;
    std::vector<float> dtw(nv), gw(nv), states((size_t)s.b * s.H * nc * s.P * s.N);
    std::vector<double> ref(nx);
    for (int bb = 0; bb < s.b; bb++)
        for (int h = 0; h < s.H; h++) {
            const int grp = h / hpg;
            std::vector<double> st((size_t)s.P * s.N);
            for (int i = 0; i < s.P * s.N; i++) st[i] = init[((size_t)bb * s.H + h) * s.P * s.N + i];
            for (int c = 0; c < nc; c++) {
                const size_t vo = (((size_t)bb * s.H + h) * nc + c) * s.Q;
                float gs = 0.0f;
                for (int i = 0; i < s.Q; i++) {
                    const int64_t tk = (int64_t)c * s.Q + i;
                    float d = 0.0f;
                    if (tk < s.L) {
                        d = dt[((size_t)bb * s.L + tk) * s.H + h];
                        gs += std::fmin(d * A[h], 0.0f);
                    }
                    dtw[vo + i] = d;
                    gw[vo + i] = gs * 1.4426950408889634f;
                }
                float *sto = states.data() + (((size_t)bb * s.H + h) * nc + c) * s.P * s.N;
                for (int i = 0; i < s.P * s.N; i++) sto[i] = (float)st[i];
                for (int i = 0; i < s.Q; i++) {
                    const int64_t tk = (int64_t)c * s.Q + i;
                    if (tk >= s.L) break;
                    const double d = dt[((size_t)bb * s.L + tk) * s.H + h];
                    const double dec = std::exp(std::fmin(d * A[h], 0.0));
                    const float *xr = x.data() + ((size_t)bb * s.L + tk) * s.H * s.P + (size_t)h * s.P;
                    const float *Br = B.data() + ((size_t)bb * s.L + tk) * s.G * s.N + (size_t)grp * s.N;
                    const float *Cr = C.data() + ((size_t)bb * s.L + tk) * s.G * s.N + (size_t)grp * s.N;
                    const float *zr = z.data() + ((size_t)bb * s.L + tk) * s.H * s.P + (size_t)h * s.P;
                    for (int p = 0; p < s.P; p++) {
                        double y = 0.0;
                        for (int n = 0; n < s.N; n++) {
                            double &v = st[(size_t)p * s.N + n];
                            v = dec * v + d * xr[p] * Br[n];
                            y += v * Cr[n];
                        }
                        if (s.has_D) y += (s.D_pc ? D[h * s.P + p] : D[h * s.P]) * xr[p];
                        if (s.has_z) y *= zr[p] / (1.0 + std::exp(-(double)zr[p]));
                        ref[((size_t)bb * s.L + tk) * s.H * s.P + (size_t)h * s.P + p] = y;
                    }
                }
            }
        }
    ssd_fwd_args a;
    memset(&a, 0, sizeof a);
    a.x = x.data(); a.B = B.data(); a.C = C.data(); a.z = s.has_z ? z.data() : nullptr;
    a.out = out.data();
    a.D = s.has_D ? D.data() : nullptr;
    a.xs[0] = (int64_t)s.L * s.H * s.P; a.xs[1] = (int64_t)s.H * s.P; a.xs[2] = s.P;
    for (int i = 0; i < 3; i++) a.zs[i] = a.os[i] = a.xs[i];
    a.Bs[0] = (int64_t)s.L * s.G * s.N; a.Bs[1] = (int64_t)s.G * s.N; a.Bs[2] = s.N;
    for (int i = 0; i < 3; i++) a.Cs[i] = a.Bs[i];
    /* D per head is read at D[h * Ds[0]]: with a per-(h, p) array, stride P */
    a.Ds[0] = s.P; a.Ds[1] = 1;
    a.batch = s.b; a.L = s.L; a.H = s.H; a.P = s.P; a.N = s.N; a.Npad = (s.N + 31) / 32 * 32;
    a.hpg = hpg; a.Q = s.Q; a.nc = nc;
    a.has_D = s.has_D; a.D_pc = s.D_pc; a.has_z = s.has_z;
    a.vec_x = a.vec_B = a.vec_C = a.vec_o = s.vec;
    a.vec_z = s.has_z && s.vec;
    a.dtw = dtw.data(); a.gw = gw.data(); a.states = states.data();
    g_not_tf32 = 0;
    g_misaligned = 0;
    g_mma = 0;
    if (s.N <= 64) {
        if (rl) run_kernel<64, true>(a); else run_kernel<64, false>(a);
    } else {
        if (rl) run_kernel<128, true>(a); else run_kernel<128, false>(a);
    }
    double num = 0.0, den = 0.0;
    size_t nan = 0;
    for (size_t i = 0; i < nx; i++) {
        if (!std::isfinite(out[i])) { nan++; continue; }
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    const double err = std::sqrt(num / den);
    const bool ok = nan == 0 && err < 1e-3 && g_not_tf32 == 0 && g_misaligned == 0;
    printf("%s %-8s b%d L%d H%d G%d P%d N%d Q%d D%s z%d vec%d: rel err %.2e, %zu non-finite, "
           "%ld non-TF32 operands, %ld misaligned ldmatrix rows, %ld warp mma\n",
           ok ? "ok  " : "FAIL", rl ? "split32l" : "split32", s.b, s.L, s.H, s.G, s.P, s.N, s.Q,
           !s.has_D ? "-" : s.D_pc ? "hp" : "h", s.has_z, s.vec, err, nan, g_not_tf32.load(),
           g_misaligned.load(), g_mma.load());
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const shape quick_shapes[] = {
        /* chunk 128, N 96 (NP 128), 1-token last chunk */
        {1, 257, 2, 1, 64, 96, 128, 0, 1, 1, 1},
        /* chunk 256, N 40 (NP 64), P 128, 3 heads per group, 88-token last chunk */
        {1, 600, 3, 1, 128, 40, 256, 1, 1, 1, 0},
    };
    const shape full_shapes[] = {
        {2, 600, 6, 2, 128, 40, 256, 1, 1, 1, 1},
        {1, 300, 2, 1, 64, 128, 256, 0, 1, 0, 1},
        {1, 512, 2, 1, 64, 128, 256, 0, 0, 1, 0},
        {2, 385, 2, 2, 64, 64, 128, 1, 1, 1, 1},
    };
    int fails = 0;
    uint64_t seed = 12345;
    for (int rl = 0; rl < 2; rl++) {
        for (const shape &s : quick_shapes) fails += run_case(s, seed++, rl);
        if (!quick)
            for (const shape &s : full_shapes) fails += run_case(s, seed++, rl);
    }
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
