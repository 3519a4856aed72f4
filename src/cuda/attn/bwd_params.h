/* bwd_params.h - what the attention backward kernels take (BwdParams, by
 * value, strides in elements) and the row addressing they share.
 *
 * Rows: a q-like tensor's element (sequence b, row i, head h, dim c) is at
 * b sb + (row0(b) + i) sr + h sh + c with row0 = cu_seqlens[b] (varlen, sb
 * 0) or 0 (dense); the f32 workspace rows (D, the dQ accumulator) are
 * indexed by the global row g = cu_seqlens_q[b] + i or b Lq + i.
 */
#ifndef SF_ATTN_BWD_PARAMS_H
#define SF_ATTN_BWD_PARAMS_H

#include "attn/params.h"

#include <stdint.h>

namespace sf_attn {

struct BwdParams {
    const void *q, *k, *v, *o, *dout;
    void *dq, *dk, *dv;
    const float *lse;
    float *dsum;                  /* D = rowsum(dO * O): (H, rows) f32          */
    float *dqacc;                 /* f32, zeroed: fast mode (rows, H, d); wg rows, both modes: per head
                                     acc_nb tiles of 64 rows x D (bwd_wg.cuh wg_acc_tile) */
    int64_t acc_nb;               /* wg rows: accumulator tiles a head */
    int *sem;                     /* wg's deterministic mode: (H, batch, sem_nqb) counts, zeroed */
    int sem_nqb;                  /* query blocks of 64 rows in the longest sequence */
    int64_t q_sb, q_sr, q_sh, k_sb, k_sr, k_sh, v_sb, v_sr, v_sh;
    int64_t o_sb, o_sr, o_sh, do_sb, do_sr, do_sh;
    int64_t dq_sb, dq_sr, dq_sh, dk_sb, dk_sr, dk_sh, dv_sb, dv_sr, dv_sh;
    int64_t l_sb, l_sh, l_sr;
    int64_t rows_q;               /* rows of q: b Lq or the packed total         */
    const void *cu_q, *cu_k;
    int64_t cu_q_s, cu_k_s;
    int cu_i64, varlen;
    int vec16;                    /* d % 8 == 0 and q, k, v, dout rows 16-byte aligned */
    int dkv16;                    /* d % 8 == 0 and dk, dv rows 16-byte aligned */
    int batch, nheads, heads_per_kv, d;
    int lq, lk;                   /* dense lengths; varlen: the packed totals    */
    int zgroup, zrot;             /* wg / ws rows: key blocks a grid group, rotated walks (wgb::block_of, item_rot) */
    int wl, wr;                   /* -1 unbounded; causal folded into wr = 0     */
    float scale, softcap;
    const float *alibi;
    int64_t alibi_sb, alibi_sh;
};

/* Sequence b's first rows and lengths (q and k). */
__device__ __forceinline__ void bwd_seq(const BwdParams &p, int b, int64_t &q0, int &lq, int64_t &k0, int &lk) {
    if (p.varlen) {
        q0 = ld_cu(p.cu_q, (int64_t)b * p.cu_q_s, p.cu_i64);
        lq = (int)(ld_cu(p.cu_q, (int64_t)(b + 1) * p.cu_q_s, p.cu_i64) - q0);
        k0 = ld_cu(p.cu_k, (int64_t)b * p.cu_k_s, p.cu_i64);
        lk = (int)(ld_cu(p.cu_k, (int64_t)(b + 1) * p.cu_k_s, p.cu_i64) - k0);
    } else {
        q0 = 0;
        lq = p.lq;
        k0 = 0;
        lk = p.lk;
    }
}

} /* namespace sf_attn */

#endif
