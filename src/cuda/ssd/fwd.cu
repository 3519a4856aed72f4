/* ssd_fwd.cu - Mamba-2 SSD on the GPU: the chunked forward (sf_ssd_fwd; the
 * decode step sf_ssd_step is in ssd_step.cu).
 *
 * Two paths, chosen per shape bucket by the autotuner (src/core/autotune.h;
 * configurations wg8 .. wgp16, split, split32, split32l, general, wg20, wg40,
 * fu8, fu40, fs32, fo32, fq32, fg32, fg32s, wgm40, wgb40, fub40, fnb40, wgq,
 * fuq):
 *   sm_90a path (ssd_hopper.cuh): 16-bit, dense batches, chunk 128 / 256,
 *     N <= 128 (multiple of 8), P a multiple of 64, aligned rows: warp-scan
 *     cumsum, wgmma chunk states + state scan (or both in one pass,
 *     ssd_state_fused_wg: configurations fu8 / fu40), wgmma output kernel
 *     with 4 to 40 heads per block.  H200 2.7B bf16: b8 L4096 1.05 ms
 *     (fu40), b1 L16384 0.585 ms (wg40) at stop 9.  wgm40: wg40 with the
 *     chunk states of head pairs in a cluster of two (B multicast by TMA,
 *     ssd_chunk_state_mc) and the kernels after the cumsum launched with
 *     programmatic serialisation; wgb40: wgm40 with S = C B^T computed once
 *     per (b, group, chunk) by ssd_cb_wg and read by the output kernel
 *     instead of a product per head (b1 L16384: 0.569 ms against 0.577
 *     for wgm40 and 0.590 for wg40, stop 14); fub40 / fnb40: the fused
 *     state pass (128 / 64 state columns a block) ahead of that output
 *     kernel (b8 L4096: fub40 1.030 ms against fu40 1.056, stop 14);
 *     wgq / fuq: wgb40 / fub40 with the output kernel on one block per SM,
 *     each over a contiguous range of (b, chunk, P tile, head) units (b1
 *     L16384 wgq 0.556 ms, b8 L4096 fuq 1.002, stop 14).
 *   general path, everything else (f32 on TF32 mma.sync, varlen, N <= 256),
 *     five launches on the context's stream, no synchronisation:
 *   ssd_seqid        (varlen only) per-token sequence id from seq_idx / cu_seqlens
 *   ssd_chunk_cumsum processed dt and g' * log2(e) per chunk     (ssd_chunk.cuh header)
 *   ssd_state_pass   chunk states on tensor cores + the pass over chunks
 *   ssd_chunk_out16  fused output, 16-bit inputs with N <= 128 (ssd_out16.cuh):
 *                    per (chunk, head, P tile, half of the row-tile pairs)
 *   ssd_chunk_out    fused output otherwise (f32, N > 128): per (chunk, head,
 *                    P tile, 64-row tile)
 *   ssd_out_sc32     fused output, f32 on the split path (configurations
 *                    split32 / split32l: dense, chunk 128 / 256, P % 64 == 0, N <= 128;
 *                    ssd_out_f32.cuh): per (chunk, head, P tile), the 64-row
 *                    blocks in order through sub-chunk states
 *   ssd_final_varlen (cu_seqlens + final_states) state after each sequence's end
 *   fs32 / fo32 / fq32 / fg32 / fg32s (f32, sm_90a; ssd_state32.cuh,
 *     ssd_out_tf32.cuh): one launch for the cumsum and B (and for the output
 *     kernel C) rearranged once per (b, group, chunk) into TF32 wgmma
 *     operand images (ssd_prologue_tf32), the state pass on TF32 wgmma
 *     (ssd_state_fused_tf32: walking the chunks; fq32: every chunk's own
 *     state in parallel + ssd_state_scan; fg32 / fg32s: the end states of
 *     segments of 8 / 4 chunks + ssd_seg_scan over the segments, and the
 *     output kernel walking each segment's chunks from its entering state),
 *     then ssd_out_sc32 (fs32) or the TF32 wgmma output kernel ssd_out_tf32.
 *     H200 2.7B f32 (stop 12): b8 L4096 1.58 ms (fg32; fo32 1.81, split32
 *     4.22), b1 L16384 0.89 ms (fg32; fq32 1.00 in the same run); stop 13,
 *     with the B / C images moved by bulk copies: 1.51 and 0.85 ms.
 * Workspace: dt and g' (2 x b H nchunks Q f32), the state entering every chunk
 * (b H nchunks P N in the input dtype; plus an f32 copy with cu_seqlens and
 * final_states), sequence ids (b L i32); the sm_90a path adds the f32 chunk
 * states (b H nchunks P N) and the C B^T tiles of wgb40 (b G nchunks, 10
 * tiles of 64 x 64 f32 at chunk 256).
 *
 * Measured on the H200, general path (2.7B layer: H 80, P 64, N 128, G 1, Q 256, D and z):
 *   b8 L4096 bf16 3.75 ms (57 TFLOP/s), f32 8.47 ms; b1 L16384 bf16 1.97 ms,
 *   f32 4.40 ms.  Split (ncu, b8 bf16): cumsum 82 us, state pass 745 us,
 *   output 2.91 ms.  Decode step (b64..256): 3.4-3.7 TB/s of state traffic.
 *
 * Output-kernel variants tried (H200, b8 L4096 bf16, output kernel alone, ncu):
 *   ssd_chunk_out, 4 warps x 16-row tiles, C / B fragments reloaded per warp:
 *     2.91 ms (f32 6.88 ms; still the f32 and N > 128 path).
 *   ssd_chunk_out16, C fragments in registers, each warp two row tiles (k,
 *     Q/16-1-k) sharing every B / X fragment, 2 x 106 KB blocks per SM:
 *     2.86 ms - no gain.  ncu: 231 registers, 12.5% occupancy (2 warps per
 *     scheduler), issue slots 31% busy, 6.45 cycles between a warp's issues,
 *     tensor pipe 13% active, 837 M warp instructions (~10 K per warp, of
 *     which under 1 K are HMMA / LDSM): latency- and instruction-bound, not
 *     shared-memory bound.  Whole forward 3.70 ms (peer 1.69 ms); b1 L16384
 *     1.96 ms (peer 0.81 ms).  Kept: correct, and the base for the next steps
 *     listed in ssd_out16.cuh.
 */
#include "common/cuda_common.h"
#include "ssd/chunk.cuh"
#include "ssd/out_f32.cuh"
#include "ssd/out16.cuh"
#include "ssd/hopper.cuh"
#include "ssd/state32.cuh"
#include "ssd/out_tf32.cuh"
#include "ssd/out_pipe.cuh"
#include "autotune.h"
#include "common/tmap.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ */
/* Small kernels                                                        */
/* ------------------------------------------------------------------ */

/* One thread per token.  cu_seqlens: the last s with cu[s] <= t (empty
 * sequences are skipped that way); seq_idx: its value. */
__global__ void ssd_seqid(const ssd_fwd_args a) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)a.batch * a.L) return;
    const int64_t b = id / a.L, t = id - b * a.L;
    int sid;
    if (a.varlen == 1) {
        sid = a.seq_idx[b * a.sis[0] + t * a.sis[1]];
    } else {
        int lo = 0, hi = a.nseq - 1; /* answer in [lo, hi] */
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            const int64_t v = a.cu64 ? ((const int64_t *)a.cu)[mid * a.cus]
                                     : (int64_t)((const int32_t *)a.cu)[mid * a.cus];
            if (v <= t) lo = mid; else hi = mid - 1;
        }
        sid = lo;
    }
    a.seqid[id] = sid;
}

/* Grid (flattened): 128-head group fastest, then chunk, batch row; one thread
 * per (b, chunk, head) walks the chunk (dt loads of a warp are one row of
 * consecutive heads).  dt = clamp(softplus?(dt + bias)); g' = running sum of
 * min(dt A, 0), restarted where the sequence id changes, times log2(e).
 * Entries past the end of a partial chunk hold dt = 0 and the last g'. */
template <typename T>
__global__ void __launch_bounds__(128) ssd_chunk_cumsum(const ssd_fwd_args a) {
    const int nhb = (a.H + 127) / 128;
    int64_t id = blockIdx.x;
    const int hbk = (int)(id % nhb);
    id /= nhb;
    const int c = (int)(id % a.nc);
    const int b = (int)(id / a.nc);
    const int h = hbk * 128 + threadIdx.x;
    if (h >= a.H) return;
    const T *dt = (const T *)a.dt + (int64_t)b * a.dts[0] + (int64_t)h * a.dts[2];
    const float A = a.A[h * a.As], bias = a.has_bias ? a.dt_bias[h * a.biass] : 0.0f;
    const int64_t t0 = (int64_t)c * a.Q;
    const int Lc = (int)min((int64_t)a.Q, a.L - t0);
    const int64_t off = (((int64_t)b * a.H + h) * a.nc + c) * a.Q;
    float *dtw = a.dtw + off, *gw = a.gw + off;
    const int *sid = a.varlen ? a.seqid + (int64_t)b * a.L + t0 : nullptr;
    float gs = 0.0f;
    int prev = sid ? sid[0] : 0;
    /* 8 independent dt loads in flight, then the sequential sum over them */
    for (int i0 = 0; i0 < a.Q; i0 += 8) {
        float raw[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            raw[u] = i0 + u < Lc ? sf_elem<T>::to_f(dt[(t0 + i0 + u) * a.dts[1]]) : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u;
            float d = 0.0f;
            if (i < Lc) {
                d = sf_dt_process(raw[u] + bias, a.softplus, a.dt_min, a.dt_max);
                if (sid) {
                    const int s = sid[i];
                    if (s != prev) gs = 0.0f;
                    prev = s;
                }
                gs += fminf(d * A, 0.0f);
            }
            dtw[i] = d;
            gw[i] = gs * SSD_LOG2E;
        }
    }
}

/* cu_seqlens with final_states: the state after each sequence's last token e,
 * from the state entering e's chunk (or the sequence's initial state when it
 * starts inside that chunk) plus the masked contribution of its tokens there.
 * Grid (flattened): 16-row P tile fastest, then head, then sequence; block 256,
 * each thread 16 (p, n) elements of the 16 x N tile; plain FMAs (at most Q
 * tokens per sequence, once per sequence). */
template <typename T>
__global__ void __launch_bounds__(256) ssd_final_varlen(const ssd_fwd_args a) {
    constexpr int PF = 16, JT = 32, EPT = 16;
    __shared__ float sx[JT][PF];
    __shared__ float sb[JT][256];
    const int ptiles = (a.P + PF - 1) / PF;
    int64_t id = blockIdx.x;
    const int pt = (int)(id % ptiles);
    id /= ptiles;
    const int h = (int)(id % a.H);
    const int s = (int)(id / a.H);
    const int p0 = pt * PF, tid = threadIdx.x, grp = h / a.hpg;
    /* device cu_seqlens are not validated on the host: clamp to [0, L] and
     * to non-decreasing, so a bad array cannot index past x or the workspace */
    int64_t st = a.cu64 ? ((const int64_t *)a.cu)[s * a.cus] : ((const int32_t *)a.cu)[s * a.cus];
    int64_t en = a.cu64 ? ((const int64_t *)a.cu)[(s + 1) * a.cus]
                        : ((const int32_t *)a.cu)[(s + 1) * a.cus];
    st = st < 0 ? 0 : st > a.L ? a.L : st;
    en = en < st ? st : en > a.L ? a.L : en;
    const float *in = a.has_init ? a.init + (int64_t)s * a.ins[0] + (int64_t)h * a.ins[1] : nullptr;
    float *fo = a.fin + (int64_t)s * a.fis[0] + (int64_t)h * a.fis[1];
    float acc[EPT];
    if (st >= en) { /* empty sequence: its initial state passes through */
#pragma unroll
        for (int k = 0; k < EPT; k++) {
            const int e = tid + 256 * k, p = p0 + e / a.N, n = e % a.N;
            if (e < PF * a.N && p < a.P)
                fo[p * a.fis[2] + n * a.fis[3]] = in ? in[p * a.ins[2] + n * a.ins[3]] : 0.0f;
        }
        return;
    }
    const int64_t e_tok = en - 1;
    const int c = (int)(e_tok / a.Q);
    const int64_t cq = (int64_t)c * a.Q;
    const int el = (int)(e_tok - cq);
    const int64_t off = ((int64_t)h * a.nc + c) * a.Q; /* b == 0 with cu_seqlens */
    const float ge = a.gw[off + el];
    const bool from_chunk = a.seqid[cq] == s;
    const float *base = from_chunk ? a.states32 + ((int64_t)h * a.nc + c) * a.P * a.N : in;
    const float dec = exp2f(fminf(ge, 0.0f));
#pragma unroll
    for (int k = 0; k < EPT; k++) {
        const int e = tid + 256 * k, p = p0 + e / a.N, n = e % a.N;
        float v = 0.0f;
        if (base && e < PF * a.N && p < a.P)
            v = from_chunk ? base[(int64_t)p * a.N + n] : base[p * a.ins[2] + n * a.ins[3]];
        acc[k] = dec * v;
    }
    const T *x = (const T *)a.x + (int64_t)h * a.xs[2];
    const T *Bm = (const T *)a.B + (int64_t)grp * a.Bs[2];
    const int jstart = (int)((st > cq ? st : cq) - cq);
    for (int j0 = jstart; j0 <= el; j0 += JT) {
        const int nj = min(JT, el - j0 + 1);
        __syncthreads();
        for (int q = tid; q < JT * PF; q += 256) {
            const int jj = q / PF, pp = q % PF;
            sx[jj][pp] = (jj < nj && p0 + pp < a.P)
                             ? sf_elem<T>::to_f(x[(cq + j0 + jj) * a.xs[1] + p0 + pp])
                             : 0.0f;
        }
        for (int q = tid; q < JT * a.N; q += 256) {
            const int jj = q / a.N, n = q % a.N;
            float v = 0.0f;
            if (jj < nj) {
                const int j = j0 + jj;
                const float w = exp2f(fminf(ge - a.gw[off + j], 0.0f)) * a.dtw[off + j];
                v = sf_elem<T>::to_f(Bm[(cq + j) * a.Bs[1] + n]) * w;
            }
            sb[jj][n] = v;
        }
        __syncthreads();
        for (int jj = 0; jj < nj; jj++)
#pragma unroll
            for (int k = 0; k < EPT; k++) {
                const int e = tid + 256 * k;
                if (e < PF * a.N) acc[k] = fmaf(sx[jj][e / a.N], sb[jj][e % a.N], acc[k]);
            }
    }
#pragma unroll
    for (int k = 0; k < EPT; k++) {
        const int e = tid + 256 * k, p = p0 + e / a.N, n = e % a.N;
        if (e < PF * a.N && p < a.P) fo[p * a.fis[2] + n * a.fis[3]] = acc[k];
    }
}

/* ------------------------------------------------------------------ */
/* Launchers                                                            */
/* ------------------------------------------------------------------ */

static int ssd_vec_ok(const sf_tensor *t, size_t esz, int nstrides) {
    const int64_t v = 16 / (int64_t)esz;
    if (!t->data || ((uintptr_t)t->data & 15)) return 0;
    for (int i = 0; i < nstrides; i++)
        if (t->stride[i] % v) return 0;
    return 1;
}

static size_t ssd_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* Why the split state path (warp cumsum, every chunk's state at once, then
 * the scan) cannot serve the problem, or NULL if it can. */
static const char *ssd_split_refusal(const ssd_fwd_args &a) {
    if (a.varlen) return "it takes dense batches (no seq_idx / cu_seqlens)";
    if (a.Q != 128 && a.Q != 256) return "it takes chunk_size 128 or 256";
    if (a.N % 4) return "it takes dstate a multiple of 4";
    return nullptr;
}

template <typename T, int Q>
static sf_status ssd_split_states(sf_ctx *ctx, ssd_fwd_args &a, float *cst) {
    cudaStream_t stream = sf_cuda_stream(ctx);
    const int64_t PN = (int64_t)a.P * a.N;
    const int64_t gcum = (int64_t)a.batch * a.nc * ((a.H + 7) / 8);
    const int64_t gst = (int64_t)a.batch * a.nc * a.H * ((a.P + 31) / 32) * ((a.N + 63) / 64);
    const int64_t gsc = (int64_t)a.batch * a.H * ((PN + 1023) / 1024);
    if (gcum > INT32_MAX || gst > INT32_MAX || gsc > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    if (gcum > 0) {
        ssd_cumsum_warp<T, Q><<<(unsigned)gcum, 256, 0, stream>>>(a);
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

/* ssd_out_sc32 (ssd_out_f32.cuh) for f32 inputs on the split path, with
 * NP = dstate padded to 64 or 128; RL: C / B rounded in the fragment loads
 * instead of in shared memory. */
template <int NP, bool RL> static sf_status ssd_launch_sc32(sf_ctx *ctx, const ssd_fwd_args &a) {
    const int64_t grid = (int64_t)a.batch * a.nc * (a.P / 64) * a.H;
    if (grid > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    if (grid == 0) return SF_OK;
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_sc32<NP, RL>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)SsdSc32<NP>::SMEM));
    ssd_out_sc32<NP, RL><<<(unsigned)grid, 256, SsdSc32<NP>::SMEM, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* Why ssd_out_sc32 (configurations split32 / split32l) cannot serve the problem, or NULL. */
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
static bool ssd_fs32_available() {
    static const bool avail = sf_cuda_sm90a_code((const void *)ssd_state_fused_tf32<256, false>);
    return avail;
}

/* Why configuration fs32 (TF32 wgmma state pass + ssd_out_sc32) cannot serve
 * the problem, or NULL. */
static const char *ssd_fs32_refusal(sf_ctx *ctx, const ssd_fwd_args &a, bool f32) {
    if (const char *why = ssd_sc32_refusal(ctx, a, f32)) return why;
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    if (!cs || cs->sm_major != 9) return "it needs an sm_90 GPU";
    if (a.N % 8) return "it takes dstate a multiple of 8";
    if (!a.vec_x) return "it needs 16-byte aligned rows of x (unit last stride, other strides multiples of 4)";
    if (SsdS32::SMEM > cs->smem_optin) return "the GPU has too little shared memory per block";
    if (!ssd_fs32_available()) return "this build has no sm_90a code (SF_CUDA_ARCHS without 90a)";
    return nullptr;
}

/* Why configuration fo32 (TF32 wgmma state pass + ssd_out_tf32) cannot
 * serve the problem, or NULL. */
static const char *ssd_fo32_refusal(sf_ctx *ctx, const ssd_fwd_args &a, bool f32) {
    if (const char *why = ssd_fs32_refusal(ctx, a, f32)) return why;
    if (!a.vec_o || (a.has_z && !a.vec_z))
        return "it needs 16-byte aligned rows of out and z (unit last stride, other strides multiples of 4)";
    if (SsdO32::smem(a.Q) > sf_cuda_st(ctx)->smem_optin) return "the GPU has too little shared memory per block";
    return nullptr;
}

/* segments of configurations fg32 / fg32s at most (ssd_seg_scan holds them all) */
static const int SSD_MAXSEG = 16;

/* Configurations fs32 / fo32 / fq32 / fg32 / fg32s (f32): warp-scan cumsum
 * and the B^T images (fo: also the C and B images) in one launch, the TF32
 * wgmma state pass (fq32: chunk states in parallel + ssd_state_scan through
 * `cst`; fg32 / fg32s: the walk in segments of `sl` = 8 / 4 chunks (at most
 * SSD_MAXSEG segments; end states only) + ssd_seg_scan, E_s in `cst`, the
 * output kernel walking the segments), then ssd_out_sc32 (fs32) or
 * ssd_out_tf32 (fo: fo32, fq32, fg32, fg32s).  `bimg`: three image arrays of
 * b G nchunks Q 128 floats each (B^T, C, B). */
template <int Q>
static sf_status ssd_fwd_fs32(sf_ctx *ctx, ssd_fwd_args &a, float *bimg, float *cst, bool fo, bool split, int sl) {
    cudaStream_t stream = sf_cuda_stream(ctx);
    const int64_t gcum = (int64_t)a.batch * a.nc * ((a.H + 7) / 8);
    const int64_t gimg = (int64_t)a.batch * (a.H / a.hpg) * a.nc * (Q / SsdS32::QS);
    const int64_t gst = (int64_t)a.batch * (a.P / 64) * a.H;
    if (gcum > INT32_MAX || gimg > INT32_MAX || gst > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    if (gcum == 0 || gst == 0) return SF_OK;
    float *gseg = nullptr; /* segment decay exponents (fg32 / fg32s) */
    const size_t nimg = (size_t)a.batch * (a.H / a.hpg) * SsdS32::img_floats(a.nc, Q);
    float *cimg = bimg + nimg, *bnat = bimg + 2 * nimg;
    /* the cumsum and the B^T image (fo: also the C and B images) in one launch */
    const int64_t gpro = gcum + (fo ? 2 : 1) * gimg;
    if (gpro > INT32_MAX) return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    ssd_prologue_tf32<Q><<<(unsigned)gpro, 256, 0, stream>>>(a, gcum, gimg, bimg, fo ? cimg : nullptr, bnat);
    SF_CUDA_CHECK_LAUNCH(ctx);
    if (split) {
        const int64_t gsp = gst * a.nc, gsc = (int64_t)a.batch * a.H * (((int64_t)a.P * a.N + 1023) / 1024);
        if (gsp > INT32_MAX || gsc > INT32_MAX)
            return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_state_fused_tf32<Q, true>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SsdS32::SMEM));
        ssd_state_fused_tf32<Q, true><<<(unsigned)gsp, 128, SsdS32::SMEM, stream>>>(a, bimg, cst, 1, nullptr);
        SF_CUDA_CHECK_LAUNCH(ctx);
        ssd_state_scan<float><<<(unsigned)gsc, 256, 0, stream>>>(a, cst);
        SF_CUDA_CHECK_LAUNCH(ctx);
    } else {
        /* fg32 / fg32s: segments of sl chunks, their end states and decay
         * exponents in cst, the scan over segments in place */
        if (sl > 0 && (a.nc + sl - 1) / sl > SSD_MAXSEG) sl = (a.nc + SSD_MAXSEG - 1) / SSD_MAXSEG;
        const int64_t nseg = sl > 0 ? (a.nc + sl - 1) / sl : 1;
        const int64_t gsc = (int64_t)a.batch * a.H * (((int64_t)a.P * a.N + 1023) / 1024);
        if (sl > 0 && !cst) return sf_fail(ctx, SF_ERR_INTERNAL, "sf_ssd_fwd: segments without workspace");
        if (gst * nseg > INT32_MAX || gsc > INT32_MAX)
            return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
        gseg = sl > 0 ? cst + (size_t)a.batch * a.H * nseg * a.P * a.N : nullptr;
        /* segments: the last one's end state only with final states */
        const int64_t nrun = gseg && !a.has_final ? nseg - 1 : nseg;
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_state_fused_tf32<Q, false>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SsdS32::SMEM));
        if (nrun > 0) {
            ssd_state_fused_tf32<Q, false><<<(unsigned)(gst * nrun), 128, SsdS32::SMEM, stream>>>(
                a, bimg, cst, sl > 0 ? sl : a.nc, gseg);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
        if (gseg) {
            /* registers for nseg states a thread, no more (occupancy) */
            if (nseg <= 4)
                ssd_seg_scan<4><<<(unsigned)gsc, 256, 0, stream>>>(a, cst, gseg, sl);
            else if (nseg <= 8)
                ssd_seg_scan<8><<<(unsigned)gsc, 256, 0, stream>>>(a, cst, gseg, sl);
            else
                ssd_seg_scan<SSD_MAXSEG><<<(unsigned)gsc, 256, 0, stream>>>(a, cst, gseg, sl);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
    }
    if (!fo && gseg) return sf_fail(ctx, SF_ERR_INTERNAL, "sf_ssd_fwd: segments need ssd_out_tf32");
    if (!fo) return a.N <= 64 ? ssd_launch_sc32<64, false>(ctx, a) : ssd_launch_sc32<128, false>(ctx, a);
    /* units: chunks (b, chunk, P tile, head), or with segments (b, segment,
     * P tile, head) walks of sl chunks each */
    const int64_t nwork = (int64_t)a.batch * (gseg ? (a.nc + sl - 1) / sl : a.nc) * (a.P / 64) * a.H;
    const int64_t gout = gseg ? nwork * sl : nwork;
    if (gout > INT32_MAX) return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_tf32<Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)SsdO32::smem(Q)));
    const int64_t gpers = nwork < sf_cuda_st(ctx)->sm_count ? nwork : sf_cuda_st(ctx)->sm_count;
    ssd_out_tf32<Q><<<(unsigned)gpers, 256, SsdO32::smem(Q), stream>>>(a, cimg, bnat, gout, gseg ? cst : nullptr,
                                                                         gseg ? sl : 0);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* The general path: any dtype, N <= 256, varlen, any alignment.  With
 * `cst` (split path, ssd_split_refusal NULL) the states come from
 * ssd_split_states instead of ssd_chunk_cumsum + ssd_state_pass; with `sc32`
 * too (f32, ssd_sc32_refusal NULL) the output is ssd_out_sc32's (sc32 1:
 * rounding pass, 2: rounding in the fragment loads). */
template <typename T>
static sf_status ssd_fwd_general(sf_ctx *ctx, ssd_fwd_args &a, int64_t grid_state,
                                 int64_t grid_out, float *cst = nullptr, int sc32 = 0) {
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
        ssd_chunk_cumsum<T><<<(unsigned)gcum, 128, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (grid_state > 0) {
        ssd_state_pass<T><<<(unsigned)grid_state, 128, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    bool done = false;
    if constexpr (sizeof(T) == 4) {
        if (cst && sc32 && grid_out > 0) {
            const sf_status st =
                sc32 == 2 ? (a.N <= 64 ? ssd_launch_sc32<64, true>(ctx, a)
                                       : ssd_launch_sc32<128, true>(ctx, a))
                          : (a.N <= 64 ? ssd_launch_sc32<64, false>(ctx, a)
                                       : ssd_launch_sc32<128, false>(ctx, a));
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
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute at[2];
    memset(at, 0, sizeof at);
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    at[1].id = cudaLaunchAttributeClusterDimension;
    at[1].val.clusterDim.x = cluster;
    at[1].val.clusterDim.y = 1;
    at[1].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = cluster > 1 ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kern, args...);
}
template <typename... KA, typename... A>
static cudaError_t ssd_launch_pdl(void (*kern)(KA...), unsigned grid, unsigned block, size_t smem,
                                  cudaStream_t stream, A... args) {
    return ssd_launch_ex(kern, grid, block, smem, stream, 1u, args...);
}

/* The fused state pass with NW state columns per block and NST stages. */
template <typename T, int Q, int NW, int NST>
static sf_status ssd_fused_launch(sf_ctx *ctx, const ssd_fwd_args &a, int64_t grid) {
    typedef SsdFu<Q, NW, NST> F;
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_state_fused_wg<T, Q, NW, NST>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)F::SMEM));
    ssd_state_fused_wg<T, Q, NW, NST><<<(unsigned)grid, 128, F::SMEM, sf_cuda_stream(ctx)>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* The sm_90a path (ssd_hopper.cuh) with `hpc` heads per output block; the
 * states by chunk states + scan (fused 0) or by the fused pass with 128
 * (fused 1) or 64 (fused 2) state columns per block. */
template <typename T, int Q>
static sf_status ssd_fwd_wg(sf_ctx *ctx, ssd_fwd_args &a, float *cst, int hpc, bool pipe, int fused,
                            bool mc = false, float *cb = nullptr, bool bal = false) {
    typedef SsdWg<Q> L;
    cudaStream_t stream = sf_cuda_stream(ctx);
    const int64_t PN = (int64_t)a.P * a.N;
    const int64_t gcum = (int64_t)a.batch * a.nc * ((a.H + 7) / 8);
    const int64_t gst = (int64_t)a.batch * a.nc * (a.P / 64) * a.H;
    const int64_t gsc = (int64_t)a.batch * a.H * ((PN + 1023) / 1024);
    const int64_t nsub = (a.hpg + hpc - 1) / hpc;
    const int64_t gout = (int64_t)a.batch * a.nc * (a.P / 64) * (a.H / a.hpg) * nsub;
    const int64_t gfu = (int64_t)a.batch * (a.P / 64) * a.H * (fused == 2 ? (a.N + 63) / 64 : 1);
    if (gcum > INT32_MAX || gst > INT32_MAX || gsc > INT32_MAX || gout > INT32_MAX || gfu > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    /* wgm40: chunk states of head pairs with B multicast in a cluster of two
     * (checked before anything is launched) */
    CUtensorMap mb;
    if (mc && !(a.H % 2 == 0 && a.hpg % 2 == 0 && gst % 2 == 0 &&
                make_tmap(&mb, std::is_same<T, __nv_bfloat16>::value, a.B, a.N, a.L, a.H / a.hpg, a.batch,
                          a.Bs[1], a.Bs[2], a.Bs[0], Q / 2)))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED,
                       "sf_ssd_fwd: configurations wgm40 / wgb40 / wgq need an even number of heads per group and "
                       "B rows a TMA tensor map takes");
    /* wgb40: first the C B^T tiles once per (b, group, chunk), then the
     * cumsum alongside (it waits for them only at its end) */
    const int64_t gcb = (int64_t)a.batch * (a.H / a.hpg) * a.nc;
    if (cb && gcb > INT32_MAX) return sf_fail(ctx, SF_ERR_TOO_LARGE, "sf_ssd_fwd: problem too large for one launch");
    if (cb && gcb > 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_cb_wg<T, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)L::CBK_SMEM));
        ssd_cb_wg<T, Q><<<(unsigned)gcb, 256, L::CBK_SMEM, stream>>>(a, cb);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (gcum > 0 && cb) {
        SF_CUDA_CHECK(ctx, ssd_launch_pdl(ssd_cumsum_warp<T, Q>, (unsigned)gcum, 256, 0, stream, a));
    } else if (gcum > 0) {
        ssd_cumsum_warp<T, Q><<<(unsigned)gcum, 256, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (fused && gfu > 0) {
        const sf_status st = fused == 2 ? ssd_fused_launch<T, Q, 64, 3>(ctx, a, gfu)
                                        : ssd_fused_launch<T, Q, 128, 2>(ctx, a, gfu);
        if (st != SF_OK) return st;
    }
    if (!fused && gst > 0 && mc) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_chunk_state_mc<T, Q>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::MC_SMEM));
        SF_CUDA_CHECK(ctx, ssd_launch_ex(ssd_chunk_state_mc<T, Q>, (unsigned)gst, 128, L::MC_SMEM, stream, 2u, a,
                                         cst, mb));
    } else if (!fused && gst > 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_chunk_state_wg<T, Q>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)L::ST_SMEM));
        ssd_chunk_state_wg<T, Q><<<(unsigned)gst, 128, L::ST_SMEM, stream>>>(a, cst);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (!fused && gsc > 0) {
        if (mc)
            SF_CUDA_CHECK(ctx, ssd_launch_pdl(ssd_state_scan<T>, (unsigned)gsc, 256, 0, stream, a, (const float *)cst));
        else
            ssd_state_scan<T><<<(unsigned)gsc, 256, 0, stream>>>(a, cst);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (gout > 0 && pipe) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_wgp<T, Q>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)SsdWgp<Q>::SMEM));
        ssd_out_wgp<T, Q><<<(unsigned)gout, 256, SsdWgp<Q>::SMEM, stream>>>(a, hpc);
        SF_CUDA_CHECK_LAUNCH(ctx);
    } else if (gout > 0 && cb && bal) {
        /* wgq / fuq: one block per SM over the (b, chunk, P tile, head) units */
        const int64_t units = (int64_t)a.batch * a.nc * (a.P / 64) * a.H, nsm = sf_cuda_st(ctx)->sm_count;
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_wg<T, Q, true, true>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::CB_SMEM));
        SF_CUDA_CHECK(ctx, ssd_launch_pdl(ssd_out_wg<T, Q, true, true>, (unsigned)(units < nsm ? units : nsm), 256,
                                          L::CB_SMEM, stream, a, hpc, (const float *)cb));
    } else if (gout > 0 && cb) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_wg<T, Q, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)L::CB_SMEM));
        SF_CUDA_CHECK(ctx, ssd_launch_pdl(ssd_out_wg<T, Q, true>, (unsigned)gout, 256, L::CB_SMEM, stream, a, hpc,
                                          (const float *)cb));
    } else if (gout > 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_out_wg<T, Q, false>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)L::OUT_SMEM));
        if (mc)
            SF_CUDA_CHECK(ctx, ssd_launch_pdl(ssd_out_wg<T, Q, false>, (unsigned)gout, 256, L::OUT_SMEM, stream, a,
                                              hpc, (const float *)nullptr));
        else
            ssd_out_wg<T, Q, false><<<(unsigned)gout, 256, L::OUT_SMEM, stream>>>(a, hpc, nullptr);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

/* Whether this build holds sm_90a machine code for the wgmma kernels (a
 * plain sm_80 / sm_90 pass compiles their bodies away: a handful of
 * registers), checked once per instantiation. */
template <typename T, int Q> static bool ssd_wg_available() {
    static const bool avail = sf_cuda_sm90a_code((const void *)ssd_out_wg<T, Q, false>);
    return avail;
}

/* Why the sm_90a path cannot serve the problem, or NULL if it can. */
template <typename T>
static const char *ssd_wg_refusal16(sf_ctx *ctx, const ssd_fwd_args &a) {
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    if (!cs || cs->sm_major != 9) return "it needs an sm_90 GPU";
    if (a.varlen) return "it takes dense batches (no seq_idx / cu_seqlens)";
    if (a.Q != 128 && a.Q != 256) return "it takes chunk_size 128 or 256";
    if (a.N > 128 || a.N % 8 || a.P % 64)
        return "it takes dstate <= 128 (a multiple of 8) and headdim a multiple of 64";
    if (!a.vec_x || !a.vec_B || !a.vec_C || !a.vec_o || (a.has_z && !a.vec_z))
        return "it needs 16-byte aligned rows (unit last stride, other strides multiples of 8)";
    const size_t smem = a.Q == 256 ? SsdWg<256>::OUT_SMEM : SsdWg<128>::OUT_SMEM;
    if (smem > cs->smem_optin) return "the GPU has too little shared memory per block";
    if (!(a.Q == 256 ? ssd_wg_available<T, 256>() : ssd_wg_available<T, 128>()))
        return "this build has no sm_90a code (SF_CUDA_ARCHS without 90a)";
    return nullptr;
}

template <typename T>
static const char *ssd_wg_refusal(sf_ctx *ctx, const ssd_fwd_args &a) {
    if constexpr (sizeof(T) == 2) return ssd_wg_refusal16<T>(ctx, a);
    (void)ctx;
    (void)a;
    return "it takes f16 / bf16 inputs";
}

/* Candidates of the autotuner (in this order, but for wg8 and wgq, which
 * swapped places at stop 14): the sm_90a path with 8, 4 or 16 heads per
 * output block (plain or pipelined output kernel), the general path with
 * split states (any dtype, dense batches), the same with ssd_out_sc32 as
 * the output kernel (f32 only; C / B rounded to TF32 in shared memory, or
 * in the fragment loads: split32l), the general path, the plain sm_90a
 * output kernel with 20 or 40 heads per block (C and B loaded once for more
 * heads), and the same with 8 or 40 heads after the fused state pass
 * ssd_state_fused_wg instead of chunk states + scan (fu8 / fu40), and for
 * f32 the TF32 wgmma state pass ssd_state_fused_tf32 ahead of ssd_out_sc32
 * (fs32) or of the TF32 wgmma output kernel ssd_out_tf32 (fo32; fq32 with
 * the chunk states in parallel and a scan, for small batches; fg32 / fg32s
 * in segments), then wg40 with the chunk states of head pairs sharing B by
 * TMA multicast (wgm40) and that with C B^T computed once per chunk
 * (wgb40), and the fused state pass ahead of that output kernel with 128
 * or 64 state columns per block (fub40, fnb40: the 64-column slices give
 * small batches twice the blocks), and wgb40 / fub40 with the output kernel
 * balanced over one block per SM (wgq, fuq).  Candidate 0 is the default
 * (no timing, or a graph capture with nothing cached): wgq since stop 14
 * (H200 2.7B bf16: b1 L16384 0.556 ms, b8 L4096 1.074; wg8, the default
 * before, took 0.66 / 1.29 at stop 8). */
static const char *const ssd_cand_names[] = {"wgq",     "wg4",     "wg16",  "wgp8",
                                             "wgp4",    "wgp16",   "split", "split32",
                                             "split32l", "general", "wg20",  "wg40",
                                             "fu8",      "fu40",    "fs32",  "fo32",
                                             "fq32",     "fg32",    "fg32s", "wgm40",
                                             "wgb40",    "fub40",   "fnb40", "wg8",
                                             "fuq"};
/* -1 split, -2 split32, -3 split32l, -4 fs32, -5 fo32, -6 fq32, -7 fg32,
 * -8 fg32s, 0 general */
static const int ssd_cand_hpc[] = {40, 4, 16, 8, 4, 16, -1, -2, -3, 0, 20, 40, 8, 40, -4, -5, -6, -7, -8, 40, 40,
                                   40, 40, 8, 40};
static const int SSD_NCAND = 25, SSD_SPLIT = 6, SSD_SPLIT32 = 7, SSD_GENERAL = 9, SSD_WG40 = 11, SSD_FUSED = 12,
                 SSD_FS32 = 14, SSD_FG32 = 17, SSD_WGM40 = 19, SSD_WGB40 = 20, SSD_FUB40 = 21, SSD_FNB40 = 22,
                 SSD_WGQ = 0, SSD_FUQ = 24;

struct ssd_tune_ctx {
    ssd_fwd_args *a;
    float *cst;  /* f32 chunk states (split paths) */
    float *bimg; /* TF32 operand images (fs32 / fo32 / fq32): B^T, then C and B (fo32, fq32) */
    float *cb;   /* C B^T tiles (wgb40) */
    int64_t grid_state, grid_out;
    int dtype; /* sf_dtype of x */
    cudaEvent_t ev[2];
};

template <typename T>
static sf_status ssd_run_cand(sf_ctx *ctx, ssd_tune_ctx *tc, int cand) {
    ssd_fwd_args &a = *tc->a;
    const int hpc = ssd_cand_hpc[cand];
    if (hpc == 0) return ssd_fwd_general<T>(ctx, a, tc->grid_state, tc->grid_out);
    if (hpc <= -4) {
        const bool fo = hpc <= -5, split = hpc == -6;
        const int sl = hpc == -7 ? 8 : hpc == -8 ? 4 : 0; /* chunks per segment (fg32 / fg32s) */
        if (const char *why = fo ? ssd_fo32_refusal(ctx, a, sizeof(T) == 4) : ssd_fs32_refusal(ctx, a, sizeof(T) == 4))
            return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: configuration %s: %s", ssd_cand_names[cand], why);
        /* (the refusals above include the split path's, which sizes cst) */
        if ((split || sl) && !tc->cst)
            return sf_fail(ctx, SF_ERR_INTERNAL, "sf_ssd_fwd: %s without chunk-state workspace", ssd_cand_names[cand]);
        if constexpr (sizeof(T) == 4)
            return a.Q == 256 ? ssd_fwd_fs32<256>(ctx, a, tc->bimg, tc->cst, fo, split, sl)
                              : ssd_fwd_fs32<128>(ctx, a, tc->bimg, tc->cst, fo, split, sl);
        return SF_ERR_UNSUPPORTED;
    }
    if (hpc <= -2) {
        if (const char *why = ssd_sc32_refusal(ctx, a, sizeof(T) == 4))
            return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: configuration %s: %s",
                           ssd_cand_names[cand], why);
        return ssd_fwd_general<T>(ctx, a, tc->grid_state, tc->grid_out, tc->cst, -1 - hpc);
    }
    if (hpc < 0) {
        if (const char *why = ssd_split_refusal(a))
            return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: configuration split: %s", why);
        return ssd_fwd_general<T>(ctx, a, tc->grid_state, tc->grid_out, tc->cst);
    }
    if (const char *why = ssd_wg_refusal<T>(ctx, a))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: configuration %s: %s",
                       ssd_cand_names[cand], why);
    if constexpr (sizeof(T) == 2) {
        const bool pipe = cand >= 3 && cand < SSD_SPLIT;
        if (pipe && (a.Q == 256 ? SsdWgp<256>::SMEM : SsdWgp<128>::SMEM) > sf_cuda_st(ctx)->smem_optin)
            return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_fwd: configuration %s: too little shared memory",
                           ssd_cand_names[cand]);
        /* fused state pass: 1 (128 state columns a block), 2 (64) */
        const int fused = cand == SSD_FUSED || cand == SSD_FUSED + 1 || cand == SSD_FUB40 || cand == SSD_FUQ ? 1
                          : cand == SSD_FNB40                                                                ? 2
                                                                                                             : 0;
        const bool mc = cand == SSD_WGM40 || cand == SSD_WGB40 || cand == SSD_WGQ;
        const bool bal = cand == SSD_WGQ || cand == SSD_FUQ;
        const bool want_cb = cand == SSD_WGB40 || cand == SSD_FUB40 || cand == SSD_FNB40 || bal;
        float *cb = want_cb ? tc->cb : nullptr;
        if (want_cb && !cb)
            return sf_fail(ctx, SF_ERR_INTERNAL, "sf_ssd_fwd: %s without C B^T workspace", ssd_cand_names[cand]);
        return a.Q == 256 ? ssd_fwd_wg<T, 256>(ctx, a, tc->cst, hpc, pipe, fused, mc, cb, bal)
                          : ssd_fwd_wg<T, 128>(ctx, a, tc->cst, hpc, pipe, fused, mc, cb, bal);
    }
    return SF_ERR_UNSUPPORTED;
}

/* sf_tune_run_fn for the SSD configurations. */
template <typename T> static sf_status ssd_tune_run(sf_ctx *ctx, int cand, void *arg, double *ms) {
    ssd_tune_ctx *tc = (ssd_tune_ctx *)arg;
    return sf_cuda_run_timed(ctx, tc->ev, ms, [&] { return ssd_run_cand<T>(ctx, tc, cand); });
}

/* Picks the configuration through the autotuner (bucket: chunk, P, N,
 * heads per group, the number of (batch row, chunk) pairs rounded to a
 * power of two, and whether the sm_90a path may serve) and leaves the
 * outputs computed.  When only the general path can serve and nothing is
 * forced, it runs without tuning. */
template <typename T>
static sf_status ssd_fwd_launch(sf_ctx *ctx, ssd_tune_ctx *tc) {
    const ssd_fwd_args &a = *tc->a;
    const sf_cuda_state *cs = sf_cuda_st(ctx);
    const char *why = ssd_wg_refusal<T>(ctx, a), *why_split = ssd_split_refusal(a);
    if (why && why_split && !sf_autotune_forced("ssd_fwd")) return ssd_run_cand<T>(ctx, tc, SSD_GENERAL);
    int64_t rows = (int64_t)a.batch * a.nc, pow2 = 1;
    while (pow2 < rows) pow2 <<= 1;
    char bucket[96];
    /* the tag names the best path that may serve, so a cache written before
     * split32 existed is not reused for shapes it serves */
    const bool sc32 = !ssd_sc32_refusal(ctx, a, sizeof(T) == 4);
    const bool fs32 = !ssd_fs32_refusal(ctx, a, sizeof(T) == 4);
    const bool fo32 = !ssd_fo32_refusal(ctx, a, sizeof(T) == 4);
    snprintf(bucket, sizeof bucket, "q%d_p%d_n%d_hpg%d_rows%lld_%s", a.Q, a.P, a.Npad, a.hpg,
             (long long)pow2,
             !why         ? "wg"
             : why_split  ? "general"
             : fo32       ? "fg32"
             : fs32       ? "fs32"
             : sc32       ? "split32"
                          : "split");
    sf_tune_request rq;
    memset(&rq, 0, sizeof rq);
    rq.device = cs ? cs->name : "cuda";
    rq.op = "ssd_fwd";
    rq.dtype = (sf_dtype)tc->dtype;
    rq.bucket = bucket;
    rq.ncand = SSD_NCAND;
    rq.names = ssd_cand_names;
    rq.run = ssd_tune_run<T>;
    rq.arg = tc;
    rq.reps = 5;
    rq.no_timing = sf_cuda_capturing(ctx);
    int choice = 0, ran = 0;
    sf_status st = sf_autotune(ctx, &rq, &choice, &ran);
    sf_cuda_events_free(tc->ev);
    if (st != SF_OK || ran) return st;
    /* the cached or default choice (tuning off, or capturing a graph); a
     * default the shape does not allow falls back to fg32 where it serves
     * (f32, dense, sm_90a: 1.51 ms at the 2.7B b8 shape, 0.85 at b1 L16384),
     * else to split32 (4.2 ms at b8), else to the general path (8.2 ms) */
    if ((choice == SSD_WGM40 || choice == SSD_WGB40 || choice == SSD_WGQ) && a.hpg % 2)
        choice = SSD_WG40; /* a cached wgm40 / wgb40 / wgq, odd head groups */
    if ((ssd_cand_hpc[choice] > 0 && why) || (choice == SSD_SPLIT && why_split) ||
        (ssd_cand_hpc[choice] <= -2 && !sc32) || (choice == SSD_FS32 && !fs32) ||
        (ssd_cand_hpc[choice] <= -5 && !fo32))
        choice = fo32 ? SSD_FG32 : sc32 ? SSD_SPLIT32 : SSD_GENERAL;
    st = ssd_run_cand<T>(ctx, tc, choice);
    /* the multicast configurations refuse B rows a tensor map cannot take
     * (before launching anything): the plain wg40 serves those */
    if (st == SF_ERR_UNSUPPORTED && (choice == SSD_WGM40 || choice == SSD_WGB40 || choice == SSD_WGQ))
        st = ssd_run_cand<T>(ctx, tc, SSD_WG40);
    return st;
}

/* sf_ssd_states_only: the split path's state kernels alone (chunk cumsums,
 * every chunk's state by mma.sync, the scan over chunks, which writes
 * final_states); the output kernels do not run. */
static sf_status ssd_states_launch(sf_ctx *ctx, const sf_ssd_problem *pr, ssd_fwd_args &a) {
    if (const char *why = a.varlen ? "it takes dense batches (no seq_idx / cu_seqlens)" : ssd_split_refusal(a))
        return sf_fail(ctx, SF_ERR_UNSUPPORTED, "sf_ssd_states_only: %s", why);
    const size_t esz = sf_dtype_size(pr->p->x.dtype);
    const size_t nvec = (size_t)a.batch * a.H * a.nc * a.Q;
    const size_t nst = (size_t)a.batch * a.H * a.nc * a.P * a.N;
    const size_t b_dt = ssd_align(nvec * 4), b_st = ssd_align(nst * esz), b_cst = ssd_align(nst * 4);
    unsigned char *ws = (unsigned char *)sf_ws_get(ctx, 2 * b_dt + b_st + b_cst);
    if (!ws) return SF_ERR_OUT_OF_MEMORY;
    a.dtw = (float *)ws;
    a.gw = (float *)(ws + b_dt);
    a.states = ws + 2 * b_dt;
    float *cst = (float *)(ws + 2 * b_dt + b_st);
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
    ssd_fwd_args a;
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
    if (pr->states_only) return ssd_states_launch(ctx, pr, a);

    /* workspace */
    const size_t nvec = (size_t)pr->batch * pr->nheads * nc * pr->chunk;
    const size_t nst = (size_t)pr->batch * pr->nheads * nc * pr->headdim * pr->dstate;
    const int need32 = pr->varlen == 2 && pr->has_final;
    const size_t b_dt = ssd_align(nvec * 4), b_st = ssd_align(nst * esz);
    const size_t b_s32 = need32 ? ssd_align(nst * 4) : 0;
    const size_t b_id = pr->varlen ? ssd_align((size_t)pr->batch * pr->seqlen * 4) : 0;
    /* f32 chunk states of the sm_90a or the split path, when one may serve */
    const char *wg_no = p->x.dtype == SF_BF16 ? ssd_wg_refusal<__nv_bfloat16>(ctx, a)
                        : p->x.dtype == SF_F16 ? ssd_wg_refusal<__half>(ctx, a)
                                               : "f32";
    /* (+ the segment exponents of fg32: up to b H nchunks floats after the segment states) */
    const size_t b_cst = wg_no && ssd_split_refusal(a) ? 0 : ssd_align((nst + nvec / pr->chunk) * 4);
    /* TF32 operand images of configurations fs32 / fo32 (f32), when one may serve */
    const size_t b_img = p->x.dtype == SF_F32 && !ssd_fs32_refusal(ctx, a, true)
                             ? ssd_align(3 * (size_t)pr->batch * (pr->nheads / pr->heads_per_group) *
                                         SsdS32::img_floats((int)nc, pr->chunk) * 4)
                             : 0;
    /* C B^T tiles of configuration wgb40 (16-bit sm_90a path): 64 x 64 f32
     * tiles on and below the diagonal, per (b, group, chunk) */
    const int64_t nrb = pr->chunk / 64;
    const size_t b_cb = wg_no ? 0
                              : ssd_align((size_t)pr->batch * (pr->nheads / pr->heads_per_group) * nc *
                                          (nrb * (nrb + 1) / 2) * 4096 * 4);
    const size_t total = 2 * b_dt + b_st + b_s32 + b_id + b_cst + b_img + b_cb;
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
