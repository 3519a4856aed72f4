// wgmma.cuh (emulation) - the sm_90a primitives of src/cuda/common/wgmma.cuh
// on the host, with the same API in namespace sf_wg; the tile layout code
// (load_tile_sw, wg_desc, ...) is the real common/wgmma_tile.cuh.
//
// wgmma (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"),
// m64nNk16, 16-bit inputs, f32 accumulators, executed at the wg_wait that
// retires its commit group (see "Asynchronous execution" below; wg_fence and
// the proxy fences are no-ops).  Thread t of the warpgroup (warp w = t / 32, lane l, g = l / 4,
// q = l % 4) holds
//   d[j], j < N / 2: row 16 w + g + 8 ((j >> 1) & 1), column 8 (j >> 2) + 2 q + (j & 1);
//   rs A: a0 row 16 w + g, k 2 q, 2 q + 1 (low half the lower k); a1 row + 8;
//         a2 k + 8; a3 row + 8, k + 8.
// Descriptors (128-byte swizzle only): start (bits 0-13), LBO (16-29), SBO
// (32-45), all >> 4; element addresses before the swizzle
//   K-major (A of ss / sst, B of ss), element (m or n, k): start + (m / 8) SBO + (m % 8) 128 + 2 k
//   MN-major (B of rs / sst), element (k, n): start + (n / 64) LBO + (k / 8) SBO + (k % 8) 128 + 2 (n % 64)
// and the swizzle XORs address bits 4-6 with bits 7-9.  Every thread
// computes its own accumulators from shared memory (k summed in order in
// float); rs passes the A registers through a per-warpgroup buffer and the
// warpgroup's barrier, and wg_commit waits at that barrier too, so a
// warpgroup whose warps do not all issue the same wgmma steps deadlocks
// (reported by emu_rt.h) instead of passing.
// mbarriers, bulk copies and TMA tensor copies are emulated (below); clusters abort.
#ifndef SF_WGMMA_UTIL_CUH
#define SF_WGMMA_UTIL_CUH

#include "common/cuda_common.h"
#include "common/wgmma_ops.cuh"
#include "common/tmap.h"

#include <stdint.h>
#include <map>
#include <vector>

namespace sf_wg {

inline void named_sync(int id, int n) { emu_named_bar(id, n)->wait(); }
inline void named_arrive(int id, int n) { emu_named_bar(id, n)->arrive(); }

inline void cp_async16_u32(uint32_t dst, const void *src, int bytes) {
    if (dst & 15) { printf("EMU: cp.async to unaligned shared address 0x%x\n", dst); abort(); }
    sf_cp_async16_zfill(emu_sptr(dst), src, bytes);
}

[[noreturn]] inline void emu_not_emulated(const char *what) {
    printf("EMU: %s is not emulated\n", what);
    fflush(stdout);
    abort();
}
// mbarriers (shared::cta), kept beside the shared memory and keyed by
// their address: the arrivals the phase still expects, the count, the
// transaction bytes outstanding (may go below 0 before the expect_tx, as on
// the GPU) and the phases completed.  A phase completes when arrivals and
// bytes both reach 0; then the arrivals are the count again.
// try_wait.parity p holds while the completed-phase count's parity is p (so
// waiting for parity 1 on a fresh barrier returns at once, the producer's
// first "empty" wait).  Bulk copies land at their call and complete their
// bytes there.  A use before init, more arrivals than the count, or a wait
// no arrival can end (every live thread waiting: the deadlock report) abort.
struct EmuMbar {
    int count = 0, pending = 0;
    long long tx = 0;
    unsigned long phases = 0;
};
inline std::mutex emu_mbar_mu;
inline std::condition_variable emu_mbar_cv;
inline std::map<uint32_t, EmuMbar> emu_mbars;
inline EmuMbar &emu_mbar(uint32_t bar, const char *what) { // emu_mbar_mu held
    auto it = emu_mbars.find(bar);
    if (it == emu_mbars.end()) {
        printf("EMU: %s on shared address 0x%x, no initialised mbarrier there\n", what, bar);
        fflush(stdout);
        abort();
    }
    return it->second;
}
inline void emu_mbar_step(EmuMbar &m, int arrivals, long long bytes, uint32_t bar) { // emu_mbar_mu held
    m.pending -= arrivals;
    m.tx += bytes;
    if (m.pending < 0) {
        printf("EMU: mbarrier 0x%x: more arrivals than its count %d in a phase\n", bar, m.count);
        fflush(stdout);
        abort();
    }
    if (m.pending == 0 && m.tx == 0) {
        m.phases++;
        m.pending = m.count;
        emu_progress.fetch_add(1, std::memory_order_relaxed);
        emu_mbar_cv.notify_all();
    }
}
inline void mbar_init(uint32_t bar, int count) {
    if (bar & 7) { printf("EMU: mbarrier at unaligned shared address 0x%x\n", bar); abort(); }
    std::lock_guard<std::mutex> lk(emu_mbar_mu);
    emu_mbars[bar] = EmuMbar{count, count, 0, 0};
}
inline void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    std::lock_guard<std::mutex> lk(emu_mbar_mu);
    emu_mbar_step(emu_mbar(bar, "mbarrier.arrive.expect_tx"), 1, (long long)bytes, bar);
}
inline void mbar_arrive(uint32_t bar) {
    std::lock_guard<std::mutex> lk(emu_mbar_mu);
    emu_mbar_step(emu_mbar(bar, "mbarrier.arrive"), 1, 0, bar);
}
// cp.async.mbarrier.arrive.noinc: the thread's cp.async copies so far land,
// then one arrival (the count includes it: noinc)
inline void cp_async_mbar_arrive_noinc(uint32_t bar) {
    auto &S = emu_cps;
    for (auto &g : S.groups)
        for (const EmuCopy &c : g) emu_copy_now(c);
    for (const EmuCopy &c : S.open) emu_copy_now(c);
    S.groups.clear();
    S.open.clear();
    mbar_arrive(bar);
}
inline void mbar_wait(uint32_t bar, uint32_t parity) {
    std::unique_lock<std::mutex> lk(emu_mbar_mu);
    EmuMbar &m = emu_mbar(bar, "mbarrier.try_wait");
    if ((m.phases & 1) != (parity & 1)) return;
    emu_wait_on[threadIdx.x] = "an mbarrier (try_wait.parity)";
    emu_waiting.fetch_add(1, std::memory_order_relaxed);
    unsigned long seen = emu_progress.load(std::memory_order_relaxed);
    int stuck = 0;
    while ((m.phases & 1) == (parity & 1)) {
        if (emu_mbar_cv.wait_for(lk, std::chrono::milliseconds(1500)) == std::cv_status::timeout &&
            (m.phases & 1) == (parity & 1)) {
            const bool all = emu_waiting.load(std::memory_order_relaxed) == emu_alive.load(std::memory_order_relaxed);
            const unsigned long now = emu_progress.load(std::memory_order_relaxed);
            stuck = all && now == seen ? stuck + 1 : 0;
            seen = now;
            if (stuck >= 2) {
                lk.unlock();
                emu_deadlock_report();
            }
        }
    }
    emu_waiting.fetch_sub(1, std::memory_order_relaxed);
    emu_wait_on[threadIdx.x] = nullptr;
}
inline void mbar_wait_sleep(uint32_t bar, uint32_t parity) { mbar_wait(bar, parity); }
inline void mbar_init_fence() {}
inline void mbar_init_stages(uint32_t bar, int n) {
    if (threadIdx.x == 0)
        for (int i = 0; i < n; i++) mbar_init(bar + 8 * i, 1);
    __syncthreads();
}
inline uint32_t cluster_rank();
inline void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
    if (rank != cluster_rank()) emu_not_emulated("an arrival on another CTA's mbarrier");
    mbar_arrive(bar);
}
inline void bulk_copy_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    if ((dst & 15) || ((uintptr_t)src & 15) || (bytes & 15)) {
        printf("EMU: bulk copy of %u bytes, 0x%x <- %p: not 16-byte aligned\n", bytes, dst, src);
        abort();
    }
    if (bytes) emu_sptr(dst + bytes - 1); // range check
    memcpy(emu_sptr(dst), src, bytes);
    std::lock_guard<std::mutex> lk(emu_mbar_mu);
    emu_mbar_step(emu_mbar(bar, "cp.async.bulk (complete_tx)"), 0, -(long long)bytes, bar);
}
// bulk groups complete at the call: the reduce-add is done when issued
inline void bulk_commit() {}
inline void bulk_wait_read0() {}
template <int N> inline void bulk_wait_read() {}
template <int N> inline void bulk_wait() {}
inline void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes) {
    if ((src & 15) || ((uintptr_t)dst & 15) || (bytes & 15)) { printf("EMU: bulk reduce misaligned\n"); abort(); }
    const float *s = (const float *)emu_sptr(src);
    for (uint32_t i = 0; i < bytes / 4; i++) atomicAdd(dst + i, s[i]);
}
inline int ld_acquire_gpu(const int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void st_release_gpu(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
inline void red_release_add_gpu(int *p, int v) { __atomic_fetch_add(p, v, __ATOMIC_RELEASE); }
inline uint32_t cluster_rank() { return 0; }
inline void cluster_sync() { emu_not_emulated("cluster_sync"); }
// TMA tensor copies of the maps of common/tmap.h (EmuTmap): a box of 64
// 16-bit columns x box rows at coordinates (c0 column, c1 row, c2 head, c3
// batch), row r of the box at shared dst + 128 r with the 128-byte swizzle
// (the 16-byte chunk address bits 4-6 XORed with bits 7-9, as wgmma reads it
// here).  Loads fill what lies outside the tensor with zeros and complete
// the whole box's bytes on the mbarrier at their call; stores skip it.
inline uint32_t emu_sw128(uint32_t a) { return a ^ (((a >> 7) & 7) << 4); }
template <bool LOAD> inline void emu_tma_box(const void *map, uint32_t sm, int c0, int c1, int c2, int c3) {
    const EmuTmap &t = *reinterpret_cast<const EmuTmap *>(map);
    if (sm & 127) { printf("EMU: TMA box at shared address 0x%x, not 128-byte aligned\n", sm); abort(); }
    const bool hb = c2 >= 0 && c2 < t.dims[2] && c3 >= 0 && c3 < t.dims[3];
    for (int r = 0; r < t.box[1]; r++)
        for (int c = 0; c < t.box[0]; c++) {
            const int64_t gc = (int64_t)c0 + c, gr = (int64_t)c1 + r;
            const bool in = hb && gc >= 0 && gc < t.dims[0] && gr >= 0 && gr < t.dims[1];
            unsigned char *g = in ? (unsigned char *)t.ptr + c3 * t.strides[2] + c2 * t.strides[1] + gr * t.strides[0] + gc * t.es
                                  : nullptr;
            unsigned char *s = emu_sptr(emu_sw128(sm + (uint32_t)(r * 128 + c * t.es)));
            if (LOAD) {
                if (in) memcpy(s, g, t.es);
                else memset(s, 0, t.es);
            } else if (in) {
                memcpy(g, s, t.es);
            }
        }
}
inline void emu_tma_load4(uint32_t dst, uint64_t map, int c0, int c1, int c2, int c3, uint32_t bar) {
    const EmuTmap &t = *reinterpret_cast<const EmuTmap *>(map);
    emu_tma_box<true>(reinterpret_cast<const void *>(map), dst, c0, c1, c2, c3);
    std::lock_guard<std::mutex> lk(emu_mbar_mu);
    emu_mbar_step(emu_mbar(bar, "cp.async.bulk.tensor (complete_tx)"), 0, -(long long)t.box[0] * t.box[1] * t.es, bar);
}
inline void tma_store4(const void *map, uint32_t src, int c0, int c1, int c2, int c3) {
    emu_tma_box<false>(map, src, c0, c1, c2, c3);
}
inline void tma_load4_mc(uint32_t dst, const void *map, int c0, int c1, int c2, int c3, uint32_t bar, uint16_t mask) {
    if (mask != 1u) emu_not_emulated("a TMA multicast to other CTAs");
    emu_tma_load4(dst, reinterpret_cast<uint64_t>(map), c0, c1, c2, c3, bar);
}

inline void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    emu_stmatrix_x4<false>(addr, r0, r1, r2, r3);
}
inline void stmatrix_x4_t(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    emu_stmatrix_x4<true>(addr, r0, r1, r2, r3);
}
inline void red_add_v2(float *p, float a, float b) { emu_red_add_v2(p, a, b); }
inline void red_add_v4(float *p, float a, float b, float c, float d) {
    if ((uintptr_t)p & 15) { printf("EMU: red.v4 at %p not 16-byte aligned\n", (void *)p); abort(); }
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
    atomicAdd(p + 2, c);
    atomicAdd(p + 3, d);
}

} /* namespace sf_wg */

#include "common/wgmma_tile.cuh"

namespace sf_wg {

inline void wg_fence() {}
inline void wg_commit();
template <int N> inline void wg_wait();
inline void wg_wait0();
template <int N> inline void reg_fence(float (&)[N][4]) {}
inline void fence_async_smem() {}

// one 16-bit element of a swizzled operand at its pre-swizzle address
template <typename T> inline float emu_wg_ld(uint32_t a) {
    const uint32_t phys = a ^ (((a >> 7) & 7) << 4);
    uint16_t v;
    memcpy(&v, emu_sptr(phys), 2);
    T x;
    memcpy(&x, &v, 2);
    return sf_elem<T>::to_f(x);
}
struct EmuDesc {
    uint32_t start, lbo, sbo;
};
inline EmuDesc emu_desc(uint64_t d) {
    if ((d >> 62) != 1) { printf("EMU: wgmma descriptor 0x%llx: only the 128-byte swizzle is emulated\n", (unsigned long long)d); abort(); }
    if ((d >> 49) & 7) { printf("EMU: wgmma descriptor 0x%llx: base offset not emulated\n", (unsigned long long)d); abort(); }
    return {(uint32_t)(d & 0x3fff) << 4, (uint32_t)((d >> 16) & 0x3fff) << 4, (uint32_t)((d >> 32) & 0x3fff) << 4};
}
inline uint32_t emu_kmajor(const EmuDesc &e, int m, int k) { return e.start + (m / 8) * e.sbo + (m % 8) * 128 + 2 * k; }
inline uint32_t emu_mnmajor(const EmuDesc &e, int k, int n) {
    return e.start + (n / 64) * e.lbo + (k / 8) * e.sbo + (k % 8) * 128 + 2 * (n % 64);
}
inline int emu_acc_row(int j) {
    const int t = threadIdx.x % 128;
    return 16 * (t / 32) + (t % 32) / 4 + 8 * ((j >> 1) & 1);
}
inline int emu_acc_col(int j) { return 8 * (j >> 2) + 2 * (threadIdx.x % 4) + (j & 1); }

// D (64 x N) (+)= A (64 x 16, K-major at da) B (16 x N at db; K-major
// unless BT): this thread's accumulators only
template <typename T, int N, bool BT, bool AT = false> inline void emu_wg_ss(float *d, uint64_t da, uint64_t db, int sc) {
    const EmuDesc ea = emu_desc(da), eb = emu_desc(db);
    float a[2][16];
    const int r0 = emu_acc_row(0);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++) a[h][k] = emu_wg_ld<T>(AT ? emu_mnmajor(ea, k, r0 + 8 * h) : emu_kmajor(ea, r0 + 8 * h, k));
    for (int j = 0; j < N / 2; j++) {
        const int n = emu_acc_col(j), h = (j >> 1) & 1;
        float s = 0.f;
        for (int k = 0; k < 16; k++)
            s += a[h][k] * emu_wg_ld<T>(BT ? emu_mnmajor(eb, k, n) : emu_kmajor(eb, n, k));
        d[j] = sc ? d[j] + s : s;
    }
}
// D (64 x N) += A (registers) B (16 x N, MN-major at db)
inline uint32_t emu_wga[2][16][128][4];
inline thread_local unsigned emu_wgph; // slot of the rs exchange (as emu_wph)
template <typename T> inline float emu_h16(uint32_t r, int u) {
    const uint16_t v = (uint16_t)(r >> (16 * u));
    T x;
    memcpy(&x, &v, 2);
    return sf_elem<T>::to_f(x);
}
template <typename T, int N> inline void emu_wg_rs(float *d, const uint32_t *ar, uint64_t db, int sc) {
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    const unsigned ph = emu_wgph++ & 1;
    for (int i = 0; i < 4; i++) emu_wga[ph][wg][t][i] = ar[i];
    emu_wg_bar[wg]->wait();
    // this thread's rows 16 w + g (h 0) and + 8 (h 1) are held by the four
    // lanes of its quad: lane 4 g + q has k 2 q, 2 q + 1 (a0 / a1) and + 8 (a2 / a3)
    float a[2][16];
    const int base = t & ~3;
    for (int q = 0; q < 4; q++)
        for (int u = 0; u < 2; u++) {
            const uint32_t *rq = emu_wga[ph][wg][base + q];
            a[0][2 * q + u] = emu_h16<T>(rq[0], u);
            a[1][2 * q + u] = emu_h16<T>(rq[1], u);
            a[0][8 + 2 * q + u] = emu_h16<T>(rq[2], u);
            a[1][8 + 2 * q + u] = emu_h16<T>(rq[3], u);
        }
    const EmuDesc eb = emu_desc(db);
    for (int j = 0; j < N / 2; j++) {
        const int n = emu_acc_col(j), h = (j >> 1) & 1;
        float s = 0.f;
        for (int k = 0; k < 16; k++) s += a[h][k] * emu_wg_ld<T>(emu_mnmajor(eb, k, n));
        d[j] = sc ? d[j] + s : s;
    }
}
template <typename T, int N, bool BT, bool AT = false> inline void emu_run_ss(float *d, const uint32_t *, uint64_t da, uint64_t db, int sc) {
    emu_wg_ss<T, N, BT, AT>(d, da, db, sc);
}
template <typename T, int N> inline void emu_run_rs(float *d, const uint32_t *a, uint64_t, uint64_t db, int sc) {
    emu_wg_rs<T, N>(d, a, db, sc);
}

// Asynchronous execution (the default; EMU_WGMMA_SYNC=1 runs each wgmma at
// its call): a wgmma is recorded at its call with its A registers, its
// accumulators are set to NaN until a wg_wait retires its commit group, and
// it reads its shared operands at that wait.  So reading an accumulator
// before its wait (NaN), overwriting an operand in shared memory before the
// wait (a different product), a wait count that retires too little, and
// groups never waited for (reported at the thread's exit) all show.  The
// products of a group run in order at the wait on a copy of the
// accumulators, written back once no pending product uses them.
struct EmuWgOp {
    void (*run)(float *, const uint32_t *, uint64_t, uint64_t, int);
    float *d;
    int n;
    uint32_t a[4];
    const uint32_t *ap;
    uint64_t da, db;
    int sc;
};
struct EmuWgState {
    std::vector<EmuWgOp> open;
    std::vector<std::vector<EmuWgOp>> groups;
    std::map<float *, std::vector<float>> shadow;
};
inline thread_local EmuWgState emu_wgs;
inline const bool emu_wg_sync = getenv("EMU_WGMMA_SYNC") != nullptr;
inline std::atomic<int> emu_wg_warned{0};
inline void emu_wg_issue(void (*run)(float *, const uint32_t *, uint64_t, uint64_t, int), float *d, int n,
                         const uint32_t *a, uint64_t da, uint64_t db, int sc) {
    if (emu_wg_sync) {
        run(d, a, da, db, sc);
        return;
    }
    EmuWgOp op{run, d, n, {0, 0, 0, 0}, a, da, db, sc};
    if (a) memcpy(op.a, a, sizeof op.a);
    auto it = emu_wgs.shadow.find(d);
    if (it == emu_wgs.shadow.end()) emu_wgs.shadow.emplace(d, std::vector<float>(d, d + n));
    else if ((int)it->second.size() != n) { printf("EMU: wgmma accumulators at %p used with two shapes\n", (void *)d); abort(); }
    for (int j = 0; j < n; j++) d[j] = NAN;
    emu_wgs.open.push_back(op);
}
inline void emu_wg_retire(size_t keep) {
    auto &S = emu_wgs;
    size_t done = 0;
    while (S.groups.size() - done > keep) {
        for (EmuWgOp &op : S.groups[done]) {
            if (op.ap && memcmp(op.ap, op.a, sizeof op.a) && emu_wg_warned++ < 4)
                printf("EMU: thread %u of CTA (%u, %u, %u): the A registers of an rs wgmma changed before its wait\n",
                       threadIdx.x, blockIdx.x, blockIdx.y, blockIdx.z);
            op.run(S.shadow[op.d].data(), op.ap ? op.a : nullptr, op.da, op.db, op.sc);
        }
        done++;
    }
    S.groups.erase(S.groups.begin(), S.groups.begin() + done);
    for (auto it = S.shadow.begin(); it != S.shadow.end();) {
        bool used = false;
        for (auto &g : S.groups)
            for (auto &op : g) used |= op.d == it->first;
        for (auto &op : S.open) used |= op.d == it->first;
        if (used) {
            ++it;
            continue;
        }
        memcpy(it->first, it->second.data(), it->second.size() * sizeof(float));
        it = S.shadow.erase(it);
    }
}
// at a thread's exit: products issued and never waited for
inline void emu_wg_exit() {
    auto &S = emu_wgs;
    if ((!S.groups.empty() || !S.open.empty()) && emu_wg_warned++ < 4)
        printf("EMU: thread %u of CTA (%u, %u, %u) exits with %zu wgmma commit groups not waited for and %zu "
               "products not committed\n", threadIdx.x, blockIdx.x, blockIdx.y, blockIdx.z, S.groups.size(),
               S.open.size());
    S.groups.clear();
    S.open.clear();
    S.shadow.clear();
}
inline const bool emu_wg_hooked = emu_add_exit_hook(emu_wg_exit);

// the Wg<T, N> table: every shape for both 16-bit types (the real table
// has a subset; a kernel that compiles against it compiles here)
template <typename T, int N> struct Wg {
    static inline void ss(float *d, uint64_t a, uint64_t b, int sc) {
        emu_wg_issue(emu_run_ss<T, N, false>, d, N / 2, nullptr, a, b, sc);
    }
    static inline void sst(float *d, uint64_t a, uint64_t b, int sc) {
        emu_wg_issue(emu_run_ss<T, N, true>, d, N / 2, nullptr, a, b, sc);
    }
    static inline void stt(float *d, uint64_t a, uint64_t b, int sc) {
        emu_wg_issue(emu_run_ss<T, N, true, true>, d, N / 2, nullptr, a, b, sc);
    }
    static inline void rs(float *d, const uint32_t *a, uint64_t b, int sc = 1) {
        emu_wg_issue(emu_run_rs<T, N>, d, N / 2, a, 0, b, sc);
    }
};
inline void wg_commit() {
    emu_wg_bar[threadIdx.x / 128]->wait();
    if (emu_wg_sync) return;
    emu_wgs.groups.push_back(std::move(emu_wgs.open));
    emu_wgs.open.clear();
}
// wgmma.wait_group is warpgroup-wide: when it returns, every thread's part
// of the retired products has read its operands (a thread that then hands
// a stage back must not race its peers' deferred reads): the warpgroup's
// barrier after this thread's part.
template <int N> inline void wg_wait() {
    if (emu_wg_sync) return;
    emu_wg_retire(N);
    emu_wg_bar[threadIdx.x / 128]->wait();
}
inline void wg_wait0() { wg_wait<0>(); }

template <int N> struct Wg<float, N> {
    static inline void ss(float *, uint64_t, uint64_t, int) { emu_not_emulated("TF32 wgmma"); }
    static inline void rs(float *, const uint32_t *, uint64_t, int = 1) { emu_not_emulated("TF32 wgmma"); }
};

} /* namespace sf_wg */

#endif
