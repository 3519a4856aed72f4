// gemv_swiglu.cu - stand-alone timing of sf_gemm_swiglu's decode kernel
// (src/cuda/gemm_swiglu/decode.cuh) at Llama-8B's gate/up (K 4096, I 14336,
// bf16) in shapes of its template (warps, chunks in flight, blocks an SM)
// against cuBLAS's GEMM and GEMM + element-wise SwiGLU: CUDA-graph replays of
// 20 calls, M 1 and 16, each checked against a float32 cuBLAS product.  A
// plain process (no torch): bench/gpu_swiglu_gemm.py times the library.
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc/cuda -Isrc -Iinclude -Ibench --expt-relaxed-constexpr \
//        -o gemv_swiglu bench/harness/gemv_swiglu.cu -lcublas
//   ./gemv_swiglu [once|time [I K]]  (once: one launch each, for ncu / compute-sanitizer)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cstring>
#include "gemm_swiglu/decode.cuh"
#include "harness/harness.cuh"

using namespace sf_gs;

__global__ void swiglu_ew(const __nv_bfloat16 *h, __nv_bfloat16 *y, int M, int I) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M * I) return;
    int m = i / I, n = i % I;
    float g = __bfloat162float(h[(size_t)m * 2 * I + n]), u = __bfloat162float(h[(size_t)m * 2 * I + I + n]);
    y[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
}

typedef void (*Launch)(const GsArgs &, cudaStream_t);

static cublasHandle_t hb;
static uint16_t *g_w, *g_h;
static void run_cublas(const GsArgs &a, cudaStream_t s) {
    float al = 1, be = 0;
    cublasSetStream(hb, s);
    // H (M x 2I, row-major) = x W^T: column-major H^T (2I x M) = W (2I x K col-major view of W^T...) 
    cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, 2 * a.I, a.M, a.K, &al, g_w, CUDA_R_16BF, a.K, a.x, CUDA_R_16BF, a.K,
                 &be, g_h, CUDA_R_16BF, 2 * a.I, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
static void run_cublas_sw(const GsArgs &a, cudaStream_t s) {
    run_cublas(a, s);
    swiglu_ew<<<(a.M * a.I + 255) / 256, 256, 0, s>>>((const __nv_bfloat16 *)g_h, (__nv_bfloat16 *)a.y, a.M, a.I);
}
static void run_dec4(const GsArgs &a, cudaStream_t s) {
    gs_dec_kernel<__nv_bfloat16, 4, 4, true, 7, true, true><<<(a.I + 7) / 8, 128, 0, s>>>(a);
}
template <int MINB, int U, int WK = 4> static void run_dec4m(const GsArgs &a, cudaStream_t s) {
    gs_dec_kernel<__nv_bfloat16, WK, U, true, MINB, true, true><<<(a.I + 7) / 8, WK * 32, 0, s>>>(a);
}
struct V { const char *name; Launch f1, f16; };

int main(int argc, char **argv) {
    const bool once = argc > 1 && !strcmp(argv[1], "once");
    const int I = argc > 2 ? atoi(argv[2]) : 14336, K = argc > 3 ? atoi(argv[3]) : 4096;
    cudaStream_t s; CK(cudaStreamCreate(&s));
    cublasCreate(&hb);
    uint16_t *x, *y;
    float *ref;
    CK(cudaMalloc(&g_w, (size_t)2 * I * K * 2));
    CK(cudaMalloc(&x, (size_t)16 * K * 2));
    CK(cudaMalloc(&y, (size_t)16 * I * 2));
    CK(cudaMalloc(&g_h, (size_t)16 * 2 * I * 2));
    CK(cudaMalloc(&ref, (size_t)16 * 2 * I * 4));
    fill16<<<1024, 256>>>(g_w, (size_t)2 * I * K, 1u, 0.04f, 0.5f);
    fill16<<<64, 256>>>(x, (size_t)16 * K, 7u, 2.0f, 0.5f);
    // reference: f32 product
    {
        float al = 1, be = 0;
        cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, 2 * I, 16, K, &al, g_w, CUDA_R_16BF, K, x, CUDA_R_16BF, K, &be, ref,
                     CUDA_R_32F, 2 * I, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    std::vector<float> hr((size_t)16 * 2 * I);
    CK(cudaMemcpy(hr.data(), ref, hr.size() * 4, cudaMemcpyDeviceToHost));
    V vs[] = {
        {"cublas_gemm", run_cublas, run_cublas},
        {"cublas+ew", run_cublas_sw, run_cublas_sw},
        {"u4_minb7_spills", run_dec4, run_dec4},
        {"dec4_row_u8_minb4", run_dec4m<4, 8>, run_dec4m<4, 8>},
        {"u8_minb3", run_dec4m<3, 8>, run_dec4m<3, 8>},
        {"u6_minb5", run_dec4m<5, 6>, run_dec4m<5, 6>},
        {"u12_minb3", run_dec4m<3, 12>, run_dec4m<3, 12>},
        {"u16_minb2", run_dec4m<2, 16>, run_dec4m<2, 16>},
        {"wk8_u4_minb3", run_dec4m<3, 4, 8>, run_dec4m<3, 4, 8>},
        {"wk8_u8_minb2", run_dec4m<2, 8, 8>, run_dec4m<2, 8, 8>},
        {"wk2_u8_minb8", run_dec4m<8, 8, 2>, run_dec4m<8, 8, 2>},
        {"wk2_u16_minb4", run_dec4m<4, 16, 2>, run_dec4m<4, 16, 2>},
    };
    const double bytes = 2.0 * I * K * 2;
    printf("%-16s %4s %9s %7s %9s\n", "variant", "M", "us", "TB/s", "maxrel");
    for (int M : {1, 16}) {
        GsArgs a{};
        a.x = x; a.wg = g_w; a.wu = g_w + (size_t)I * K; a.y = y;
        a.x_rs = K; a.wg_rs = K; a.wu_rs = K; a.y_rs = I; a.M = M; a.I = I; a.K = K; a.y_pair = 1;
        for (const V &v : vs) {
            Launch f = M == 1 ? v.f1 : v.f16;
            CK(cudaMemset(y, 0xff, (size_t)16 * I * 2));
            f(a, s);
            CK(cudaStreamSynchronize(s));
            CK(cudaGetLastError());
            std::vector<uint16_t> hy((size_t)M * I);
            CK(cudaMemcpy(hy.data(), y, hy.size() * 2, cudaMemcpyDeviceToHost));
            double maxerr = 0, maxref = 0;
            bool gemm_only = v.f1 == run_cublas;
            for (int m = 0; m < M && !gemm_only; m++)
                for (int n = 0; n < I; n++) {
                    float gg = hr[(size_t)m * 2 * I + n], uu = hr[(size_t)m * 2 * I + I + n];
                    double r = gg / (1.0 + exp(-gg)) * uu;
                    uint32_t bits = (uint32_t)hy[(size_t)m * I + n] << 16;
                    float got; memcpy(&got, &bits, 4);
                    double e = fabs(got - r);
                    if (!(e <= 1e30)) e = 1e30;
                    maxerr = std::max(maxerr, e); maxref = std::max(maxref, fabs(r));
                }
            if (once) { printf("%s M %d maxrel %.2e\n", v.name, M, gemm_only ? 0.0 : maxerr / maxref); continue; }
            float ms = graph_ms(f, a, s);
            printf("%-16s %4d %9.2f %7.3f %9.2e\n", v.name, M, ms * 1e3, bytes / (ms * 1e-3) / 1e12, gemm_only ? 0.0 : maxerr / maxref);
        }
    }
    return 0;
}
