// emu_rt.h - a minimal CUDA emulation on the host for checking kernels
// without a GPU (tests/emu/run_*_emu.sh): the CTAs of a launch run one
// after another, each CUDA thread a std::thread; __syncthreads is a barrier
// of the CTA's threads, warp shuffles / votes go through a per-warp buffer
// with a warp barrier, shared memory is one poisoned, 1024-byte aligned host
// buffer whose byte offsets are the 32-bit shared addresses.  A thread that
// returns leaves every barrier of its CTA, warp and warpgroup (as an exited
// thread no longer counts on the GPU).  When every live thread of the CTA
// waits in some barrier and none completes, the emulator prints who waits
// where and aborts (a deadlock of the kernel, e.g. a barrier not reached by
// all threads).  common/ptx.cuh adds ldmatrix and mma.sync, common/wgmma.cuh
// the sm_90 primitives (wgmma, stmatrix, named barriers).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#include <map>
#include <type_traits>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <cxxabi.h>
#include <dlfcn.h>
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3() = default;
    dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;

// ---- barriers ------------------------------------------------------------
// the deadlock watch: updated relaxed, so that it orders no thread for
// ThreadSanitizer (seq_cst updates by every thread at each barrier, warp ones
// included, are synchronisation edges between all threads there, which the
// kernels do not have)
inline std::atomic<int> emu_alive{0}, emu_waiting{0};
inline std::atomic<unsigned long> emu_progress{0};
inline const char *emu_wait_on[1024];
inline std::mutex emu_report_mu;
static void emu_deadlock_report() {
    std::lock_guard<std::mutex> lk(emu_report_mu);
    printf("EMU: deadlock in CTA (%u, %u, %u): every live thread waits in a barrier\n", blockIdx.x, blockIdx.y,
           blockIdx.z);
    // runs of consecutive threads waiting in the same barrier
    unsigned t0 = 0;
    for (unsigned t = 1; t <= blockDim.x; t++) {
        if (t == blockDim.x || emu_wait_on[t] != emu_wait_on[t0]) {
            printf("EMU:   threads %u..%u: %s\n", t0, t - 1, emu_wait_on[t0] ? emu_wait_on[t0] : "(exited or running)");
            t0 = t;
        }
    }
    fflush(stdout);
    abort();
}
// EMU_JITTER=<percent>: after that share of barrier passages a thread
// sleeps 1-300 us, so threads interleave differently from run to run (for
// races that the usual order hides)
inline const int emu_jitter = getenv("EMU_JITTER") ? atoi(getenv("EMU_JITTER")) : 0;
inline void emu_jit() {
    static thread_local unsigned long x = 0x9e3779b97f4a7c15ul ^ (unsigned long)&x;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    if ((int)(x % 100) < emu_jitter) std::this_thread::sleep_for(std::chrono::microseconds(1 + (x >> 8) % 300));
}
// A barrier of `expected` arrivals, reusable phase after phase: wait (arrive
// and wait for the phase), arrive (without waiting: bar.arrive), drop (an
// exited thread: one arrival fewer from now on).
struct EmuBar {
    std::mutex m;
    std::condition_variable cv;
    int expected, count = 0;
    unsigned long gen = 0;
    char name[48];
    EmuBar(int n, const char *fmt, int id) : expected(n) { snprintf(name, sizeof name, fmt, id); }
    void complete() {
        count = 0;
        gen++;
        emu_progress.fetch_add(1, std::memory_order_relaxed);
        cv.notify_all();
    }
    void wait() {
        std::unique_lock<std::mutex> lk(m);
        const unsigned long g = gen;
        if (++count >= expected) {
            complete();
            lk.unlock();
            if (emu_jitter) emu_jit();
            return;
        }
        emu_wait_on[threadIdx.x] = name;
        emu_waiting.fetch_add(1, std::memory_order_relaxed);
        unsigned long seen = emu_progress.load(std::memory_order_relaxed);
        int stuck = 0;
        while (gen == g) {
            if (cv.wait_for(lk, std::chrono::milliseconds(1500)) == std::cv_status::timeout && gen == g) {
                const bool all = emu_waiting.load(std::memory_order_relaxed) == emu_alive.load(std::memory_order_relaxed);
                const unsigned long now = emu_progress.load(std::memory_order_relaxed);
                stuck = all && now == seen ? stuck + 1 : 0;
                seen = now;
                if (stuck >= 2) emu_deadlock_report();
            }
        }
        emu_waiting.fetch_sub(1, std::memory_order_relaxed);
        emu_wait_on[threadIdx.x] = nullptr;
        lk.unlock();
        if (emu_jitter) emu_jit();
    }
    void arrive() {
        std::lock_guard<std::mutex> lk(m);
        if (++count >= expected) complete();
    }
    void drop() {
        std::lock_guard<std::mutex> lk(m);
        expected--;
        if (count > 0 && count >= expected) complete();
    }
};
inline EmuBar *emu_cta_bar;
inline void (*emu_exit_hooks[4])() = {}; // run by each thread as it leaves the kernel
inline bool emu_add_exit_hook(void (*f)()) {
    for (auto &h : emu_exit_hooks)
        if (!h || h == f) { h = f; return true; }
    return false;
}
inline EmuBar *emu_warp_bar[64];
inline EmuBar *emu_wg_bar[16];
// warp exchange buffers are double: a warp operation k uses slot k % 2 (the
// thread's count emu_wph), so one barrier per operation suffices (a lane can
// write slot k % 2 again, at k + 2, only after every lane has arrived at
// operation k + 1's barrier, i.e. finished reading operation k's slot)
inline thread_local unsigned emu_wph;
inline uint64_t emu_wbuf[2][64][32];

alignas(1024) inline float emu_smem[1 << 18];
// the 32-bit shared address of a pointer into emu_smem, and back
inline uint32_t sf_smem_u32(const void *p) {
    const char *c = (const char *)p, *b = (const char *)emu_smem;
    if (c < b || c >= b + sizeof emu_smem) {
        printf("EMU: shared address of %p, which is not in the emulated shared memory\n", p);
        abort();
    }
    return (uint32_t)(c - b);
}
inline unsigned char *emu_sptr(uint32_t a) {
    if (a >= sizeof emu_smem) {
        printf("EMU: shared address 0x%x out of range\n", a);
        abort();
    }
    return (unsigned char *)emu_smem + a;
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x) alignas(x)
#define __restrict__
#define __grid_constant__
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { uint32_t x, y; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline void __syncthreads() { emu_cta_bar->wait(); }
inline int __syncthreads_or(int v) {
    static std::atomic<int> acc[2];
    static thread_local int ph;
    acc[ph] |= v ? 1 : 0;
    __syncthreads();
    const int r = acc[ph];
    __syncthreads();
    if (threadIdx.x == 0) acc[ph] = 0;
    ph ^= 1;
    return r;
}
inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp_bar[threadIdx.x / 32]->wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// warp exchange: every lane posts a value, then reads lane src's (width:
// segments of `width` lanes as __shfl_*_sync's width argument)
template <class T> inline T emu_xchg(T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    const unsigned ph = emu_wph++ & 1;
    emu_wbuf[ph][w][l] = u;
    emu_warp_bar[w]->wait();
    u = emu_wbuf[ph][w][src & 31];
    T r;
    memcpy(&r, &u, sizeof(T));
    return r;
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int o, int width = 32) {
    const int l = threadIdx.x % 32;
    int s = l ^ o;
    if ((s & ~(width - 1)) != (l & ~(width - 1))) s = l;
    return emu_xchg(v, s);
}
template <class T> inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
    const int l = threadIdx.x % 32;
    return emu_xchg(v, (l & ~(width - 1)) + (src & (width - 1)));
}
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
    const int l = threadIdx.x % 32, seg = l & ~(width - 1);
    return emu_xchg(v, l - (int)d >= seg ? l - (int)d : l);
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
    const int l = threadIdx.x % 32, seg = l & ~(width - 1);
    return emu_xchg(v, l + (int)d < seg + width ? l + (int)d : l);
}
inline unsigned __ballot_sync(unsigned, int pred) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    const unsigned ph = emu_wph++ & 1;
    emu_wbuf[ph][w][l] = pred != 0;
    emu_warp_bar[w]->wait();
    unsigned m = 0;
    for (int i = 0; i < 32; i++) m |= (unsigned)emu_wbuf[ph][w][i] << i;
    return m;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == 0xffffffffu; }
inline int __ffs(unsigned x) { return x ? __builtin_ctz(x) + 1 : 0; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }

// atomics on global (host) memory
template <class T> inline T atomicAdd(T *p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
template <class T> inline T atomicMax(T *p, T v) {
    std::atomic_ref<T> a(*p);
    T o = a.load();
    while (o < v && !a.compare_exchange_weak(o, v)) {}
    return o;
}
template <class T> inline T atomicExch(T *p, T v) { return std::atomic_ref<T>(*p).exchange(v); }
template <class T> inline T atomicCAS(T *p, T c, T v) { std::atomic_ref<T>(*p).compare_exchange_strong(c, v); return c; }

// CUDA's integer min / max (both operands of one type, or promoted)
template <class A, class B> inline typename std::common_type<A, B>::type min(A a, B b) { return a < b ? a : b; }
template <class A, class B> inline typename std::common_type<A, B>::type max(A a, B b) { return a > b ? a : b; }
inline float __expf(float x) { return expf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline void sincospif(float x, float *s, float *c) { *s = (float)sin(3.14159265358979323846 * x), *c = (float)cos(3.14159265358979323846 * x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }

template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
struct __half { uint16_t v; };
struct __nv_bfloat16 { uint16_t v; };
inline float __half2float(__half h) {
    uint32_t s = (h.v >> 15) & 1, e = (h.v >> 10) & 31, m = h.v & 1023; float f;
    if (e == 0) f = std::ldexp((float)m, -24); else if (e == 31) f = m ? NAN : INFINITY; else f = std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -f : f;
}
inline __half __float2half_rn(float f) {
    _Float16 h = (_Float16)f; __half r; memcpy(&r.v, &h, 2); return r;
}
struct __half2_raw { unsigned short x, y; };
struct __half2 {
    __half x, y;
    __half2() = default;
    __half2(__half a, __half b) : x(a), y(b) {}
    explicit __half2(__half2_raw r) : x{r.x}, y{r.y} {}
};
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.v << 16; float f; memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { __nv_bfloat16 r; r.v = (uint16_t)((u >> 16) | 0x40); return r; } // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u); __nv_bfloat16 r; r.v = (uint16_t)(u >> 16); return r;
}
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 b) { return b.v; }
// byte j of the result = byte s_j of the 8 bytes (b:a), s_j the j-th nibble of s
inline uint32_t __byte_perm(uint32_t a, uint32_t b, uint32_t s) {
    const uint64_t v = (uint64_t)b << 32 | a;
    uint32_t r = 0;
    for (int j = 0; j < 4; j++) r |= (uint32_t)((v >> (8 * ((s >> (4 * j)) & 7))) & 0xff) << (8 * j);
    return r;
}
// lop3.b32: bit i of the result = bit (a_i b_i c_i) of the lookup table
inline uint32_t emu_lop3(uint32_t a, uint32_t b, uint32_t c, uint32_t lut) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i++)
        r |= ((lut >> ((a >> i & 1) << 2 | (b >> i & 1) << 1 | (c >> i & 1))) & 1u) << i;
    return r;
}
// fma.rn on two 16-bit halves (each product and sum in double, then rounded)
template <typename H, float (*TOF)(H), H (*FROMF)(float)> inline uint32_t emu_fma2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r = 0;
    for (int h = 0; h < 2; h++) {
        H x{(uint16_t)(a >> 16 * h)}, y{(uint16_t)(b >> 16 * h)}, z{(uint16_t)(c >> 16 * h)};
        const double v = (double)TOF(x) * TOF(y) + TOF(z);
        r |= (uint32_t)FROMF((float)v).v << 16 * h;
    }
    return r;
}
inline uint32_t emu_fma2_h(uint32_t a, uint32_t b, uint32_t c) {
    return emu_fma2<__half, __half2float, __float2half_rn>(a, b, c);
}
inline uint32_t emu_fma2_b(uint32_t a, uint32_t b, uint32_t c) {
    return emu_fma2<__nv_bfloat16, __bfloat162float, __float2bfloat16_rn>(a, b, c);
}
inline uint16_t __half_as_ushort(__half h) { return h.v; }
inline __half __ushort_as_half(uint16_t v) { __half h; h.v = v; return h; }
inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t v) { __nv_bfloat16 b; b.v = v; return b; }
inline float2 __half22float2(__half2 v) { return {__half2float(v.x), __half2float(v.y)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__float2bfloat16_rn(f.x), __float2bfloat16_rn(f.y)}; }
// cuda_fp8.h's e4m3 pair to f16 pair (exact: every e4m3 value is an f16)
typedef unsigned short __nv_fp8x2_storage_t;
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
inline uint16_t emu_e4m3_to_half(uint8_t c) {
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    float v = (e == 15 && m == 7) ? NAN : e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp(m / 8.0f, -6);
    return __float2half_rn(s ? -v : v).v;
}
inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t x, __nv_fp8_interpretation_t t) {
    if (t != __NV_E4M3) { printf("EMU: e5m2 not emulated\n"); abort(); }
    return {emu_e4m3_to_half((uint8_t)(x & 0xff)), emu_e4m3_to_half((uint8_t)(x >> 8))};
}
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {__bfloat162float(v.x), __bfloat162float(v.y)}; }
inline float __low2float(__half2 v) { return __half2float(v.x); }
inline float __high2float(__half2 v) { return __half2float(v.y); }
inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }

// named barriers (bar.sync / bar.arrive id, n) of the running CTA: made at
// their first use with the count that use gives
inline std::mutex emu_named_mu;
inline std::map<int, EmuBar *> emu_named;
inline EmuBar *emu_named_bar(int id, int n) {
    std::lock_guard<std::mutex> lk(emu_named_mu);
    auto it = emu_named.find(id);
    if (it == emu_named.end()) it = emu_named.emplace(id, new EmuBar(n, "named barrier %d", id)).first;
    if (it->second->expected != n && it->second->count == 0) {
        // a count differs from the first use's: allowed on the GPU only
        // between phases; report it, it is almost surely a bug
        printf("EMU: named barrier %d used with %d threads, first with %d\n", id, n, it->second->expected);
        abort();
    }
    return it->second;
}

template <class K, class... A> void emu_launch(K kern, dim3 grid3, dim3 block3, size_t smem, const A &...a) {
    const unsigned block = block3.x * block3.y * block3.z;
    if (block3.y != 1 || block3.z != 1) { printf("EMU: 2-D / 3-D blocks not emulated\n"); exit(1); }
    const unsigned long grid = (unsigned long)grid3.x * grid3.y * grid3.z;
    gridDim = grid3; blockDim = block3;
    if (smem > sizeof emu_smem) { printf("EMU: smem %zu too big\n", smem); exit(1); }
    if (block > 1024 || block == 0) { printf("EMU: block of %u threads\n", block); exit(1); }
    const unsigned nw = (block + 31) / 32, nwg = (block + 127) / 128;
    if (getenv("EMU_TRACE")) { // the kernel's name (the binary is linked with -rdynamic)
        Dl_info di;
        const char *nm = "?";
        char *dm = nullptr;
        if (dladdr((void *)kern, &di) && di.dli_sname) {
            int st;
            dm = abi::__cxa_demangle(di.dli_sname, nullptr, nullptr, &st);
            nm = dm ? dm : di.dli_sname;
        }
        printf("EMU: launch %s grid (%u, %u, %u) block %u smem %zu\n", nm, grid3.x, grid3.y, grid3.z, block, smem);
        free(dm);
    }
    for (unsigned long b = 0; b < grid; b++) {
        EmuBar cta((int)block, "__syncthreads%.0d", 0);
        emu_cta_bar = &cta;
        for (unsigned w = 0; w < nw; w++) emu_warp_bar[w] = new EmuBar((int)min(32u, block - 32 * w), "warp %d (shuffle / mma / __syncwarp)", (int)w);
        for (unsigned w = 0; w < nwg; w++) emu_wg_bar[w] = new EmuBar((int)min(128u, block - 128 * w), "warpgroup %d (wgmma)", (int)w);
        memset(emu_smem, 0xff, smem); // poison shared memory
        emu_alive = (int)block;
        emu_waiting = 0;
        std::vector<std::thread> th;
        const dim3 bi((unsigned)(b % grid3.x), (unsigned)(b / grid3.x % grid3.y), (unsigned)(b / grid3.x / grid3.y));
        for (unsigned t = 0; t < block; t++)
            th.emplace_back([&, t, bi] {
                threadIdx.x = t;
                blockIdx = bi;
                kern(a...);
                for (auto h : emu_exit_hooks)
                    if (h) h();
                emu_alive--;
                emu_cta_bar->drop();
                emu_warp_bar[t / 32]->drop();
                emu_wg_bar[t / 128]->drop();
            });
        for (auto &x : th) x.join();
        for (unsigned w = 0; w < nw; w++) delete emu_warp_bar[w];
        for (unsigned w = 0; w < nwg; w++) delete emu_wg_bar[w];
        for (auto &kv : emu_named) delete kv.second;
        emu_named.clear();
    }
}

// an inline asm statement that emu_prep.py could not translate, reached
[[noreturn]] inline void emu_asm_unsupported(const char *where) {
    printf("EMU: inline asm at %s is not emulated\n", where);
    fflush(stdout);
    abort();
}
