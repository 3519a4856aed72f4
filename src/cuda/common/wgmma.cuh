/* wgmma.cuh - Hopper (sm_90a) building blocks shared by the attention
 * and SSD kernels: 128-byte-swizzled shared tiles filled with cp.async,
 * wgmma matrix descriptors, the wgmma fence / commit / wait steps, and the
 * Wg<T, N> table of the generated wgmma wrappers (wgmma_ops.cuh).
 *
 * Swizzled tile layout: a ROWS x D tile of 16-bit elements is stored as
 * column blocks of 64 elements (128 bytes) x ROWS rows, 16-byte chunk c of
 * row r at ((c ^ r) & 7): the canonical 128B-swizzle layout, so every block
 * must be 1024-byte aligned.  As a K-major operand (rows = M or N, columns =
 * K) the descriptor of k-step kk (16 elements) is
 *   wg_desc(base + (kk / 4) * ROWS * 128 + row0 * 128 + (kk % 4) * 32, 16, 1024);
 * as an MN-major operand (rows = K, columns = N) it is
 *   wg_desc(base + kk * 2048, ROWS * 128, 1024)
 * (LBO: the next 64-column block, SBO: the next 8 rows).
 * cp.async writes go through the generic proxy: every thread fences them
 * to the async proxy (fence_async_smem) before the barrier that precedes
 * the wgmma reading them. */
#ifndef SF_WGMMA_UTIL_CUH
#define SF_WGMMA_UTIL_CUH

#include "common/cuda_common.h"
#include "common/wgmma_ops.cuh"

#include <stdint.h>

namespace sf_wg {

/* Named barrier `id` over `n` threads: wait for all, or only arrive. */
__device__ __forceinline__ void named_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void cp_async16_u32(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}

/* mbarriers (shared::cta) and the bulk copy engine */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* One arrival on `bar` when the thread's cp.async copies issued so far have
 * landed (noinc: the mbarrier's count includes this arrival). */
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* mbar_wait for a thread that may wait long (a producer waiting for its
 * consumers to free a stage): the suspend-time hint (ns) lets the thread
 * sleep in the try_wait until the phase completes instead of returning at
 * once and spinning, which took issue slots from the consumer warps on the
 * same scheduler (ncu, H200: 117-187 iterations per wait, 92 warp
 * instructions per key tile and consumer warp). */
__device__ __forceinline__ void mbar_wait_sleep(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity), "r"(0x989680u)
                     : "memory");
    } while (!done);
}
/* An arrival on the mbarrier at shared offset bar of the cluster's CTA
 * `rank` (this CTA's own included).  Default semantics (release, CTA
 * scope), as CUTLASS's ClusterBarrier: what it hands over is a stage whose
 * reads have completed (wgmma waited for), and a release at cluster scope
 * costs a MEMBAR.ALL.GPU per arrival. */
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
    asm volatile("{\n.reg .b32 ra;\n"
                 "mapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                 "r"(rank)
                 : "memory");
}
/* Makes mbarrier inits visible to the async proxy (copies completing on
 * them): after the inits, before the block barrier that publishes them. */
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* The block's n stage mbarriers of count 1 at bar, bar + 8, ...: set up by
 * thread 0, fenced, and published to every thread (a block barrier). */
__device__ __forceinline__ void mbar_init_stages(uint32_t bar, int n) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < n; i++) mbar_init(bar + 8 * i, 1);
        mbar_init_fence();
    }
    __syncthreads();
}
/* `bytes` (a multiple of 16; both addresses 16-byte aligned) from global
 * memory to shared address dst by the bulk copy engine, completing as
 * transaction bytes on mbarrier `bar` (async proxy: no fence before a wgmma
 * that reads them once the mbarrier phase is seen complete) */
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* A 4-D tensor-map box from shared address src to global memory (rows past
 * the map's bounds are not written), in the thread's bulk async-group;
 * bulk_commit closes the group, bulk_wait_read0 waits until every committed
 * group has read its shared source (the buffer may then be written again). */
__device__ __forceinline__ void tma_store4(const void *map, uint32_t src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
/* Every committed bulk group but the newest N has read its shared source. */
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/* Every committed bulk group but the newest N complete: their global writes
 * done, not only their shared sources read. */
template <int N> __device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
/* `bytes` of f32 (a multiple of 16; both addresses 16-byte aligned) at
 * shared address src added element by element into global dst by the bulk
 * copy engine (each element's add atomic), in the thread's bulk async-group.
 * The shared source is read in the async proxy: its writers fence first
 * (fence_async_smem). */
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
/* Four 8 x 8 matrices of 16-bit elements to shared memory: lane l gives the
 * address of row l % 8 of matrix l / 8 and holds, in r[i], its two
 * elements of row (l / 4) of matrix i (the accumulator fragment layout). */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
/* stmatrix_x4 with each 8 x 8 matrix stored transposed: lane l gives the
 * address of row l % 8 of stored matrix l / 8, which is column l % 8 of
 * the fragment's matrix l / 8. */
__device__ __forceinline__ void stmatrix_x4_t(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

/* Adds (a, b, c, d) to the four consecutive floats at p (16-byte aligned),
 * each add atomic (red.global.add.v4.f32, sm_90). */
__device__ __forceinline__ void red_add_v4(float *p, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

/* An acquire load and a release store at GPU scope (semaphores between
 * CTAs). */
__device__ __forceinline__ int ld_acquire_gpu(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_gpu(int *p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_add_gpu(int *p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* The CTA's rank in its cluster, and a barrier over every thread of the
 * cluster.  The arrive is relaxed (a release at cluster scope costs a
 * MEMBAR.ALL.GPU): it orders execution, not memory; what must be visible
 * across it is published otherwise (mbarrier inits by
 * fence.mbarrier_init.release.cluster, shared reads by having completed). */
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
/* A 4-D tensor-map box to shared address dst of every CTA of the cluster in
 * `mask`, completing as transaction bytes on the mbarrier at shared address
 * `bar` of each of them (dst and bar: the same offsets in every CTA). */
__device__ __forceinline__ void tma_load4_mc(uint32_t dst, const void *map, int c0, int c1, int c2, int c3,
                                             uint32_t bar, uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask)
                 : "memory");
}

#endif

} /* namespace sf_wg */

#include "common/wgmma_tile.cuh"

namespace sf_wg {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wg_wait0() { wg_wait<0>(); }
/* Ties registers written by an async wgmma to the preceding wait_group so
 * the compiler cannot move their uses (or copies) above it. */
template <int N> __device__ __forceinline__ void reg_fence(float (&a)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(a[i][e])::"memory");
}
__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

template <typename T, int N> struct Wg;
template <> struct Wg<__nv_bfloat16, 64> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b, int sc) { wgmma_ss_bf16_n64(d, a, b, sc); }
    static __device__ __forceinline__ void sst(float *d, uint64_t a, uint64_t b, int sc) { wgmma_sst_bf16_n64(d, a, b, sc); }
    static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b) { wgmma_rs_bf16_n64(d, a, b, 1); }
};
template <> struct Wg<__nv_bfloat16, 128> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b, int sc) { wgmma_ss_bf16_n128(d, a, b, sc); }
    static __device__ __forceinline__ void sst(float *d, uint64_t a, uint64_t b, int sc) { wgmma_sst_bf16_n128(d, a, b, sc); }
    static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b) { wgmma_rs_bf16_n128(d, a, b, 1); }
};
template <> struct Wg<__half, 64> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b, int sc) { wgmma_ss_f16_n64(d, a, b, sc); }
    static __device__ __forceinline__ void sst(float *d, uint64_t a, uint64_t b, int sc) { wgmma_sst_f16_n64(d, a, b, sc); }
    static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b) { wgmma_rs_f16_n64(d, a, b, 1); }
};
template <> struct Wg<__half, 128> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b, int sc) { wgmma_ss_f16_n128(d, a, b, sc); }
    static __device__ __forceinline__ void sst(float *d, uint64_t a, uint64_t b, int sc) { wgmma_sst_f16_n128(d, a, b, sc); }
    static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b) { wgmma_rs_f16_n128(d, a, b, 1); }
};
/* TF32 (f32 operands rounded by the caller), B K-major; rs takes scale_d */
template <> struct Wg<float, 64> {
    static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b, int sc) { wgmma_ss_tf32_n64(d, a, b, sc); }
    static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b, int sc = 1) { wgmma_rs_tf32_n64(d, a, b, sc); }
};
template <> struct Wg<float, 128> {
    static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b) { wgmma_rs_tf32_n128(d, a, b, 1); }
};
/* S tiles of 48 / 80 / 96 / 112 keys (ss only) and O tiles of 192 / 256 columns (rs
 * only): the head-dim 256 / 192 tiles of attn_fwd_ws; S^T tiles of 32 queries:
 * the head-dim-256 backward */
#define SF_WG_SS_ONLY(TY, NAME, N)                                                                  \
    template <> struct Wg<TY, N> {                                                                  \
        static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b, int sc) {      \
            wgmma_ss_##NAME##_n##N(d, a, b, sc);                                                    \
        }                                                                                           \
    };
#define SF_WG_RS_ONLY(TY, NAME, N)                                                                  \
    template <> struct Wg<TY, N> {                                                                  \
        static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b) {        \
            wgmma_rs_##NAME##_n##N(d, a, b, 1);                                                     \
        }                                                                                           \
    };
SF_WG_SS_ONLY(__nv_bfloat16, bf16, 32)
SF_WG_SS_ONLY(__half, f16, 32)
SF_WG_SS_ONLY(__nv_bfloat16, bf16, 48)
SF_WG_SS_ONLY(__half, f16, 48)
SF_WG_SS_ONLY(__nv_bfloat16, bf16, 80)
SF_WG_SS_ONLY(__nv_bfloat16, bf16, 96)
SF_WG_SS_ONLY(__nv_bfloat16, bf16, 112)
SF_WG_SS_ONLY(__half, f16, 80)
SF_WG_SS_ONLY(__half, f16, 96)
SF_WG_SS_ONLY(__half, f16, 112)
SF_WG_RS_ONLY(__nv_bfloat16, bf16, 192)
SF_WG_RS_ONLY(__nv_bfloat16, bf16, 256)
SF_WG_RS_ONLY(__half, f16, 192)
SF_WG_RS_ONLY(__half, f16, 256)
#undef SF_WG_SS_ONLY
#undef SF_WG_RS_ONLY
#endif

} /* namespace sf_wg */

#endif
