/* decode_tma.cuh - paged decode (sf_attn_paged) with the K/V tiles loaded
 * by TMA into one ring a CTA, on sm_90a: 16-bit and FP8 pools, narrow tiles (at
 * most 8 query rows a kv head), pages of 16 keys or more, d 64 or 128.
 *
 * FP8 pools (d 128) too: one box of codes for K and one for V a tile (128
 * bytes x 16 rows), the tile's scales by the producer lanes' cp.async,
 * counted on the stage's "full" mbarrier by cp.async.mbarrier.arrive.noinc.
 *
 * decode.cuh gives each warp its own ring of cp.async stages, so the bytes
 * in flight an SM are bounded by twelve warps' second stages.  Here a
 * producer warp fills a ring of NS 16-key stages shared by the NW consumer
 * warps: a stage is one tile's K and V as D / 64 tensor-map boxes each (64
 * columns x 16 rows of one page and kv head, 128-byte swizzle, 2 KB), so a
 * tile costs four copies at d 128 where the cp.async kernel issues 512,
 * and every stage not being computed on is in flight.  The producer reads
 * the table 32 entries at a time (a lane each) and waits on a stage's
 * "empty" mbarrier before reusing it; consumer warp w takes tiles w, w +
 * NW, ... (tile_step_n on the swizzled layout), waiting on its "full"
 * mbarrier and arriving on "empty" when done.
 *
 * Keys past the sequence in its last page are whatever the pool holds: the
 * key ranges mask their scores, and the consumer zeroes their V rows before
 * P V (0 x NaN would be NaN).  The rest (split plan, table checks, the
 * merge of the warps and of the splits) is decode.cuh's: the producer warp
 * joins finish_split as a warp that saw no keys.
 */
#ifndef SF_PAGED_DECODE_TMA_CUH
#define SF_PAGED_DECODE_TMA_CUH

#include "attn/fwd_ws.cuh" /* tma_load4 */
#include "paged/decode.cuh"

namespace sf_paged {

/* Shapes (CFG): 4 consumer warps and 12 stages at two blocks an SM (0), 4
 * and 8 at three (1, 16-bit only), 8 and 24 at one (2).  FP8 pools (d 128):
 * a stage is one box of K's and one of V's codes (128 x 16 bytes each) and
 * the tile's 16 K and 16 V scales sit in an array of their own. */
template <int D, int CFG = 0, bool FP8 = false> struct TmaTraits {
    static constexpr int NW = CFG == 2 ? 8 : 4;       /* consumer warps            */
    static constexpr int NT = (NW + 1) * 32;          /* + the producer warp       */
    static constexpr int NS = CFG == 2 ? 24 : CFG == 1 ? 8 : 12; /* ring stages  */
    static constexpr int MINB = CFG == 2 ? 1 : CFG == 1 ? 3 : 2; /* blocks an SM */
    static constexpr int LDS = D + 8;                 /* sQ's padded row           */
    static constexpr int TILE_BYTES = 16 * D * (FP8 ? 1 : 2); /* K or V of a tile  */
    static constexpr int STAGE_BYTES = 2 * TILE_BYTES;
    static constexpr int OFF_RING = ((16 * LDS * 2 + 1023) / 1024) * 1024; /* 1 KB aligned for the swizzle */
    static constexpr int OFF_SC = OFF_RING + NS * STAGE_BYTES;            /* FP8: NS x 32 scales */
    static constexpr int OFF_BAR = OFF_SC + (FP8 ? NS * 32 * 4 : 0);
    static constexpr size_t SMEM = (size_t)OFF_BAR + 2 * NS * 8 + 1024; /* + 1 KB to align the base */
    static constexpr int OLD = D + 4;
    static constexpr size_t SCRATCH = (size_t)OFF_BAR - OFF_RING;       /* the ring and the scales */
    static_assert(D == 64 || D == 128, "boxes of 64 columns");
    static_assert(!FP8 || (D == 128 && CFG != 1), "FP8: d 128, shapes 0 and 2");
    static_assert((size_t)(NW + 1) * 16 * (2 + OLD) * 4 <= SCRATCH, "merge scratch fits the ring");
    static_assert((size_t)16 * MAX_SPLITS * 4 <= SCRATCH, "split merge scratch fits the ring");
};

template <typename T, int D, bool FP8, bool CAP, int CFG = 0>
__global__ void __launch_bounds__(TmaTraits<D, CFG, FP8>::NT, TmaTraits<D, CFG, FP8>::MINB)
    paged_attn_tma(const PagedParams p, const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    typedef TmaTraits<D, CFG, FP8> Tr;
    constexpr int NW = Tr::NW, NS = Tr::NS, KD = D / 16;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    T *sQ = reinterpret_cast<T *>(smem);
    unsigned char *ring = smem + Tr::OFF_RING;
    float *scl = reinterpret_cast<float *>(smem + Tr::OFF_SC); /* FP8: stage s's scales at 32 s */
    const uint32_t bFull = sf_smem_u32(smem + Tr::OFF_BAR), bEmpty = bFull + 8 * NS;

    sf_pdl_wait();
    sf_pdl_launch();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int split = blockIdx.x, b = blockIdx.z;
    const int kvh = blockIdx.y / p.mtiles, mt = blockIdx.y - kvh * p.mtiles;
    SplitWork w;
    if (!split_setup(p, split, b, mt, tid, lane, w)) return;
    const int len = w.len;
    if (tid == 0) {
        /* FP8: "full" also counts the producer lanes' scale copies (noinc arrivals) */
        for (int i = 0; i < NS; i++) sf_wg::mbar_init(bFull + 8 * i, FP8 ? 33 : 1), sf_wg::mbar_init(bEmpty + 8 * i, 1);
        sf_wg::mbar_init_fence();
    }
    load_q<T, D, false>(p, sQ, b, kvh, w, tid);
    sf_cp_async_wait<0>();
    __syncthreads(); /* Q and the mbarriers */

    const int ntiles = w.t1 - w.t0;
    float o[KD][4];
#pragma unroll
    for (int i = 0; i < KD; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};

    if (warp == NW) {
        /* ---- producer: tile i of the split into stage i % NS ---- */
        const int32_t *bt = p.bt + (int64_t)b * p.bt_sb;
        const int pmask = (1 << p.page_shift) - 1;
        int ent = 0;
        for (int i = 0; i < ntiles; i++) {
            const int key0 = (w.t0 + i) * 16;
            if ((i & 31) == 0) { /* the pages of the next 32 tiles, a lane each; a bad entry reads page 0 */
                const int k = key0 + 16 * lane;
                ent = 0;
                if (i + lane < ntiles) {
                    const int pg = bt[(int64_t)(k >> p.page_shift) * p.bt_sp];
                    ent = (unsigned)pg < (unsigned)p.num_pages ? pg : 0;
                }
            }
            const int pg = __shfl_sync(0xffffffffu, ent, i & 31);
            const int s = i % NS;
            if (i >= NS) sf_wg::mbar_wait_sleep(bEmpty + 8 * s, (uint32_t)((i / NS) - 1) & 1u);
            const int row0 = key0 & pmask;
            if (lane == 0) {
                const uint32_t dk = sf_smem_u32(ring + s * Tr::STAGE_BYTES), dv = dk + Tr::TILE_BYTES;
                sf_wg::mbar_expect_tx(bFull + 8 * s, Tr::STAGE_BYTES);
#pragma unroll
                for (int c = 0; c < (FP8 ? 1 : D / 64); c++) {
                    sf_attn::tma_load4(dk + c * 2048, &tmk, c * 64, row0, kvh, pg, bFull + 8 * s);
                    sf_attn::tma_load4(dv + c * 2048, &tmv, c * 64, row0, kvh, pg, bFull + 8 * s);
                }
            }
            if constexpr (FP8) { /* the scales: lanes 0-15 K's, 16-31 V's; 0 past the sequence */
                const int r = lane & 15;
                const bool v = key0 + r < len;
                const float *src = lane < 16 ? p.ks + (int64_t)kvh * p.ks_sh + pg * p.ks_sp + (int64_t)(row0 + r) * p.ks_sr
                                             : p.vs + (int64_t)kvh * p.vs_sh + pg * p.vs_sp + (int64_t)(row0 + r) * p.vs_sr;
                sf_cp_async4_zfill(scl + 32 * s + lane, v ? src : p.ks, v ? 4 : 0);
                sf_wg::cp_async_mbar_arrive_noinc(bFull + 8 * s);
            }
            __syncwarp();
        }
    } else {
        /* ---- consumers ---- */
        uint32_t qf[KD][2];
        float qinv[2] = {1.f, 1.f};
        int clo[2] = {0, 0}, chi[2] = {0, 0};
        narrow_rows<T, D, FP8>(p, w, sQ, qf, qinv, clo, chi, lane);
        ScoreMod mod = ScoreMod();
        mod.cap2 = p.cap2;
        for (int i = warp; i < ntiles; i += NW) {
            const int s = i % NS, key0 = (w.t0 + i) * 16;
            unsigned char *stage = ring + s * Tr::STAGE_BYTES;
            sf_wg::mbar_wait(bFull + 8 * s, (uint32_t)(i / NS) & 1u);
            if (key0 + 16 > len) { /* V rows past the sequence to 0 (lane: row lane / 2, half lane % 2) */
                constexpr int CH = Tr::TILE_BYTES / 256; /* 16-byte chunks a row */
                const int r = lane >> 1;
                if (key0 + r >= len) {
#pragma unroll
                    for (int q = (lane & 1) * (CH / 2); q < (lane & 1) * (CH / 2) + CH / 2; q++)
                        *reinterpret_cast<uint4 *>(stage + Tr::TILE_BYTES + sw_off(r, 8 * q)) = make_uint4(0, 0, 0, 0);
                }
                sf_wg::fence_async_smem(); /* before TMA may write the stage again */
                __syncwarp();
            }
            tile_step_n<T, D, FP8, CAP, false, true>(p, stage, qf, qinv, o, mrow, lrow, key0, clo, chi, lane, mod,
                                                     scl + 32 * s);
            __syncwarp(); /* every lane's reads of the stage before it is handed back */
            if (lane == 0) sf_wg::mbar_arrive(bEmpty + 8 * s);
        }
    }
    /* the producer warp merges as a warp that saw no keys */
    finish_split<T, D, NW + 1, NAR_NARROW, FP8>(p, w, split, b, kvh, o, mrow, lrow, reinterpret_cast<float *>(ring));
#else
    (void)p, (void)tmk, (void)tmv;
#endif
}

} /* namespace sf_paged */

#endif
