/* ssd_args.h - the argument block of the CUDA SSD forward kernels
 * (ssd_fwd_args, filled by fwd.cu) and the log2(e) they scale by.
 * Plain C++ with no device code, so the CPU emulation of a kernel
 * (tests/emu) includes the same definition. */
#ifndef SF_SSD_ARGS_H
#define SF_SSD_ARGS_H

#include <stdint.h>

#define SSD_LOG2E 1.4426950408889634f

struct ssd_fwd_args {
    const void *x, *dt, *B, *C, *z;
    void *out;
    const float *A, *D, *dt_bias, *init;
    float *fin;
    const void *cu;
    const int *seq_idx;
    int64_t xs[3], dts[3], Bs[3], Cs[3], zs[3], os[3];
    int64_t As, Ds[2], biass, ins[4], fis[4], sis[2], cus;
    int batch, L, H, P, N, Npad, hpg, Q, nc, nseq;
    int has_D, D_pc, has_z, has_bias, softplus, has_init, has_final, varlen, cu64;
    float dt_min, dt_max;
    int vec_x, vec_B, vec_C, vec_z, vec_o;
    float *dtw, *gw;
    void *states;     /* (b, H, nchunks, P, N) in the operand type T        */
    float *states32;  /* f32 copy for ssd_final_varlen (cu_seqlens + final) */
    int *seqid;
};

#endif
