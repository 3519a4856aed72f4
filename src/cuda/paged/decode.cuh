/* decode.cuh - attention over a paged KV cache (sf_attn_paged) on mma.sync
 * (sm_80+): decode (one query token a sequence) up to short chunks of new
 * tokens, memory-bound on the K/V pages.
 *
 * Grid: x = split of the sequence's keys, y = (kv head, 16-row tile of its
 * query rows), z = sequence.  The query rows of a kv head are its group's
 * heads times the new tokens (row r: token r / group, head kvh * group +
 * r % group), so every K/V byte a CTA reads serves all the query heads that
 * share it (GQA on tensor cores).  Four warps take the CTA's 16-key tiles in
 * turn, each with its own 3-stage cp.async ring and its own online softmax
 * (softmax_step of the dense kernel); the warps' (max, sum, O) are merged in
 * shared memory at the end.  Keys are found through the block table row by
 * row, so any page size works, tiles may straddle pages.
 *
 * Narrow tiles: where a kv head has at most 8 query rows (decode with GQA
 * groups up to 8) the products run transposed with the keys as mma rows
 * (tile_step_n): half the mma work of a 16-row tile, whose rows past 8
 * would be padding.
 *
 * Split-KV: the number of splits of a sequence is a function of its length
 * alone (nsplit_of), evaluated on the device, so a captured graph stays
 * right when lengths change; the grid holds the most any length can use.
 * One split writes the output directly; several write f32 partial outputs
 * and their lse, and the last split of each (sequence, kv head, row tile)
 * to finish (a counter, counters.h) merges them: a call is one launch.
 *
 * Bad input on the device: a length out of [0, max_pages * page_size]
 * makes the sequence bad; each split checks the table entries of its own
 * keys' pages (all of them, window or not, so together the splits of a
 * group check every page of the sequence), and its loads read page 0 in
 * place of a bad entry so nothing outside the pool is touched.  A bad
 * sequence's rows get 0 and lse -inf and it is recorded in the context's
 * error word.
 *
 * FP8 pools (template FP8): the ring holds the e4m3 codes (half the bytes
 * of a 16-bit tile) and each key tile's 16 K and 16 V scales (cp.async
 * like the codes; per-head scales are the same address for every key).  K's
 * codes go from the ring into registers by ldmatrix and are converted there
 * (exact: every e4m3 value is an f16) into the f16 B fragments of S = Q K^T,
 * with Q's fragments in f16 too (qf_to_f16) and in the matching k order
 * (load_qf); V, which
 * P V needs transposed, is then converted to f16 in place, over the stage's
 * K and V codes (16 rows of D + 8 f16 fit in 32 rows of D + 16 codes), and
 * P V runs in f16 whatever T is.  With no conversion tile of their own the
 * FP8 warps keep three stages at three blocks an SM: two tiles in flight a
 * warp, as many bytes as the 16-bit kernel's one.
 * The scales go on the scores (s * k_scale of the key's column) and on P
 * (p * v_scale) rather than on the 16 x d codes (H100, b 32 with 4k keys:
 * 2.39 TB/s of FP8 bytes, 2.26 with K converted through shared memory).
 *
 * ALiBi (MOD 2): the rows of a tile are (token, head) pairs of one kv
 * group, so each row has its own slope and key position; the bias
 * -slope |pos - j| goes on after the softcap, in log2 units.
 */
#ifndef SF_PAGED_DECODE_CUH
#define SF_PAGED_DECODE_CUH

#include "attn/fwd_mma.cuh"

#include <cuda_fp8.h>
#include <stdint.h>
#include <type_traits>

namespace sf_paged {

using sf_attn::ScoreMod;
using sf_attn::key_range;

struct PagedParams {
    const void *q;
    void *o;
    float *lse;
    const void *kc, *vc;
    int64_t q_sb, q_sr, q_sh;
    int64_t o_sb, o_sr, o_sh;
    int64_t l_sb, l_sh, l_sr;
    int64_t k_sp, k_sr, k_sh;   /* page, row in page, head strides of k_cache */
    int64_t v_sp, v_sr, v_sh;
    const int32_t *bt;
    int64_t bt_sb, bt_sp;
    const int32_t *lens;
    int64_t lens_s;
    int batch, nheads, nkv, group, lq, d;
    int page_shift;             /* log2 page_size */
    int max_pages, num_pages;
    int wl, wr;
    float scale_log2;
    float cap2;                 /* softcap * log2(e), 0: off */
    int mtiles;                 /* 16-row tiles of a kv head's query rows */
    int nsplit_max;
    int min_split;              /* keys a split takes at least (nsplit_of) */
    float *o_part;              /* (nsplit_max, b, lq, H, D) f32 */
    float *lse_part;            /* (nsplit_max, b, H, lq) f32 */
    unsigned int *ctr;          /* split counters (counters.h), or NULL: one split */
    unsigned int *err;          /* the context's error word (host-mapped), or NULL */
    /* FP8: scale of pool row (page, row, head) at ks[page * ks_sp + row *
     * ks_sr + head * ks_sh] (per-head scales: ks_sp = ks_sr = 0) */
    const float *ks, *vs;
    int64_t ks_sp, ks_sr, ks_sh, vs_sp, vs_sr, vs_sh;
    const float *alibi;         /* slopes of (b, h) at alibi[b * sb + h * sh], or NULL */
    int64_t alibi_sb, alibi_sh;
};

/* Score modifiers of an instance: none, softcap, or ALiBi (softcap then at
 * run time). */
enum { MOD_NONE = 0, MOD_CAP = 1, MOD_ALIBI = 2 };

/* Tiles of an instance (NAR): 16 query rows (wide) or 8 (narrow,
 * tile_step_n); variants of narrow (flags): NAR_FOUR four blocks an SM (two
 * stages, at most 128 registers) for FP8 pools at d <= 128, NAR_L2 the
 * K/V copies with the L2::256B hint, NAR_ACC2 S^T in two accumulators. */
enum { NAR_WIDE = 0, NAR_NARROW = 1, NAR_FOUR = 2, NAR_L2 = 4, NAR_ACC2 = 8 };


/* Two e4m3 codes (low byte first) as two T packed in 32 bits; exact. */
template <typename T> __device__ __forceinline__ uint32_t fp8x2_to(uint32_t v);
template <> __device__ __forceinline__ uint32_t fp8x2_to<__half>(uint32_t v) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3);
    return (uint32_t)h.x | ((uint32_t)h.y << 16);
}
template <> __device__ __forceinline__ uint32_t fp8x2_to<__nv_bfloat16>(uint32_t v) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3);
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<const uint32_t *>(&b);
}

/* Keys a split takes at least: below it, the merge costs more than the
 * parallelism gives back. */
constexpr int MIN_SPLIT_KEYS = 256;

/* Splits of a sequence of `len` keys: one per min_keys (MIN_SPLIT_KEYS
 * unless pinned, paged.cu), at most nsplit_max, at least 1.  The same on
 * host and device. */
__host__ __device__ __forceinline__ int nsplit_of(int len, int nsplit_max, int min_keys) {
    int n = (len + min_keys - 1) / min_keys;
    n = n < 1 ? 1 : n;
    return n < nsplit_max ? n : nsplit_max;
}

/* Most splits a sequence may have (the merge's scratch holds this many per
 * row; the counters count to 0xffff). */
constexpr int MAX_SPLITS = 256;

/* Keys of one split: a multiple of the 16-key tile. */
__device__ __forceinline__ int split_chunk(int len, int ns) { return (((len + ns - 1) / ns) + 15) & ~15; }

__device__ __forceinline__ void record_error(unsigned int *err, int b) { sf_record_row_error(err, b); }

template <int D, bool FP8 = false, int NAR = NAR_WIDE> struct PagedTraits {
    static constexpr int NW = 4;          /* warps, each on every 4th key tile */
    static constexpr bool FOUR = FP8 && (NAR & NAR_FOUR) && D <= 128;
    /* blocks an SM the register budget must allow: three fit in shared
     * memory at d <= 128 (the FP8 instances took 213 registers without it) */
    static constexpr int MINB = FOUR ? 4 : D <= 128 ? 3 : 1;
    /* cp.async stages per warp: two (70 KB at d 128) fit three blocks on an
     * SM where three stages fit two; the twelve warps beat the deeper ring
     * (b 8, 8k keys: 3.10 TB/s against 2.72).  FP8 tiles are half the bytes:
     * three stages (61 KB at d 128) still fit three blocks an SM (H100, b 32
     * with 4k keys: 2.21 TB/s of FP8 bytes against 2.07 with two stages and
     * a conversion tile); at d 256 two keep two blocks an SM (79 KB, where
     * three take 114). */
    static constexpr int ST = FP8 && D <= 128 && !FOUR ? 3 : 2;
    static constexpr int LDS = D + 8;     /* padded row (elements)             */
    static constexpr int TILE = 16;       /* keys a tile                       */
    static constexpr int STAGE_ELEMS = 2 * TILE * LDS;                 /* K and V */
    /* FP8 stage: K and V codes (rows of D + 16 bytes), then 16 K and 16 V
     * scales; V's f16 tile (16 x LDS) is written over the codes */
    static constexpr int LDB = D + 16;
    static constexpr int STAGE_BYTES = FP8 ? 2 * TILE * LDB + 2 * TILE * 4 : STAGE_ELEMS * 2;
    static_assert(!FP8 || TILE * LDS * 2 <= 2 * TILE * LDB, "V's f16 tile fits over the codes");
    static constexpr size_t SMEM_RING = (size_t)NW * ST * STAGE_BYTES;
    static constexpr size_t SMEM_KV = SMEM_RING;
    static constexpr size_t SMEM = (size_t)TILE * LDS * 2 + SMEM_KV;
    /* the warps' merge scratch (m, l, O in f32) reuses the K/V ring */
    static constexpr int OLD = D + 4;
    static_assert((size_t)NW * 16 * (2 + OLD) * 4 <= SMEM_KV, "merge scratch fits the ring");
    static_assert((size_t)16 * MAX_SPLITS * 4 <= SMEM_KV, "split merge scratch fits the ring");
};

/* The merge of a group's splits by the last of them (paged_attn): rows r0
 * .. r0 + 15 of kv head kvh of sequence b, each the lse-weighted sum of its
 * ns partial outputs (read from L2: other CTAs wrote them); rows 0 and lse
 * -inf when a split found the sequence bad.  sw: 16 x MAX_SPLITS floats of
 * shared scratch (the CTA's ring, free by now). */
template <typename T, int D>
__device__ __forceinline__ void combine_group(const PagedParams &p, int b, int kvh, int r0, int nrows, int ns,
                                              bool bad, float *sw) {
    const int tid = threadIdx.x;
    /* lse of each (row, split) */
    for (int i = tid; i < 16 * ns; i += blockDim.x) {
        const int r = i / ns, s = i - (i / ns) * ns, rr = r0 + r;
        float v = -INFINITY;
        if (rr < nrows) {
            const int tok = rr / p.group, h = kvh * p.group + (rr - tok * p.group);
            v = __ldcg(p.lse_part + (((int64_t)s * p.batch + b) * p.nheads + h) * p.lq + tok);
        }
        sw[r * MAX_SPLITS + s] = v;
    }
    __syncthreads();
    /* per row (a warp each, its lanes over the splits): the weights
     * exp(lse_s - M) / W in place, and the row's lse */
    const int lane = tid & 31;
    for (int r = tid >> 5; r < 16 && r0 + r < nrows; r += blockDim.x >> 5) {
        const int rr = r0 + r;
        float M = -INFINITY;
        for (int s = lane; s < ns; s += 32) M = fmaxf(M, sw[r * MAX_SPLITS + s]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        const float base = M == -INFINITY ? 0.f : M;
        float W = 0.f;
        for (int s = lane; s < ns; s += 32) W += __expf(sw[r * MAX_SPLITS + s] - base);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) W += __shfl_xor_sync(0xffffffffu, W, o);
        const float inv = W > 0.f && !bad ? 1.f / W : 0.f;
        for (int s = lane; s < ns; s += 32) sw[r * MAX_SPLITS + s] = __expf(sw[r * MAX_SPLITS + s] - base) * inv;
        if (p.lse && lane == 0) {
            const int tok = rr / p.group, h = kvh * p.group + (rr - tok * p.group);
            p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (int64_t)tok * p.l_sr] =
                W > 0.f && !bad ? M + logf(W) : -INFINITY;
        }
    }
    __syncthreads();
    /* 4 columns a thread: the splits' float4s, sixteen loads in flight */
    for (int i = tid; i < 16 * (D / 4); i += blockDim.x) {
        const int r = i / (D / 4), c = (i - r * (D / 4)) * 4, rr = r0 + r;
        if (rr >= nrows || c >= p.d) continue;
        const int tok = rr / p.group, h = kvh * p.group + (rr - tok * p.group);
        const int64_t row0 = ((int64_t)b * p.lq + tok) * p.nheads + h;
        const int64_t sstride = (int64_t)p.batch * p.lq * p.nheads * D;
        const float4 *src = reinterpret_cast<const float4 *>(p.o_part + row0 * D + c);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 16
        for (int s = 0; s < ns; s++) {
            const float4 v = __ldcg(src + s * (sstride / 4));
            const float w = sw[r * MAX_SPLITS + s];
            acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
        }
        T *dst = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)tok * p.o_sr + (int64_t)h * p.o_sh + c;
        const float a4[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (c + e < p.d) dst[e] = sf_elem<T>::from_f(a4[e]);
    }
}

/* The keys a split of (sequence b, kv head, 16-row tile) covers and what
 * its rows may see (split_setup): shared by the cp.async kernel below and
 * the bulk-copy one (decode_bulk.cuh). */
struct SplitWork {
    int len;          /* keys of the sequence (0 when its length is bad) */
    bool len_ok;
    int ns;           /* splits of the sequence                          */
    int nrows, r0;    /* query rows of the kv head, first row of the tile */
    int ks, ke;       /* the split's keys                                */
    int pg_first, pg_end, chk0; /* its pages; the first entry a thread checks */
    int rlo[2], rhi[2];         /* keys each fragment row sees           */
    int t0, t1;       /* its 16-key tiles any row of the tile sees       */
};

/* Fills w; false when this split has no keys to take (split >= ns).  The
 * table entries of the split's pages (all of [ks, ke), window or not, so
 * the splits of a group check every page of the sequence) are checked by
 * finish_split, each thread its share: the first entry is loaded here and
 * looked at after the key loop, so its latency hides behind the loads; a
 * bad entry is read as page 0 by the loads meanwhile. */
__device__ __forceinline__ bool split_setup(const PagedParams &p, int split, int b, int mt, int tid, int lane,
                                            SplitWork &w) {
    /* a length out of range: the sequence is bad and read as empty */
    const int len_in = p.lens[(int64_t)b * p.lens_s];
    w.len_ok = len_in == 0 || (len_in > 0 && p.num_pages > 0 &&
                               (int64_t)len_in <= ((int64_t)p.max_pages << p.page_shift));
    w.len = w.len_ok ? len_in : 0;
    w.ns = nsplit_of(w.len, p.nsplit_max, p.min_split);
    if (split >= w.ns) return false;
    w.nrows = p.group * p.lq, w.r0 = mt * 16;
    /* this split's keys, cut to what the tile's rows can see */
    const int chunk = split_chunk(w.len, w.ns);
    w.ks = split * chunk, w.ke = min(w.len, w.ks + chunk);
    w.pg_first = w.ks >> p.page_shift;
    w.pg_end = w.ke > w.ks ? ((w.ke - 1) >> p.page_shift) + 1 : w.pg_first;
    const int32_t *btb = p.bt + (int64_t)b * p.bt_sb;
    w.chk0 = w.pg_first + tid < w.pg_end ? btb[(int64_t)(w.pg_first + tid) * p.bt_sp] : 0;
    const int g = lane >> 2;
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int r = w.r0 + g + rr * 8;
        w.rlo[rr] = w.rhi[rr] = 0;
        if (r < w.nrows) {
            key_range(r / p.group, p.lq, w.len, p.wl, p.wr, w.rlo[rr], w.rhi[rr]);
            w.rlo[rr] = max(w.rlo[rr], w.ks);
            w.rhi[rr] = min(w.rhi[rr], w.ke);
        }
    }
    int lo_u, hi_u, unused;
    key_range(w.r0 / p.group, p.lq, w.len, p.wl, p.wr, lo_u, unused);
    key_range(min(w.r0 + 15, w.nrows - 1) / p.group, p.lq, w.len, p.wl, p.wr, unused, hi_u);
    const int kb = max(w.ks, lo_u), kend = min(w.ke, hi_u);
    w.t0 = kb / 16, w.t1 = kend > kb ? (kend + 15) / 16 : w.t0;
    return true;
}

/* Q rows of the tile into sQ (16 x LDS, zeros past the group's rows and
 * past d), one cp.async group issued by every thread; EL: element loads
 * (any head dim, rows of any alignment). */
template <typename T, int D, bool EL>
__device__ __forceinline__ void load_q(const PagedParams &p, T *sQ, int b, int kvh, const SplitWork &w, int tid) {
    constexpr int LDS = D + 8;
    if constexpr (EL) {
        const uint16_t *q = reinterpret_cast<const uint16_t *>(p.q);
        uint16_t *sq = reinterpret_cast<uint16_t *>(sQ);
        for (int i = tid; i < 16 * D; i += blockDim.x) {
            const int r = i / D, c = i - (i / D) * D;
            const int rr = w.r0 + r;
            uint16_t v = 0;
            if (rr < w.nrows && c < p.d) {
                const int tok = rr / p.group, h = kvh * p.group + (rr - tok * p.group);
                v = q[(int64_t)b * p.q_sb + (int64_t)tok * p.q_sr + (int64_t)h * p.q_sh + c];
            }
            sq[r * LDS + c] = v;
        }
        sf_cp_async_commit();
        return;
    }
    const int d8 = p.d >> 3;
    for (int i = tid; i < 16 * (D / 8); i += blockDim.x) {
        const int r = i / (D / 8), c = i - (i / (D / 8)) * (D / 8);
        const int rr = w.r0 + r;
        const bool v = rr < w.nrows && c < d8;
        const int tok = v ? rr / p.group : 0, h = kvh * p.group + (v ? rr - tok * p.group : 0);
        const T *src = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (int64_t)tok * p.q_sr +
                       (int64_t)h * p.q_sh + c * 8;
        sf_cp_async16_zfill(sQ + r * LDS + c * 8, v ? (const void *)src : p.q, v ? 16 : 0);
    }
    sf_cp_async_commit();
}

/* ALiBi: each fragment row's slope (log2 units) and key position */
__device__ __forceinline__ void alibi_rows(const PagedParams &p, int b, int kvh, const SplitWork &w, int lane,
                                           float (&slope2)[2], int (&rpos)[2]) {
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int r = w.r0 + (lane >> 2) + rr * 8;
        slope2[rr] = 0.f, rpos[rr] = 0;
        if (r < w.nrows) {
            const int tok = r / p.group, h = kvh * p.group + (r - tok * p.group);
            slope2[rr] = p.alibi[(int64_t)b * p.alibi_sb + (int64_t)h * p.alibi_sh] * 1.4426950408889634f;
            rpos[rr] = tok + w.len - p.lq;
        }
    }
}

/* FP8: V's codes (stage rows 16-31, D + 16 bytes each) into a 16 x D + 8
 * tile of T at the stage's start, over the K and V codes; call it after
 * S = Q K^T has read K.  In 512 / D-row steps, one 16-byte chunk a lane
 * each: a step's rows land below the codes of the steps after it
 * ((k + 1) x 512 / D rows of 2D + 16 bytes end at or before 16 + (k + 1) x
 * 512 / D rows of D + 16), but may cover its own, so every lane reads its
 * chunk before any writes. */
template <typename T, int D>
__device__ __forceinline__ void convert_v_in_place(unsigned char *stage, int lane) {
    constexpr int CH = D / 16, PR = 512 / D, LDB = D + 16, LDS = D + 8;
    static_assert(PR * CH == 32 && 16 % PR == 0, "one chunk a lane a step");
    const int r = lane / CH, c = lane - (lane / CH) * CH;
    T *dst = reinterpret_cast<T *>(stage) + r * LDS + c * 16;
    const unsigned char *src = stage + (16 + r) * LDB + c * 16;
    __syncwarp(); /* K read by every lane */
#pragma unroll
    for (int r0 = 0; r0 < 16; r0 += PR) {
        const uint4 in = *reinterpret_cast<const uint4 *>(src + r0 * LDB);
        __syncwarp(); /* this step's codes read by every lane */
        const uint32_t w[4] = {in.x, in.y, in.z, in.w};
        uint32_t o[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            o[2 * k] = fp8x2_to<T>(w[k] & 0xffffu);
            o[2 * k + 1] = fp8x2_to<T>(w[k] >> 16);
        }
        uint4 *d4 = reinterpret_cast<uint4 *>(dst + r0 * LDS);
        d4[0] = make_uint4(o[0], o[1], o[2], o[3]);
        d4[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
}

/* The Q fragments of the tile's 16 rows (sQ: 16 x D + 8).  16-bit pools:
 * ldmatrix, the usual k order.  FP8 pools: K's codes go into the products
 * without a shared-memory conversion (tile_step), which fixes the order of
 * k within each 16-wide chunk: mma k-slots (2t, 2t+1, 2t+8, 2t+9) of lane
 * quad t are columns 4t .. 4t+3, so Q's fragments are loaded in that order. */
template <typename T, int D, bool FP8>
__device__ __forceinline__ void load_qf(const T *sQ, uint32_t (&qf)[D / 16][4], int lane) {
    constexpr int LDS = D + 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        if constexpr (FP8) {
            const T *q0 = sQ + (lane >> 2) * LDS + kk * 16 + 4 * (lane & 3), *q1 = q0 + 8 * LDS;
            qf[kk][0] = *reinterpret_cast<const uint32_t *>(q0);
            qf[kk][1] = *reinterpret_cast<const uint32_t *>(q1);
            qf[kk][2] = *reinterpret_cast<const uint32_t *>(q0 + 2);
            qf[kk][3] = *reinterpret_cast<const uint32_t *>(q1 + 2);
        } else {
            sf_ldsm_x4(qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], sQ + (lane & 15) * LDS + kk * 16 + (lane >> 4) * 8);
        }
    }
}

/* FP8 pools: S = Q K^T runs in f16, whatever T is (an e4m3 pair becomes an
 * f16 pair in one instruction, a bf16 pair in four).  bf16 queries are
 * scaled by a power of two a row so that the row's largest |q| lies in
 * [2^14, 2^15): every bf16 value down to 2^-24 of its row's largest is then
 * exact in f16, and qinv (1 / the scale of rows lane / 4 and lane / 4 + 8)
 * goes back onto the scores (H100, b 32 with 4k keys: 2.26 TB/s of FP8
 * bytes against 2.21 with bf16 products).  The fragments' rows: [0] and [2]
 * row lane / 4, [1] and [3] that + 8 (load_qf). */
template <typename T, int D>
__device__ __forceinline__ void qf_to_f16(uint32_t (&qf)[D / 16][4], float (&qinv)[2]) {
    qinv[0] = qinv[1] = 1.f;
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        float mx[2] = {0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&qf[kk][j]));
                mx[j & 1] = fmaxf(mx[j & 1], fmaxf(fabsf(f.x), fabsf(f.y)));
            }
        float sc[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            /* the row's four lanes (a quad) hold all its columns */
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            int e = 15; /* a row with inf or NaN: left as it is */
            if (isfinite(mx[r])) frexpf(mx[r], &e);
            const int k = 15 - e > 126 ? 126 : 15 - e;
            sc[r] = ldexpf(1.f, k);
            qinv[r] = ldexpf(1.f, -k);
        }
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&qf[kk][j]));
                const __half2 h = __floats2half2_rn(f.x * sc[j & 1], f.y * sc[j & 1]);
                qf[kk][j] = *reinterpret_cast<const uint32_t *>(&h);
            }
    }
}

/* One 16-key tile of a warp: S = Q K^T, the online softmax, O += P V.
 * stage: the tile's K then V rows (16-bit: rows of D + 8 elements; FP8:
 * rows of D + 16 codes, then 16 K and 16 V f32 scales), complete and seen
 * by every lane.  FP8: ldmatrix of 8 keys x 16 codes hands a lane 4 codes
 * of one key (columns 4t .. 4t+3 of the chunk), converted in registers into
 * the B fragment of one product (load_qf's k order); V, which P V needs
 * transposed, is then converted to f16 over the stage's codes. */
template <typename T, int D, bool FP8, int MOD>
__device__ __forceinline__ void tile_step(const PagedParams &p, unsigned char *stage,
                                          const uint32_t (&qf)[D / 16][4], const float (&qinv)[2],
                                          float (&o)[D / 8][4], float (&mrow)[2],
                                          float (&lrow)[2], int key0, const int (&rlo)[2], const int (&rhi)[2],
                                          int lane, const float (&slope2)[2], const int (&rpos)[2],
                                          const ScoreMod &mod) {
    constexpr bool CAP = MOD == MOD_CAP;
    constexpr int LDS = D + 8, LDB = D + 16, KD = D / 16, NO = D / 8;
    /* P V's operands: T, or f16 with FP8 pages (every e4m3 code is an f16,
     * converted by one instruction a pair where bf16 takes four, and P in
     * [0, 1] keeps more bits in f16 than in bf16) */
    typedef typename std::conditional<FP8, __half, T>::type VT;
    const int tq = lane & 3;
    float s[2][4];
#pragma unroll
    for (int i = 0; i < 2; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    const T *sv;
    /* FP8: the tile's K and V scales (after the codes; the conversion of V
     * leaves them), read where they are used */
    const float *ssc = reinterpret_cast<const float *>(stage + 2 * 16 * LDB);
    if constexpr (FP8) {
        /* matrix lane / 8 of the x4: keys 0-7 / 8-15 (bit 0) of chunk kk / kk+1 (bit 1) */
        const uint8_t *kr = stage + ((lane >> 3 & 1) * 8 + (lane & 7)) * LDB + (lane >> 4) * 16;
#pragma unroll
        for (int kk = 0; kk < KD; kk += 2) {
            uint32_t c[4];
            sf_ldsm_x4(c[0], c[1], c[2], c[3], kr + kk * 16);
#pragma unroll
            for (int j = 0; j < 4; j++)
                sf_mma16<__half>::run(s[j & 1], qf[kk + (j >> 1)], fp8x2_to<__half>(c[j] & 0xffffu),
                                      fp8x2_to<__half>(c[j] >> 16));
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[i][e] *= ssc[i * 8 + 2 * tq + (e & 1)] * qinv[e >> 1];
        convert_v_in_place<VT, D>(stage, lane);
        sv = reinterpret_cast<const T *>(stage);
    } else {
        const T *sk = reinterpret_cast<const T *>(stage);
        sv = sk + 16 * LDS;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            uint32_t b0, b1, b2, b3;
            sf_ldsm_x4(b0, b1, b2, b3, sk + ((lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
            sf_mma16<T>::run(s[0], qf[kk], b0, b1);
            sf_mma16<T>::run(s[1], qf[kk], b2, b3);
        }
    }
    if constexpr (MOD == MOD_ALIBI) {
        /* scale, softcap and bias here; softmax_step then only masks */
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[i][e] * p.scale_log2;
                if (p.cap2 > 0.f) x = p.cap2 * tanhf(x / p.cap2);
                const int dist = rpos[e >> 1] - (key0 + i * 8 + 2 * tq + (e & 1));
                s[i][e] = x - slope2[e >> 1] * (float)(dist < 0 ? -dist : dist);
            }
        sf_attn::softmax_step<2, NO, false>(s, o, mrow, lrow, key0, true, rlo, rhi, tq, 1.0f, mod, 0);
    } else {
        sf_attn::softmax_step<2, NO, CAP>(s, o, mrow, lrow, key0, true, rlo, rhi, tq, p.scale_log2, mod, 0);
    }
    if constexpr (FP8) {
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[i][e] *= ssc[16 + i * 8 + 2 * tq + (e & 1)];
        __syncwarp(); /* V is in the tile */
    }
    uint32_t pa[4];
    pa[0] = sf_mma16<VT>::pack(s[0][0], s[0][1]);
    pa[1] = sf_mma16<VT>::pack(s[0][2], s[0][3]);
    pa[2] = sf_mma16<VT>::pack(s[1][0], s[1][1]);
    pa[3] = sf_mma16<VT>::pack(s[1][2], s[1][3]);
#pragma unroll
    for (int j = 0; j < NO / 2; j++) {
        uint32_t b0, b1, b2, b3;
        sf_ldsm_x4_t(b0, b1, b2, b3, sv + (lane & 15) * LDS + j * 16 + (lane >> 4) * 8);
        sf_mma16<VT>::run(o[2 * j], pa, b0, b1);
        sf_mma16<VT>::run(o[2 * j + 1], pa, b2, b3);
    }
}

/* Narrow tiles (NAR): where a kv head has at most 8 query rows (decode with
 * a GQA group of up to 8), rows 8-15 of the 16-row tile above would be
 * padding, so the products run transposed: S^T = K Q^T (16 keys x 8 rows,
 * K the A operand) and O^T += V^T P^T (16 dims x 8 rows a product, V^T by
 * ldmatrix.trans), P^T's B fragments made from S^T's accumulators by
 * movmatrix.  Half the mma, the exponentials and the O registers of the
 * wide tile.  A lane holds keys g and g + 8 (g = lane / 4) of rows 2 t and
 * 2 t + 1 (t = lane % 4), and O^T's dims j x 16 + g (+ 8) of the same two
 * rows; a row's max and sum run over the 8 lanes of its t. */

/* Q's B fragments (rows lane / 4 of sQ): 16-bit pools in the usual k order,
 * FP8 pools in tile_step's (k-slots 2t, 2t+1, 2t+8, 2t+9 of a 16-wide chunk
 * are its columns 4t .. 4t+3). */
template <typename T, int D, bool FP8>
__device__ __forceinline__ void load_qf_n(const T *sQ, uint32_t (&qf)[D / 16][2], int lane) {
    constexpr int LDS = D + 8;
    const T *q = sQ + (lane >> 2) * LDS + (FP8 ? 4 : 2) * (lane & 3);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        qf[kk][0] = *reinterpret_cast<const uint32_t *>(q + kk * 16);
        qf[kk][1] = *reinterpret_cast<const uint32_t *>(q + kk * 16 + (FP8 ? 2 : 8));
    }
}

/* FP8 pools: Q's fragments in f16 (qf_to_f16's scaling, one row a lane
 * quad); qinv[c] is then the inverse scale of row 2 t + c, the rows of this
 * lane's scores. */
template <typename T, int D>
__device__ __forceinline__ void qf_to_f16_n(uint32_t (&qf)[D / 16][2], float (&qinv)[2], int lane) {
    qinv[0] = qinv[1] = 1.f;
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        float mx = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&qf[kk][j]));
                mx = fmaxf(mx, fmaxf(fabsf(f.x), fabsf(f.y)));
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        int e = 15; /* a row with inf or NaN: left as it is */
        if (isfinite(mx)) frexpf(mx, &e);
        const int k = 15 - e > 126 ? 126 : 15 - e;
        const float sc = ldexpf(1.f, k), inv = ldexpf(1.f, -k);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&qf[kk][j]));
                const __half2 h = __floats2half2_rn(f.x * sc, f.y * sc);
                qf[kk][j] = *reinterpret_cast<const uint32_t *>(&h);
            }
        const int t = lane & 3;
        qinv[0] = __shfl_sync(0xffffffffu, inv, 8 * t);
        qinv[1] = __shfl_sync(0xffffffffu, inv, 8 * t + 4);
    }
}

/* A warp's start on narrow tiles: Q's B fragments (FP8 pools: in f16,
 * qinv the rows' inverse scales) and the keys rows 2 t and 2 t + 1 see
 * within the split (clo / chi). */
template <typename T, int D, bool FP8>
__device__ __forceinline__ void narrow_rows(const PagedParams &p, const SplitWork &w, const T *sQ,
                                            uint32_t (&qf)[D / 16][2], float (&qinv)[2], int (&clo)[2],
                                            int (&chi)[2], int lane) {
    load_qf_n<T, D, FP8>(sQ, qf, lane);
    if constexpr (FP8) qf_to_f16_n<T, D>(qf, qinv, lane);
#pragma unroll
    for (int c = 0; c < 2; c++) {
        const int r = 2 * (lane & 3) + c;
        if (r < w.nrows) {
            key_range(r / p.group, p.lq, w.len, p.wl, p.wr, clo[c], chi[c]);
            clo[c] = max(clo[c], w.ks);
            chi[c] = min(chi[c], w.ke);
        }
    }
}

/* One 16-key tile of a warp on narrow tiles (tile_step's contract; clo /
 * chi: the keys rows 2 t and 2 t + 1 see; m, l: those rows' running max and
 * this lane's part of their sums). */
/* A 16-byte cp.async of a K/V row chunk; L2: with the L2::256B prefetch
 * hint (NAR_L2). */
template <bool L2> __device__ __forceinline__ void cp16(void *s, const void *g, int bytes) {
    if constexpr (L2)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(sf_smem_u32(s)), "l"(g), "r"(bytes));
    else
        sf_cp_async16_zfill(s, g, bytes);
}

/* Byte offset of (row r, column c, a multiple of 8) of a 16-row tile of
 * 16-bit elements laid out as TMA's 128-byte swizzle writes D / 64 boxes of
 * 64 columns (decode_tma.cuh): box c / 64 at 2 KB steps, row r at 128 r,
 * its 16-byte chunk c / 8 % 8 at position (c / 8 % 8) ^ (r % 8). */
__device__ __forceinline__ int sw_off(int r, int c) {
    return (c >> 6) * 2048 + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4);
}

template <typename T, int D, bool FP8, bool CAP, bool ACC2 = false, bool SW = false>
__device__ __forceinline__ void tile_step_n(const PagedParams &p, unsigned char *stage,
                                            const uint32_t (&qf)[D / 16][2], const float (&qinv)[2],
                                            float (&o)[D / 16][4], float (&m)[2], float (&l)[2], int key0,
                                            const int (&clo)[2], const int (&chi)[2], int lane,
                                            const ScoreMod &mod, const float *ssc_sw = nullptr) {
    constexpr int LDS = D + 8, LDB = D + 16, KD = D / 16;
    typedef typename std::conditional<FP8, __half, T>::type VT;
    const int g = lane >> 2;
    /* s[e]: key g + (e >> 1) x 8, row 2 t + (e & 1) */
    float s[4] = {0.f, 0.f, 0.f, 0.f}, s2[4] = {0.f, 0.f, 0.f, 0.f};
    /* FP8: the tile's 16 K then 16 V scales (SW: in an array of their own) */
    const float *ssc = SW ? ssc_sw : reinterpret_cast<const float *>(stage + 2 * 16 * LDB);
    /* FP8 codes: row of matrix lane / 8 of an x4 (keys 0-7 / 8-15 by bit 0) */
    const int cr = (lane >> 3 & 1) * 8 + (lane & 7);
    if constexpr (FP8) {
        /* matrix lane / 8 of the x4: keys 0-7 / 8-15 (bit 0) of chunk kk / kk+1 (bit 1); a lane gets
         * codes 4t .. 4t+3 of key g (+ 8): A's k-slots 2t, 2t+1 (low pair) and 2t+8, 2t+9 (high) */
        const uint8_t *kr = stage + cr * LDB + (lane >> 4) * 16;
#pragma unroll
        for (int kk = 0; kk < KD; kk += 2) {
            uint32_t c[4];
            if constexpr (SW)
                sf_ldsm_x4(c[0], c[1], c[2], c[3], stage + sw_off(cr, 8 * (kk + (lane >> 4))));
            else
                sf_ldsm_x4(c[0], c[1], c[2], c[3], kr + kk * 16);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t a[4] = {fp8x2_to<__half>(c[2 * h] & 0xffffu), fp8x2_to<__half>(c[2 * h + 1] & 0xffffu),
                                       fp8x2_to<__half>(c[2 * h] >> 16), fp8x2_to<__half>(c[2 * h + 1] >> 16)};
                sf_mma16<__half>::run(ACC2 && h ? s2 : s, a, qf[kk + h][0], qf[kk + h][1]);
            }
        }
#pragma unroll
        for (int e = 0; e < 4; e++) s[e] = (ACC2 ? s[e] + s2[e] : s[e]) * ssc[g + (e >> 1) * 8] * qinv[e & 1];
    } else {
        const T *sk = reinterpret_cast<const T *>(stage);
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            uint32_t a[4];
            if constexpr (SW)
                sf_ldsm_x4(a[0], a[1], a[2], a[3], stage + sw_off(lane & 15, kk * 16 + (lane >> 4) * 8));
            else
                sf_ldsm_x4(a[0], a[1], a[2], a[3], sk + (lane & 15) * LDS + kk * 16 + (lane >> 4) * 8);
            sf_mma16<T>::run(ACC2 && (kk & 1) ? s2 : s, a, qf[kk][0], qf[kk][1]);
        }
        if constexpr (ACC2) {
#pragma unroll
            for (int e = 0; e < 4; e++) s[e] += s2[e];
        }
    }
    /* scale (log2 units), softcap, the rows' key ranges */
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float x = s[e] * p.scale_log2;
        if constexpr (CAP) x = mod.apply(x, 0, 0);
        const int j = key0 + g + (e >> 1) * 8;
        s[e] = j < clo[e & 1] || j >= chi[e & 1] ? -INFINITY : x;
    }
    float alpha[2];
#pragma unroll
    for (int c = 0; c < 2; c++) {
        float mx = fmaxf(m[c], fmaxf(s[c], s[2 + c]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        /* base 0 while the row has seen nothing: exps stay 0, no NaN */
        const float base = mx == -INFINITY ? 0.f : mx;
        alpha[c] = sf_ex2(m[c] - base);
        m[c] = mx;
        s[c] = sf_ex2(s[c] - base);
        s[2 + c] = sf_ex2(s[2 + c] - base);
        l[c] = l[c] * alpha[c] + s[c] + s[2 + c];
    }
#pragma unroll
    for (int j = 0; j < KD; j++) {
        o[j][0] *= alpha[0], o[j][1] *= alpha[1];
        o[j][2] *= alpha[0], o[j][3] *= alpha[1];
    }
    if constexpr (FP8) {
#pragma unroll
        for (int e = 0; e < 4; e++) s[e] *= ssc[16 + g + (e >> 1) * 8];
    }
    /* P^T's B fragment: keys 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of row g */
    const uint32_t pb0 = sf_movm_t(sf_mma16<VT>::pack(s[0], s[1]));
    const uint32_t pb1 = sf_movm_t(sf_mma16<VT>::pack(s[2], s[3]));
    if constexpr (FP8) {
        /* V's codes straight into A fragments (H100, b 32 with 4k keys: 2.35 TB/s of FP8 bytes, 2.28 with V
         * converted in shared memory as the wide tiles do): ldmatrix of 8 keys x 16 codes hands a lane codes 4t .. 4t+3
         * of key g; movmatrix turns that into codes 2g, 2g+1 of keys 2t and 2t+1, and a byte permute
         * pairs them by dim, one pair a cvt.  O^T's rows g / g + 8 of product j are then dims 16 j + 2g
         * and + 1 (finish_split writes them so). */
        const uint8_t *vr = stage + (16 + cr) * LDB + (lane >> 4) * 16;
#pragma unroll
        for (int j = 0; j < KD; j += 2) {
            uint32_t c[4];
            if constexpr (SW)
                sf_ldsm_x4(c[0], c[1], c[2], c[3], stage + 16 * D + sw_off(cr, 8 * (j + (lane >> 4))));
            else
                sf_ldsm_x4(c[0], c[1], c[2], c[3], vr + j * 16);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t u0 = __byte_perm(sf_movm_t(c[2 * h]), 0u, 0x3120u);
                const uint32_t u1 = __byte_perm(sf_movm_t(c[2 * h + 1]), 0u, 0x3120u);
                const uint32_t a[4] = {fp8x2_to<__half>(u0 & 0xffffu), fp8x2_to<__half>(u0 >> 16),
                                       fp8x2_to<__half>(u1 & 0xffffu), fp8x2_to<__half>(u1 >> 16)};
                sf_mma16<__half>::run(o[j + h], a, pb0, pb1);
            }
        }
        return;
    }
    /* V^T's A fragments by ldmatrix.trans: matrices keys 0-7 / 8-15 (bit 1) x dims 0-7 / 8-15 (bit 0) */
    const T *vr = reinterpret_cast<const T *>(stage) + 16 * LDS + ((lane & 7) + ((lane >> 4) << 3)) * LDS + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int j = 0; j < KD; j++) {
        uint32_t a[4];
        if constexpr (SW)
            sf_ldsm_x4_t(a[0], a[1], a[2], a[3],
                         stage + 16 * D * 2 + sw_off((lane & 7) + ((lane >> 4) << 3), j * 16 + ((lane >> 3) & 1) * 8));
        else
            sf_ldsm_x4_t(a[0], a[1], a[2], a[3], vr + j * 16);
        sf_mma16<VT>::run(o[j], a, pb0, pb1);
    }
}

/* After a split's key loop (every load waited for): the rest of its table
 * checks, the merge of the CTA's NW warps (m, l, O) in shared scratch (the
 * ring, free by now: NW x 16 x (D + 6) floats), then the output (one split)
 * or the split's partials, and with several splits the counter and, by the
 * last split of the group, the merge of them all. */
template <typename T, int D, int NW, int NAR, bool FP8>
__device__ __forceinline__ void finish_split(const PagedParams &p, const SplitWork &w, int split, int b, int kvh,
                                             float (&o)[NAR ? D / 16 : D / 8][4], const float (&mrow)[2],
                                             float (&lrow)[2], float *scratch) {
    constexpr int NO = NAR ? D / 16 : D / 8, OLD = D + 4;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    /* the row sums over the lanes that hold parts of them */
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        if constexpr (NAR) {
            lrow[rr] += __shfl_xor_sync(0xffffffffu, lrow[rr], 4);
            lrow[rr] += __shfl_xor_sync(0xffffffffu, lrow[rr], 8);
            lrow[rr] += __shfl_xor_sync(0xffffffffu, lrow[rr], 16);
        } else {
            lrow[rr] += __shfl_xor_sync(0xffffffffu, lrow[rr], 1);
            lrow[rr] += __shfl_xor_sync(0xffffffffu, lrow[rr], 2);
        }
    }
    /* the rest of the split's table entries (past the first a thread took) */
    const int32_t *btb = p.bt + (int64_t)b * p.bt_sb;
    bool bad = !w.len_ok || (w.pg_first + tid < w.pg_end && (unsigned)w.chk0 >= (unsigned)p.num_pages);
    for (int i = w.pg_first + tid + (int)blockDim.x; i < w.pg_end; i += blockDim.x) {
        const int pg = btb[(int64_t)i * p.bt_sp];
        bad |= (unsigned)pg >= (unsigned)p.num_pages;
    }
    const bool direct = w.ns == 1 || !p.ctr;
    /* merge the warps: m (log2 units), l and the unnormalised O of each */
    __syncthreads(); /* every warp is done with the ring */
    float *ms = scratch;
    float *ls = ms + NW * 16;
    float *os = ls + NW * 16;
    if constexpr (NAR) { /* rows 2 t, 2 t + 1; rows 8-15 of the scratch unused */
        if (g == 0) {
            ms[warp * 16 + 2 * tq] = mrow[0], ms[warp * 16 + 2 * tq + 1] = mrow[1];
            ls[warp * 16 + 2 * tq] = lrow[0], ls[warp * 16 + 2 * tq + 1] = lrow[1];
        }
#pragma unroll
        for (int j = 0; j < NO; j++) {
            if constexpr (FP8) { /* rows g / g + 8 of product j: dims 16 j + 2g, + 1 (tile_step_n) */
                float *o0 = os + (warp * 16 + 2 * tq) * OLD + j * 16 + 2 * g, *o1 = o0 + OLD;
                o0[0] = o[j][0], o1[0] = o[j][1];
                o0[1] = o[j][2], o1[1] = o[j][3];
            } else {
                float *o0 = os + (warp * 16 + 2 * tq) * OLD + j * 16 + g, *o1 = o0 + OLD;
                o0[0] = o[j][0], o1[0] = o[j][1];
                o0[8] = o[j][2], o1[8] = o[j][3];
            }
        }
    } else {
        if (tq == 0) {
            ms[warp * 16 + g] = mrow[0], ms[warp * 16 + g + 8] = mrow[1];
            ls[warp * 16 + g] = lrow[0], ls[warp * 16 + g + 8] = lrow[1];
        }
#pragma unroll
        for (int i = 0; i < NO; i++) {
            float *o0 = os + (warp * 16 + g) * OLD + i * 8 + 2 * tq, *o1 = o0 + 8 * OLD;
            o0[0] = o[i][0], o0[1] = o[i][1];
            o1[0] = o[i][2], o1[1] = o[i][3];
        }
    }
    bad = __syncthreads_or(bad) != 0; /* also: the scratch is written */
    for (int idx = tid; idx < 16 * D; idx += blockDim.x) {
        const int r = idx / D, c = idx - (idx / D) * D;
        const int rr = w.r0 + r;
        if (rr >= w.nrows || c >= p.d) continue;
        float M = -INFINITY;
#pragma unroll
        for (int k = 0; k < NW; k++) M = fmaxf(M, ms[k * 16 + r]);
        const float base = M == -INFINITY ? 0.f : M;
        float L = 0.f, acc = 0.f;
#pragma unroll
        for (int k = 0; k < NW; k++) {
            const float f = sf_ex2(ms[k * 16 + r] - base);
            L += ls[k * 16 + r] * f;
            acc += os[(k * 16 + r) * OLD + c] * f;
        }
        const bool has = L > 0.f && !bad;
        const float val = has ? acc / L : 0.f;
        const float lsev = has ? (M + __log2f(L)) * 0.69314718055994531f : -INFINITY;
        const int tok = rr / p.group, h = kvh * p.group + (rr - tok * p.group);
        if (direct) {
            T *dst = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)tok * p.o_sr + (int64_t)h * p.o_sh;
            dst[c] = sf_elem<T>::from_f(val);
            if (p.lse && c == 0)
                p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (int64_t)tok * p.l_sr] = lsev;
        } else {
            const int64_t row = (((int64_t)split * p.batch + b) * p.lq + tok) * p.nheads + h;
            p.o_part[row * D + c] = val;
            if (c == 0) p.lse_part[(((int64_t)split * p.batch + b) * p.nheads + h) * p.lq + tok] = lsev;
        }
    }
    if (bad && tid == 0) record_error(p.err, b);
    if (direct) return;
    /* Several splits: the last of the group to finish merges them.  Each
     * publishes its partials (fence) before it counts itself; a bad split
     * counts 0x10000 more, so the last one knows whether any was bad. */
    __threadfence();
    __syncthreads();
    __shared__ unsigned int last_word;
    unsigned int *ctr = p.ctr + (int64_t)b * gridDim.y + blockIdx.y;
    if (tid == 0) {
        const unsigned int old = atomicAdd(ctr, 1u + (bad ? 0x10000u : 0u));
        const bool last = (old & 0xffffu) == (unsigned)w.ns - 1u;
        last_word = last ? 1u + ((old >> 16) != 0u || bad ? 1u : 0u) : 0u;
        if (last) *ctr = 0u; /* every split has counted: back to 0 for the next call */
    }
    __syncthreads();
    if (last_word == 0u) return;
    __threadfence();
    const bool any_bad = last_word == 2u;
    combine_group<T, D>(p, b, kvh, w.r0, w.nrows, w.ns, any_bad, scratch);
}

/* EL: the pools' and q's rows by element loads, for head dims that are not
 * whole 16-byte chunks or rows that are not 16-byte aligned (the stage
 * tiles are the same, zero past d, so everything after the loads is
 * shared); the loads of a tile are then not asynchronous. */
template <typename T, int D, bool FP8, int MOD, bool EL, int NAR>
__global__ void __launch_bounds__(128, PagedTraits<D, FP8, NAR>::MINB) paged_attn(const PagedParams p) {
    typedef PagedTraits<D, FP8, NAR> Tr;
    static_assert(!NAR || (!EL && MOD != MOD_ALIBI), "narrow tiles: cp.async loads, no ALiBi");
    constexpr int NW = Tr::NW, ST = Tr::ST, LDS = Tr::LDS, KD = D / 16, NO = NAR ? D / 16 : D / 8;
    /* 16-byte chunks of a row: 8 elements of T, or 16 FP8 codes */
    constexpr int CH = FP8 ? D / 16 : D / 8;
    constexpr int LOADS = (16 * CH + 31) / 32; /* 16-byte chunks a lane moves per tile and tensor */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sKV = sQ + 16 * LDS;

    /* launched as a programmatic dependent (sm_90): nothing is read before
     * the kernel ahead is done; the next kernel may launch at once (the
     * engine's o_proj waits for this one before reading anything) */
    sf_pdl_wait();
    sf_pdl_launch();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int split = blockIdx.x, b = blockIdx.z;
    const int kvh = blockIdx.y / p.mtiles, mt = blockIdx.y - kvh * p.mtiles;
    SplitWork w;
    if (!split_setup(p, split, b, mt, tid, lane, w)) return;
    const int len = w.len;
    const int dch = FP8 ? p.d >> 4 : p.d >> 3; /* valid 16-byte chunks of a pool row */

    unsigned char *ring = reinterpret_cast<unsigned char *>(sKV) + (size_t)warp * ST * Tr::STAGE_BYTES;
    load_q<T, D, EL>(p, sQ, b, kvh, w, tid);

    const int my_tiles = w.t1 - w.t0 > warp ? (w.t1 - w.t0 - warp + NW - 1) / NW : 0;
    const int tfirst = w.t0 + warp, tstep = NW; /* this warp's tiles */

    ScoreMod mod = ScoreMod();
    mod.cap2 = p.cap2;
    float slope2[2] = {0.f, 0.f};
    int rpos[2] = {0, 0};
    if constexpr (MOD == MOD_ALIBI) alibi_rows(p, b, kvh, w, lane, slope2, rpos);

    typedef typename std::conditional<FP8, uint8_t, T>::type KV;
    const KV *kc = reinterpret_cast<const KV *>(p.kc) + (int64_t)kvh * p.k_sh;
    const KV *vc = reinterpret_cast<const KV *>(p.vc) + (int64_t)kvh * p.v_sh;
    const float *ksc = FP8 ? p.ks + (int64_t)kvh * p.ks_sh : nullptr;
    const float *vsc = FP8 ? p.vs + (int64_t)kvh * p.vs_sh : nullptr;
    const int32_t *bt = p.bt + (int64_t)b * p.bt_sb;
    const int pmask = (1 << p.page_shift) - 1;
    /* row stride of a stage tile (elements of KV) */
    constexpr int RS = FP8 ? Tr::LDB : LDS;
    /* What a lane moves of each tile is fixed: chunk c of row r, for LOADS
     * (r, c) pairs.  Their offsets within a page row and within a stage are
     * computed once; with pages of 16 keys or more (a whole tile in one
     * page) a tile then costs one table entry and one 64-bit base per
     * tensor instead of a table entry and 64-bit products per chunk. */
    int crow[LOADS], lcol[LOADS], soff[LOADS];
    bool lval[LOADS];
#pragma unroll
    for (int it = 0; it < LOADS; it++) {
        const int i = lane + it * 32;
        const int r = i / CH, c = i - (i / CH) * CH;
        lval[it] = ((16 * CH) % 32 == 0 || i < 16 * CH) && c < dch;
        crow[it] = r;
        lcol[it] = c * (FP8 ? 16 : 8);
        soff[it] = r * RS + c * (FP8 ? 16 : 8);
    }
    const bool tile_page = p.page_shift >= 4;
    /* the pool page of key `key`; an entry out of range (the sequence is
     * bad, found by the check) reads page 0, so no load leaves the pool */
    auto page_at = [&](int key) -> int64_t {
        const int pg = bt[(int64_t)(key >> p.page_shift) * p.bt_sp];
        return (unsigned)pg < (unsigned)p.num_pages ? pg : 0;
    };
    /* Key tile t into stage st: 16 rows of K then of V; rows past the
     * sequence are zero-filled (their pages need not exist).  FP8: then the
     * 16 K scales (lanes 0-15) and V scales (lanes 16-31), 0 past it. */
    auto load = [&](int t, int st) {
        KV *sk = reinterpret_cast<KV *>(ring + st * Tr::STAGE_BYTES), *sv = sk + 16 * RS;
        const int key0 = t * 16;
        if constexpr (EL) {
            /* lane r < 16 finds row r's page; the warp then moves the tile
             * a row at a time (D a multiple of 32: r is the same for every
             * lane of an iteration), each row's offset by a shuffle */
            typedef typename std::conditional<FP8, uint8_t, uint16_t>::type RAW;
            const RAW *kr = reinterpret_cast<const RAW *>(kc), *vr = reinterpret_cast<const RAW *>(vc);
            RAW *skr = reinterpret_cast<RAW *>(sk), *svr = reinterpret_cast<RAW *>(sv);
            const int key = key0 + (lane & 15);
            int64_t ko = 0, vo = 0, so = 0;
            if (key < len) {
                const int64_t pg = page_at(key), row = key & pmask;
                ko = pg * p.k_sp + row * p.k_sr;
                vo = pg * p.v_sp + row * p.v_sr;
                if constexpr (FP8) so = lane < 16 ? pg * p.ks_sp + row * p.ks_sr : pg * p.vs_sp + row * p.vs_sr;
            }
#pragma unroll 4
            for (int i = lane; i < 16 * D; i += 32) {
                const int r = i / D, c = i - (i / D) * D;
                const int64_t kro = __shfl_sync(0xffffffffu, ko, r), vro = __shfl_sync(0xffffffffu, vo, r);
                const bool v = c < p.d && key0 + r < len;
                skr[r * RS + c] = v ? kr[kro + c] : RAW(0);
                svr[r * RS + c] = v ? vr[vro + c] : RAW(0);
            }
            if constexpr (FP8) { /* the scales: lanes 0-15 K's, 16-31 V's, as below */
                float *dst = reinterpret_cast<float *>(sv + 16 * RS) + lane;
                sf_cp_async4_zfill(dst, (lane < 16 ? ksc : vsc) + so, key < len ? 4 : 0);
            }
        } else if (tile_page) {
            const int64_t pg = page_at(key0);
            const int64_t row0 = key0 & pmask;
            const KV *kt = kc + pg * p.k_sp + row0 * p.k_sr, *vt = vc + pg * p.v_sp + row0 * p.v_sr;
#pragma unroll
            for (int it = 0; it < LOADS; it++) {
                const bool v = lval[it] && key0 + crow[it] < len;
                const KV *ksrc = kt + (int64_t)crow[it] * p.k_sr + lcol[it];
                const KV *vsrc = vt + (int64_t)crow[it] * p.v_sr + lcol[it];
                cp16<(NAR & NAR_L2) != 0>(sk + soff[it], v ? ksrc : kc, v ? 16 : 0);
                cp16<(NAR & NAR_L2) != 0>(sv + soff[it], v ? vsrc : vc, v ? 16 : 0);
            }
            if constexpr (FP8) {
                const int r = lane & 15, key = key0 + r;
                const bool v = key < len;
                float *dst = reinterpret_cast<float *>(sv + 16 * RS) + lane;
                const float *src = lane < 16 ? ksc + pg * p.ks_sp + (row0 + r) * p.ks_sr
                                             : vsc + pg * p.vs_sp + (row0 + r) * p.vs_sr;
                sf_cp_async4_zfill(dst, v ? src : p.ks, v ? 4 : 0);
            }
        } else {
#pragma unroll
            for (int it = 0; it < LOADS; it++) {
                const int key = key0 + crow[it];
                const bool v = lval[it] && key < len;
                int64_t ko = 0, vo = 0;
                if (v) {
                    const int64_t pg = page_at(key);
                    const int64_t row = key & pmask;
                    ko = pg * p.k_sp + row * p.k_sr + lcol[it];
                    vo = pg * p.v_sp + row * p.v_sr + lcol[it];
                }
                sf_cp_async16_zfill(sk + soff[it], kc + ko, v ? 16 : 0);
                sf_cp_async16_zfill(sv + soff[it], vc + vo, v ? 16 : 0);
            }
            if constexpr (FP8) {
                const int key = key0 + (lane & 15);
                const bool v = key < len;
                int64_t o = 0;
                if (v) {
                    const int64_t pg = page_at(key);
                    const int64_t row = key & pmask;
                    o = lane < 16 ? pg * p.ks_sp + row * p.ks_sr : pg * p.vs_sp + row * p.vs_sr;
                }
                float *dst = reinterpret_cast<float *>(sv + 16 * RS) + lane;
                sf_cp_async4_zfill(dst, (lane < 16 ? ksc : vsc) + o, v ? 4 : 0);
            }
        }
    };

#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < my_tiles) load(tfirst + s * tstep, s);
        sf_cp_async_commit();
    }
    /* Q (the first group, issued by every thread) is in */
    sf_cp_async_wait<ST - 1>();
    __syncthreads();
    uint32_t qf[KD][NAR ? 2 : 4];
    float qinv[2] = {1.f, 1.f};
    /* narrow tiles: the keys rows 2 t and 2 t + 1 see */
    int clo[2] = {0, 0}, chi[2] = {0, 0};
    if constexpr (NAR) {
        narrow_rows<T, D, FP8>(p, w, sQ, qf, qinv, clo, chi, lane);
    } else {
        load_qf<T, D, FP8>(sQ, qf, lane);
        if constexpr (FP8) qf_to_f16<T, D>(qf, qinv);
    }
    /* no lane needs this (Q is in registers); it fences the compiler, and
     * the loop below was timed with the schedule it gives */
    __syncwarp();

    float o[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};

    for (int n = 0; n < my_tiles; n++) {
        if (n + ST - 1 < my_tiles) load(tfirst + (n + ST - 1) * tstep, (n + ST - 1) % ST);
        sf_cp_async_commit();
        sf_cp_async_wait<ST - 1>();
        __syncwarp();
        if constexpr (NAR)
            tile_step_n<T, D, FP8, MOD == MOD_CAP, (NAR & NAR_ACC2) != 0>(p, ring + (n % ST) * Tr::STAGE_BYTES, qf, qinv, o, mrow, lrow,
                                                   (tfirst + n * tstep) * 16, clo, chi, lane, mod);
        else
            tile_step<T, D, FP8, MOD>(p, ring + (n % ST) * Tr::STAGE_BYTES, qf, qinv, o, mrow, lrow,
                                      (tfirst + n * tstep) * 16, w.rlo, w.rhi, lane, slope2, rpos, mod);
        __syncwarp(); /* the stage is reloaded next iteration */
    }
    sf_cp_async_wait<0>();
    finish_split<T, D, NW, NAR, FP8>(p, w, split, b, kvh, o, mrow, lrow, reinterpret_cast<float *>(sKV));
}

} /* namespace sf_paged */

#endif
