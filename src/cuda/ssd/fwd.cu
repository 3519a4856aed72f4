/* fwd.cu - the chunked SSD forward on the GPU (sf_ssd_fwd; the decode step
 * is step.cu): the workspace, the configuration the autotuner picks
 * (configs.h), and the launches of each path.  The kernels are in one
 * header per stage (DESIGN.md section 1):
 *   cumsum.cuh       processed dt and the chunk-local cumsum g'
 *   chunk_state.cuh  every chunk's own state, in parallel
 *   state_pass.cuh   the walk over chunks (the jump formula), fused or as a
 *                    scan over the chunk states; final states of varlen
 *   state_tf32.cuh   the f32 state pass on TF32 wgmma, in segments
 *   cb.cuh           C B^T once per (b, group, chunk)
 *   out_wg.cuh, out_tf32.cuh, out_f32.cuh, out16.cuh, out_mma.cuh
 *                    the fused output: sm_90a 16-bit, sm_90a f32, f32 on
 *                    mma.sync, 16-bit on mma.sync, any dtype on mma.sync
 * Paths (SsdPath): hopper16 (16-bit, sm_90a) = cumsum + C B^T + chunk
 * states + scan, or the fused state pass, + ssd_out_wg; tf32_seg (f32,
 * sm_90a) = cumsum and TF32 operand images in one launch + segment states +
 * segment scan + ssd_out_tf32; split / split32 = warp cumsum + chunk states
 * (mma.sync) + scan + ssd_chunk_out[16] / ssd_out_sc32; general = cumsum +
 * ssd_state_pass + ssd_chunk_out[16] (+ ssd_final_varlen).  Every launch is
 * on the context's stream; nothing synchronises.
 *
 * Workspace: dt and g' (2 x b H nchunks Q f32), the state entering every
 * chunk (b H nchunks P N in the input dtype; plus an f32 copy with
 * cu_seqlens and final_states), sequence ids (b L i32, varlen); the split,
 * sm_90a and TF32 paths add f32 chunk or segment states (b H nchunks P N),
 * the TF32 path three operand images, the sm_90a path the C B^T tiles (b G
 * nchunks, 10 tiles of 64 x 64 f32 at chunk 256); an f32 B or C with 16-bit
 * x its copy in x's dtype (b L G N each, round_in.cuh).
 */
#include "common/cuda_common.h"
#include "common/launch.cuh"
#include "common/tmap.h"
#include "ssd/round_in.cuh"
#include "ssd/cumsum.cuh"
#include "ssd/chunk_state.cuh"
#include "ssd/state_pass.cuh"
#include "ssd/state_tf32.cuh"
#include "ssd/cb.cuh"
#include "ssd/out_wg.cuh"
#include "ssd/out_tf32.cuh"
#include "ssd/out_f32.cuh"
#include "ssd/out16.cuh"
#include "ssd/out_mma.cuh"
#include "ssd/configs.h"
#include "autotune.h"

#include <stdio.h>
#include <stdlib.h>

static int ssd_vec_ok(const sf_tensor *t, size_t esz, int nstrides) {
    const int64_t v = 16 / (int64_t)esz;
    if (!t->data || ((uintptr_t)t->data & 15)) return 0;
    for (int i = 0; i < nstrides; i++)
        if (t->stride[i] % v) return 0;
    return 1;
}

static size_t ssd_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* The kernels' arguments and what only the host reads (so the kernels'
 * argument block, and their machine code, stay those of the same-dtype
 * call). */
struct ssd_fwd_host : ssd_fwd_args {
    int dt32; /* dt in f32 with 16-bit x: the cumsum's f32 instance runs */
};

/* The cumsum instances for dt's dtype: x's (T), or f32 with 16-bit x
 * (a.dt32).  The other stages never read dt, so they stay T's. */
typedef void (*ssd_kernel_fn)(const ssd_fwd_args);
template <typename T, int Q> static ssd_kernel_fn ssd_cumsum_warp_for(const ssd_fwd_host &a) {
    return sizeof(T) == 2 && a.dt32 ? ssd_cumsum_warp<float, Q> : ssd_cumsum_warp<T, Q>;
}
template <typename T> static ssd_kernel_fn ssd_chunk_cumsum_for(const ssd_fwd_host &a) {
    return sizeof(T) == 2 && a.dt32 ? ssd_chunk_cumsum<float> : ssd_chunk_cumsum<T>;
}

/* Mixed inputs: whether B (C) is f32 with 16-bit x, and so read through a
 * copy rounded to x's dtype (round_in.cuh). */
static bool ssd_rounds(const sf_ssd_fwd_params *p, const sf_tensor *t) {
    return sf_dtype_size(p->x.dtype) == 2 && t->dtype == SF_F32;
}

/* Strides and the 16-byte row flag of such a copy: contiguous (b, L, G, N)
 * in x's dtype, 256-byte aligned in the workspace. */
static void ssd_round_layout(int64_t *st, int *vec, const ssd_fwd_args &a) {
    const int64_t G = a.H / a.hpg;
    st[2] = a.N;
    st[1] = G * a.N;
    st[0] = (int64_t)a.L * G * a.N;
    *vec = a.N % 8 == 0;
}

/* Workspace bytes of the rounded copies. */
static size_t ssd_round_bytes(const sf_ssd_fwd_params *p, const ssd_fwd_args &a) {
    const size_t n = (size_t)a.batch * a.L * (a.H / a.hpg) * a.N * 2;
    return (ssd_rounds(p, &p->B) ? ssd_align(n) : 0) + (ssd_rounds(p, &p->C) ? ssd_align(n) : 0);
}

/* Rounds the f32 B and / or C into `ws` (ssd_round_bytes of it) and points
 * `a` at the copies; launched before every other kernel of the call. */
static sf_status ssd_round_inputs(sf_ctx *ctx, const sf_ssd_fwd_params *p, ssd_fwd_args &a, unsigned char *ws) {
    const int64_t G = a.H / a.hpg, total = (int64_t)a.batch * a.L * G * a.N;
    const int64_t nblk = (total + 255) / 256;
    const unsigned grid = (unsigned)(nblk < ((int64_t)1 << 20) ? nblk : ((int64_t)1 << 20));
    const sf_tensor *ts[2] = {&p->B, &p->C};
    const void **dst[2] = {&a.B, &a.C};
    for (int k = 0; k < 2; k++) {
        if (!ssd_rounds(p, ts[k])) continue;
        const sf_tensor *t = ts[k];
        if (total > 0) {
            const float *src = (const float *)t->data;
            if (p->x.dtype == SF_BF16)
                ssd_round_in<__nv_bfloat16><<<grid, 256, 0, sf_cuda_stream(ctx)>>>(
                    src, t->stride[0], t->stride[1], t->stride[2], (__nv_bfloat16 *)ws, a.L, (int)G, a.N, total);
            else
                ssd_round_in<__half><<<grid, 256, 0, sf_cuda_stream(ctx)>>>(
                    src, t->stride[0], t->stride[1], t->stride[2], (__half *)ws, a.L, (int)G, a.N, total);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
        *dst[k] = ws;
        ws += ssd_align((size_t)total * 2);
    }
    return SF_OK;
}

/* Why the split state path (warp cumsum, every chunk's state at once, then
 * the scan) cannot serve the problem, or NULL if it can. */
static const char *ssd_split_refusal(const ssd_fwd_args &a) {
    if (a.varlen) return "it takes dense batches (no seq_idx / cu_seqlens)";
    if (a.Q != 128 && a.Q != 256) return "it takes chunk_size 128 or 256";
    if (a.N % 4) return "it takes dstate a multiple of 4";
    return nullptr;
}

template <typename T, int Q>
static sf_status ssd_split_states(sf_ctx *ctx, ssd_fwd_host &a, float *cst) {
    cudaStream_t stream = sf_cuda_stream(ctx);
    const int64_t PN = (int64_t)a.P * a.N;
    const int64_t gcum = (int64_t)a.batch * a.nc * ((a.H + 7) / 8);
    const int64_t gst = (int64_t)a.batch * a.nc * a.H * ((a.P + 31) / 32) * ((a.N + 63) / 64);
    const int64_t gsc = (int64_t)a.batch * a.H * ((PN + 1023) / 1024);
    if (gcum > INT32_MAX || gst > INT32_MAX || gsc > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    if (gcum > 0) {
        ssd_cumsum_warp_for<T, Q>(a)<<<(unsigned)gcum, 256, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (gst > 0) {
        ssd_chunk_state_mma<T><<<(unsigned)gst, 128, 0, stream>>>(a, cst);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (gsc > 0) {
        ssd_state_scan<T><<<(unsigned)gsc, 256, 0, stream>>>(a, cst);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

/* ssd_out_sc32 (out_f32.cuh) for f32 inputs on the split path, with NP =
 * dstate padded to 64 or 128. */
template <int NP> static sf_status ssd_launch_sc32(sf_ctx *ctx, const ssd_fwd_args &a) {
    const int64_t grid = (int64_t)a.batch * a.nc * (a.P / 64) * a.H;
    if (grid > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    if (grid == 0) return SF_OK;
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_sc32<NP>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)SsdSc32<NP>::SMEM));
    ssd_out_sc32<NP><<<(unsigned)grid, 256, SsdSc32<NP>::SMEM, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* Why ssd_out_sc32 (configuration split32) cannot serve the problem, or NULL. */
static const char *ssd_sc32_refusal(sf_ctx *ctx, const ssd_fwd_args &a, bool f32) {
    if (!f32) return "it takes f32 inputs";
    if (const char *why = ssd_split_refusal(a)) return why;
    if (a.P % 64 || a.N > 128) return "it takes headdim a multiple of 64 and dstate <= 128";
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    const size_t smem = a.N <= 64 ? SsdSc32<64>::SMEM : SsdSc32<128>::SMEM;
    if (!cs || smem > cs->smem_optin) return "the GPU has too little shared memory per block";
    return nullptr;
}

/* Whether this build holds sm_90a code for the TF32 state pass (checked once). */
static bool ssd_tf32_available() {
    static const bool avail = sf_cuda_sm90a_code((const void *)ssd_state_fused_tf32<256>);
    return avail;
}

/* Why the TF32 path (configuration fg32: TF32 wgmma states in segments +
 * ssd_out_tf32) cannot serve the problem, or NULL. */
static const char *ssd_tf32_refusal(sf_ctx *ctx, const ssd_fwd_args &a, bool f32) {
    if (const char *why = ssd_sc32_refusal(ctx, a, f32)) return why;
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    if (!cs || cs->sm_major != 9) return "it needs an sm_90 GPU";
    if (a.N % 8) return "it takes dstate a multiple of 8";
    if (!a.vec_x) return "it needs 16-byte aligned rows of x (unit last stride, other strides multiples of 4)";
    if (SsdS32::SMEM > cs->smem_optin || SsdO32::smem(a.Q) > cs->smem_optin)
        return "the GPU has too little shared memory per block";
    if (!ssd_tf32_available()) return "this build has no sm_90a code (SF_CUDA_ARCHS without 90a)";
    if (!a.vec_o || (a.has_z && !a.vec_z))
        return "it needs 16-byte aligned rows of out and z (unit last stride, other strides multiples of 4)";
    return nullptr;
}

/* segments at most (ssd_seg_scan holds them all) */
static const int SSD_MAXSEG = 16;

/* The tf32_seg path (f32): warp-scan cumsum and the TF32 operand images of
 * B^T, C and B in one launch, the TF32 wgmma state pass over segments of
 * `sl` chunks (at most SSD_MAXSEG segments; their end states and decay
 * exponents in `cst`), ssd_seg_scan over the segments, then ssd_out_tf32
 * walking each segment's chunks from its entering state.  `bimg`: three
 * image arrays of b G nchunks Q 128 floats each. */
template <int Q>
static sf_status ssd_fwd_tf32(sf_ctx *ctx, ssd_fwd_args &a, float *bimg, float *cst, int sl) {
    cudaStream_t stream = sf_cuda_stream(ctx);
    const int64_t gcum = (int64_t)a.batch * a.nc * ((a.H + 7) / 8);
    const int64_t gimg = (int64_t)a.batch * (a.H / a.hpg) * a.nc * (Q / SsdS32::QS);
    const int64_t gst = (int64_t)a.batch * (a.P / 64) * a.H;
    if (gcum > INT32_MAX || gimg > INT32_MAX || gst > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    if (gcum == 0 || gst == 0) return SF_OK;
    if (!cst || !bimg) return sf_fail(ctx, SF_ERR_INTERNAL, "sf_ssd_fwd: fg32 without its workspace");
    const size_t nimg = (size_t)a.batch * (a.H / a.hpg) * SsdS32::img_floats(a.nc, Q);
    float *cimg = bimg + nimg, *bnat = bimg + 2 * nimg;
    const int64_t gpro = gcum + 2 * gimg;
    if (gpro > INT32_MAX) return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    ssd_prologue_tf32<Q><<<(unsigned)gpro, 256, 0, stream>>>(a, gcum, gimg, bimg, cimg, bnat);
    SF_CUDA_CHECK_LAUNCH(ctx);
    if ((a.nc + sl - 1) / sl > SSD_MAXSEG) sl = (a.nc + SSD_MAXSEG - 1) / SSD_MAXSEG;
    const int64_t nseg = (a.nc + sl - 1) / sl;
    const int64_t gsc = (int64_t)a.batch * a.H * (((int64_t)a.P * a.N + 1023) / 1024);
    if (gst * nseg > INT32_MAX || gsc > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    float *gseg = cst + (size_t)a.batch * a.H * nseg * a.P * a.N;
    /* the last segment's end state only with final states */
    const int64_t nrun = a.has_final ? nseg : nseg - 1;
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_state_fused_tf32<Q>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SsdS32::SMEM));
    if (nrun > 0) {
        ssd_state_fused_tf32<Q><<<(unsigned)(gst * nrun), 128, SsdS32::SMEM, stream>>>(a, bimg, cst, sl,
                                                                                              gseg);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    /* registers for nseg states a thread, no more (occupancy) */
    if (nseg <= 4)
        ssd_seg_scan<4><<<(unsigned)gsc, 256, 0, stream>>>(a, cst, gseg, sl);
    else if (nseg <= 8)
        ssd_seg_scan<8><<<(unsigned)gsc, 256, 0, stream>>>(a, cst, gseg, sl);
    else
        ssd_seg_scan<SSD_MAXSEG><<<(unsigned)gsc, 256, 0, stream>>>(a, cst, gseg, sl);
    SF_CUDA_CHECK_LAUNCH(ctx);
    /* units (b, segment, P tile, head), each a walk of sl chunks */
    const int64_t nwork = (int64_t)a.batch * nseg * (a.P / 64) * a.H;
    const int64_t gout = nwork * sl;
    if (gout > INT32_MAX) return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_tf32<Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)SsdO32::smem(Q)));
    const int64_t gpers = nwork < sf_cuda_st(ctx)->sm_count ? nwork : sf_cuda_st(ctx)->sm_count;
    ssd_out_tf32<Q><<<(unsigned)gpers, 256, SsdO32::smem(Q), stream>>>(a, cimg, bnat, gout, cst, sl);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* The general path: any dtype, N <= 256, varlen, any alignment.  With
 * `cst` (the split paths, ssd_split_refusal NULL) the states come from
 * ssd_split_states instead of ssd_chunk_cumsum + ssd_state_pass; with `sc32`
 * too (f32, ssd_sc32_refusal NULL) the output is ssd_out_sc32's. */
template <typename T>
static sf_status ssd_fwd_general(sf_ctx *ctx, ssd_fwd_host &a, int64_t grid_state,
                                 int64_t grid_out, float *cst = nullptr, bool sc32 = false) {
    cudaStream_t stream = sf_cuda_stream(ctx);
    if (cst) {
        const sf_status st = a.Q == 256 ? ssd_split_states<T, 256>(ctx, a, cst)
                                        : ssd_split_states<T, 128>(ctx, a, cst);
        if (st != SF_OK) return st;
        grid_state = 0;
    }
    if (a.varlen && (int64_t)a.batch * a.L > 0) {
        const int64_t n = (int64_t)a.batch * a.L;
        ssd_seqid<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    const int64_t gcum = cst ? 0 : (int64_t)a.batch * a.nc * ((a.H + 127) / 128);
    if (gcum > 0) {
        ssd_chunk_cumsum_for<T>(a)<<<(unsigned)gcum, 128, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (grid_state > 0) {
        ssd_state_pass<T><<<(unsigned)grid_state, 128, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    bool done = false;
    if constexpr (sizeof(T) == 4) {
        if (cst && sc32 && grid_out > 0) {
            const sf_status st = a.N <= 64 ? ssd_launch_sc32<64>(ctx, a) : ssd_launch_sc32<128>(ctx, a);
            if (st != SF_OK) return st;
            done = true;
        }
    }
    if constexpr (sizeof(T) == 2) {
        if (grid_out > 0 && a.Npad <= SSD_O16_NK * 16) {
            /* 16-bit, N <= 128: two blocks per (chunk, head, P tile), Q / 2 threads */
            const int64_t g16 = grid_out / (a.Q / 64) * 2;
            const size_t smem = ssd_out16_smem(a.Q);
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_chunk_out16<T>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)smem));
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_chunk_out16<T>,
                                                    cudaFuncAttributePreferredSharedMemoryCarveout,
                                                    100));
            ssd_chunk_out16<T><<<(unsigned)g16, a.Q / 2, smem, stream>>>(a);
            SF_CUDA_CHECK_LAUNCH(ctx);
            done = true;
        }
    }
    if (grid_out > 0 && !done) {
        const size_t smem = ssd_out_smem<T>(a.Npad, a.Q);
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_chunk_out<T>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)smem));
        ssd_chunk_out<T><<<(unsigned)grid_out, 128, smem, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (a.varlen == 2 && a.has_final && a.nseq > 0) {
        const int64_t g = (int64_t)a.nseq * a.H * ((a.P + 15) / 16);
        ssd_final_varlen<T><<<(unsigned)g, 256, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

/* Launch with programmatic stream serialization (the kernel may start while
 * the previous one in the stream drains; it calls ssd_griddep_wait before
 * reading that kernel's output), in clusters of `cluster` blocks when > 1
 * (a launch attribute rather than __cluster_dims__, which the sm_80 pass of
 * the same kernel would reject). */
template <typename... KA, typename... A>
static cudaError_t ssd_launch_ex(void (*kern)(KA...), unsigned grid, unsigned block, size_t smem,
                                 cudaStream_t stream, unsigned cluster, A... args) {
    return sf_launch_ex(kern, dim3(grid), dim3(block), smem, stream, true, cluster, args...);
}
template <typename... KA, typename... A>
static cudaError_t ssd_launch_pdl(void (*kern)(KA...), unsigned grid, unsigned block, size_t smem,
                                  cudaStream_t stream, A... args) {
    return ssd_launch_ex(kern, grid, block, smem, stream, 1u, args...);
}

/* The hopper16 path: the C B^T tiles once per (b, group, chunk) with the
 * cumsum launched alongside (it waits for them only at its end), then the
 * states (multicast: chunk states of head pairs in clusters of two sharing
 * B by TMA + ssd_state_scan; fused: ssd_state_fused_wg with 128 state
 * columns a block), then ssd_out_wg on one block per SM over balanced
 * ranges of the (b, chunk, P tile, head) units.  The kernels after the
 * cumsum are launched with programmatic serialisation. */
template <typename T, int Q>
static sf_status ssd_fwd_wg(sf_ctx *ctx, ssd_fwd_host &a, const SsdConfig &cfg, float *cst, float *cb) {
    typedef SsdWg<Q> L;
    typedef SsdFu<Q, 128, 2> F;
    cudaStream_t stream = sf_cuda_stream(ctx);
    const int64_t PN = (int64_t)a.P * a.N;
    const int64_t gcum = (int64_t)a.batch * a.nc * ((a.H + 7) / 8);
    const int64_t gst = (int64_t)a.batch * a.nc * (a.P / 64) * a.H;
    const int64_t gsc = (int64_t)a.batch * a.H * ((PN + 1023) / 1024);
    const int64_t gfu = (int64_t)a.batch * (a.P / 64) * a.H;
    const int64_t gcb = (int64_t)a.batch * (a.H / a.hpg) * a.nc;
    const int64_t units = (int64_t)a.batch * a.nc * (a.P / 64) * a.H, nsm = sf_cuda_st(ctx)->sm_count;
    if (gcum > INT32_MAX || gst > INT32_MAX || gsc > INT32_MAX || gfu > INT32_MAX || gcb > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    if (!cb || (cfg.multicast && !cst))
        return sf_fail(ctx, SF_ERR_INTERNAL, "sf_ssd_fwd: %s without its workspace", cfg.name);
    /* multicast: B rows a TMA tensor map takes (checked before anything is launched) */
    CUtensorMap mb;
    if (cfg.multicast && (gst % 2 || !make_tmap(&mb, std::is_same<T, __nv_bfloat16>::value, a.B, a.N, a.L,
                                                a.H / a.hpg, a.batch, a.Bs[1], a.Bs[2], a.Bs[0], Q / 2)))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_ssd_fwd: configuration %s: B's rows are not ones a TMA tensor map takes", cfg.name);
    if (gcb > 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_cb_wg<T, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)L::CBK_SMEM));
        ssd_cb_wg<T, Q><<<(unsigned)gcb, 256, L::CBK_SMEM, stream>>>(a, cb);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (gcum > 0) SF_CUDA_CHECK(ctx, ssd_launch_pdl(ssd_cumsum_warp_for<T, Q>(a), (unsigned)gcum, 256, 0, stream, a));
    if (cfg.fused_states && gfu > 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_state_fused_wg<T, Q, 128, 2>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)F::SMEM));
        ssd_state_fused_wg<T, Q, 128, 2><<<(unsigned)gfu, 128, F::SMEM, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (cfg.multicast && gst > 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_chunk_state_mc<T, Q>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::MC_SMEM));
        SF_CUDA_CHECK(ctx, ssd_launch_ex(ssd_chunk_state_mc<T, Q>, (unsigned)gst, 128, L::MC_SMEM, stream, 2u, a,
                                         cst, mb));
    }
    if (cfg.multicast && gsc > 0)
        SF_CUDA_CHECK(ctx, ssd_launch_pdl(ssd_state_scan<T>, (unsigned)gsc, 256, 0, stream, a, (const float *)cst));
    if (units > 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_wg<T, Q>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::CB_SMEM));
        SF_CUDA_CHECK(ctx, ssd_launch_pdl(ssd_out_wg<T, Q>, (unsigned)(units < nsm ? units : nsm), 256,
                                          L::CB_SMEM, stream, a, (const float *)cb));
    }
    return SF_OK;
}

/* Whether this build holds sm_90a machine code for the wgmma kernels (a
 * plain sm_80 / sm_90 pass compiles their bodies away), checked once per
 * instantiation. */
template <typename T, int Q> static bool ssd_wg_available() {
    static const bool avail = sf_cuda_sm90a_code((const void *)ssd_out_wg<T, Q>);
    return avail;
}

/* Why the hopper16 path cannot serve the problem, or NULL. */
template <typename T>
static const char *ssd_wg_refusal(sf_ctx *ctx, const ssd_fwd_args &a, const SsdConfig &cfg) {
    if constexpr (sizeof(T) != 2) {
        (void)ctx, (void)a, (void)cfg;
        return "it takes f16 / bf16 inputs";
    } else {
        const sf_cuda_state *cs = sf_cuda_st(ctx);
        if (!cs || cs->sm_major != 9) return "it needs an sm_90 GPU";
        if (a.varlen) return "it takes dense batches (no seq_idx / cu_seqlens)";
        if (a.Q != 128 && a.Q != 256) return "it takes chunk_size 128 or 256";
        if (a.N > 128 || a.N % 8 || a.P % 64)
            return "it takes dstate <= 128 (a multiple of 8) and headdim a multiple of 64";
        if (!a.vec_x || !a.vec_B || !a.vec_C || !a.vec_o || (a.has_z && !a.vec_z))
            return "it needs 16-byte aligned rows (unit last stride, other strides multiples of 8)";
        if (cfg.multicast && (a.H % 2 || a.hpg % 2)) return "it needs an even number of heads per group";
        const size_t smem = a.Q == 256 ? SsdWg<256>::CB_SMEM : SsdWg<128>::CB_SMEM;
        const size_t sst = cfg.fused_states ? (a.Q == 256 ? SsdFu<256, 128, 2>::SMEM : SsdFu<128, 128, 2>::SMEM)
                                            : (a.Q == 256 ? SsdWg<256>::MC_SMEM : SsdWg<128>::MC_SMEM);
        if (smem > cs->smem_optin || sst > cs->smem_optin) return "the GPU has too little shared memory per block";
        if (!(a.Q == 256 ? ssd_wg_available<T, 256>() : ssd_wg_available<T, 128>()))
            return "this build has no sm_90a code (SF_CUDA_ARCHS without 90a)";
        return nullptr;
    }
}

/* ssd_config_supports: NULL when configuration `c` can serve the problem,
 * else why not.  The one place that answers; the launcher, the autotuner's
 * run function and the untuned default all ask it. */
template <typename T>
static const char *ssd_config_supports(sf_ctx *ctx, const SsdConfig &c, const ssd_fwd_args &a) {
    const bool f32 = sizeof(T) == 4;
    switch (c.path) {
    case SsdPath::hopper16: return ssd_wg_refusal<T>(ctx, a, c);
    case SsdPath::tf32_seg: return ssd_tf32_refusal(ctx, a, f32);
    case SsdPath::split32: return ssd_sc32_refusal(ctx, a, f32);
    case SsdPath::split: return ssd_split_refusal(a);
    case SsdPath::general: return nullptr;
    }
    return "unknown path";
}

struct ssd_tune_ctx {
    ssd_fwd_host *a;
    float *cst;  /* f32 chunk or segment states (split, hopper16, tf32_seg) */
    float *bimg; /* TF32 operand images (tf32_seg): B^T, C, B */
    float *cb;   /* C B^T tiles (hopper16) */
    int64_t grid_state, grid_out;
    int dtype; /* sf_dtype of x */
    cudaEvent_t ev[2];
};

/* Runs configuration row `i` (SF_ERR_UNSUPPORTED with the reason when it
 * cannot serve the problem). */
template <typename T>
static sf_status ssd_run_config(sf_ctx *ctx, ssd_tune_ctx *tc, int i) {
    ssd_fwd_host &a = *tc->a;
    const SsdConfig &c = ssd_configs[i];
    if (const char *why = ssd_config_supports<T>(ctx, c, a))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: configuration %s: %s", c.name, why);
    switch (c.path) {
    case SsdPath::hopper16:
        if constexpr (sizeof(T) == 2)
            return a.Q == 256 ? ssd_fwd_wg<T, 256>(ctx, a, c, tc->cst, tc->cb)
                              : ssd_fwd_wg<T, 128>(ctx, a, c, tc->cst, tc->cb);
        break;
    case SsdPath::tf32_seg:
        if constexpr (sizeof(T) == 4)
            return a.Q == 256 ? ssd_fwd_tf32<256>(ctx, a, tc->bimg, tc->cst, c.seg_chunks)
                              : ssd_fwd_tf32<128>(ctx, a, tc->bimg, tc->cst, c.seg_chunks);
        break;
    case SsdPath::split32: return ssd_fwd_general<T>(ctx, a, tc->grid_state, tc->grid_out, tc->cst, true);
    case SsdPath::split: return ssd_fwd_general<T>(ctx, a, tc->grid_state, tc->grid_out, tc->cst);
    case SsdPath::general: return ssd_fwd_general<T>(ctx, a, tc->grid_state, tc->grid_out);
    }
    return sf_fail(ctx, SF_ERR_INTERNAL, "sf_ssd_fwd: configuration %s has no launcher for this dtype", c.name);
}

/* sf_tune_run_fn over the table. */
template <typename T> static sf_status ssd_tune_run(sf_ctx *ctx, int i, void *arg, double *ms) {
    ssd_tune_ctx *tc = (ssd_tune_ctx *)arg;
    return sf_cuda_run_timed(ctx, tc->ev, ms, [&] { return ssd_run_config<T>(ctx, tc, i); });
}

/* Picks the configuration through the autotuner (bucket: chunk, P, N, heads
 * per group, the number of (batch row, chunk) pairs rounded to a power of
 * two, and the best path that may serve) and leaves the outputs computed.
 * When one row alone can serve and nothing is forced, it runs untimed. */
template <typename T>
static sf_status ssd_fwd_launch(sf_ctx *ctx, ssd_tune_ctx *tc) {
    const ssd_fwd_args &a = *tc->a;
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    int nserve = 0, first = -1;
    for (int i = 0; i < SSD_NCONFIG; i++)
        if (!ssd_config_supports<T>(ctx, ssd_configs[i], a)) {
            nserve++;
            if (first < 0) first = i;
        }
    if (first < 0) return sf_fail(ctx, SF_ERR_INTERNAL, "sf_ssd_fwd: no configuration serves the problem");
    if (nserve == 1 && !sf_autotune_forced("ssd_fwd")) return ssd_run_config<T>(ctx, tc, first);
    int64_t rows = (int64_t)a.batch * a.nc, pow2 = 1;
    while (pow2 < rows) pow2 <<= 1;
    char bucket[96];
    const SsdPath best = ssd_configs[first].path;
    snprintf(bucket, sizeof bucket, "q%d_p%d_n%d_hpg%d_rows%lld_%s", a.Q, a.P, a.Npad, a.hpg, (long long)pow2,
             best == SsdPath::hopper16   ? "wg"
             : best == SsdPath::tf32_seg ? "fg32"
             : best == SsdPath::split32  ? "split32"
             : best == SsdPath::general && !ssd_split_refusal(a) ? "split"
                                                                 : "general");
    sf_tune_request rq;
    memset(&rq, 0, sizeof rq);
    rq.device = cs ? cs->name : "cuda";
    rq.op = "ssd_fwd";
    rq.dtype = (sf_dtype)tc->dtype;
    rq.bucket = bucket;
    rq.ncand = SSD_NCONFIG;
    rq.names = sf_config_names(ssd_configs);
    rq.run = ssd_tune_run<T>;
    rq.arg = tc;
    rq.reps = 5;
    rq.no_timing = sf_cuda_capturing(ctx);
    int choice = 0, ran = 0;
    sf_status st = sf_autotune(ctx, &rq, &choice, &ran);
    sf_cuda_events_free(tc->ev);
    if (st != SF_OK || ran) return st;
    /* the cached or default choice (tuning off, or capturing a graph): a
     * row the shape does not allow gives way to the first that serves */
    if (ssd_config_supports<T>(ctx, ssd_configs[choice], a)) choice = first;
    st = ssd_run_config<T>(ctx, tc, choice);
    /* a refusal found at launch (B rows no TMA map takes), before anything
     * ran: the next row that serves */
    for (int i = choice + 1; st == SF_ERR_UNSUPPORTED && !sf_autotune_forced("ssd_fwd") && i < SSD_NCONFIG; i++)
        if (!ssd_config_supports<T>(ctx, ssd_configs[i], a)) st = ssd_run_config<T>(ctx, tc, i);
    return st;
}

/* sf_ssd_states_only: the split path's state kernels alone (chunk cumsums,
 * every chunk's state by mma.sync, the scan over chunks, which writes
 * final_states); the output kernels do not run. */
static sf_status ssd_states_launch(sf_ctx *ctx, const sf_ssd_problem *pr, ssd_fwd_host &a) {
    if (const char *why = a.varlen ? "it takes dense batches (no seq_idx / cu_seqlens)" : ssd_split_refusal(a))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_states_only: %s", why);
    const size_t esz = sf_dtype_size(pr->p->x.dtype);
    const size_t nvec = (size_t)a.batch * a.H * a.nc * a.Q;
    const size_t nst = (size_t)a.batch * a.H * a.nc * a.P * a.N;
    const size_t b_dt = ssd_align(nvec * 4), b_st = ssd_align(nst * esz), b_cst = ssd_align(nst * 4);
    const size_t b_rnd = ssd_round_bytes(pr->p, a);
    unsigned char *ws = (unsigned char *)sf_ws_get(ctx, 2 * b_dt + b_st + b_cst + b_rnd);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    a.dtw = (float *)ws;
    a.gw = (float *)(ws + b_dt);
    a.states = ws + 2 * b_dt;
    float *cst = (float *)(ws + 2 * b_dt + b_st);
    if (b_rnd) {
        const sf_status st = ssd_round_inputs(ctx, pr->p, a, ws + 2 * b_dt + b_st + b_cst);
        if (st != SF_OK) return st;
    }
    switch (pr->p->x.dtype) {
    case SF_F32: return a.Q == 256 ? ssd_split_states<float, 256>(ctx, a, cst) : ssd_split_states<float, 128>(ctx, a, cst);
    case SF_F16: return a.Q == 256 ? ssd_split_states<__half, 256>(ctx, a, cst) : ssd_split_states<__half, 128>(ctx, a, cst);
    case SF_BF16:
        return a.Q == 256 ? ssd_split_states<__nv_bfloat16, 256>(ctx, a, cst)
                          : ssd_split_states<__nv_bfloat16, 128>(ctx, a, cst);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_ssd_states_only: x must be f32, f16 or bf16");
    }
}

extern "C" sf_status sf_cuda_ssd_fwd(sf_ctx *ctx, const sf_ssd_problem *pr) {
    const sf_ssd_fwd_params *p = pr->p;
    if (pr->dstate > 256)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_ssd_fwd: the CUDA kernels take dstate <= 256 (got %lld)",
                       (long long)pr->dstate);
    if (pr->chunk != 64 && pr->chunk != 128 && pr->chunk != 256)
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: CUDA chunk_size must be 64/128/256");
    const int64_t nc = (pr->seqlen + pr->chunk - 1) / pr->chunk;
    const int64_t npad = (pr->dstate + 31) / 32 * 32;
    ssd_fwd_host a;
    memset(&a, 0, sizeof(a));
    a.x = p->x.data; a.dt = p->dt.data; a.B = p->B.data; a.C = p->C.data; a.z = p->z.data;
    a.out = p->out.data;
    a.A = (const float *)p->A.data; a.D = (const float *)p->D.data;
    a.dt_bias = (const float *)p->dt_bias.data; a.init = (const float *)p->initial_states.data;
    a.fin = (float *)p->final_states.data;
    a.cu = p->cu_seqlens.data;
    a.seq_idx = (const int *)p->seq_idx.data;
    sf_cuda_copy_strides(a.xs, &p->x, 3);
    sf_cuda_copy_strides(a.dts, &p->dt, 3);
    sf_cuda_copy_strides(a.Bs, &p->B, 3);
    sf_cuda_copy_strides(a.Cs, &p->C, 3);
    sf_cuda_copy_strides(a.zs, &p->z, 3);
    sf_cuda_copy_strides(a.os, &p->out, 3);
    a.As = p->A.stride[0];
    sf_cuda_copy_strides(a.Ds, &p->D, pr->has_D ? p->D.rank : 0);
    a.biass = p->dt_bias.data ? p->dt_bias.stride[0] : 0;
    sf_cuda_copy_strides(a.ins, &p->initial_states, pr->has_init ? 4 : 0);
    sf_cuda_copy_strides(a.fis, &p->final_states, pr->has_final ? 4 : 0);
    sf_cuda_copy_strides(a.sis, &p->seq_idx, p->seq_idx.data ? 2 : 0);
    a.cus = p->cu_seqlens.data ? p->cu_seqlens.stride[0] : 0;
    a.cu64 = p->cu_seqlens.data && p->cu_seqlens.dtype == SF_I64;
    a.batch = (int)pr->batch; a.L = (int)pr->seqlen; a.H = (int)pr->nheads; a.P = (int)pr->headdim;
    a.N = (int)pr->dstate; a.Npad = (int)npad; a.hpg = (int)pr->heads_per_group;
    a.Q = pr->chunk; a.nc = (int)nc; a.nseq = (int)pr->nseq;
    a.has_D = pr->has_D; a.D_pc = pr->D_per_channel; a.has_z = pr->has_z;
    a.has_bias = pr->has_dt_bias; a.softplus = p->dt_softplus; a.has_init = pr->has_init;
    a.has_final = pr->has_final; a.varlen = pr->varlen;
    a.dt_min = p->dt_min; a.dt_max = p->dt_max;
    const size_t esz = sf_dtype_size(p->x.dtype);
    a.vec_x = ssd_vec_ok(&p->x, esz, 3);
    a.vec_B = ssd_vec_ok(&p->B, esz, 3);
    a.vec_C = ssd_vec_ok(&p->C, esz, 3);
    a.vec_z = pr->has_z && ssd_vec_ok(&p->z, esz, 3);
    a.vec_o = ssd_vec_ok(&p->out, esz, 3);
    if (pr->batch == 0 || pr->seqlen == 0 || pr->nheads == 0 || pr->headdim == 0) {
        /* no tokens, or no outputs: the final states only */
        const int64_t ns = pr->varlen == 2 ? pr->nseq : pr->batch;
        const int64_t total = pr->has_final ? ns * pr->nheads * pr->headdim * pr->dstate : 0;
        if ((total + 255) / 256 > INT32_MAX)
            return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
        if (total > 0) {
            ssd_final_empty<<<(unsigned)((total + 255) / 256), 256, 0, sf_cuda_stream(ctx)>>>(a, total);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
        return SF_OK;
    }
    /* mixed inputs (the front end allows f32 dt, B, C with 16-bit x): the
     * cumsum reads an f32 dt as such; B, C are read through copies rounded
     * to x's dtype, laid out here and made once the workspace is there */
    a.dt32 = esz == 2 && p->dt.dtype == SF_F32;
    if (ssd_rounds(p, &p->B)) ssd_round_layout(a.Bs, &a.vec_B, a);
    if (ssd_rounds(p, &p->C)) ssd_round_layout(a.Cs, &a.vec_C, a);
    if (pr->states_only) return ssd_states_launch(ctx, pr, a);

    /* workspace */
    const size_t nvec = (size_t)pr->batch * pr->nheads * nc * pr->chunk;
    const size_t nst = (size_t)pr->batch * pr->nheads * nc * pr->headdim * pr->dstate;
    const int need32 = pr->varlen == 2 && pr->has_final;
    const size_t b_dt = ssd_align(nvec * 4), b_st = ssd_align(nst * esz);
    const size_t b_s32 = need32 ? ssd_align(nst * 4) : 0;
    const size_t b_id = pr->varlen ? ssd_align((size_t)pr->batch * pr->seqlen * 4) : 0;
    /* what the rows that may serve need */
    bool any_cst = false, any_img = false, any_cb = false;
    for (int i = 0; i < SSD_NCONFIG; i++) {
        const SsdConfig &c = ssd_configs[i];
        const char *why = p->x.dtype == SF_BF16  ? ssd_config_supports<__nv_bfloat16>(ctx, c, a)
                          : p->x.dtype == SF_F16 ? ssd_config_supports<__half>(ctx, c, a)
                                                 : ssd_config_supports<float>(ctx, c, a);
        if (why) continue;
        any_cst |= c.path != SsdPath::general;
        any_img |= c.path == SsdPath::tf32_seg;
        any_cb |= c.path == SsdPath::hopper16;
    }
    /* f32 chunk or segment states (+ the segment exponents of fg32: up to b H nchunks floats) */
    const size_t b_cst = any_cst ? ssd_align((nst + nvec / pr->chunk) * 4) : 0;
    const size_t b_img = any_img ? ssd_align(3 * (size_t)pr->batch * (pr->nheads / pr->heads_per_group) *
                                             SsdS32::img_floats((int)nc, pr->chunk) * 4)
                                 : 0;
    /* C B^T: 64 x 64 f32 tiles on and below the diagonal, per (b, group, chunk) */
    const int64_t nrb = pr->chunk / 64;
    const size_t b_cb = any_cb ? ssd_align((size_t)pr->batch * (pr->nheads / pr->heads_per_group) * nc *
                                           (nrb * (nrb + 1) / 2) * 4096 * 4)
                               : 0;
    const size_t b_rnd = ssd_round_bytes(p, a);
    const size_t total = 2 * b_dt + b_st + b_s32 + b_id + b_cst + b_img + b_cb + b_rnd;
    unsigned char *ws = (unsigned char *)sf_ws_get(ctx, total);
    if (!ws && total > 0) return SF_ERR_OUT_OF_MEMORY;
    a.dtw = (float *)ws;
    a.gw = (float *)(ws + b_dt);
    a.states = ws + 2 * b_dt;
    a.states32 = need32 ? (float *)(ws + 2 * b_dt + b_st) : nullptr;
    a.seqid = pr->varlen ? (int *)(ws + 2 * b_dt + b_st + b_s32) : nullptr;
    float *cst = b_cst ? (float *)(ws + 2 * b_dt + b_st + b_s32 + b_id) : nullptr;
    float *bimg = b_img ? (float *)(ws + 2 * b_dt + b_st + b_s32 + b_id + b_cst) : nullptr;
    float *cbw = b_cb ? (float *)(ws + 2 * b_dt + b_st + b_s32 + b_id + b_cst + b_img) : nullptr;
    if (b_rnd) {
        const sf_status st = ssd_round_inputs(ctx, p, a, ws + 2 * b_dt + b_st + b_s32 + b_id + b_cst + b_img + b_cb);
        if (st != SF_OK) return st;
    }

    const int64_t grid_state = (int64_t)pr->batch * pr->nheads * ((pr->headdim + 31) / 32) *
                               ((pr->dstate + 63) / 64);
    const int64_t grid_out = (int64_t)pr->batch * nc * (pr->chunk / 64) *
                             ((pr->headdim + 63) / 64) * pr->nheads;
    if (grid_state > INT32_MAX || grid_out > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    ssd_tune_ctx tc;
    memset(&tc, 0, sizeof tc);
    tc.a = &a;
    tc.cst = cst;
    tc.bimg = bimg;
    tc.cb = cbw;
    tc.grid_state = grid_state;
    tc.grid_out = grid_out;
    tc.dtype = p->x.dtype;
    switch (p->x.dtype) {
    case SF_F32: return ssd_fwd_launch<float>(ctx, &tc);
    case SF_F16: return ssd_fwd_launch<__half>(ctx, &tc);
    case SF_BF16: return ssd_fwd_launch<__nv_bfloat16>(ctx, &tc);
    default: return sf_fail(ctx, SF_ERR_DTYPE, "sf_ssd_fwd: x must be f32, f16 or bf16");
    }
}
