#!/usr/bin/env python3
# Usage: python3 tools/gen_wgmma_ops.py > src/cuda/common/wgmma_ops.cuh
# Writes the wgmma inline-asm wrappers of src/cuda/common/wgmma_ops.cuh
# (one asm statement per shape needs every accumulator as an operand).
out = []
out.append("/* wgmma_ops.cuh - wgmma wrappers (attention and SSD kernels): one asm\n"
           " * statement per shape lists every f32 accumulator as an operand (written\n"
           " * out by a small script).  ss: A and B from shared memory, B K-major;\n"
           " * sst: the same with B MN-major; rs: A from registers, B MN-major\n"
           " * (transposed; K-major for TF32, which has no transposed operands).\n"
           " * Only the sm_90a pass compiles them. */\n"
           "#ifndef SF_WGMMA_OPS_CUH\n#define SF_WGMMA_OPS_CUH\n\n"
           "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\nnamespace sf_wg {\n")
# (n, ss wanted, rs wanted): n 64 / 128 both; the head-dim-192/256 tiles of
# attn_fwd_ws add S = Q K^T at 48 (narrow first tiles), 80, 96 and 112 keys (ss)
# and O += P V at 192 and 256 columns (rs); the gate/up GEMM of sf_gemm_swiglu
# takes ss at 256 (128 gate + 128 up columns); the head-dim-256 backward
# (bwd_wg256.cuh) takes S^T = K Q^T at 32 queries (ss).  sst (B MN-major from
# shared memory): the attention backward's dQ = dS K at 64 columns, and the
# head-dim-256 backward's dV, dK and dQ at 128.
SHAPES = ((64, 1, 1), (128, 1, 1), (32, 1, 0), (48, 1, 0), (80, 1, 0), (96, 1, 0), (112, 1, 0), (192, 0, 1), (256, 1, 1))
SST = (64, 128)
for ty, pt in (("bf16", "bf16"), ("f16", "f16")):
    for n, want_ss, want_rs in SHAPES:
        nreg = n // 2
        dl = ",".join("%%%d" % i for i in range(nreg))
        cons = ", ".join('"+f"(d[%d])' % i for i in range(nreg))
        # smem x smem, B K-major (trans-b 0); scale_d predicate
        if want_ss:
            out.append("/* D(64 x %d) (+)= A(desc, K-major) * B(desc, K-major), %s */\n" % (n, ty))
            out.append("__device__ __forceinline__ void wgmma_ss_%s_n%d(float *d, uint64_t da, uint64_t db, int scale_d) {\n" % (ty, n))
            out.append('    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"\n' % (nreg + 2))
            out.append('                 "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, %%%d, %%%d, p, 1, 1, 0, 0;\\n}\\n"\n' % (n, pt, pt, dl, nreg, nreg + 1))
            out.append('                 : %s\n' % cons)
            out.append('                 : "l"(da), "l"(db), "r"(scale_d));\n}\n')
        # smem x smem, B MN-major (trans-b 1); scale_d predicate
        if n in SST:
            out.append("/* D(64 x %d) (+)= A(desc, K-major) * B(desc, MN-major), %s */\n" % (n, ty))
            out.append("__device__ __forceinline__ void wgmma_sst_%s_n%d(float *d, uint64_t da, uint64_t db, int scale_d) {\n" % (ty, n))
            out.append('    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"\n' % (nreg + 2))
            out.append('                 "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, %%%d, %%%d, p, 1, 1, 0, 1;\\n}\\n"\n' % (n, pt, pt, dl, nreg, nreg + 1))
            out.append('                 : %s\n' % cons)
            out.append('                 : "l"(da), "l"(db), "r"(scale_d));\n}\n')
        # regs x smem, B MN-major (trans-b 1), accumulate
        if want_rs:
            out.append("/* D(64 x %d) += A(registers) * B(desc, MN-major), %s */\n" % (n, ty))
            out.append("__device__ __forceinline__ void wgmma_rs_%s_n%d(float *d, const uint32_t *a, uint64_t db, int scale_d) {\n" % (ty, n))
            out.append('    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"\n' % (nreg + 5))
            out.append('                 "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, {%%%d,%%%d,%%%d,%%%d}, %%%d, p, 1, 1, 1;\\n}\\n"\n' % (n, pt, pt, dl, nreg, nreg + 1, nreg + 2, nreg + 3, nreg + 4))
            out.append('                 : %s\n' % cons)
            out.append('                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));\n}\n')
# TF32 (f32 inputs of the SSD kernels), k 8: rs (A from registers) at n 64 /
# 128 and ss at n 64; B always K-major (TF32 has no transposed operands)
for n in (64, 128):
    nreg = n // 2
    dl = ",".join("%%%d" % i for i in range(nreg))
    cons = ", ".join('"+f"(d[%d])' % i for i in range(nreg))
    if n == 64:
        out.append("/* D(64 x %d) (+)= A(desc, K-major) * B(desc, K-major), TF32, k 8 */\n" % n)
        out.append("__device__ __forceinline__ void wgmma_ss_tf32_n%d(float *d, uint64_t da, uint64_t db, int scale_d) {\n" % n)
        out.append('    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"\n' % (nreg + 2))
        out.append('                 "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32 {%s}, %%%d, %%%d, p, 1, 1;\\n}\\n"\n' % (n, dl, nreg, nreg + 1))
        out.append('                 : %s\n' % cons)
        out.append('                 : "l"(da), "l"(db), "r"(scale_d));\n}\n')
    out.append("/* D(64 x %d) (+)= A(registers, TF32) * B(desc, K-major, TF32), k 8 */\n" % n)
    out.append("__device__ __forceinline__ void wgmma_rs_tf32_n%d(float *d, const uint32_t *a, uint64_t db, int scale_d) {\n" % n)
    out.append('    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"\n' % (nreg + 5))
    out.append('                 "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32 {%s}, {%%%d,%%%d,%%%d,%%%d}, %%%d, p, 1, 1;\\n}\\n"\n' % (n, dl, nreg, nreg + 1, nreg + 2, nreg + 3, nreg + 4))
    out.append('                 : %s\n' % cons)
    out.append('                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));\n}\n')
out.append("} /* namespace sf_wg */\n#endif\n#endif\n")
import sys
sys.stdout.write("".join(out))
