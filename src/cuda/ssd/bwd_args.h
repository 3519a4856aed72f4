/* bwd_args.h - the argument block of the CUDA SSD backward kernels
 * (ssd_bwd_args, filled by bwd.cu).  Plain C++, no device code. */
#ifndef SF_SSD_BWD_ARGS_H
#define SF_SSD_BWD_ARGS_H

#include <stdint.h>

struct ssd_bwd_args {
    /* forward inputs; dtypes are seqfuse sf_dtype codes */
    const void *x, *dt, *B, *C, *z, *dout;
    const float *A, *D, *dt_bias, *init, *dfin;
    const void *cu;
    const int *seq_idx;
    int xdt, dtdt, Bdt, Cdt;   /* x (also z, dout, dx, dz), dt, B, C dtypes */
    int64_t xs[3], dts[3], Bs[3], Cs[3], zs[3], dos[3];
    int64_t As, Ds[2], biass, ins[4], dfs[4], sis[2], cus;
    /* gradients (NULL: not wanted) */
    void *dx, *ddt, *dB, *dC, *dz;
    float *dA, *dD, *ddt_bias, *dinit;
    int64_t dxs[3], ddts[3], dBs[3], dCs[3], dzs[3], dAs, dDs[2], dbs, dis[4];
    int batch, L, H, P, N, hpg, G, Q, nseq, ntask, nck;
    int has_D, D_pc, has_z, has_bias, softplus, has_init, has_final, varlen, cu64;
    float dt_min, dt_max;
    /* workspace */
    float *scratch;   /* per CTA: (seq: nck checkpoints +) Q + 1 chunk states, P x N each */
    int64_t scratch_per_cta;
    float *part;      /* npt per task (seq, h): dA, ddt_bias, dD[P]           */
    int npt;          /* partials per task: 1 (seq) or nck (cpar)              */
    float *X, *R;     /* cpar: per (task, chunk) P x N state and adjoint maps  */
    float *Dc;        /* cpar: per (task, chunk) decay product                 */
    int sub;          /* cpars: tokens a sub-block (states in shared memory)   */
    float *pdB, *pdC; /* (b, L, H / hk, N) rows of head groups when a group has several */
    int hk;           /* heads a partial row of pdB / pdC sums: 1, or tc's CTA's heads */
    /* tc (bwd_tc_*.cuh): per (task, chunk) item, Q tokens each */
    float *tcum, *tdt;   /* cumulative log-decay, processed dt              */
    float *tS, *tdS;     /* P x N f32: the chunk's own state and adjoint,
                            then (tS) the state entering                    */
    void *tS16, *tdS16;  /* the state entering, the adjoint leaving, in x's
                            16-bit dtype: the operands of the block stages  */
    float *trow, *tcol;  /* the rows' and the columns' parts of d(cum)       */
    float *tq, *tddt;    /* the state-out part of d(cum), x . d(x / dt)      */
    float *tdot;         /* <state entering, adjoint leaving>, per slice     */
    void *tgy;           /* Q x P per item: gy = dout silu(z) in x's 16-bit
                            dtype, written by the chunk-state kernel (the
                            pairs, rows and cols kernels read it)           */
    float *tcb;          /* per (batch, chunk, group, block pair) 64 x 64:
                            C_i B_j^T (the pairs kernel's, read by rows / cols) */
    void *tws;           /* per (batch, head group, chunk, block pair) 64 x
                            64 in x's 16-bit dtype: W summed over the head
                            group's heads (dC_i, dB_j take it once)         */
    float *tzr, *tzc;    /* per (item, block pair) 64: row, column sums of Z */
    int npair;           /* causal 64-token block pairs of a chunk           */
    int tnsl;            /* slices of 1024 state elements                    */
    int tvec;            /* x, z, dout, B, C rows 16-byte aligned            */
    int tpair;           /* dx, dz 4-byte aligned with even strides: element
                            pairs stored as one word                         */
};

#endif
