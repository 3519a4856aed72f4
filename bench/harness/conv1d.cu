// conv1d.cu - stand-alone timer of the causal depthwise conv1d prefill
// kernel (src/cuda/layer/conv1d_fwd.cuh) at Mamba-2 2.7B's shape (8 x 4096
// tokens x 5376 channels, width 4, bias, SiLU), bf16 and f32: the library's
// run length (tl 32) against shorter and longer runs, each with and without
// the L2 prefetch of a run's first rows ahead of the weights' barrier (the
// kernel's PF flag), against a copy of the same bytes (read x, write out)
// as the ceiling.  Every variant's output is checked on sampled elements
// against a double-precision host reference.  CUDA-graph replays, 20 calls.
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc/cuda -Isrc -Isrc/core -Iinclude -Ibench \
//        -o conv1d bench/harness/conv1d.cu
//   ./conv1d [batch L dim]          all variants
//   ./conv1d once NAME              one call of NAME (for ncu)
#include "harness/harness.cuh"
#include "layer/conv1d_fwd.cuh"
#include <cmath>
#include <cstring>
#include <string>

constexpr int W = 4;

struct Run {
    conv_fwd_args a;
    unsigned blocks;
    bool pf;
};

template <typename T> static void launch(const Run &r, cudaStream_t s) {
    if (r.pf) conv1d_fwd_kernel<T, W, CONV_V, true, true><<<r.blocks, dim3(32, 4), 0, s>>>(r.a);
    else conv1d_fwd_kernel<T, W, CONV_V, true, false><<<r.blocks, dim3(32, 4), 0, s>>>(r.a);
}

struct Copy {
    const uint4 *x;
    uint4 *y;
    size_t n;
};
__global__ void copy_kernel(Copy c) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < c.n; i += (size_t)gridDim.x * blockDim.x)
        c.y[i] = c.x[i];
}
static void launch_copy(const Copy &c, cudaStream_t s) { copy_kernel<<<132 * 8, 512, 0, s>>>(c); }

__global__ void fillf(float *p, size_t n, uint32_t seed, float sc) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = ((harness_hash(i, seed) & 0xffffff) / 16777216.0f - 0.5f) * sc;
}
static double host_elem(const std::vector<uint16_t> &v, size_t i) {
    uint32_t u = (uint32_t)v[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double host_elem(const std::vector<float> &v, size_t i) { return v[i]; }

// the largest |out - ref| / (1 + |ref|) over sampled (b, t, c), t < W
// included
template <typename T, typename H>
static double check(const T *out_d, const std::vector<H> &x, const std::vector<float> &w,
                    const std::vector<float> &bias, int B, int64_t L, int D) {
    const size_t n = (size_t)B * L * D;
    std::vector<H> out(n);
    CK(cudaMemcpy(out.data(), out_d, n * sizeof(T), cudaMemcpyDeviceToHost));
    double worst = 0;
    uint64_t s = 12345;
    for (int i = 0; i < 20000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int b = (int)((s >> 33) % B);
        const int64_t t = i < 200 ? i % W : (int64_t)((s >> 17) % L);
        const int c = (int)((s >> 7) % D);
        double acc = bias[c];
        for (int k = 0; k < W; k++) {
            const int64_t p = t - (W - 1) + k;
            if (p >= 0) acc += w[(size_t)c * W + k] * host_elem(x, ((size_t)b * L + p) * D + c);
        }
        const double ref = acc / (1 + std::exp(-acc));
        const double got = host_elem(out, ((size_t)b * L + t) * D + c);
        worst = std::max(worst, std::fabs(got - ref) / (1 + std::fabs(ref)));
    }
    return worst;
}

template <typename T>
static void run_dtype(const char *dt, int B, int64_t L, int D, const char *only) {
    const size_t n = (size_t)B * L * D, es = sizeof(T);
    void *x, *out;
    float *w, *bias;
    CK(cudaMalloc(&x, n * es));
    CK(cudaMalloc(&out, n * es));
    CK(cudaMalloc(&w, (size_t)D * W * 4));
    CK(cudaMalloc(&bias, (size_t)D * 4));
    if (es == 2) fill16<<<1024, 256>>>((uint16_t *)x, n, 1, 2.0f, 0.5f);
    else fillf<<<1024, 256>>>((float *)x, n, 1, 2.0f);
    fillf<<<64, 256>>>(w, (size_t)D * W, 2, 1.0f);
    fillf<<<64, 256>>>(bias, D, 3, 0.5f);
    CK(cudaDeviceSynchronize());
    std::vector<float> hw((size_t)D * W), hb(D);
    CK(cudaMemcpy(hw.data(), w, hw.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), bias, hb.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<uint16_t> hx16;
    std::vector<float> hx32;
    if (!only) {
        if (es == 2) {
            hx16.resize(n);
            CK(cudaMemcpy(hx16.data(), x, n * 2, cudaMemcpyDeviceToHost));
        } else {
            hx32.resize(n);
            CK(cudaMemcpy(hx32.data(), x, n * 4, cudaMemcpyDeviceToHost));
        }
    }
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    const double bytes = 2.0 * (double)n * es;
    if (!only) {
        Copy c{(const uint4 *)x, (uint4 *)out, n * es / 16};
        const float ms = graph_ms(launch_copy, c, s);
        printf("%-5s %-14s %8.1f us %6.2f TB/s\n", dt, "copy", ms * 1e3, bytes / ms / 1e9);
    }
    const int tls[] = {16, 32, 64, 128};
    for (int pf = 0; pf < 2; pf++)
        for (int tl : tls) {
            char name[32];
            snprintf(name, sizeof name, "tl%d%s", tl, pf ? "_pf" : "");
            if (only && strcmp(only, name) != 0) continue;
            Run r;
            memset(&r, 0, sizeof r);
            conv_fwd_args &a = r.a;
            a.x = x, a.out = out, a.w = w, a.bias = bias;
            a.xs[0] = L * D, a.xs[1] = D, a.os[0] = L * D, a.os[1] = D;
            a.wsd[0] = W, a.wsd[1] = 1, a.bs = 1;
            a.L = L, a.batch = B, a.dim = D, a.nseq = B, a.width = W;
            a.has_bias = 1, a.silu = 1;
            a.tl = tl;
            a.ctiles = (D + 32 * CONV_V - 1) / (32 * CONV_V);
            a.ttiles = (int)((L + 4 * tl - 1) / (4 * tl));
            r.blocks = (unsigned)((int64_t)a.ctiles * a.ttiles * B);
            r.pf = pf;
            if (only) {
                launch<T>(r, s);
                CK(cudaStreamSynchronize(s));
                printf("%s %s: one call\n", dt, name);
                continue;
            }
            CK(cudaMemset(out, 0xff, n * es)); // NaN everywhere before the check
            launch<T>(r, s);
            CK(cudaStreamSynchronize(s));
            const double err = es == 2 ? check((const T *)out, hx16, hw, hb, B, L, D)
                                       : check((const T *)out, hx32, hw, hb, B, L, D);
            const float ms = graph_ms(launch<T>, r, s);
            printf("%-5s %-14s %8.1f us %6.2f TB/s  blocks %6u  err %.1e%s\n", dt, name, ms * 1e3,
                   bytes / ms / 1e9, r.blocks, err, err < (es == 2 ? 1e-2 : 1e-5) ? "" : "  WRONG");
        }
    cudaStreamDestroy(s);
    cudaFree(x), cudaFree(out), cudaFree(w), cudaFree(bias);
}

int main(int argc, char **argv) {
    int B = 8, D = 5376;
    int64_t L = 4096;
    const char *only = nullptr;
    if (argc > 2 && strcmp(argv[1], "once") == 0) only = argv[2];
    else if (argc > 3) B = atoi(argv[1]), L = atoll(argv[2]), D = atoi(argv[3]);
    if (B <= 0 || L <= 0 || D <= 0 || D % CONV_V) {
        printf("need batch, L, dim > 0, dim a multiple of %d\n", CONV_V);
        return 1;
    }
    printf("conv1d prefill %d x %lld x %d, width %d, bias, SiLU (bytes: read x + write out)\n", B, (long long)L, D, W);
    run_dtype<__nv_bfloat16>("bf16", B, L, D, only);
    run_dtype<float>("f32", B, L, D, only);
    return 0;
}
