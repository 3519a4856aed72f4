/* bwd.cu - launcher of the CUDA SSD backward (sf_ssd_bwd): fills the
 * argument block, picks a configuration (bwd_configs.h), carves the
 * workspace, runs its kernels and the fixed-order reductions.  Every output
 * is bit-identical from run to run whatever p->deterministic says (no
 * atomics anywhere). */
#include "common/cuda_common.h"
#include "ssd_bwd.h"

#include "autotune.h"
#include "ssd/bwd_configs.h"
#include "ssd/bwd_cpar.cuh"
#include "ssd/bwd_reduce.cuh"
#include "ssd/bwd_seq.cuh"
#include "ssd/bwd_tc_chunk.cuh"
#include "ssd/bwd_tc_pairs.cuh"
#include "ssd/bwd_tc_state.cuh"

static void fill3(int64_t *d, const sf_tensor *t) { sf_cuda_copy_strides(d, t, t->data ? 3 : 0); }

static int64_t rup32(int64_t v) { return (v + 31) / 32 * 32; }

static void fill_args(const sf_ssd_bwd_problem *bp, ssd_bwd_args &a) {
    const sf_ssd_problem *pr = &bp->f;
    const sf_ssd_bwd_params *q = bp->p;
    const sf_ssd_fwd_params *p = &q->fwd;
    memset(&a, 0, sizeof(a));
    a.x = p->x.data; a.dt = p->dt.data; a.B = p->B.data; a.C = p->C.data; a.z = p->z.data;
    a.dout = q->dout.data;
    a.A = (const float *)p->A.data; a.D = (const float *)p->D.data;
    a.dt_bias = (const float *)p->dt_bias.data; a.init = (const float *)p->initial_states.data;
    a.dfin = (const float *)q->dfinal_states.data;
    a.cu = p->cu_seqlens.data; a.seq_idx = (const int *)p->seq_idx.data;
    a.xdt = (int)p->x.dtype; a.dtdt = (int)p->dt.dtype; a.Bdt = (int)p->B.dtype; a.Cdt = (int)p->C.dtype;
    fill3(a.xs, &p->x); fill3(a.dts, &p->dt); fill3(a.Bs, &p->B); fill3(a.Cs, &p->C);
    fill3(a.zs, &p->z); fill3(a.dos, &q->dout);
    a.As = p->A.stride[0];
    sf_cuda_copy_strides(a.Ds, &p->D, pr->has_D ? p->D.rank : 0);
    a.biass = pr->has_dt_bias ? p->dt_bias.stride[0] : 0;
    sf_cuda_copy_strides(a.ins, &p->initial_states, pr->has_init ? 4 : 0);
    sf_cuda_copy_strides(a.dfs, &q->dfinal_states, pr->has_final ? 4 : 0);
    sf_cuda_copy_strides(a.sis, &p->seq_idx, p->seq_idx.data ? 2 : 0);
    a.cus = p->cu_seqlens.data ? p->cu_seqlens.stride[0] : 0;
    a.cu64 = p->cu_seqlens.data && p->cu_seqlens.dtype == SF_I64;
    a.dx = q->dx.data; a.ddt = q->ddt.data; a.dB = q->dB.data; a.dC = q->dC.data; a.dz = q->dz.data;
    a.dA = (float *)q->dA.data; a.dD = (float *)q->dD.data; a.ddt_bias = (float *)q->ddt_bias.data;
    a.dinit = (float *)q->dinitial_states.data;
    fill3(a.dxs, &q->dx); fill3(a.ddts, &q->ddt); fill3(a.dBs, &q->dB); fill3(a.dCs, &q->dC);
    fill3(a.dzs, &q->dz);
    a.dAs = q->dA.data ? q->dA.stride[0] : 0;
    sf_cuda_copy_strides(a.dDs, &q->dD, q->dD.data ? q->dD.rank : 0);
    a.dbs = q->ddt_bias.data ? q->ddt_bias.stride[0] : 0;
    sf_cuda_copy_strides(a.dis, &q->dinitial_states, q->dinitial_states.data ? 4 : 0);
    a.batch = (int)pr->batch; a.L = (int)pr->seqlen; a.H = (int)pr->nheads; a.P = (int)pr->headdim;
    a.N = (int)pr->dstate; a.hpg = (int)pr->heads_per_group; a.G = (int)pr->ngroups; a.Q = pr->chunk;
    a.nseq = (int)pr->nseq;
    a.hk = 1;
    a.has_D = pr->has_D; a.D_pc = pr->D_per_channel; a.has_z = pr->has_z; a.has_bias = pr->has_dt_bias;
    a.softplus = p->dt_softplus; a.has_init = pr->has_init; a.has_final = pr->has_final; a.varlen = pr->varlen;
    a.dt_min = p->dt_min; a.dt_max = p->dt_max;
}

/* Every given 16-bit tensor of n (pointers, 3 strides each) at `elems`
 * elements' alignment: the pointer and its strides multiples of it. */
static int tc_aligned(int n, const void *const *ptr, const int64_t *const *st, int elems) {
    for (int i = 0; i < n; i++) {
        if (!ptr[i]) continue;
        if ((uintptr_t)ptr[i] % (2 * (uintptr_t)elems)) return 0;
        for (int d = 0; d < 3; d++)
            if (st[i][d] % elems) return 0;
    }
    return 1;
}
/* x, z, dout, B, C rows 16-byte aligned (8 16-bit elements) */
static int tc_vec(const ssd_bwd_args &a) {
    const void *ptr[5] = {a.x, a.z, a.dout, a.B, a.C};
    const int64_t *st[5] = {a.xs, a.zs, a.dos, a.Bs, a.Cs};
    return tc_aligned(5, ptr, st, 8);
}
/* dx and dz (where wanted) take a pair of adjacent channels as one 4-byte
 * store. */
static int tc_pair_out(const ssd_bwd_args &a) {
    const void *ptr[2] = {a.dx, a.dz};
    const int64_t *st[2] = {a.dxs, a.dzs};
    return tc_aligned(2, ptr, st, 2);
}

/* The rows and cols kernels: compiled for headdim 64, dstate 128 (the
 * Mamba-2 layers'; every tile count, loop bound and shared-memory offset a
 * constant, which halves their instructions) or for any served shape
 * (PT = NT = 0: read from a). */
template <typename T, int PT, int NT>
static sf_status tc_blocks(sf_ctx *ctx, const ssd_bwd_args &a, unsigned grid, size_t bsm, unsigned pgrid,
                           size_t psm, cudaStream_t stream) {
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_tc_pairs_kernel<T, PT, NT>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)psm));
    ssd_tc_pairs_kernel<T, PT, NT><<<pgrid, SSD_BWD_THREADS, psm, stream>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_tc_rows_kernel<T, PT, NT>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bsm));
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_tc_cols_kernel<T, PT, NT>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bsm));
    ssd_tc_rows_kernel<T, PT, NT><<<grid, SSD_BWD_THREADS, bsm, stream>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    ssd_tc_cols_kernel<T, PT, NT><<<grid, SSD_BWD_THREADS, bsm, stream>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

/* The chunk-state kernel, compiled for the Mamba-2 layers' shape (headdim
 * 64, dstate 128, chunk 256) or for any served one. */
template <typename T, int PT, int NT, int QT>
static sf_status tc_local(sf_ctx *ctx, const ssd_bwd_args &a, unsigned grid, size_t lsm, cudaStream_t stream) {
    SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_tc_local_kernel<T, PT, NT, QT>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lsm));
    ssd_tc_local_kernel<T, PT, NT, QT><<<grid, SSD_BWD_THREADS, lsm, stream>>>(a);
    SF_CUDA_CHECK_LAUNCH(ctx);
    return SF_OK;
}

template <typename T> static sf_status tc_launch(sf_ctx *ctx, const ssd_bwd_args &a, cudaStream_t stream) {
    const int64_t nitems = (int64_t)a.ntask * a.nck, nb = a.Q / TC_BT;
    const size_t lsm = tc_state_smem(a.P, a.N, a.Q), bsm = tc_blk_layout(a.P, a.N).total;
    if (nitems > 0) {
        ssd_tc_prep_kernel<<<(unsigned)nitems, SSD_BWD_THREADS, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
        const sf_status st = a.P == 64 && a.N == 128 && a.Q == 256
                                 ? tc_local<T, 64, 128, 256>(ctx, a, (unsigned)nitems, lsm, stream)
                                 : tc_local<T, 0, 0, 0>(ctx, a, (unsigned)nitems, lsm, stream);
        if (st != SF_OK) return st;
    }
    if (a.ntask > 0) {
        ssd_tc_scan_kernel<T><<<dim3((unsigned)a.ntask, (unsigned)a.tnsl), SSD_BWD_THREADS, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (nitems > 0) {
        const unsigned grid = (unsigned)(nitems / a.hk * nb), pgrid = (unsigned)(nitems / a.hk * a.npair);
        const size_t psm = tc_pairs_layout(a.P, a.N).total;
        const sf_status st = a.P == 64 && a.N == 128 ? tc_blocks<T, 64, 128>(ctx, a, grid, bsm, pgrid, psm, stream)
                                                     : tc_blocks<T, 0, 0>(ctx, a, grid, bsm, pgrid, psm, stream);
        if (st != SF_OK) return st;
        ssd_tc_fin_kernel<<<(unsigned)nitems, SSD_BWD_THREADS, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

/* The tc configuration: workspace (chunk rows of cum, dt, the d(cum)
 * parts; entering states and leaving adjoints; partials per 64-token
 * block; dB/dC rows of head groups; 16-bit gy; per block pair the f32
 * CB tiles, the 16-bit W sums of head groups and Z's row / column sums),
 * its kernels, the fixed-order reductions. */
static sf_status tc_run(sf_ctx *ctx, const sf_ssd_bwd_problem *bp, ssd_bwd_args &a, sf_cuda_state *cs) {
    static const char *op = "sf_ssd_bwd";
    (void)cs;
    const sf_ssd_problem *pr = &bp->f;
    const int64_t ntask = pr->batch * pr->nheads;
    a.nck = (int)((pr->seqlen + a.Q - 1) / a.Q);
    const int64_t nb = a.Q / TC_BT, nitems = ntask * a.nck;
    a.npair = (int)(nb * (nb + 1) / 2);
    if (ntask > INT32_MAX || nitems * a.npair > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: batch x nheads x chunks too large", op);
    a.ntask = (int)ntask;
    a.npt = (int)(a.nck * nb);
    const int64_t PN = (int64_t)a.P * a.N;
    a.tnsl = (int)((PN + 1023) / 1024);
    a.tvec = tc_vec(a);
    a.tpair = tc_pair_out(a);
    /* heads a rows / cols CTA sums dB and dC over: the largest divisor of a
     * group's heads up to TC_HK (its whole group where that fits, else its
     * partial rows, a sixteenth of the per-head ones at 80 heads a group) */
    for (int d = TC_HK; d >= 1; d--)
        if (a.hpg % d == 0) {
            a.hk = d;
            break;
        }
    const bool per_head_bc = a.hpg / a.hk > 1 && (a.dB || a.dC);
    const int64_t npart = rup32(ntask * a.npt * (2 + (int64_t)a.P));
    const int64_t nrow = rup32(nitems * a.Q), nst = nitems * PN, ndot = rup32(nitems * a.tnsl);
    const int64_t nbc = per_head_bc ? (int64_t)a.batch * a.L * (a.H / a.hk) * a.N : 0;
    const int64_t ngy = rup32((nitems * a.Q * a.P + 1) / 2); /* 16-bit gy, in f32 words */
    const int64_t tile = TC_BT * TC_BT, npr = (int64_t)a.npair;
    const int64_t ncb = rup32((int64_t)a.batch * a.nck * a.G * npr * tile);  /* f32 CB tiles */
    const int64_t nws = rup32(nitems / a.hk * npr * tile / 2);               /* 16-bit W sums */
    const int64_t nz = rup32(nitems * npr * TC_BT);                          /* Z's row / column sums */
    /* f32 words; the two 16-bit state copies take nst words together */
    const double total_d = (double)npart + 6.0 * nrow + 3.0 * nst + ndot + 2.0 * nbc + 0.5 * nitems * a.Q * a.P +
                           (double)a.batch * a.nck * a.G * npr * tile + 0.5 * nitems * npr * tile + 2.0 * nitems * npr * TC_BT;
    if (total_d * sizeof(float) > 9.0e18) return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: workspace too large", op);
    const int64_t total = npart + 6 * nrow + 3 * nst + ndot + 2 * nbc + ngy + ncb + nws + 2 * nz;
    float *ws = (float *)sf_ws_get(ctx, (size_t)total * sizeof(float));
    if (!ws && total > 0) return SF_ERR_OUT_OF_MEMORY;
    a.part = ws;
    a.tcum = a.part + npart;
    a.tdt = a.tcum + nrow;
    a.trow = a.tdt + nrow;
    a.tcol = a.trow + nrow;
    a.tq = a.tcol + nrow;
    a.tddt = a.tq + nrow;
    a.tS = a.tddt + nrow;
    a.tdS = a.tS + nst;
    a.tS16 = a.tdS + nst;
    a.tdS16 = (char *)a.tS16 + nst * 2;
    a.tdot = a.tdS + 2 * nst;
    a.pdB = per_head_bc ? a.tdot + ndot : NULL;
    a.pdC = per_head_bc ? a.pdB + nbc : NULL;
    a.tgy = a.tdot + ndot + 2 * nbc;
    a.tcb = a.tdot + ndot + 2 * nbc + ngy;
    a.tws = a.tcb + ncb;
    a.tzr = a.tcb + ncb + nws;
    a.tzc = a.tzr + nz;
    cudaStream_t stream = sf_cuda_stream(ctx);
    const sf_status st =
        a.xdt == SF_BF16 ? tc_launch<__nv_bfloat16>(ctx, a, stream) : tc_launch<__half>(ctx, a, stream);
    if (st != SF_OK) return st;
    if (per_head_bc) {
        const int64_t n = (int64_t)a.batch * a.L * a.G * a.N;
        if (n > 0) {
            ssd_bwd_bc_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(a);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
    }
    if (a.dA || a.dD || a.ddt_bias) {
        ssd_bwd_param_kernel<<<a.H, 256, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}

extern "C" sf_status sf_cuda_ssd_bwd(sf_ctx *ctx, const sf_ssd_bwd_problem *bp) {
    static const char *op = "sf_ssd_bwd";
    const sf_ssd_problem *pr = &bp->f;
    ssd_bwd_args a;
    fill_args(bp, a);
    if (a.H == 0) return SF_OK;
    sf_cuda_state *cs = sf_cuda_st(ctx);
    const size_t smem = bwd_smem_bytes(a.P, a.N);
    size_t tc_smem = tc_blk_layout(a.P, a.N).total;
    if (tc_state_smem(a.P, a.N, a.Q) > tc_smem) tc_smem = tc_state_smem(a.P, a.N, a.Q);
    if (tc_pairs_layout(a.P, a.N).total > tc_smem) tc_smem = tc_pairs_layout(a.P, a.N).total;

    /* the configuration: a forced one, else the first that serves */
    char forced[48];
    const char *fname = sf_autotune_forced_name("ssd_bwd", forced, sizeof forced);
    const SsdBwdConfig *cfg = NULL;
    for (int i = 0; i < SSD_BWD_NCONFIG && !cfg; i++) {
        const SsdBwdConfig &c = ssd_bwd_configs[i];
        if (fname && strcmp(fname, c.name) != 0) continue;
        const char *why = ssd_bwd_supports(c, a, smem, tc_smem, cs->smem_optin);
        if (why && (fname || i == SSD_BWD_NCONFIG - 1))
            return sf_fail(ctx, SF_ERR_UNSUPPORTED, "%s: CUDA configuration %s: %s (headdim %d, dstate %d)", op,
                           c.name, why, a.P, a.N);
        if (!why) cfg = &c;
    }
    if (!cfg)
        return sf_fail(ctx, fname ? SF_ERR_INVALID_ARG : SF_ERR_UNSUPPORTED, "%s: SF_AUTOTUNE_FORCE names configuration %s, which does not exist",
                       op, fname ? fname : "?");
    if (cfg->path == SsdBwdPath::tc) return tc_run(ctx, bp, a, cs);
    const bool cpars = cfg->path == SsdBwdPath::cpars;
    const bool cpar = cfg->path == SsdBwdPath::cpar || cpars;
    a.sub = cpars ? ssd_bwd_sub(a.P, a.N, a.Q, smem, cs->smem_optin) : 0;

    const int64_t nseq = pr->varlen == 2 ? pr->nseq : pr->batch;
    const int64_t ntask = nseq * pr->nheads;
    a.nck = (int)((pr->seqlen + a.Q - 1) / a.Q); /* a sequence has at most L tokens */
    const int64_t nitems = ntask * a.nck;
    if (ntask > INT32_MAX || nitems > INT32_MAX)
        return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: sequences x nheads x chunks too large", op);
    a.ntask = (int)ntask;
    a.npt = cpar ? a.nck : 1;
    const int64_t PN = (int64_t)a.P * a.N;
    /* per-CTA scratch: seq: nck chunk states + Q + 1; cpar: Q + 1;
     * cpars: the states entering its ceil(Q / sub) sub-blocks */
    a.scratch_per_cta = cpars ? rup32((int64_t)((a.Q + a.sub - 1) / a.sub) * PN)
                              : rup32(((cpar ? 0 : (int64_t)a.nck) + a.Q + 1) * PN);

    /* CTAs on the persistent grids: the configuration's count an SM */
    int64_t grid = (int64_t)cs->sm_count * cfg->ctas_per_sm;
    const int64_t work = cpar ? nitems : ntask;
    if (grid > work) grid = work;

    /* workspace: per-CTA scratch, partials, cpar's maps, per-head dB/dC rows */
    const bool per_head_bc = a.hpg > 1 && (a.dB || a.dC);
    const int64_t npart = rup32(ntask * a.npt * (2 + (int64_t)a.P));
    const int64_t nmap = cpar ? nitems * PN : 0;
    const int64_t ndc = cpar ? rup32(nitems) : 0;
    const int64_t nbc = per_head_bc ? (int64_t)a.batch * a.L * a.H * a.N : 0;
    const double total_d = (double)grid * a.scratch_per_cta + npart + 2.0 * nmap + ndc + 2.0 * nbc;
    if (total_d * sizeof(float) > 9.0e18) return sf_fail(ctx, SF_ERR_TOO_LARGE, "%s: workspace too large", op);
    const int64_t total = grid * a.scratch_per_cta + npart + 2 * nmap + ndc + 2 * nbc;
    float *ws = (float *)sf_ws_get(ctx, (size_t)total * sizeof(float));
    if (!ws && total > 0) return SF_ERR_OUT_OF_MEMORY;
    a.scratch = ws;
    a.part = ws + grid * a.scratch_per_cta;
    a.X = cpar ? a.part + npart : NULL;
    a.R = cpar ? a.X + nmap : NULL;
    a.Dc = cpar ? a.R + nmap : NULL;
    a.pdB = per_head_bc ? a.part + npart + 2 * nmap + ndc : NULL;
    a.pdC = per_head_bc ? a.pdB + nbc : NULL;

    cudaStream_t stream = sf_cuda_stream(ctx);
    if (cpar) {
        if (nitems > 0) {
            const size_t lsm = 2 * (size_t)PN * sizeof(float); /* supports() checked it */
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_bwd_local_kernel,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lsm));
            ssd_bwd_local_kernel<<<(unsigned)nitems, SSD_BWD_THREADS, lsm, stream>>>(a);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
        if (ntask > 0) {
            ssd_bwd_scan_kernel<<<(unsigned)ntask, SSD_BWD_THREADS, 0, stream>>>(a);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
        if (grid > 0 && cpars) {
            const size_t ssm = smem + (size_t)(a.sub + 1) * (size_t)PN * sizeof(float);
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_bwd_chunk_sm_kernel,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ssm));
            ssd_bwd_chunk_sm_kernel<<<(unsigned)grid, SSD_BWD_THREADS, ssm, stream>>>(a);
            SF_CUDA_CHECK_LAUNCH(ctx);
        } else if (grid > 0) {
            SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_bwd_chunk_kernel,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            ssd_bwd_chunk_kernel<<<(unsigned)grid, SSD_BWD_THREADS, smem, stream>>>(a);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
    } else if (grid > 0) {
        SF_CUDA_CHECK(ctx, cudaFuncSetAttribute(ssd_bwd_seq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)smem));
        ssd_bwd_seq_kernel<<<(unsigned)grid, SSD_BWD_THREADS, smem, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    if (per_head_bc) {
        const int64_t n = (int64_t)a.batch * a.L * a.G * a.N;
        if (n > 0) {
            ssd_bwd_bc_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(a);
            SF_CUDA_CHECK_LAUNCH(ctx);
        }
    }
    if (a.dA || a.dD || a.ddt_bias) {
        ssd_bwd_param_kernel<<<a.H, 256, 0, stream>>>(a);
        SF_CUDA_CHECK_LAUNCH(ctx);
    }
    return SF_OK;
}
