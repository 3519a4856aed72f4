"""The gate/up projection of a SwiGLU MLP on the GPU: seqfuse's sf_gemm_swiglu
(one kernel, silu(g) * u formed in registers, the (M, 2I) product never
written) against its peers in the same run on the same GPU:

  cuBLAS+sf_swiglu  torch.matmul(x, [Wg; Wu]^T) (cuBLAS GEMM, 4096 -> 28672),
                    then seqfuse.swiglu on the (M, 2I) product (concat layout);
  torch eager       the same matmul, then F.silu(g) * u;
  cuBLAS GEMM       the matmul alone (what the fused kernel must beat).

Llama-3-8B's MLP, K = 4096, I = 14336, bf16; M = 1, 16 (decode: bound by
reading the 235 MB of weights once), 64, 512, 4096 (prefill: bound by the
tensor cores; 2 M 2I K = 962 GFLOP at M 4096).  Times: ms per call from
CUDA-graph replays (benchutil.graph_ms: 20 calls a graph, median of triton's
do_bench), so launch overhead stays out.  Reported: ms, TFLOP/s (4 M I K /
time), the fraction of the 700 TFLOP/s bf16 ceiling, the weight bytes per
second at M <= 16, and peer time / ours.  With --configs each row of
src/cuda/gemm_swiglu/configs.h is also timed pinned
(SF_AUTOTUNE_FORCE=gemm_swiglu:NAME).  The error of ours against float32
matmuls of the same bf16 inputs is checked once per M.

    PYTHONPATH=python:bench SEQFUSE_LIB=build/libseqfuse.so python3 bench/gpu_swiglu_gemm.py \\
        [--csv out.csv] [--configs] [--quick] [--results bench/RESULTS.md]
    python3 bench/gpu_swiglu_gemm.py --from-csv out.csv --results bench/RESULTS.md \\
        --gpu "NVIDIA H200" --torch-version 2.11.0+cu130   (the section again, no GPU)
"""
import argparse
import os
import sys

from benchutil import BF16_TFLOPS, COPY_TBS, commit, graph_ms, md_table, replace_section, write_csv

try:
    import torch
    import torch.nn.functional as F

    import seqfuse
except ImportError:
    torch = None

K, I = 4096, 14336
MS = [1, 16, 64, 512, 4096]
# the rows of src/cuda/gemm_swiglu/configs.h; with --configs the decode rows
# are timed at M <= 64, the tensor-core rows from M 16
CONFIGS = ["dec4", "ws128", "ws64", "ws128c2"]


def run_m(m, w, g):
    x = torch.randn(m, K, dtype=torch.bfloat16, device="cuda", generator=g)
    wg, wu = w[:I], w[I:]  # two views of the concatenated projection
    h = torch.empty(m, 2 * I, dtype=torch.bfloat16, device="cuda")

    def ours():
        return seqfuse.gemm_swiglu(x, wg, wu)

    def mm():
        return torch.matmul(x, w.t(), out=h)

    def mm_sf():
        torch.matmul(x, w.t(), out=h)
        return seqfuse.swiglu(h)

    def mm_eager():
        torch.matmul(x, w.t(), out=h)
        return F.silu(h[:, :I]) * h[:, I:]

    y = ours().float()
    ref = F.silu(x.float() @ wg.float().t()) * (x.float() @ wu.float().t())
    err = ((y - ref).norm() / ref.norm()).item()
    r = dict(m=m, ours=graph_ms(ours), mm=graph_ms(mm), mm_sf=graph_ms(mm_sf), mm_eager=graph_ms(mm_eager),
             err=err)
    return r, ours


def read_csv(path):
    with open(path) as f:
        keys = f.readline().strip().split(",")
        rows = [dict(zip(keys, line.strip().split(","))) for line in f if line.strip()]
    return [{k: (int(v) if k in ("m", "k", "i") else float(v)) for k, v in r.items()} for r in rows]


def write_results(path, rows, gpu, torch_version, date):
    """The gemm_swiglu section of RESULTS.md from the rows (measured or read back)."""
    cfgs = [c for c in CONFIGS if c + "_ms" in rows[0]]

    def ms(v):
        return "" if v != v else f"{v:.4f}"
    body = [f"{date}, {gpu}, torch {torch_version}, bf16, Llama-3-8B's MLP (K {K}, I {I}: x [Wg; Wu]^T is "
            f"{K} -> {2 * I}), `bench/gpu_swiglu_gemm.py{' --configs' if cfgs else ''}`.  ms per call from CUDA-graph "
            f"replays (benchutil.graph_ms, 20 calls a graph), all columns from one run.  cuBLAS+sf: torch.matmul "
            f"on the concatenated weight then seqfuse.swiglu (the peer to beat); eager: the matmul then "
            f"F.silu(g) * u; GEMM only: the matmul alone.  TFLOP/s = 4 M I K / time; TB/s = the "
            f"{2 * I * K * 2 / 1e6:.0f} MB of weights / time (copy ceiling ~{COPY_TBS}).  err: ours against float32 "
            f"matmuls of the same inputs.  Pinned rows (SF_AUTOTUNE_FORCE): " + (", ".join(cfgs) or "none") + ".", ""]
    body.append(md_table(
        ["M", "ours ms", "TFLOP/s", f"of {BF16_TFLOPS:.0f}", "TB/s", "cuBLAS+sf ms", "eager ms", "GEMM only ms",
         "cuBLAS+sf / ours", "eager / ours", "GEMM / ours"] + cfgs + ["err"],
        [[r["m"], ms(r["ours_ms"]), f"{r['ours_tflops']:.1f}", f"{r['frac700']:.2f}", f"{r['ours_tbs']:.2f}",
          ms(r["cublas_sf_ms"]), ms(r["eager_ms"]), ms(r["gemm_ms"]), f"{r['ratio_sf']:.2f}x",
          f"{r['ratio_eager']:.2f}x", f"{r['ratio_gemm']:.2f}x"] + [ms(r[c + "_ms"]) for c in cfgs]
         + [f"{r['err']:.1e}"] for r in rows]))
    how = replace_section(path, "gemm_swiglu", "## Gate/up GEMM with SwiGLU fused in (`sf_gemm_swiglu`)\n\n"
                          + "\n".join(body))
    print(f"{path}: gemm_swiglu section {how}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default=None)
    ap.add_argument("--configs", action="store_true", help="also time every configuration pinned")
    ap.add_argument("--quick", action="store_true", help="M = 1 and 4096 only")
    ap.add_argument("--results", default=None, help="write the gemm_swiglu section of this markdown file")
    ap.add_argument("--from-csv", default="", metavar="CSV", help="no GPU: the section from an earlier --csv")
    ap.add_argument("--gpu", default="NVIDIA H200", help="with --from-csv: the GPU of that run")
    ap.add_argument("--torch-version", default="", help="with --from-csv: the torch of that run")
    ap.add_argument("--date", default="", help="with --from-csv: the date of that run")
    a = ap.parse_args()
    import datetime
    date = a.date or datetime.date.today().isoformat()
    if a.from_csv:
        if a.results:
            write_results(a.results, read_csv(a.from_csv), a.gpu, a.torch_version, date)
        return 0
    if torch is None or not torch.cuda.is_available():
        print("gpu_swiglu_gemm.py: needs torch with CUDA, triton and seqfuse", file=sys.stderr)
        return 77
    gpu = torch.cuda.get_device_name()
    g = torch.Generator(device="cuda").manual_seed(1)
    w = (torch.randn(2 * I, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    wbytes = 2 * I * K * 2
    rows = []
    print(f"{gpu}, torch {torch.__version__}, commit {commit()}, bf16, K {K}, I {I}")
    print(f"{'M':>5s} {'ours ms':>9s} {'TFLOP/s':>8s} {'of700':>6s} {'TB/s':>6s} | {'cuBLAS+sf':>10s} "
          f"{'eager':>9s} {'GEMM only':>9s} | {'sf/ours':>7s} {'eager/ours':>10s} {'GEMM/ours':>9s}  err")
    for m in ([1, 4096] if a.quick else MS):
        r, ours = run_m(m, w, g)
        fl = 4.0 * m * I * K
        row = dict(m=m, k=K, i=I, ours_ms=r["ours"], ours_tflops=fl / r["ours"] / 1e9,
                   frac700=fl / r["ours"] / 1e9 / BF16_TFLOPS, ours_tbs=wbytes / r["ours"] / 1e9,
                   cublas_sf_ms=r["mm_sf"], eager_ms=r["mm_eager"], gemm_ms=r["mm"],
                   gemm_tflops=fl / r["mm"] / 1e9, ratio_sf=r["mm_sf"] / r["ours"],
                   ratio_eager=r["mm_eager"] / r["ours"], ratio_gemm=r["mm"] / r["ours"], err=r["err"])
        if a.configs:
            for c in CONFIGS:
                if (c.startswith("dec") and m > 64) or (c.startswith("ws") and m < 16):
                    row[c + "_ms"] = float("nan")
                    continue
                os.environ["SF_AUTOTUNE_FORCE"] = "gemm_swiglu:" + c
                try:
                    row[c + "_ms"] = graph_ms(ours)
                except seqfuse.SeqfuseError:
                    row[c + "_ms"] = float("nan")
                del os.environ["SF_AUTOTUNE_FORCE"]
        rows.append(row)
        print(f"{m:5d} {r['ours']:9.4f} {row['ours_tflops']:8.1f} {row['frac700']:6.2f} {row['ours_tbs']:6.2f} | "
              f"{r['mm_sf']:10.4f} {r['mm_eager']:9.4f} {r['mm']:9.4f} | {row['ratio_sf']:6.2f}x "
              f"{row['ratio_eager']:9.2f}x {row['ratio_gemm']:8.2f}x  {r['err']:.1e}"
              + ("".join(f"  {c} {row[c + '_ms']:.4f}" for c in CONFIGS) if a.configs else ""), flush=True)
    print(f"(TB/s: the {wbytes / 1e6:.0f} MB of weights / time; copy ceiling ~{COPY_TBS} TB/s)")
    if a.csv:
        write_csv(a.csv, rows)
    if a.results:
        write_results(a.results, rows, gpu, torch.__version__, date)
    return 0


if __name__ == "__main__":
    sys.exit(main())
