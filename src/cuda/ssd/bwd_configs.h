/* bwd_configs.h - the SSD backward's CUDA configurations, as data.  Row
 * order is the default: the first row whose supports() accepts the shape
 * runs (tc, first, is the chunked tensor-core one where it serves; seq,
 * last, serves what the others cannot: a P x N adjoint too big for two
 * states in shared memory); SF_AUTOTUNE_FORCE=ssd_bwd:<name> pins one (the
 * tests run each).  The order of the per-token rows is a guess until
 * bench/gpu_ssd_bwd.py --configs has measured them. */
#ifndef SF_SSD_BWD_CONFIGS_H
#define SF_SSD_BWD_CONFIGS_H

#include "ssd/bwd_args.h"

enum class SsdBwdPath {
    tc,    /* chunked, tensor cores: per-chunk matrix products (bwd_tc_*) */
    cpar,  /* chunk-parallel: local chunk maps, a scan, chunks in parallel */
    cpars, /* cpar with each sub-block's states in shared memory          */
    seq,  /* one CTA per (sequence, head) walking all its chunks          */
};

struct SsdBwdConfig {
    const char *name;
    SsdBwdPath path;
    int ctas_per_sm;     /* persistent grid: CTAs an SM, each with its own
                            Q + 1 states of scratch (8 MB at P 64, N 128,
                            Q 256): memory for latency hiding; not tuned */
    const char *about;
};

static const SsdBwdConfig ssd_bwd_configs[] = {
    {"tc", SsdBwdPath::tc, 2, "16-bit inputs, no varlen: the chunked decomposition on mma.sync (chunk states, a reverse state pass, 64-token block pair products; 2 CTAs an SM by its tiles, not this count)"},
    {"cpar", SsdBwdPath::cpar, 2, "any GPU: chunks of every (sequence, head) in parallel, joined by a scan of the chunks' linear state and adjoint maps"},
    {"cpar4", SsdBwdPath::cpar, 4, "cpar with 4 CTAs an SM on the chunk walk (twice the scratch)"},
    {"cpars", SsdBwdPath::cpars, 1, "cpar with the per-token states of sub-blocks of a few tokens in shared memory (the chunk's states not written out)"},
    {"seq", SsdBwdPath::seq, 2, "any GPU: one CTA per (sequence, head) walking its chunks in order (the reference point of cpar)"},
};
static const int SSD_BWD_NCONFIG = (int)(sizeof ssd_bwd_configs / sizeof ssd_bwd_configs[0]);

/* cpars: tokens a sub-block whose states fit in shared memory beside the
 * adjoint's (smem bytes), at most Q; below 2 it is not worth it. */
static inline int ssd_bwd_sub(int P, int N, int Q, size_t smem, size_t smem_optin) {
    const size_t state = sizeof(float) * (size_t)P * N;
    if (state == 0) return Q;
    const size_t room = smem_optin > smem ? smem_optin - smem : 0;
    const size_t fit = room / state;
    return fit < 2 ? 0 : (int)(fit - 1 < (size_t)Q ? fit - 1 : (size_t)Q);
}

/* NULL when configuration c serves the problem a, else the reason; smem:
 * the per-token paths' shared memory, tc_smem: the tc path's largest. */
static inline const char *ssd_bwd_supports(const SsdBwdConfig &c, const ssd_bwd_args &a, size_t smem,
                                           size_t tc_smem, size_t smem_optin) {
    const int P = a.P, N = a.N, Q = a.Q;
    if (c.path == SsdBwdPath::tc) {
        if (a.xdt != SF_F16 && a.xdt != SF_BF16) return "x is not 16-bit (f16, bf16)";
        if (a.Bdt != a.xdt || a.Cdt != a.xdt) return "B or C not of x's dtype";
        if (a.varlen) return "varlen (seq_idx, cu_seqlens) not served yet";
        if (P % 16 || 256 % P || P > 128) return "headdim not 16, 32, 64 or 128";
        if (N % 16) return "dstate not a multiple of 16";
        if (Q % 64 || Q > 256) return "chunk not a multiple of 64 up to 256";
        if (tc_smem > smem_optin) return "the tiles do not fit in shared memory";
        return nullptr;
    }
    if (N > 256) return "dstate > 256";
    if (smem > smem_optin) return "the P x N adjoint does not fit in shared memory";
    if (c.path != SsdBwdPath::seq && 2 * sizeof(float) * (size_t)P * N > smem_optin)
        return "the chunk maps' two P x N states do not fit in shared memory";
    if (c.path == SsdBwdPath::cpars && ssd_bwd_sub(P, N, Q, smem, smem_optin) < 2)
        return "fewer than 2 states of a sub-block fit in shared memory beside the adjoint";
    return nullptr;
}

#endif
