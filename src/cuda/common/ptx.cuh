/* ptx.cuh - the sm_80+ PTX primitives every kernel shares: shared-memory
 * addresses, ldmatrix, movmatrix, cp.async, mma.sync m16n8k16 / m16n8k8 (TF32), the
 * SFU's 2^x and tanh, the TF32 rounding.  The Hopper-only primitives (wgmma,
 * mbarriers, TMA, named barriers) are in wgmma.cuh.
 */
#ifndef SF_PTX_CUH
#define SF_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

static __device__ __forceinline__ uint32_t sf_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ldmatrix .x4: four 8 x 8 b16 matrices, one register each; _t transposes. */
static __device__ __forceinline__ void sf_ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                                  const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(sf_smem_u32(p)));
}
static __device__ __forceinline__ void sf_ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                                    const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(sf_smem_u32(p)));
}
static __device__ __forceinline__ void sf_ldsm_x4(uint32_t r[4], const void *p) {
    sf_ldsm_x4(r[0], r[1], r[2], r[3], p);
}
static __device__ __forceinline__ void sf_ldsm_x4_t(uint32_t r[4], const void *p) {
    sf_ldsm_x4_t(r[0], r[1], r[2], r[3], p);
}

/* movmatrix .trans: the 8 x 8 b16 matrix whose fragment a lane holds (lane l:
 * row l / 4, columns 2 (l % 4) and + 1) transposed, in the same layout. */
static __device__ __forceinline__ uint32_t sf_movm_t(uint32_t a) {
    uint32_t d;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(a));
    return d;
}

/* cp.async: 16-byte global -> shared copies that complete asynchronously; a
 * group is waited for with sf_cp_async_wait<n> (at most n younger groups
 * still in flight).  _zfill copies `bytes` (0..16) and zero-fills the rest. */
static __device__ __forceinline__ void sf_cp_async16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sf_smem_u32(s)), "l"(g));
}
static __device__ __forceinline__ void sf_cp_async16_zfill(void *s, const void *g, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sf_smem_u32(s)), "l"(g), "r"(bytes));
}
/* 4 bytes (an f32), zero-filled when bytes is 0; in the same groups. */
static __device__ __forceinline__ void sf_cp_async4_zfill(void *s, const void *g, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(sf_smem_u32(s)), "l"(g), "r"(bytes));
}
static __device__ __forceinline__ void sf_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> static __device__ __forceinline__ void sf_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}
/* The same with a memory clobber, for a thread that reads its own copies
 * right after the wait, with no barrier in between to order the loads. */
template <int N> static __device__ __forceinline__ void sf_cp_async_wait_mem() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* mma.sync m16n8k16, f32 accumulators, 16-bit inputs: c += a b. */
template <typename T> struct sf_mma16;
template <> struct sf_mma16<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    /* two floats -> one register of two bf16 (round to nearest) */
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};
template <> struct sf_mma16<__half> {
    static __device__ __forceinline__ void run(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};

/* mma.sync m16n8k8 on TF32 operands (registers holding TF32-rounded f32). */
static __device__ __forceinline__ void sf_mma_tf32(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* f32 -> TF32 (round to nearest, ties away), kept in an f32 register. */
static __device__ __forceinline__ float sf_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

/* 2^x by the SFU (flush-to-zero; 2^-inf = 0, 2 ulp). */
static __device__ __forceinline__ float sf_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* 1/x by the SFU (flush-to-zero; 1/inf = 0, 1 ulp). */
static __device__ __forceinline__ float sf_rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* silu(v) = v / (1 + e^-v): 5 instructions, two of them on the SFU (a few
 * ulp).  __expf and __fdividef without ftz add a range test and two
 * rescaling multiplies each: 8 instructions, which mattered in the 16-bit
 * conv1d (bound by instructions).  v < -88: e^-v = inf, the result -0. */
static __device__ __forceinline__ float sf_sigmoid_sfu(float v) {
    return sf_rcp_approx(1.0f + sf_ex2(v * -1.4426950408889634f)); /* 0 for v < -88, 1 where e^-v flushes */
}
static __device__ __forceinline__ float sf_silu_sfu(float v) { return v * sf_sigmoid_sfu(v); }

/* Programmatic dependent launch (sm_90): a kernel launched with the
 * programmatic stream serialisation attribute may start before the kernel
 * ahead of it in the stream has finished; sf_pdl_wait() blocks until that
 * kernel has completed and its writes are visible (everything that reads
 * its output or writes what it reads goes after), and sf_pdl_launch() lets
 * the next such kernel start once every block of this one has called it.
 * Both do nothing in a kernel launched without the attribute. */
/* The paged kernels' error word (host-mapped, cuda_common.h paged_err_d):
 * the first bad row b of a call is recorded as b + 1. */
static __device__ __forceinline__ void sf_record_row_error(unsigned int *err, int b) {
    if (err && *(volatile unsigned int *)err == 0u) {
        *(volatile unsigned int *)err = (unsigned int)b + 1u;
        __threadfence_system();
    }
}

static __device__ __forceinline__ void sf_pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void sf_pdl_launch() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* tanh by the SFU (absolute error below 2^-10.9). */
static __device__ __forceinline__ float sf_tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#endif
