/* state_pass.cuh - stage 2, the state entering every chunk by the jump
 * formula H_{c+1} = exp(g_last(c)) H_c + S_c (DESIGN.md section 1):
 *   ssd_state_pass     (any GPU, the general path) chunk states on mma.sync
 *                      and the walk over chunks in one kernel, varlen aware
 *   ssd_state_scan     (any GPU) the walk alone, over chunk states S_c
 *                      computed in parallel (chunk_state.cuh)
 *   ssd_state_fused_wg (sm_90a, configuration fuq) chunk states on wgmma and
 *                      the walk in one kernel, dense batches
 *   ssd_final_varlen   (cu_seqlens + final_states) the state after each
 *                      sequence's last token
 */
#ifndef SF_SSD_STATE_PASS_CUH
#define SF_SSD_STATE_PASS_CUH

#include "ssd/wg_common.cuh"

/* ------------------------------------------------------------------ */
/* fwd_pass_state                                                       */
/* ------------------------------------------------------------------ */
/* Grid (flattened): state slice fastest (P / 32 x N / 64), then head, then
 * batch row.  Block 128 = 2 x 2 warps, warp tile 16 (P) x 32 (N) held in
 * registers across all chunks: S_c = X^T diag(w) B on tensor cores (A = X^T
 * from a token-major tile, scaled by w per k column in registers; B = raw B
 * rows), H_{c+1} = exp2(g'_last) H_c + S_c.  The chunk is consumed in
 * sub-tiles of KT tokens over the flat sequence of (chunk, sub-tile), three
 * cp.async stages deep; the next chunk's dt / g' / sequence ids are loaded
 * into registers a chunk ahead.  The chain of sub-tiles is sequential per
 * block, so what bounds this kernel is load latency, not arithmetic.
 * Measured (H200, 2.7B shape b8 L4096 bf16): whole forward 5.1 ms with
 * synchronous staging, 4.5 ms with two stages, 3.75 ms with three stages and
 * the other changes below; this kernel alone 745 us (ncu), ~1.8 us per
 * sub-tile per block: latency-bound. */
template <typename T>
__global__ void __launch_bounds__(128) ssd_state_pass(const ssd_fwd_args a) {
    constexpr int PS = 32, NS = 64, KT = sizeof(T) == 2 ? 64 : 32, ST = 3;
    constexpr int LDX = PS + ssd_pad<T>::KMAJ, LDB = NS + ssd_pad<T>::KMAJ;
    __shared__ __align__(16) T sX[ST][KT * LDX];
    __shared__ __align__(16) T sB[ST][KT * LDB];
    __shared__ __align__(16) float sg[256], sdt[256], sw[256];
    __shared__ int sseq[256];

    const int npsl = (a.P + PS - 1) / PS, nnsl = (a.N + NS - 1) / NS;
    int64_t id = blockIdx.x;
    const int sl = (int)(id % (npsl * nnsl));
    id /= npsl * nnsl;
    const int h = (int)(id % a.H);
    const int b = (int)(id / a.H);
    const int p0 = (sl / nnsl) * PS, n0 = (sl % nnsl) * NS;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1;
    const int prow0 = p0 + wm * 16, ncol0 = n0 + wn * 32;
    const T *xb = (const T *)a.x + (int64_t)b * a.xs[0] + (int64_t)h * a.xs[2] + p0;
    const T *Bb = (const T *)a.B + (int64_t)b * a.Bs[0] + (int64_t)(h / a.hpg) * a.Bs[2] + n0;
    const int64_t bh = (int64_t)b * a.H + h;
    const int64_t PN = (int64_t)a.P * a.N;
    const int pv = min(PS, a.P - p0), nv = min(NS, a.N - n0);
    const int spc = a.Q / KT; /* sub-tiles per full chunk */
    const int Llast = (int)(a.L - (int64_t)(a.nc - 1) * a.Q);
    const int nit = (a.nc - 1) * spc + (Llast + KT - 1) / KT; /* all sub-tiles */

    /* flat sub-tile `it` -> buffer it % ST; always one (maybe empty) group */
    auto issue = [&](int it) {
        if (it < nit) {
            const int c = it / spc, k0 = (it - c * spc) * KT;
            const int64_t tok = (int64_t)c * a.Q + k0;
            const int kv = (int)min((int64_t)KT, min((int64_t)a.Q - k0, a.L - tok));
            ssd_stage_async<T, 128>(sX[it % ST], LDX, xb + tok * a.xs[1], a.xs[1], KT, PS, kv,
                                    pv, a.vec_x);
            ssd_stage_async<T, 128>(sB[it % ST], LDB, Bb + tok * a.Bs[1], a.Bs[1], KT, NS, kv,
                                    nv, a.vec_B);
        }
        sf_cp_async_commit();
    };
    /* per-chunk vectors, Q <= 256 so two per thread */
    float pg[2], pd[2];
    int ps[2];
    auto fetch_vec = [&](int c) {
        const int64_t t0 = (int64_t)c * a.Q;
        const int Lc = (int)min((int64_t)a.Q, a.L - t0);
        const float *gwc = a.gw + (bh * a.nc + c) * a.Q, *dtc = a.dtw + (bh * a.nc + c) * a.Q;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int i = tid + 128 * u;
            pg[u] = i < a.Q ? gwc[i] : 0.0f;
            pd[u] = i < a.Q ? dtc[i] : 0.0f;
            ps[u] = (a.varlen && i < Lc) ? a.seqid[(int64_t)b * a.L + t0 + i] : -1;
        }
    };

    float R[4][4];
    {
        const int64_t row = a.varlen == 2 ? -1 : ssd_init_row(a, b, 0, 0);
        ssd_acc_load<4>(R, row < 0 ? nullptr : a.init + row * a.ins[0] + h * a.ins[1], a.ins[2],
                        a.ins[3], prow0, ncol0, a.P, a.N);
    }
    for (int u = 0; u < ST - 1; u++) issue(u);
    if (a.nc > 0) fetch_vec(0);
    int it = 0, prev_last = 0;
    for (int c = 0; c < a.nc; c++) {
        const int64_t t0 = (int64_t)c * a.Q;
        const int Lc = (int)min((int64_t)a.Q, a.L - t0);
        __syncthreads(); /* the previous chunk's readers of the shared vectors are done */
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int i = tid + 128 * u;
            if (i < a.Q) {
                sg[i] = pg[u];
                sdt[i] = pd[u];
                sseq[i] = ps[u];
            }
        }
        __syncthreads();
        if (c + 1 < a.nc) fetch_vec(c + 1); /* in flight during this chunk */
        const int sfirst = a.varlen ? sseq[0] : 0, slast = a.varlen ? sseq[Lc - 1] : 0;
        const float glast = sg[Lc - 1];
        for (int i = tid; i < a.Q; i += 128)
            sw[i] = (i < Lc && (!a.varlen || sseq[i] == slast))
                        ? exp2f(fminf(glast - sg[i], 0.0f)) * sdt[i]
                        : 0.0f;
        /* the state entering this chunk for its first sequence */
        if (c == 0 || (a.varlen && sfirst != prev_last)) {
            const int64_t row = ssd_init_row(a, b, c, sfirst);
            ssd_acc_load<4>(R, row < 0 ? nullptr : a.init + row * a.ins[0] + h * a.ins[1],
                            a.ins[2], a.ins[3], prow0, ncol0, a.P, a.N);
        }
        prev_last = slast;
        ssd_acc_store_op<T, 4>(R, (T *)a.states + (bh * a.nc + c) * PN, prow0, ncol0, a.P, a.N);
        if (a.states32)
            ssd_acc_store<4>(R, a.states32 + (bh * a.nc + c) * PN, a.N, 1, prow0, ncol0, a.P,
                             a.N);

        float S[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[nt][e] = 0.0f;
        for (int k0 = 0; k0 < Lc; k0 += KT, it++) {
            issue(it + ST - 1);
            sf_cp_async_wait<ST - 1>();
            __syncthreads(); /* sub-tile `it` (and sw) visible to all warps */
            const T *cX = sX[it % ST], *cB = sB[it % ST];
            const int kv = min(KT, Lc - k0);
            ssd_state_subtile<T, KT, LDX, LDB>(S, cX, cB, sw + k0, kv, wm, wn);
            __syncthreads(); /* buffer it % ST free for sub-tile it + ST */
        }
        /* a last sequence that started inside the chunk does not continue H_c */
        if (a.varlen && slast != sfirst) {
            const int64_t row = a.varlen == 2 ? ssd_init_row(a, b, c, slast) : -1;
            ssd_acc_load<4>(R, row < 0 ? nullptr : a.init + row * a.ins[0] + h * a.ins[1],
                            a.ins[2], a.ins[3], prow0, ncol0, a.P, a.N);
        }
        const float dec = exp2f(fminf(glast, 0.0f));
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) R[nt][e] = fmaf(dec, R[nt][e], S[nt][e]);
    }
    sf_cp_async_wait<0>();
    if (a.has_final && a.varlen != 2)
        ssd_acc_store<4>(R, a.fin + (int64_t)b * a.fis[0] + h * a.fis[1], a.fis[2], a.fis[3],
                         prow0, ncol0, a.P, a.N);
}

/* ------------------------------------------------------------------ */
/* state scan over chunks                                               */
/* ------------------------------------------------------------------ */
/* Grid (flattened): block of 1024 state elements fastest, then (b, head);
 * each thread 4 consecutive elements of one row (N % 4 == 0).  The next
 * chunk's S and decay are loaded before the current one is used. */
/* A scan thread's 4 consecutive state elements (grid: block of 1024
 * elements fastest, then (b, head)): the (b, h) row, the offset e within
 * its P N states, and (p, n) of the first; ok false past the end. */
struct SsdScanElem {
    int64_t bh, e;
    int b, h, p, n;
    bool ok;
};
static __device__ __forceinline__ SsdScanElem ssd_scan_elem(const ssd_fwd_args &a) {
    SsdScanElem s;
    const int64_t PN = (int64_t)a.P * a.N, nblk = (PN + 1023) / 1024;
    s.bh = blockIdx.x / nblk;
    s.e = ((blockIdx.x - s.bh * nblk) * 256 + threadIdx.x) * 4;
    s.ok = s.e < PN;
    s.b = s.h = s.p = s.n = 0;
    if (s.ok) {
        s.b = (int)(s.bh / a.H);
        s.h = (int)(s.bh - (int64_t)s.b * a.H);
        s.p = (int)(s.e / a.N);
        s.n = (int)(s.e - (int64_t)s.p * a.N);
    }
    return s;
}
/* the initial state's 4 elements (any strides), or 0 without one */
static __device__ __forceinline__ float4 ssd_scan_init(const ssd_fwd_args &a, const SsdScanElem &s) {
    if (!a.has_init) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float *in = a.init + (int64_t)s.b * a.ins[0] + (int64_t)s.h * a.ins[1] + (int64_t)s.p * a.ins[2] +
                      (int64_t)s.n * a.ins[3];
    return make_float4(in[0], in[a.ins[3]], in[2 * a.ins[3]], in[3 * a.ins[3]]);
}
/* H as the final state's 4 elements (any strides), when asked for */
static __device__ __forceinline__ void ssd_scan_final(const ssd_fwd_args &a, const SsdScanElem &s, float4 H) {
    if (!a.has_final) return;
    float *fo = a.fin + (int64_t)s.b * a.fis[0] + (int64_t)s.h * a.fis[1] + (int64_t)s.p * a.fis[2] +
                (int64_t)s.n * a.fis[3];
    fo[0] = H.x;
    fo[a.fis[3]] = H.y;
    fo[2 * a.fis[3]] = H.z;
    fo[3 * a.fis[3]] = H.w;
}

template <typename T>
__global__ void __launch_bounds__(256) ssd_state_scan(const ssd_fwd_args a, const float *cst) {
    ssd_griddep_wait();
    const int64_t PN = (int64_t)a.P * a.N;
    const SsdScanElem el = ssd_scan_elem(a);
    if (!el.ok) return;
    const int64_t bh = el.bh, e = el.e;
    float4 H = ssd_scan_init(a, el);
    const float *sc = cst + bh * a.nc * PN + e;
    const float *gl = a.gw + bh * a.nc * a.Q + (a.Q - 1);
    T *st = (T *)a.states + bh * a.nc * PN + e;
    float4 Sn = a.nc > 0 ? *reinterpret_cast<const float4 *>(sc) : H;
    float gn = a.nc > 0 ? gl[0] : 0.0f;
    for (int c = 0; c < a.nc; c++) {
        const float4 S = Sn;
        const float dec = exp2f(fminf(gn, 0.0f));
        if (c + 1 < a.nc) {
            Sn = *reinterpret_cast<const float4 *>(sc + (int64_t)(c + 1) * PN);
            gn = gl[(int64_t)(c + 1) * a.Q];
        }
        T *d = st + (int64_t)c * PN;
        if constexpr (sizeof(T) == 4) {
            *reinterpret_cast<float4 *>(d) = H;
        } else {
            const uint32_t lo = ssd_pack(T{}, H.x, H.y), hi = ssd_pack(T{}, H.z, H.w);
            *reinterpret_cast<uint2 *>(d) = make_uint2(lo, hi);
        }
        H = make_float4(fmaf(dec, H.x, S.x), fmaf(dec, H.y, S.y), fmaf(dec, H.z, S.z),
                        fmaf(dec, H.w, S.w));
    }
    ssd_scan_final(a, el, H);
}

/* Chunk states and the pass over chunks in one kernel, for dense batches
 * (configuration fuq, NW 128): a
 * block per (b, P tile, NW-column state slice, head), head fastest (the
 * heads of a group read the same B tiles from L2 together), walks the
 * chunks in order with its 64 x NW slice of the state H (f32) in the wgmma
 * accumulator: at chunk c it stores H (the state entering c, in T, for the
 * output kernel), scales it by 2^(g'_last), then adds X_c^T diag(w) B_c
 * (w_j = 2^(g'_last - g'_j) dt_j) half a chunk at a time.  The halves stream
 * through NST shared stages: the next NST - 1 halves' copies are in flight
 * while one is multiplied.  No f32 chunk-state round trip through HBM (the
 * split kernels write and read 335 MB of it at the 2.7B b8 L4096 shape);
 * the cost is parallelism: batch x heads x P tiles x N / NW blocks, each
 * walking every chunk (NW 64 doubles the blocks for small batches and reads
 * X twice). */
template <typename T, int Q, int NW, int NST>
__global__ void __launch_bounds__(128, NW == 128 ? 2 : 3) ssd_state_fused_wg(const ssd_fwd_args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sf_wg;
    typedef SsdFu<Q, NW, NST> F;
    constexpr int LDX = F::LDX, QH = F::QH, NT8 = NW / 8;
    static_assert(NST >= 2, "two stages at least");
    extern __shared__ __align__(16) unsigned char ssd_smem[];
    const uint32_t sraw = sf_smem_u32(ssd_smem);
    const uint32_t sbase = (sraw + 1023u) & ~1023u;
    unsigned char *gbase = ssd_smem + (sbase - sraw);

    const int ptiles = a.P / 64, nsl = (a.N + NW - 1) / NW;
    int64_t id = blockIdx.x;
    const int h = (int)(id % a.H);
    id /= a.H;
    const int sl = (int)(id % nsl);
    id /= nsl;
    const int pt = (int)(id % ptiles);
    const int b = (int)(id / ptiles);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t bh = (int64_t)b * a.H + h, PN = (int64_t)a.P * a.N;
    const int p0 = pt * 64, n0 = sl * NW, nsub = 2 * a.nc;
    const int nv8 = min(NW / 8, (a.N - n0) / 8); /* this slice's 16-byte chunks of a B row */
    const T *Bg = (const T *)a.B + (int64_t)b * a.Bs[0] + (int64_t)(h / a.hpg) * a.Bs[2] + n0;
    const T *Xg = (const T *)a.x + (int64_t)b * a.xs[0] + (int64_t)h * a.xs[2] + p0;

    /* this thread's token of a sub-tile (s: chunk s / 2, half s % 2):
     * g', dt and the chunk's last g', fetched one issue ahead of use */
    float pg = 0.0f, pd = 0.0f, pgl = 0.0f;
    auto fetch = [&](int s) {
        if (s < nsub && tid < QH) {
            const int64_t v = (bh * a.nc + (s >> 1)) * Q;
            pg = a.gw[v + (s & 1) * QH + tid];
            pd = a.dtw[v + (s & 1) * QH + tid];
            pgl = a.gw[v + Q - 1];
        }
    };
    /* sub-tile s's copies into stage s % NST (always one commit group) */
    auto issue = [&](int s) {
        if (s < nsub) {
            const int64_t t0 = (int64_t)(s >> 1) * Q + (s & 1) * QH;
            const int lv = (int)min((int64_t)QH, a.L - t0); /* valid tokens (may be <= 0) */
            const uint32_t st = sbase + (s % NST) * F::STAGE;
            load_tile_sw_rs<QH, NW, 128>(st, Bg + t0 * a.Bs[1], a.Bs[1], lv, nv8, tid);
#pragma unroll
            for (int it = 0; it < QH * 8 / 128; it++) {
                const int i = tid + it * 128, r = i >> 3, cc = i & 7;
                const bool ok = r < lv;
                cp_async16_u32(st + F::OX + (r * LDX + cc * 8) * 2, ok ? Xg + (t0 + r) * a.xs[1] + cc * 8 : Xg,
                               ok ? 16 : 0);
            }
            if (tid < QH)
                reinterpret_cast<float *>(gbase + (s % NST) * F::STAGE + F::OW)[tid] =
                    exp2f(fminf(pgl - pg, 0.0f)) * pd;
        }
        sf_cp_async_commit();
    };

    /* H in the accumulator layout: rows p0 + 16 warp + g (+ 8), columns n0 + 8 nt + 2 t (+ 1) */
    float H[NT8][4];
    const int pr = p0 + 16 * warp + g;
    ssd_h_init(H, a, b, h, pr, t, a.has_init, n0);
#pragma unroll
    for (int u = 0; u < NST - 1; u++) {
        fetch(u);
        issue(u);
    }
    fetch(NST - 1);
    for (int s = 0; s < nsub; s++) {
        sf_cp_async_wait<NST - 2>(); /* sub-tile s landed (s + 1 .. s + NST - 2 may be in flight) */
        fence_async_smem();
        __syncthreads(); /* ... for every thread; stage (s - 1) % NST free (sub-tile s - 1 done) */
        issue(s + NST - 1);
        fetch(s + NST);
        if ((s & 1) == 0) {
            /* H is the state entering chunk s / 2: store it, then decay it */
            const int c = s >> 1;
            ssd_h_store(H, (T *)a.states + (bh * a.nc + c) * PN + (int64_t)pr * a.N, a.N, t, n0);
            ssd_h_scale(H, exp2f(fminf(a.gw[(bh * a.nc + c) * Q + Q - 1], 0.0f)));
        }
        const int stg = s % NST;
        ssd_state_half_wg<T, QH, LDX, NW>(H, reinterpret_cast<const T *>(gbase + stg * F::STAGE + F::OX),
                                          reinterpret_cast<const float *>(gbase + stg * F::STAGE + F::OW),
                                          sbase + stg * F::STAGE, warp);
    }
    if (a.has_final) ssd_h_final(H, a, b, h, pr, t, n0);
#else
    (void)a;
#endif
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

/* No tokens (b or L 0): each sequence's final state is its initial state, or
 * zeros without one.  One thread per (sequence, head, p, n), n fastest. */
__global__ void __launch_bounds__(256) ssd_final_empty(const ssd_fwd_args a, int64_t total) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= total) return;
    int64_t r = id;
    const int64_t n = r % a.N;
    r /= a.N;
    const int64_t p = r % a.P;
    r /= a.P;
    const int64_t h = r % a.H, s = r / a.H;
    const float v = a.has_init ? a.init[s * a.ins[0] + h * a.ins[1] + p * a.ins[2] + n * a.ins[3]] : 0.0f;
    a.fin[s * a.fis[0] + h * a.fis[1] + p * a.fis[2] + n * a.fis[3]] = v;
}

#endif
