// ptx.cuh (emulation) - what src/cuda/common/ptx.cuh gives the kernels
// (sf_smem_u32 is emu_rt.h's), on the host: ldmatrix (.x4,
// .trans), movmatrix (.trans) and mma.sync m16n8k16 (bf16, f16; f32 accumulation) as
// warp-collective operations through a per-warp exchange buffer and the
// warp barrier of emu_rt.h, with the PTX ISA's fragment layouts:
//   ldmatrix x4: lanes 8 i .. 8 i + 7 give the row addresses of 8 x 8
//     matrix i; lane l gets in r[i] row l / 4, columns 2 (l % 4) and + 1
//     (.trans: column l / 4, rows 2 (l % 4) and + 1);
//   mma m16n8k16, g = l / 4, t = l % 4: a0 A[g][2t..], a1 A[g+8][2t..],
//     a2 A[g][2t+8..], a3 A[g+8][2t+8..]; b0 B[2t..][g], b1 B[2t+8..][g];
//     c0, c1 C[g][2t], C[g][2t+1]; c2, c3 the same in row g + 8.
// The products are summed over k in order in float (the hardware's order
// of the f32 sum is unspecified); f32 (TF32) paths are not emulated.
#pragma once
#include "emu_rt.h"
#include <cstdlib>
#include <vector>

inline const void *emu_wptr[2][64][32];
inline uint32_t emu_wreg[2][64][32][6];

static inline float emu_h2f(uint16_t v, bool bf) {
    if (bf) {
        __nv_bfloat16 b;
        b.v = v;
        return __bfloat162float(b);
    }
    __half h;
    h.v = v;
    return __half2float(h);
}

static inline void emu_ldsm(uint32_t r[4], const void *p, bool trans) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    const unsigned ph = emu_wph++ & 1;
    emu_wptr[ph][w][l] = p;
    emu_warp_bar[w]->wait();
    for (int i = 0; i < 4; i++) {
        uint16_t e[2];
        if (!trans) {
            const uint16_t *row = (const uint16_t *)emu_wptr[ph][w][8 * i + l / 4];
            e[0] = row[2 * (l % 4)];
            e[1] = row[2 * (l % 4) + 1];
        } else {
            for (int u = 0; u < 2; u++) e[u] = ((const uint16_t *)emu_wptr[ph][w][8 * i + 2 * (l % 4) + u])[l / 4];
        }
        r[i] = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
    }
}
static inline void sf_ldsm_x4(uint32_t r[4], const void *p) { emu_ldsm(r, p, false); }
static inline void sf_ldsm_x4_t(uint32_t r[4], const void *p) { emu_ldsm(r, p, true); }
static inline void sf_ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
    uint32_t r[4];
    emu_ldsm(r, p, false);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
static inline void sf_ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
    uint32_t r[4];
    emu_ldsm(r, p, true);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

// movmatrix .trans: lane l gets {M[2 (l % 4)][l / 4], M[2 (l % 4) + 1][l / 4]}
// of the matrix M whose element M[r][c] lane 4 r + c / 2 holds (half c % 2)
static inline uint32_t sf_movm_t(uint32_t a) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    const unsigned ph = emu_wph++ & 1;
    emu_wreg[ph][w][l][0] = a;
    emu_warp_bar[w]->wait();
    const int g = l / 4, t = l % 4;
    uint32_t out = 0;
    for (int u = 0; u < 2; u++) {
        const uint32_t src = emu_wreg[ph][w][4 * (2 * t + u) + g / 2][0];
        out |= ((src >> (16 * (g % 2))) & 0xffffu) << (16 * u);
    }
    return out;
}

static inline void emu_mma16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1, bool bf) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    const unsigned ph = emu_wph++ & 1;
    for (int i = 0; i < 4; i++) emu_wreg[ph][w][l][i] = a[i];
    emu_wreg[ph][w][l][4] = b0;
    emu_wreg[ph][w][l][5] = b1;
    emu_warp_bar[w]->wait();
    float A[16][16], B[16][8];
    for (int q = 0; q < 32; q++) {
        const int g = q / 4, t = q % 4;
        const uint32_t *rg = emu_wreg[ph][w][q];
        for (int u = 0; u < 2; u++) {
            A[g][2 * t + u] = emu_h2f((uint16_t)(rg[0] >> (16 * u)), bf);
            A[g + 8][2 * t + u] = emu_h2f((uint16_t)(rg[1] >> (16 * u)), bf);
            A[g][2 * t + 8 + u] = emu_h2f((uint16_t)(rg[2] >> (16 * u)), bf);
            A[g + 8][2 * t + 8 + u] = emu_h2f((uint16_t)(rg[3] >> (16 * u)), bf);
            B[2 * t + u][g] = emu_h2f((uint16_t)(rg[4] >> (16 * u)), bf);
            B[2 * t + 8 + u][g] = emu_h2f((uint16_t)(rg[5] >> (16 * u)), bf);
        }
    }
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
        c[i] += s;
    }
}

template <typename T> struct sf_mma16;
template <> struct sf_mma16<__nv_bfloat16> {
    static inline void run(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) { emu_mma16(c, a, b0, b1, true); }
    static inline uint32_t pack(float lo, float hi) {
        return (uint32_t)__float2bfloat16_rn(lo).v | ((uint32_t)__float2bfloat16_rn(hi).v << 16);
    }
};
template <> struct sf_mma16<__half> {
    static inline void run(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) { emu_mma16(c, a, b0, b1, false); }
    static inline uint32_t pack(float lo, float hi) {
        return (uint32_t)__float2half_rn(lo).v | ((uint32_t)__float2half_rn(hi).v << 16);
    }
};

// f32 paths: compiled, not emulated
static inline void sf_mma_tf32(float *, const uint32_t *, uint32_t, uint32_t) {
    printf("EMU: tf32 mma not emulated\n");
    abort();
}
static inline float sf_tf32(float x) { return x; }
// cp.async, asynchronous (EMU_CPASYNC_SYNC=1: copied at the call): a copy
// is recorded at its call and lands (reads its source, writes shared
// memory) when a sf_cp_async_wait<N> of its thread retires its commit
// group; at its call it fills its destination with 0xff bytes (NaN for
// 16-bit and f32 data), so a missing or too weak wait reads NaN (also where
// the buffer held older data), and ThreadSanitizer sees a write at the call
// (another thread still reading the old contents without a barrier between
// is a race).  Copies never waited for are reported at the thread's exit.
struct EmuCopy {
    void *dst;
    const void *src;
    int bytes;
    int size; /* 16, or 4 (sf_cp_async4_zfill) */
};
struct EmuCpState {
    std::vector<EmuCopy> open;
    std::vector<std::vector<EmuCopy>> groups;
};
inline thread_local EmuCpState emu_cps;
inline const bool emu_cp_sync = getenv("EMU_CPASYNC_SYNC") != nullptr;
static inline void emu_copy_now(const EmuCopy &c) {
    memcpy(c.dst, c.src, c.bytes);
    memset((char *)c.dst + c.bytes, 0, c.size - c.bytes);
}
static inline void sf_cp_async16_zfill(void *s, const void *g, int bytes) {
    if (bytes < 0 || bytes > 16) { printf("EMU: cp.async of %d bytes\n", bytes); abort(); }
    if ((uintptr_t)s & 15) { printf("EMU: cp.async to unaligned shared address %p\n", s); abort(); }
    if (((uintptr_t)g & 15) && bytes) { printf("EMU: cp.async from unaligned global address %p\n", g); abort(); }
    const EmuCopy c{s, g, bytes, 16};
    if (emu_cp_sync) {
        emu_copy_now(c);
    } else {
        memset(s, 0xff, 16);
        emu_cps.open.push_back(c);
    }
}
static inline void sf_cp_async16(void *s, const void *g) { sf_cp_async16_zfill(s, g, 16); }
static inline void sf_cp_async4_zfill(void *s, const void *g, int bytes) {
    if (bytes != 0 && bytes != 4) { printf("EMU: 4-byte cp.async of %d bytes\n", bytes); abort(); }
    if (((uintptr_t)s & 3) || (((uintptr_t)g & 3) && bytes)) { printf("EMU: unaligned 4-byte cp.async\n"); abort(); }
    const EmuCopy c{s, g, bytes, 4};
    if (emu_cp_sync) {
        emu_copy_now(c);
    } else {
        memset(s, 0xff, 4);
        emu_cps.open.push_back(c);
    }
}
static inline void sf_cp_async_commit() {
    if (emu_cp_sync) return;
    emu_cps.groups.push_back(std::move(emu_cps.open));
    emu_cps.open.clear();
}
template <int N> static inline void sf_cp_async_wait() {
    auto &S = emu_cps;
    if (S.groups.size() <= (size_t)N) return;
    const size_t done = S.groups.size() - N;
    for (size_t i = 0; i < done; i++)
        for (const EmuCopy &c : S.groups[i]) emu_copy_now(c);
    S.groups.erase(S.groups.begin(), S.groups.begin() + done);
}
template <int N> static inline void sf_cp_async_wait_mem() { sf_cp_async_wait<N>(); }
inline std::atomic<int> emu_cp_warned{0};
inline void emu_cp_exit() {
    auto &S = emu_cps;
    size_t n = S.open.size();
    for (auto &g : S.groups) n += g.size();
    if (n && emu_cp_warned++ < 4)
        printf("EMU: thread %u of CTA (%u, %u, %u) exits with %zu cp.async copies not waited for\n", threadIdx.x,
               blockIdx.x, blockIdx.y, blockIdx.z, n);
    S.open.clear();
    S.groups.clear();
}

// the SFU functions (ex2 and rcp flush subnormal results to zero; the
// libm values here are a little more accurate than the GPU's)
static inline float emu_ftz(float y) { return std::fabs(y) < 1.17549435e-38f ? 0.f * y : y; }
static inline float sf_ex2(float x) { return emu_ftz(exp2f(x)); }
static inline float sf_rcp_approx(float x) { return emu_ftz(1.0f / x); }
static inline float sf_sigmoid_sfu(float v) { return sf_rcp_approx(1.0f + sf_ex2(v * -1.4426950408889634f)); }
static inline float sf_silu_sfu(float v) { return v * sf_sigmoid_sfu(v); }
static inline float sf_tanh_approx(float x) { return tanhf(x); }
// programmatic dependent launch: one kernel at a time here, nothing to wait for
static inline void sf_pdl_wait() {}
static inline void sf_pdl_launch() {}
// the paged kernels' error word: the first bad row b recorded as b + 1
static inline void sf_record_row_error(unsigned int *err, int b) {
    if (err && *err == 0u) *err = (unsigned int)b + 1u;
}

// stmatrix m8n8 x4 (.trans), warp-collective: lane l gives the shared
// address of row l % 8 of matrix l / 8; r[i] of lane l is row l / 4,
// columns 2 (l % 4), + 1 of matrix i (TRANS: stored as column l / 4, rows
// 2 (l % 4), + 1).  Also what emu_prep.py makes of the raw asm.
inline uint32_t emu_saddr[2][64][32];
template <bool TRANS> inline void emu_stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    const uint32_t r[4] = {r0, r1, r2, r3};
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    const unsigned ph = emu_wph++ & 1;
    if (addr & 15) { printf("EMU: stmatrix row address 0x%x not 16-byte aligned\n", addr); abort(); }
    emu_saddr[ph][w][l] = addr;
    emu_warp_bar[w]->wait();
    for (int i = 0; i < 4; i++)
        for (int u = 0; u < 2; u++) {
            const uint16_t v = (uint16_t)(r[i] >> (16 * u));
            uint32_t a;
            if (!TRANS) a = emu_saddr[ph][w][8 * i + l / 4] + 2 * (2 * (l % 4) + u);
            else a = emu_saddr[ph][w][8 * i + 2 * (l % 4) + u] + 2 * (l / 4);
            memcpy(emu_sptr(a), &v, 2);
        }
    emu_warp_bar[w]->wait(); // the stores done before any lane goes on
}
// red.global.add.v2.f32: two float atomic adds at an 8-byte aligned address
inline void emu_red_add_v2(float *p, float a, float b) {
    if ((uintptr_t)p & 7) { printf("EMU: red.v2 at %p not 8-byte aligned\n", (void *)p); abort(); }
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
}
inline const bool emu_cp_hooked = emu_add_exit_hook(emu_cp_exit);
