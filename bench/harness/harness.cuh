// harness.cuh - what the stand-alone decode timers share: the CUDA check,
// hashed fills of the inputs, and the CUDA-graph timing.
#ifndef SF_BENCH_HARNESS_CUH
#define SF_BENCH_HARNESS_CUH

#include <cuda_bf16.h>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

__device__ __forceinline__ uint32_t harness_hash(size_t i, uint32_t seed) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    return h;
}
// bf16 values uniform in [-off, 1 - off) * sc
__global__ void fill16(uint16_t *p, size_t n, uint32_t seed, float sc, float off) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __bfloat16_as_ushort(__float2bfloat16(((harness_hash(i, seed) & 0xffffff) / 16777216.0f - off) * sc));
}
// random bytes
__global__ void fill8(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint8_t)(harness_hash(i, seed) >> 8);
}

// GPU milliseconds per call of f(a, s): `calls` calls captured in one CUDA
// graph after 3 warm-up calls, the median of `reps` timed replays.
template <typename A>
static float graph_ms(void (*f)(const A &, cudaStream_t), const A &a, cudaStream_t s, int calls = 20, int reps = 15) {
    for (int i = 0; i < 3; i++) f(a, s);
    CK(cudaStreamSynchronize(s));
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < calls; i++) f(a, s);
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t;
    CK(cudaGraphLaunch(ge, s));
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms / calls);
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(gr);
    return t[t.size() / 2];
}

#endif
