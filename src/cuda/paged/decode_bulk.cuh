/* decode_bulk.cuh - sf_attn_paged on sm_90a with the bulk copy engine: a
 * producer warp streams whole key tiles of K and V into a multi-stage
 * shared-memory ring, consumer warps compute on tensor cores (the "bulk"
 * configurations of configs.h; decode.cuh's mma kernel serves the rest).
 *
 * Why: decode reads each K/V byte once, so its speed is the bytes kept in
 * flight per SM.  The mma kernel's warps each issue their own 16-byte
 * cp.async chunks between their own softmax steps (16 chunks a lane per
 * 16-key tile, one tile ahead); here one warp issues one bulk copy per K or
 * V row (cp.async.bulk, completing as transaction bytes on the stage's
 * "full" mbarrier) for up to ST tiles of KEYS keys ahead of the consumers,
 * who only compute.
 *
 * Grid and rows as decode.cuh: x = split, y = (kv head, 16-row tile of the
 * group's query rows), z = sequence.  Block: KEYS / 16 consumer warps, each
 * on its 16 keys of every tile (its own online softmax, merged at the end
 * through shared memory), then the producer warp.  Rows of a stage sit at a
 * padded stride (D + 8 elements), so ldmatrix reads them without bank
 * conflicts; the pad columns past the head dim are zeroed once.
 *
 * Rows past the sequence's end are copies of its last key (its page is in
 * the pool): finite, and their scores are masked, so P is 0 there.
 *
 * Validation is folded in: the producer checks every table entry it maps
 * before copying through it (an entry outside the pool is never read, its
 * rows stay as they were), the block scans the entries of its split it did
 * not need (keys outside a window), and a length outside [0, capacity]
 * reads nothing.  A CTA that found something bad records it in the
 * context's error word and its sequence's rows get 0 (lse -inf).
 *
 * Split-KV: the split count of a sequence comes from its length on the
 * device (nsplit_of, as decode.cuh), each split a multiple of KEYS keys.
 * The combine is fused: each split writes its f32 partial (O normalised,
 * lse), then adds 1 (plus 1 << 16 when it found a bad entry) to its
 * (sequence, kv head, row tile)'s counter; the CTA that brings the count
 * to the split count merges the partials in split order (the same bits
 * whichever CTA is last) and resets the counter to 0 for the next call.
 */
#ifndef SF_PAGED_DECODE_BULK_CUH
#define SF_PAGED_DECODE_BULK_CUH

#include "common/wgmma.cuh"
#include "paged/decode.cuh"

namespace sf_paged {

template <int D, int KEYS, int ST> struct BulkTraits {
    static_assert(KEYS % 32 == 0 && KEYS >= 32 && KEYS <= 128, "32, 64, 96 or 128 keys a tile");
    static constexpr int CW = KEYS / 16;          /* consumer warps          */
    static constexpr int THREADS = 32 * (CW + 1); /* and the producer warp   */
    static constexpr int LDS = D + 8;             /* padded row (elements)   */
    static constexpr int STAGE_ELEMS = 2 * KEYS * LDS; /* K rows, then V rows */
    static constexpr size_t Q_BYTES = (size_t)16 * LDS * 2;
    static constexpr size_t RING = (size_t)ST * STAGE_ELEMS * 2;
    static constexpr size_t BAR_OFF = Q_BYTES + RING;
    /* full[ST], empty[ST] mbarriers, then two flag words */
    static constexpr size_t SMEM = BAR_OFF + (size_t)2 * ST * 8 + 16;
    /* end of the block: the warps' (m, l, O) merge scratch in the ring,
     * then the combine's weights (64 splits x 16 rows) and lse (16 rows) */
    static constexpr int OLD = D + 4;
    static constexpr size_t MERGE = (size_t)CW * 16 * (2 + OLD) * 4;
    static_assert(MERGE + (64 * 16 + 16) * 4 <= RING, "merge and combine scratch fit the ring");
    static_assert(SMEM <= 227 * 1024, "over sm_90's opt-in shared memory");
};

/* Keys of one split: a multiple of the tile, so no tile is shared by two
 * splits. */
template <int KEYS> __device__ __forceinline__ int bulk_chunk(int len, int ns) {
    return ((len + ns - 1) / ns + KEYS - 1) / KEYS * KEYS;
}

template <typename T, int D, int KEYS, int ST, int MOD>
__global__ void __launch_bounds__(BulkTraits<D, KEYS, ST>::THREADS) paged_attn_bulk(const PagedParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef BulkTraits<D, KEYS, ST> Tr;
    using namespace sf_wg;
    constexpr bool CAP = MOD == MOD_CAP;
    constexpr int CW = Tr::CW, LDS = Tr::LDS, KD = D / 16, NO = D / 8, NT = Tr::THREADS;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *ring = reinterpret_cast<T *>(smem_raw + Tr::Q_BYTES);
    const uint32_t bars = sf_smem_u32(smem_raw + Tr::BAR_OFF); /* full s: + 8 s; empty s: + 8 (ST + s) */
    int *sflag = reinterpret_cast<int *>(smem_raw + Tr::BAR_OFF + 16 * ST);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int split = blockIdx.x, b = blockIdx.z;
    const int kvh = blockIdx.y / p.mtiles, mt = blockIdx.y - kvh * p.mtiles;
    const int64_t cap = (int64_t)p.max_pages << p.page_shift;
    const int len_in = p.lens[(int64_t)b * p.lens_s];
    const bool len_bad = len_in < 0 || (int64_t)len_in > cap;
    const int len = len_bad ? 0 : len_in;
    const int ns = nsplit_of(len, p.nsplit_max);
    if (split >= ns) return;
    const int nrows = p.group * p.lq, r0 = mt * 16;

    /* this split's keys and the tiles the block's rows can see of them */
    const int chunk = bulk_chunk<KEYS>(len, ns);
    const int ks = min(len, split * chunk), ke = min(len, ks + chunk);
    int lo_u, hi_u, unused;
    key_range(r0 / p.group, p.lq, len, p.wl, p.wr, lo_u, unused);
    key_range(min(r0 + 15, nrows - 1) / p.group, p.lq, len, p.wl, p.wr, unused, hi_u);
    const int kb = max(ks, lo_u), kend = min(ke, hi_u);
    const int t0 = kb / KEYS, ntiles = kend > kb ? (kend + KEYS - 1) / KEYS - t0 : 0;

    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            mbar_init(bars + 8 * s, 32);        /* every producer lane arrives */
            mbar_init(bars + 8 * (ST + s), CW); /* lane 0 of every consumer warp */
        }
        mbar_init_fence();
    }
    /* pad columns [d, D) of every ring row: zero once (the copies move d) */
    if (p.d < D) {
        const int nz = (D - p.d) / 8;
        for (int i = tid; i < ST * 2 * KEYS * nz; i += NT) {
            const int r = i / nz, c = p.d + (i - r * nz) * 8;
            *reinterpret_cast<uint4 *>(ring + (size_t)r * LDS + c) = make_uint4(0, 0, 0, 0);
        }
        fence_async_smem();
    }
    __syncthreads();

    int bad = 0;
    /* consumer state */
    const int g = lane >> 2, tq = lane & 3;
    float o[NO][4];
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < NO; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;

    if (warp == CW) {
        /* producer: lane l copies rows l, l + 32, ... of K and of V */
        constexpr int RPL = KEYS / 32;
        const T *kc = reinterpret_cast<const T *>(p.kc) + (int64_t)kvh * p.k_sh;
        const T *vc = reinterpret_cast<const T *>(p.vc) + (int64_t)kvh * p.v_sh;
        const int32_t *bt = p.bt + (int64_t)b * p.bt_sb;
        const int pmask = (1 << p.page_shift) - 1;
        const uint32_t rowb = (uint32_t)p.d * 2;
        int pg[RPL], prow[RPL];
        /* the table entries of tile t, a tile ahead of its copies */
        auto lookup = [&](int t) {
#pragma unroll
            for (int j = 0; j < RPL; j++) {
                const int key = min(t * KEYS + lane + 32 * j, len - 1);
                pg[j] = bt[(int64_t)(key >> p.page_shift) * p.bt_sp];
                prow[j] = key & pmask;
            }
        };
        if (ntiles > 0) lookup(t0);
        for (int n = 0; n < ntiles; n++) {
            const int s = n % ST;
            if (n >= ST) mbar_wait_sleep(bars + 8 * (ST + s), (uint32_t)((n / ST - 1) & 1));
            bool ok[RPL];
            uint32_t bytes = 0;
#pragma unroll
            for (int j = 0; j < RPL; j++) {
                ok[j] = pg[j] >= 0 && pg[j] < p.num_pages;
                bad |= !ok[j];
                bytes += ok[j] ? 2 * rowb : 0;
            }
            const uint32_t full = bars + 8 * s;
            mbar_expect_tx(full, bytes); /* this lane's arrival, with its bytes */
            T *sk = ring + (size_t)s * Tr::STAGE_ELEMS, *sv = sk + KEYS * LDS;
#pragma unroll
            for (int j = 0; j < RPL; j++) {
                if (!ok[j]) continue;
                const int r = lane + 32 * j;
                bulk_copy_g2s(sf_smem_u32(sk + r * LDS), kc + (int64_t)pg[j] * p.k_sp + (int64_t)prow[j] * p.k_sr,
                              rowb, full);
                bulk_copy_g2s(sf_smem_u32(sv + r * LDS), vc + (int64_t)pg[j] * p.v_sp + (int64_t)prow[j] * p.v_sr,
                              rowb, full);
            }
            if (n + 1 < ntiles) lookup(t0 + n + 1);
        }
    } else {
        /* consumers: Q rows of this tile (zeros past the group's rows and d) */
        const int d8 = p.d >> 3;
        for (int i = tid; i < 16 * (D / 8); i += 32 * CW) {
            const int r = i / (D / 8), c = i - r * (D / 8);
            const int rr = r0 + r;
            const bool v = rr < nrows && c < d8;
            const int tok = v ? rr / p.group : 0, h = kvh * p.group + (v ? rr - tok * p.group : 0);
            const T *src = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (int64_t)tok * p.q_sr +
                           (int64_t)h * p.q_sh + c * 8;
            sf_cp_async16_zfill(sQ + r * LDS + c * 8, v ? (const void *)src : p.q, v ? 16 : 0);
        }
        sf_cp_async_commit();
        int rlo[2], rhi[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const int r = r0 + g + rr * 8;
            rlo[rr] = rhi[rr] = 0;
            if (r < nrows) {
                key_range(r / p.group, p.lq, len, p.wl, p.wr, rlo[rr], rhi[rr]);
                rlo[rr] = max(rlo[rr], ks);
                rhi[rr] = min(rhi[rr], ke);
            }
        }
        ScoreMod mod = ScoreMod();
        mod.cap2 = p.cap2;
        float slope2[2] = {0.f, 0.f};
        int rpos[2] = {0, 0};
        if constexpr (MOD == MOD_ALIBI) {
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                const int r = r0 + g + rr * 8;
                if (r < nrows) {
                    const int tok = r / p.group, h = kvh * p.group + (r - tok * p.group);
                    slope2[rr] = p.alibi[(int64_t)b * p.alibi_sb + (int64_t)h * p.alibi_sh] * 1.4426950408889634f;
                    rpos[rr] = tok + len - p.lq;
                }
            }
        }
        sf_cp_async_wait<0>();
        named_sync(1, 32 * CW);
        uint32_t qf[KD][4];
#pragma unroll
        for (int kk = 0; kk < KD; kk++)
            sf_ldsm_x4(qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], sQ + (lane & 15) * LDS + kk * 16 + (lane >> 4) * 8);

        for (int n = 0; n < ntiles; n++) {
            const int s = n % ST;
            const int key0 = (t0 + n) * KEYS + warp * 16;
            mbar_wait(bars + 8 * s, (uint32_t)((n / ST) & 1));
            if (key0 + 16 > kb && key0 < kend) { /* this warp's 16 keys meet the rows' range */
                const T *sk = ring + (size_t)s * Tr::STAGE_ELEMS + warp * 16 * LDS;
                const T *sv = sk + KEYS * LDS;
                float sc[2][4];
#pragma unroll
                for (int i = 0; i < 2; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
                for (int kk = 0; kk < KD; kk++) {
                    uint32_t b0, b1, b2, b3;
                    sf_ldsm_x4(b0, b1, b2, b3,
                               sk + ((lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
                    sf_mma16<T>::run(sc[0], qf[kk], b0, b1);
                    sf_mma16<T>::run(sc[1], qf[kk], b2, b3);
                }
                if constexpr (MOD == MOD_ALIBI) {
#pragma unroll
                    for (int i = 0; i < 2; i++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            float x = sc[i][e] * p.scale_log2;
                            if (p.cap2 > 0.f) x = p.cap2 * tanhf(x / p.cap2);
                            const int dist = rpos[e >> 1] - (key0 + i * 8 + 2 * tq + (e & 1));
                            sc[i][e] = x - slope2[e >> 1] * (float)(dist < 0 ? -dist : dist);
                        }
                    sf_attn::softmax_step<2, NO, false>(sc, o, mrow, lrow, key0, true, rlo, rhi, tq, 1.0f, mod, 0);
                } else {
                    sf_attn::softmax_step<2, NO, CAP>(sc, o, mrow, lrow, key0, true, rlo, rhi, tq, p.scale_log2, mod,
                                                      0);
                }
                uint32_t pa[4];
                pa[0] = sf_mma16<T>::pack(sc[0][0], sc[0][1]);
                pa[1] = sf_mma16<T>::pack(sc[0][2], sc[0][3]);
                pa[2] = sf_mma16<T>::pack(sc[1][0], sc[1][1]);
                pa[3] = sf_mma16<T>::pack(sc[1][2], sc[1][3]);
#pragma unroll
                for (int j = 0; j < NO / 2; j++) {
                    uint32_t b0, b1, b2, b3;
                    sf_ldsm_x4_t(b0, b1, b2, b3, sv + (lane & 15) * LDS + j * 16 + (lane >> 4) * 8);
                    sf_mma16<T>::run(o[2 * j], pa, b0, b1);
                    sf_mma16<T>::run(o[2 * j + 1], pa, b2, b3);
                }
            }
            __syncwarp(); /* every lane is done with the stage */
            if (lane == 0) mbar_arrive(bars + 8 * (ST + s));
        }
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            lrow[rr] += __shfl_xor_sync(0xffffffffu, lrow[rr], 1);
            lrow[rr] += __shfl_xor_sync(0xffffffffu, lrow[rr], 2);
        }
    }

    /* the split's table entries the tiles did not map (keys outside the
     * rows' window): checked too, by the whole block */
    {
        const int32_t *bt = p.bt + (int64_t)b * p.bt_sb;
        const int rd_lo = ntiles ? min(ke, t0 * KEYS) : ke, rd_hi = ntiles ? max(ks, (t0 + ntiles) * KEYS) : ke;
        const int a0[2] = {ks, rd_hi}, a1[2] = {rd_lo, ke};
#pragma unroll
        for (int part = 0; part < 2; part++) {
            if (a1[part] <= a0[part]) continue;
            const int first = a0[part] >> p.page_shift, last = (a1[part] - 1) >> p.page_shift;
            for (int i = first + tid; i <= last; i += NT) {
                const int e = bt[(int64_t)i * p.bt_sp];
                bad |= e < 0 || e >= p.num_pages;
            }
        }
    }
    /* the ring is free (every copy landed: the consumers waited for all) */
    bad = __syncthreads_or(bad | (int)len_bad);
    float *ms = reinterpret_cast<float *>(ring);
    float *ls = ms + CW * 16;
    float *os = ls + CW * 16;
    if (warp < CW) {
        if (tq == 0) {
            ms[warp * 16 + g] = mrow[0], ms[warp * 16 + g + 8] = mrow[1];
            ls[warp * 16 + g] = lrow[0], ls[warp * 16 + g + 8] = lrow[1];
        }
#pragma unroll
        for (int i = 0; i < NO; i++) {
            float *o0 = os + (warp * 16 + g) * Tr::OLD + i * 8 + 2 * tq, *o1 = o0 + 8 * Tr::OLD;
            o0[0] = o[i][0], o0[1] = o[i][1];
            o1[0] = o[i][2], o1[1] = o[i][3];
        }
    }
    __syncthreads();
    const int64_t grp = (int64_t)b * gridDim.y + blockIdx.y;
    for (int idx = tid; idx < 16 * D; idx += NT) {
        const int r = idx / D, c = idx - (idx / D) * D;
        const int rr = r0 + r;
        if (rr >= nrows || c >= p.d) continue;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < CW; w++) M = fmaxf(M, ms[w * 16 + r]);
        const float base = M == -INFINITY ? 0.f : M;
        float L = 0.f, acc = 0.f;
#pragma unroll
        for (int w = 0; w < CW; w++) {
            const float f = sf_ex2(ms[w * 16 + r] - base);
            L += ls[w * 16 + r] * f;
            acc += os[(w * 16 + r) * Tr::OLD + c] * f;
        }
        float val = L > 0.f ? acc / L : 0.f;
        float lsev = L > 0.f ? (M + __log2f(L)) * 0.69314718055994531f : -INFINITY;
        if (ns == 1) {
            if (bad) val = 0.f, lsev = -INFINITY;
            const int tok = rr / p.group, h = kvh * p.group + (rr - tok * p.group);
            T *dst = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)tok * p.o_sr + (int64_t)h * p.o_sh;
            dst[c] = sf_elem<T>::from_f(val);
            if (p.lse && c == 0) p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (int64_t)tok * p.l_sr] = lsev;
        } else {
            const int64_t prow = (grp * p.nsplit_max + split) * 16 + r;
            p.o_part[prow * D + c] = val;
            if (c == 0) p.lse_part[prow] = lsev;
        }
    }
    if (bad && tid == 0) record_error(p.err, b);
    if (ns == 1) return;

    /* fused combine: the last split of the group to finish merges them all */
    __threadfence(); /* this CTA's partial, before its count */
    __syncthreads();
    if (tid == 0) {
        const unsigned add = 1u + (bad ? 1u << 16 : 0u);
        const unsigned old = atomicAdd(&p.ctr[grp], add);
        const unsigned now = old + add;
        sflag[0] = (int)(now & 0xffffu) == ns;
        sflag[1] = (now >> 16) != 0u;
    }
    __syncthreads();
    if (!sflag[0]) return;
    __threadfence(); /* the other splits' partials, after their counts */
    const bool any_bad = sflag[1] != 0;
    float *wsm = reinterpret_cast<float *>(reinterpret_cast<unsigned char *>(ring) + Tr::MERGE);
    float *lsm = wsm + 64 * 16;
    /* the splits' lse (split s, row r at s * 16 + r), all loads in flight
     * at once, then each row's weights */
    for (int i = tid; i < ns * 16; i += NT) wsm[i] = __ldcg(p.lse_part + grp * p.nsplit_max * 16 + i);
    __syncthreads();
    if (tid < 16) {
        const int r = tid;
        float M = -INFINITY;
        for (int s = 0; s < ns; s++) M = fmaxf(M, wsm[s * 16 + r]);
        const float base = M == -INFINITY ? 0.f : M;
        float W = 0.f;
        for (int s = 0; s < ns; s++) {
            const float w = __expf(wsm[s * 16 + r] - base);
            wsm[s * 16 + r] = w;
            W += w;
        }
        const float inv = W > 0.f ? 1.f / W : 0.f;
        for (int s = 0; s < ns; s++) wsm[s * 16 + r] *= inv;
        lsm[r] = W > 0.f && !any_bad ? M + logf(W) : -INFINITY;
    }
    __syncthreads();
    constexpr int D4 = D / 4;
    for (int idx = tid; idx < 16 * D4; idx += NT) {
        const int r = idx / D4, c = (idx - r * D4) * 4;
        const int rr = r0 + r;
        if (rr >= nrows || c >= p.d) continue;
        const float4 *src = reinterpret_cast<const float4 *>(p.o_part + (grp * p.nsplit_max * 16 + r) * D + c);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int s = 0; s < ns; s++) {
            const float w = wsm[s * 16 + r];
            const float4 v = __ldcg(src + (size_t)s * 16 * D4);
            acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
        }
        if (any_bad) acc = make_float4(0.f, 0.f, 0.f, 0.f);
        const int tok = rr / p.group, h = kvh * p.group + (rr - tok * p.group);
        T *dst = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)tok * p.o_sr + (int64_t)h * p.o_sh + c;
        dst[0] = sf_elem<T>::from_f(acc.x);
        dst[1] = sf_elem<T>::from_f(acc.y);
        dst[2] = sf_elem<T>::from_f(acc.z);
        dst[3] = sf_elem<T>::from_f(acc.w);
        if (p.lse && c == 0) p.lse[(int64_t)b * p.l_sb + (int64_t)h * p.l_sh + (int64_t)tok * p.l_sr] = lsm[r];
    }
    if (tid == 0) p.ctr[grp] = 0u; /* ready for the next call */
#endif
}

} /* namespace sf_paged */

#endif
