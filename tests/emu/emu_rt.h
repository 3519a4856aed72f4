// emu_rt.h - a minimal CUDA emulation on the host for checking kernels
// without a GPU (tests/emu/run_ssd_bwd_emu.sh): the CTAs of a launch run one
// after another, each CUDA thread a std::thread; __syncthreads is a barrier
// of the CTA's threads, __shfl_xor_sync goes through a per-warp buffer with
// a warp barrier, shared memory is one poisoned host buffer.  Enough for
// kernels whose warps call shuffles uniformly and that use no atomics, async
// copies or tensor-core instructions.
#pragma once
#include <barrier>
#include <thread>
#include <vector>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <functional>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;
inline std::barrier<> *emu_cta_bar;
inline std::barrier<> *emu_warp_bar[64];
inline float emu_wbuf[64][32];
alignas(64) inline float emu_smem[1 << 18];
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
inline void __syncthreads() { emu_cta_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    emu_wbuf[w][l] = v;
    emu_warp_bar[w]->arrive_and_wait();
    float r = emu_wbuf[w][l ^ o];
    emu_warp_bar[w]->arrive_and_wait();
    return r;
}
template <class T> inline T __ldg(const T *p) { return *p; }
struct __half { uint16_t v; };
struct __nv_bfloat16 { uint16_t v; };
inline float __half2float(__half h) {
    uint32_t s = (h.v >> 15) & 1, e = (h.v >> 10) & 31, m = h.v & 1023; float f;
    if (e == 0) f = std::ldexp((float)m, -24); else if (e == 31) f = m ? NAN : INFINITY; else f = std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -f : f;
}
inline __half __float2half_rn(float f) {
    // via double rounding-safe path: use _Float16 if available
    _Float16 h = (_Float16)f; __half r; memcpy(&r.v, &h, 2); return r;
}
inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.v << 16; float f; memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fffu + ((u >> 16) & 1u); __nv_bfloat16 r; r.v = (uint16_t)(u >> 16); return r; }
template <class K, class A> void emu_launch(K kern, unsigned grid, unsigned block, size_t smem, const A &a) {
    gridDim.x = grid; blockDim.x = block;
    if (smem > sizeof emu_smem) { printf("EMU: smem %zu too big\n", smem); exit(1); }
    for (unsigned b = 0; b < grid; b++) {
        std::barrier<> cta(block);
        emu_cta_bar = &cta;
        for (unsigned w = 0; w < (block + 31) / 32; w++) { emu_warp_bar[w] = new std::barrier<>(32); }
        memset(emu_smem, 0xff, smem); // poison shared memory
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; t++)
            th.emplace_back([&, t, b] { threadIdx.x = t; blockIdx.x = b; kern(a); });
        for (auto &x : th) x.join();
        for (unsigned w = 0; w < (block + 31) / 32; w++) delete emu_warp_bar[w];
    }
}
