/* naive.h - the naive baselines of the `seqfuse` main job: the unfused
 * algorithms, on the fused run's device and in its precision, as an
 * sfc_baseline (tests/cases.h) that sfc_run_baseline times beside the fused
 * backend.  Not part of the library: a yardstick, built into the tool and
 * its tests only.
 *
 *   CPU (f32): attention materialises the (b, H, Lq, Lk) score matrix,
 *   soft-maxes it row by row in place (mask, scale, GQA), then P V; the SSD
 *   is the sequential recurrence over tokens, one (b, h) state at a time.
 *   Threaded over heads and rows as the fused CPU backend is.
 *
 *   CUDA (bf16/f16 in and out, f32 accumulation): S = scale Q K^T through
 *   cuBLAS into a bf16/f16 score matrix, a softmax kernel writing P over it,
 *   O = P V through cuBLAS; the SSD is one block per (b, h) walking the
 *   tokens with its f32 state in shared memory.
 */
#ifndef SFN_NAIVE_H
#define SFN_NAIVE_H

#include "cases.h"

typedef struct sfn_baseline {
    sfc_baseline bl;      /* what sfc_run_baseline takes: bl.self is this struct */
    int device;           /* SF_DEVICE_CPU or a CUDA ordinal */
    int threads;          /* CPU threads */
    void *stream;         /* CUDA stream (NULL: the default stream) */
    void *cpu_ws;         /* CPU: the score matrix or the states */
    size_t cpu_ws_bytes;
    struct sfn_cuda *gpu; /* CUDA: the plan */
} sfn_baseline;

/* A baseline on the device, threads and stream of `ctx` (the fused run's). */
void sfn_baseline_init(sfn_baseline *nb, sf_ctx *ctx);

/* One line: what naive means on this device. */
const char *sfn_describe(int device);

/* The naive baseline's error bound on case c: the dtype's tolerance
 * (sfc_tolerance), or for 16-bit attention twice the error of the emulated
 * low-precision naive attention (r->err_naive, the bar the fused kernels
 * meet too) where that is larger: a sharp softmax whose scores are stored
 * in bf16 loses about 1e-2. */
double sfn_tolerance(const sfc_case *c, sf_dtype dt, sf_backend be, const sfc_result *r);

/* Bytes the naive baseline moves through memory (HBM on a GPU, DRAM on
 * the CPU) for case c in dtype dt, given `fused_bytes`, the fused kernel's
 * minimum (inputs read once, outputs written: sfc_result.bytes). */
double sfn_bytes(const sfc_case *c, sf_dtype dt, int device, double fused_bytes);

#endif
