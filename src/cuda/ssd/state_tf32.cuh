/* state_tf32.cuh - the state pass of the chunked SSD forward for f32 inputs
 * on TF32 wgmma (sm_90a, configuration fg32), ahead of ssd_out_tf32.
 *
 * The 16-bit fused pass (ssd_state_fused_wg) takes B as an MN-major wgmma
 * operand straight from its token-major rows; TF32 wgmma has no transposed
 * operands, so here B goes through an image first:
 *   ssd_img_tf32         per (b, group, chunk, 64-token part): B of those
 *                        tokens, rounded to TF32, written in the exact byte
 *                        layout of a K-major, 128-byte-swizzled wgmma operand
 *                        (rows = state column n, padded to 128 with zeros;
 *                        K = token).  B is shared by the heads of a group, so
 *                        the image is made once and read by every head.
 *   ssd_state_fused_tf32 per (b, 64-row P tile, head): walks the chunks in
 *                        64-token parts with the state H (64 x 128, f32) in
 *                        the accumulator.  Per part: X (token-major, padded)
 *                        by cp.async and the part's image by one bulk copy
 *                        in a two-stage ring (an mbarrier per stage); A = X^T
 *                        diag(w) from registers (w_j = exp2(g'_last - g'_j)
 *                        dt_j, rounded to TF32),
 *                        B = the image; at each chunk start H is stored as
 *                        the state entering the chunk (f32) and decayed by
 *                        exp2(g'_last).  The final state comes out at the end.
 * Against the split states (ssd_chunk_state_mma on mma.sync + ssd_state_scan
 * through an f32 chunk-state array of b H nchunks P N floats) this drops the
 * chunk-state round trip and runs the products on wgmma.
 *
 * Image layout (one 64-token part, 32 KB): K-atom a = j / 32 of token j,
 * row n: byte a * 16384 + n * 128 + (((j / 4) % 8) ^ (n % 8)) * 16 + (j % 4) * 4.
 */
#ifndef SF_SSD_STATE_TF32_CUH
#define SF_SSD_STATE_TF32_CUH

#include "ssd/cumsum.cuh"
#include "ssd/state_pass.cuh"

struct SsdS32 {
    static constexpr int QS = 64;       /* tokens per part */
    static constexpr int LDX = 72;      /* X row pitch (floats): 8t + g banks in the A loads */
    static constexpr uint32_t IMG = 128u * QS * 4u;            /* image bytes per part */
    static constexpr uint32_t OX = IMG, OW = OX + QS * LDX * 4; /* stage: image, X, w */
    static constexpr uint32_t STAGE = (OW + QS * 4 + 1023u) & ~1023u;
    static constexpr uint32_t OBAR = 2 * STAGE;                 /* the two stages' mbarriers */
    static constexpr size_t SMEM = OBAR + 16 + 1024;            /* ~103 KB: two blocks per SM */
    /* image floats of one (b, group) row of chunks */
    static __host__ __device__ size_t img_floats(int nc, int Q) { return (size_t)nc * (Q / QS) * (IMG / 4); }
};

/* TF32 operand images of B or C (`src` 0 / 1), one 64-token part per block
 * `id`.  NAT false: rows = state column n (128), K = token (the B operand of
 * X^T B, layout above); NAT true: rows = token (64), K = n (the natural
 * row-major operand of C B^T and C H^T in ssd_out_tf32): byte (n / 32) *
 * 8192 + j * 128 + (((n / 4) % 8) ^ (j % 8)) * 16 + (n % 4) * 4 for token j.
 * Block ids (flattened): part fastest, then chunk, group, batch row; block
 * 256.  The part goes through shared memory `sb` (QS x 129 floats;
 * coalesced reads along n, all of a thread's loads in flight at once), then
 * every thread writes whole 16-byte chunks of the image (with `img_nat`
 * and !nat: both layouts, from one read of the part). */
template <int Q>
static __device__ __forceinline__ void ssd_img_block(const ssd_fwd_args &a, int64_t id, int src, bool nat,
                                                     float *img, float *img_nat, float *sb) {
    constexpr int QS = SsdS32::QS, NPART = Q / QS, LDS = 129;
    const int G = a.H / a.hpg;
    const int64_t io = id * (int64_t)(SsdS32::IMG / 4);
    const int part = (int)(id % NPART);
    id /= NPART;
    const int c = (int)(id % a.nc);
    id /= a.nc;
    const int grp = (int)(id % G);
    const int b = (int)(id / G);
    const int64_t t0 = (int64_t)c * Q + part * QS;
    const int lv = (int)min((int64_t)QS, a.L - t0);
    const int64_t *st = src ? a.Cs : a.Bs;
    const float *g0 = (const float *)(src ? a.C : a.B) + (int64_t)b * st[0] + (int64_t)grp * st[2];
    const int tid = threadIdx.x;
#pragma unroll 16
    for (int i = tid; i < QS * 128; i += 256) {
        const int j = i >> 7, n = i & 127;
        sb[j * LDS + n] = j < lv && n < a.N ? sf_tf32(g0[(t0 + j) * st[1] + n]) : 0.0f;
    }
    __syncthreads();
    if (!nat) {
        float4 *dst = reinterpret_cast<float4 *>(img + io);
        for (int i = tid; i < (int)(SsdS32::IMG / 16); i += 256) {
            const int n = (i >> 3) & 127, j0 = (i >> 10) * 32 + (((i & 7) ^ (n & 7)) << 2);
            dst[i] = make_float4(sb[j0 * LDS + n], sb[(j0 + 1) * LDS + n], sb[(j0 + 2) * LDS + n],
                                 sb[(j0 + 3) * LDS + n]);
        }
    }
    if (float *nimg = nat ? img : img_nat) {
        float4 *dst = reinterpret_cast<float4 *>(nimg + io);
        for (int i = tid; i < (int)(SsdS32::IMG / 16); i += 256) {
            const int j = (i >> 3) & 63, n0 = (i >> 9) * 32 + (((i & 7) ^ (j & 7)) << 2);
            const float *r = sb + j * LDS + n0;
            dst[i] = make_float4(r[0], r[1], r[2], r[3]);
        }
    }
}

/* The f32 path's first launch: the cumsum (ssd_cumsum_block, blocks [0,
 * gcum)), then the images in blocks of `gimg`: B^T (img0, for the state
 * pass) and, when img1 (ssd_out_tf32's), B natural (img2) from the same
 * read of B, then C natural (img1).  One launch instead of four: the
 * pieces are small and latency-bound (b 1 L 16384: 12 + 3 x 9 us as
 * separate launches, 27 together). */
template <int Q>
__global__ void __launch_bounds__(256) ssd_prologue_tf32(const ssd_fwd_args a, int64_t gcum, int64_t gimg,
                                                         float *img0, float *img1, float *img2) {
    __shared__ float sb[SsdS32::QS * 129];
    int64_t id = blockIdx.x;
    if (id < gcum) {
        ssd_cumsum_block<float, Q>(a, id);
        return;
    }
    id -= gcum;
    const int k = (int)(id / gimg);
    id -= k * gimg;
    if (k == 0) ssd_img_block<Q>(a, id, 0, false, img0, img1 ? img2 : nullptr, sb);
    else ssd_img_block<Q>(a, id, 1, true, img1, nullptr, sb);
}

/* Scan over the segments of ssd_state_fused_tf32 (configuration fg32), in
 * place: cst[(b H + h) nseg + s] holds segment s's own end state
 * (from zero; the last one only with final states) and becomes E_s, the
 * state entering it (E_0 the initial state or 0); the final state is the
 * last E.  gseg[(b H + h) nseg + s]:
 * segment s's decay exponent.  At most MS segments, all loaded at once (a
 * handful of dependent steps, not one load latency each).  Grid and
 * elements as ssd_state_scan's (ssd_scan_elem). */
template <int MS>
__global__ void __launch_bounds__(256) ssd_seg_scan(const ssd_fwd_args a, float *cst, const float *gseg, int sl) {
    const int64_t PN = (int64_t)a.P * a.N;
    const SsdScanElem el = ssd_scan_elem(a);
    if (!el.ok) return;
    const int64_t bh = el.bh, e = el.e;
    const int nseg = (a.nc + sl - 1) / sl;
    float *sc = cst + bh * nseg * PN + e;
    const int nin = a.has_final ? nseg : nseg - 1; /* segment end states made */
    float4 S[MS];
    float gd[MS];
#pragma unroll
    for (int s = 0; s < MS; s++)
        if (s < nin) {
            S[s] = *reinterpret_cast<const float4 *>(sc + s * PN);
            gd[s] = gseg[bh * nseg + s];
        }
    float4 H = ssd_scan_init(a, el);
#pragma unroll
    for (int s = 0; s < MS; s++)
        if (s < nseg) {
            *reinterpret_cast<float4 *>(sc + s * PN) = H;
            if (s >= nin) break;
            const float dec = exp2f(gd[s]);
            H = make_float4(fmaf(dec, H.x, S[s].x), fmaf(dec, H.y, S[s].y), fmaf(dec, H.z, S[s].z),
                            fmaf(dec, H.w, S[s].w));
        }
    ssd_scan_final(a, el, H);
}

/* Grid (flattened): head fastest (the heads of a group read one image from
 * L2 together), then P tile, segment, batch row.  Block 128 = one
 * warpgroup; warp w owns state rows p0 + 16w .. + 15, all 128 columns.
 * Without `gseg` (sl = nchunks): one walk per (b, head, P tile) from the
 * initial state, storing the state entering every chunk and the final state.
 * With `gseg` (configuration fg32): the chunks walked in segments of `sl`
 * (grid: b, segment, P tile, head), each from zero, storing only its end
 * state to cst[(b H + h) nseg + s] (P N floats) and its decay exponent
 * (sum of min(g'_last, 0) over its chunks) to gseg[(b H + h) nseg + s]
 * (the last segment only with final states: nothing else reads it);
 * ssd_seg_scan turns them into the states entering the segments, from which
 * ssd_out_tf32 walks each segment's chunks itself. */
template <int Q>
__global__ void __launch_bounds__(128, 2) ssd_state_fused_tf32(const ssd_fwd_args a, const float *img, float *cst,
                                                               int sl, float *gseg) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdS32 L;
    constexpr int QS = L::QS, LDX = L::LDX, NPART = Q / QS, KS = QS / 8;
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    unsigned char *gbase = ssd_smem + (sbase - sraw);

    const int ptiles = a.P / 64, G = a.H / a.hpg;
    int64_t id = blockIdx.x;
    const int h = (int)(id % a.H);
    id /= a.H;
    const int pt = (int)(id % ptiles);
    id /= ptiles;
    /* segments run: the last one's end state only feeds the final state */
    const int nseg = (a.nc + sl - 1) / sl, nrun = gseg && !a.has_final ? nseg - 1 : nseg;
    const int seg = (int)(id % nrun), c0 = seg * sl; /* first chunk */
    const int b = (int)(id / nrun);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t bh = (int64_t)b * a.H + h, PN = (int64_t)a.P * a.N;
    const int p0 = pt * 64, nsub = NPART * min(sl, a.nc - c0);
    const char *imgb = reinterpret_cast<const char *>(
        img + ((int64_t)b * G + h / a.hpg) * (int64_t)SsdS32::img_floats(a.nc, Q));
    const float *Xg = (const float *)a.x + (int64_t)b * a.xs[0] + (int64_t)h * a.xs[2] + p0;

    /* this thread's token of part s (chunk s / NPART): g', dt and the
     * chunk's last g', fetched one part ahead of use */
    float pg = 0.0f, pd = 0.0f, pgl = 0.0f;
    auto fetch = [&](int s) {
        if (s < nsub && tid < QS) {
            s += c0 * NPART;
            const int64_t v = (bh * a.nc + s / NPART) * Q;
            pg = a.gw[v + (s % NPART) * QS + tid];
            pd = a.dtw[v + (s % NPART) * QS + tid];
            pgl = a.gw[v + Q - 1];
        }
    };
    /* part s into stage s % 2: the image (32 KB) by one bulk copy, completing
     * on the stage's mbarrier; X by cp.async (always one commit group) */
    const uint32_t bfull = sbase + L::OBAR;
    mbar_init_stages(bfull, 2);
    auto issue = [&](int sp) {
        if (sp < nsub) {
            const int s = sp + c0 * NPART; /* part index from the sequence start */
            const int64_t t0 = (int64_t)(s / NPART) * Q + (s % NPART) * QS;
            const int lv = (int)min((int64_t)QS, a.L - t0); /* valid tokens (may be <= 0) */
            const uint32_t st = sbase + (sp & 1) * L::STAGE, bar = bfull + 8 * (sp & 1);
            if (tid == 0) {
                mbar_expect_tx(bar, L::IMG);
                bulk_copy_g2s(st, imgb + (int64_t)s * L::IMG, L::IMG, bar);
            }
#pragma unroll
            for (int it = 0; it < QS * 16 / 128; it++) {
                const int i = tid + it * 128, r = i >> 4, cc = i & 15;
                const bool ok = r < lv;
                cp_async16_u32(st + L::OX + (r * LDX + cc * 4) * 4, ok ? Xg + (t0 + r) * a.xs[1] + cc * 4 : Xg,
                               ok ? 16 : 0);
            }
            if (tid < QS)
                reinterpret_cast<float *>(gbase + (sp & 1) * L::STAGE + L::OW)[tid] =
                    exp2f(fminf(pgl - pg, 0.0f)) * pd;
        }
        sf_cp_async_commit();
    };

    /* H in the accumulator layout: rows p0 + 16 warp + g (+ 8), columns 8 nt + 2 t (+ 1) */
    float H[16][4];
    const int pr = p0 + 16 * warp + g;
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int p = pr + (e >> 1) * 8, n = 8 * nt + 2 * t + (e & 1);
            H[nt][e] = !gseg && a.has_init && n < a.N
                           ? a.init[(int64_t)b * a.ins[0] + (int64_t)h * a.ins[1] + (int64_t)p * a.ins[2] +
                                    (int64_t)n * a.ins[3]]
                           : 0.0f;
        }
    float gacc = 0.0f; /* sum of min(g'_last, 0) over the segment's chunks */
    /* the next chunk's min(g'_last, 0), loaded a chunk ahead of its use */
    const float *glp = a.gw + (bh * a.nc + c0) * Q + Q - 1;
    float gln = fminf(glp[0], 0.0f);
    fetch(0);
    issue(0);
    fetch(1);
    for (int s = 0; s < nsub; s++) {
        sf_cp_async_wait<0>(); /* part s's X landed (the only group in flight) */
        mbar_wait(bfull + 8 * (s & 1), (s >> 1) & 1); /* ... and its image */
        __syncthreads(); /* ... for every thread; stage (s + 1) % 2 free (part s - 1 done) */
        issue(s + 1);
        fetch(s + 2);
        if (s % NPART == 0) {
            /* H is the state entering chunk c (segments: from the segment's
             * start): store it (not in segments), then decay it */
            const int c = c0 + s / NPART;
            if (!gseg) ssd_h_store(H, (float *)a.states + (bh * a.nc + c) * PN + (int64_t)pr * a.N, a.N, t);
            const float gl = gln;
            if (c + 1 < a.nc) gln = fminf(glp[(int64_t)(c + 1 - c0) * Q], 0.0f);
            gacc += gl;
            ssd_h_scale(H, exp2f(gl));
        }
        const uint32_t st = sbase + (s & 1) * L::STAGE;
        const float *sX = reinterpret_cast<const float *>(gbase + (s & 1) * L::STAGE + L::OX);
        const float *sw = reinterpret_cast<const float *>(gbase + (s & 1) * L::STAGE + L::OW);
        /* H += X^T diag(w) B over the part: A from registers (TF32), B the image */
        uint32_t af[KS][4];
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            ssd_mma<float>::load_a_t(af[kk], sX, LDX, 16 * warp, 8 * kk);
            ssd_mma<float>::scale_a(af[kk], sw + 8 * kk);
        }
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
            Wg<float, 128>::rs(&H[0][0], af[kk], wg_desc(st + (kk >> 2) * 16384 + (kk & 3) * 32, 16, 1024));
        wg_commit();
        wg_wait<0>();
        reg_fence(H);
    }
    if (gseg && pt == 0 && tid == 0) gseg[bh * nseg + seg] = gacc;
    if (gseg) {
        /* the segment's own state (ssd_h_store<float> written out) */
        float *dst = cst + (bh * nseg + seg) * PN + (int64_t)pr * a.N;
#pragma unroll
        for (int nt = 0; nt < 16; nt++) {
            const int n = 8 * nt + 2 * t;
            if (n < a.N) {
                *reinterpret_cast<float2 *>(dst + n) = make_float2(H[nt][0], H[nt][1]);
                *reinterpret_cast<float2 *>(dst + 8 * a.N + n) = make_float2(H[nt][2], H[nt][3]);
            }
        }
    } else if (a.has_final) {
        ssd_h_final(H, a, b, h, pr, t);
    }
#else
    (void)a;
    (void)img;
    (void)cst;
    (void)sl;
    (void)gseg;
#endif
}

#endif
