// add_rmsnorm.cu - stand-alone timer of residual add + RMSNorm shapes for
// long rows (bf16, 16384 x 8192 by default): h = x + r (written over r),
// y = h * rsqrt(mean(h^2) + eps) * w, statistics and y from the f32 h.
// Variants of how a row's chain (loads, block reduction, stores) overlaps
// with other rows', each checked on sampled rows against a double-precision
// host reference, against a copy kernel of the same bytes (read x and r,
// write two outputs) as the ceiling.  CUDA-graph replays, 20 calls each.
//   nvcc -std=c++17 -O3 -arch=sm_90a -Ibench -o add_rmsnorm bench/harness/add_rmsnorm.cu
//   ./add_rmsnorm [rows] [cols]         all variants
//   ./add_rmsnorm once NAME             one call of NAME (for ncu)
#include "harness/harness.cuh"
#include <cmath>
#include <cstring>
#include <string>

struct Args {
    const uint16_t *x, *w;
    uint16_t *r, *y; // r: residual in, h out (in place)
    int64_t rows;
    int D;           // multiple of 8 * threads
    float eps;
};

__device__ __forceinline__ void unpack8(const uint4 &v, float (&f)[8]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    uint32_t u[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
        u[i] = *reinterpret_cast<const uint32_t *>(&b);
    }
    return make_uint4(u[0], u[1], u[2], u[3]);
}

// Loads and stores with a cache policy: 0 plain, 1 L2 only (cg), 2 streaming (cs)
template <int P> __device__ __forceinline__ uint4 ld(const uint16_t *p) {
    const uint4 *q = reinterpret_cast<const uint4 *>(p);
    if constexpr (P == 1) return __ldcg(q);
    else if constexpr (P == 2) return __ldcs(q);
    else return *q;
}
template <int P> __device__ __forceinline__ void st(uint16_t *p, uint4 v) {
    uint4 *q = reinterpret_cast<uint4 *>(p);
    if constexpr (P == 2) __stcs(q, v);
    else *q = v;
}

// U vectors of x and of r from vector v0 on (NT apart), then h = x + r
template <int NT, int U, int LP>
__device__ __forceinline__ void load_h(const uint16_t *xp, const uint16_t *rp, int v0, float (&h)[U][8]) {
    uint4 xv[U], rv[U];
#pragma unroll
    for (int u = 0; u < U; u++) xv[u] = ld<LP>(xp + (v0 + u * NT) * 8), rv[u] = ld<LP>(rp + (v0 + u * NT) * 8);
#pragma unroll
    for (int u = 0; u < U; u++) {
        float xf[8], rf[8];
        unpack8(xv[u], xf), unpack8(rv[u], rf);
#pragma unroll
        for (int e = 0; e < 8; e++) h[u][e] = xf[e] + rf[e];
    }
}

template <int NT>
__device__ __forceinline__ float block_sum(float s, float *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if constexpr (NT > 32) {
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
        __syncthreads();
        s = 0.f;
#pragma unroll
        for (int i = 0; i < NT / 32; i++) s += red[i];
    }
    return s;
}

// Row in registers: NT threads x NV vectors of 8, one row a block (the
// library's shape at 8192: 512 x 2).  LP / SP: load / store policy.
template <int NT, int NV, int LP, int SP, int MB = 0>
__global__ void __launch_bounds__(NT, MB) k_regs(Args a) {
    __shared__ float red[2][NT / 32];
    int par = 0;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const uint16_t *xp = a.x + row * a.D;
        uint16_t *rp = a.r + row * a.D;
        uint4 xv[NV], rv[NV];
#pragma unroll
        for (int j = 0; j < NV; j++) xv[j] = ld<LP>(xp + (threadIdx.x + j * NT) * 8);
#pragma unroll
        for (int j = 0; j < NV; j++) rv[j] = ld<LP>(rp + (threadIdx.x + j * NT) * 8);
        float h[NV][8];
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            float xf[8], rf[8];
            unpack8(xv[j], xf), unpack8(rv[j], rf);
#pragma unroll
            for (int e = 0; e < 8; e++) h[j][e] = xf[e] + rf[e], ss = fmaf(h[j][e], h[j][e], ss);
            st<SP>(rp + (threadIdx.x + j * NT) * 8, pack8(h[j]));
        }
        ss = block_sum<NT>(ss, red[par]);
        par ^= 1;
        const float rs = rsqrtf(ss / a.D + a.eps);
#pragma unroll
        for (int j = 0; j < NV; j++) {
            float wf[8], y[8];
            unpack8(*reinterpret_cast<const uint4 *>(a.w + (threadIdx.x + j * NT) * 8), wf);
#pragma unroll
            for (int e = 0; e < 8; e++) y[e] = h[j][e] * rs * wf[e];
            st<SP>(a.y + row * a.D + (threadIdx.x + j * NT) * 8, pack8(y));
        }
    }
}

// Two passes over the row: the first reads x and r for the sum of squares
// only, the second reads them again (L2 hits) and writes h and y, so a
// thread holds U vectors at a time and many more blocks fit an SM.
template <int NT, int U, int LP1, int LP2, int SP, int MB = 0>
__global__ void __launch_bounds__(NT, MB) k_twopass(Args a) {
    __shared__ float red[2][NT / 32];
    int par = 0;
    const int nv = a.D / 8;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const uint16_t *xp = a.x + row * a.D;
        uint16_t *rp = a.r + row * a.D;
        float ss = 0.f;
        for (int v0 = threadIdx.x; v0 < nv; v0 += NT * U) {
            float h[U][8];
            load_h<NT, U, LP1>(xp, rp, v0, h);
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int e = 0; e < 8; e++) ss = fmaf(h[u][e], h[u][e], ss);
        }
        ss = block_sum<NT>(ss, red[par]);
        par ^= 1;
        const float rs = rsqrtf(ss / a.D + a.eps);
        for (int v0 = threadIdx.x; v0 < nv; v0 += NT * U) {
            float h[U][8];
            load_h<NT, U, LP2>(xp, rp, v0, h);
#pragma unroll
            for (int u = 0; u < U; u++) {
                float wf[8], y[8];
                unpack8(*reinterpret_cast<const uint4 *>(a.w + (v0 + u * NT) * 8), wf);
#pragma unroll
                for (int e = 0; e < 8; e++) y[e] = h[u][e] * rs * wf[e];
                st<SP>(rp + (v0 + u * NT) * 8, pack8(h[u]));
                st<SP>(a.y + row * a.D + (v0 + u * NT) * 8, pack8(y));
            }
        }
    }
}

// h in shared memory (f32, the row's D floats): the loads of a row are
// issued U vectors at a time, h stashed, then y from the stash, so the
// registers stay few while the row stays on chip.
template <int NT, int U, int LP, int SP, int MB = 0>
__global__ void __launch_bounds__(NT, MB) k_smem(Args a) {
    extern __shared__ float hs[];
    __shared__ float red[2][NT / 32];
    int par = 0;
    const int nv = a.D / 8;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const uint16_t *xp = a.x + row * a.D;
        uint16_t *rp = a.r + row * a.D;
        float ss = 0.f;
        for (int v0 = threadIdx.x; v0 < nv; v0 += NT * U) {
            float h[U][8];
            load_h<NT, U, LP>(xp, rp, v0, h);
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int e = 0; e < 8; e++) ss = fmaf(h[u][e], h[u][e], ss);
                float4 *d = reinterpret_cast<float4 *>(hs + (v0 + u * NT) * 8);
                d[0] = make_float4(h[u][0], h[u][1], h[u][2], h[u][3]);
                d[1] = make_float4(h[u][4], h[u][5], h[u][6], h[u][7]);
                st<SP>(rp + (v0 + u * NT) * 8, pack8(h[u]));
            }
        }
        ss = block_sum<NT>(ss, red[par]); // also: the stash is written (each thread reads its own back)
        par ^= 1;
        const float rs = rsqrtf(ss / a.D + a.eps);
        for (int v = threadIdx.x; v < nv; v += NT) {
            const float4 *s = reinterpret_cast<const float4 *>(hs + v * 8);
            const float4 h0 = s[0], h1 = s[1];
            const float h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
            float wf[8], y[8];
            unpack8(*reinterpret_cast<const uint4 *>(a.w + v * 8), wf);
#pragma unroll
            for (int e = 0; e < 8; e++) y[e] = h[e] * rs * wf[e];
            st<SP>(a.y + row * a.D + v * 8, pack8(y));
        }
    }
}

// The ceiling: the same bytes moved, no reduction (x + r into both outputs).
template <int NT>
__global__ void __launch_bounds__(NT) k_copy(Args a) {
    const int64_t n = a.rows * a.D / 8;
    for (int64_t i = blockIdx.x * (int64_t)NT + threadIdx.x; i < n; i += (int64_t)gridDim.x * NT) {
        float xf[8], rf[8];
        unpack8(reinterpret_cast<const uint4 *>(a.x)[i], xf);
        unpack8(reinterpret_cast<uint4 *>(a.r)[i], rf);
#pragma unroll
        for (int e = 0; e < 8; e++) xf[e] += rf[e];
        const uint4 o = pack8(xf);
        reinterpret_cast<uint4 *>(a.r)[i] = o;
        reinterpret_cast<uint4 *>(a.y)[i] = o;
    }
}

struct Variant {
    const char *name;
    const void *kern;
    int threads;
    size_t smem;   // dynamic shared memory (bytes), 0: none
    bool persistent; // grid = resident blocks (else one block a row)
};

static int g_sms = 132;

static void launch(const Variant &v, const Args &a, cudaStream_t s) {
    int per_sm = 1;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v.kern, v.threads, v.smem));
    const int64_t want = v.persistent ? (int64_t)per_sm * g_sms : a.rows;
    dim3 grid((unsigned)(strcmp(v.name, "copy") == 0 ? (int64_t)per_sm * g_sms : want));
    void *args[] = {(void *)&a};
    CK(cudaLaunchKernel(v.kern, grid, dim3(v.threads), args, v.smem, s));
}

struct Run {
    Variant v;
    Args a;
};
static void run_fn(const Run &r, cudaStream_t s) { launch(r.v, r.a, s); }

static float bf(uint16_t u) {
    uint32_t b = (uint32_t)u << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

int main(int argc, char **argv) {
    const bool once = argc > 2 && std::string(argv[1]) == "once";
    const int64_t rows = !once && argc > 1 ? atoll(argv[1]) : 16384;
    const int D = !once && argc > 2 ? atoi(argv[2]) : 8192;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    g_sms = prop.multiProcessorCount;
    const size_t n = (size_t)rows * D;
    uint16_t *x, *r0, *r, *y, *w;
    CK(cudaMalloc(&x, n * 2));
    CK(cudaMalloc(&r0, n * 2));
    CK(cudaMalloc(&r, n * 2));
    CK(cudaMalloc(&y, n * 2));
    CK(cudaMalloc(&w, D * 2));
    fill16<<<1024, 256>>>(x, n, 1, 2.f, 0.5f);
    fill16<<<1024, 256>>>(r0, n, 2, 2.f, 0.5f);
    fill16<<<64, 256>>>(w, D, 3, 1.f, -0.5f);
    CK(cudaDeviceSynchronize());
    const size_t smem_row = (size_t)D * 4;
#define V(nm, k, nt, sm, pers) Variant{nm, (const void *)k, nt, sm, pers}
    std::vector<Variant> vs = {
        V("regs512x2", (k_regs<512, 2, 0, 0>), 512, 0, false),
        V("regs512x2_cs", (k_regs<512, 2, 2, 2>), 512, 0, false),
        V("regs512x2_p", (k_regs<512, 2, 0, 0>), 512, 0, true),
        V("regs256x4", (k_regs<256, 4, 0, 0>), 256, 0, false),
        V("twopass512u1", (k_twopass<512, 1, 0, 0, 0>), 512, 0, false),
        V("twopass512u2", (k_twopass<512, 2, 0, 0, 0>), 512, 0, false),
        V("twopass256u2", (k_twopass<256, 2, 0, 0, 0>), 256, 0, false),
        V("twopass512u2_cg_cs", (k_twopass<512, 2, 1, 2, 0>), 512, 0, false),
        V("twopass512u2_p", (k_twopass<512, 2, 0, 0, 0>), 512, 0, true),
        V("twopass1024u1", (k_twopass<1024, 1, 0, 0, 0>), 1024, 0, false),
        V("smem512u2", (k_smem<512, 2, 0, 0>), 512, smem_row, false),
        V("smem256u4", (k_smem<256, 4, 0, 0>), 256, smem_row, false),
        V("smem512u2_p", (k_smem<512, 2, 0, 0>), 512, smem_row, true),
        V("regs512x2_mb4", (k_regs<512, 2, 0, 0, 4>), 512, 0, false),
        V("twopass512u1_mb4", (k_twopass<512, 1, 0, 0, 0, 4>), 512, 0, false),
        V("twopass256u2_mb8", (k_twopass<256, 2, 0, 0, 0, 8>), 256, 0, false),
        V("smem512u2_mb4", (k_smem<512, 2, 0, 0, 4>), 512, smem_row, false),
        V("smem256u4_mb6", (k_smem<256, 4, 0, 0, 6>), 256, smem_row, false),
        V("copy", (k_copy<256>), 256, 0, true),
    };
    for (auto &v : vs)
        if (v.smem) CK(cudaFuncSetAttribute(v.kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)v.smem));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    Args a{x, w, r, y, rows, D, 1e-6f};
    if (once) {
        for (auto &v : vs)
            if (std::string(argv[2]) == v.name) {
                CK(cudaMemcpy(r, r0, n * 2, cudaMemcpyDeviceToDevice));
                launch(v, a, s);
                CK(cudaStreamSynchronize(s));
                printf("ran %s\n", v.name);
                return 0;
            }
        printf("no variant %s\n", argv[2]);
        return 1;
    }
    // host copies of the sampled rows for the reference
    const int64_t sample[4] = {0, 1, rows / 2 + 3, rows - 1};
    std::vector<uint16_t> hx((size_t)D), hr((size_t)D), hw((size_t)D), gy((size_t)D), gh((size_t)D);
    CK(cudaMemcpy(hw.data(), w, D * 2, cudaMemcpyDeviceToHost));
    const double bytes = 4.0 * n * 2;
    printf("%s, %lld x %d bf16, %d SMs; TB/s counts x, r read and h, y written\n", prop.name, (long long)rows, D,
           g_sms);
    for (auto &v : vs) {
        int per_sm = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v.kern, v.threads, v.smem));
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, v.kern));
        // correctness (one call on fresh inputs)
        CK(cudaMemcpy(r, r0, n * 2, cudaMemcpyDeviceToDevice));
        CK(cudaMemset(y, 0xff, n * 2));
        launch(v, a, s);
        CK(cudaStreamSynchronize(s));
        double err = 0, errh = 0;
        if (strcmp(v.name, "copy") != 0) {
            for (int64_t row : sample) {
                CK(cudaMemcpy(hx.data(), x + row * D, D * 2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hr.data(), r0 + row * D, D * 2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(gy.data(), y + row * D, D * 2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(gh.data(), r + row * D, D * 2, cudaMemcpyDeviceToHost));
                double ss = 0;
                for (int i = 0; i < D; i++) {
                    const double h = (double)bf(hx[i]) + bf(hr[i]);
                    ss += h * h;
                }
                const double rs = 1.0 / std::sqrt(ss / D + 1e-6);
                for (int i = 0; i < D; i++) {
                    const double h = (double)bf(hx[i]) + bf(hr[i]);
                    const double ref = h * rs * bf(hw[i]);
                    err = std::max(err, std::fabs(bf(gy[i]) - ref) / std::max(1.0, std::fabs(ref)));
                    errh = std::max(errh, std::fabs(bf(gh[i]) - h) / std::max(1.0, std::fabs(h)));
                    if (!std::isfinite(bf(gy[i]))) err = INFINITY;
                }
            }
        }
        Run run{v, a};
        const float ms = graph_ms(run_fn, run, s);
        printf("%-20s %6.3f ms %5.2f TB/s  %d blocks/SM, %3d regs, %5zu B smem  err y %.1e h %.1e%s\n", v.name, ms,
               bytes / ms / 1e9, per_sm, fa.numRegs, v.smem + fa.sharedSizeBytes, err, errh,
               err > 1e-2 || errh > 1e-2 ? "  WRONG" : "");
    }
    return 0;
}
