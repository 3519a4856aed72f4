"""The kernels of one engine decode step under Nsight Compute: where a step's time goes.

    python3 bench/ncu_engine_step.py --model CKPT [--build build-dev] [--new-tokens 3]
        [--prompt-len 128] [--out step.csv]

Runs `seqfuse generate --no-graphs` on the checkpoint (prompt of --prompt-len ids, greedy,
EOS ignored) under `ncu --clock-control none --cache-control none` with the duration and
DRAM bytes of every kernel, then prints the last decode step's kernels (from its embedding
lookup on) one a line and summed by kernel name: microseconds, MB read + written, TB/s.
ncu times each kernel alone, launch included, so the sum exceeds a CUDA-graph step (H200,
llama-1b batch 1: 1220 us against 1.10 ms); the ranking is what it is for.  The checkpoint is
one bench/gpu_engine.py wrote (its --cache, e.g. /tmp/seqfuse_engine_ckpt/llama-1b).
SF_AUTOTUNE_FORCE in the environment pins configurations as for any run (e.g.
dec_gemv:apart for the unfused products).
"""
import argparse
import collections
import csv
import io
import os
import subprocess
import sys

METRICS = "gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"


def kernels(text):
    """[{name, grid, block, metric: value}] in launch order, from ncu's --csv output"""
    hdr, rows = None, collections.OrderedDict()
    for r in csv.reader(io.StringIO(text)):
        if r and r[0] == "ID":
            hdr = r
            continue
        if hdr is None or len(r) != len(hdr):
            continue
        d = dict(zip(hdr, r))
        k = rows.setdefault(int(d["ID"]), {"name": d["Kernel Name"], "grid": d.get("Grid Size", ""),
                                          "block": d.get("Block Size", "")})
        try:
            k[d["Metric Name"]] = float(d["Metric Value"].replace(",", ""))
        except ValueError:
            pass
    return list(rows.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--build", default="build-dev", help="the build with seqfuse in it")
    ap.add_argument("--new-tokens", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--out", default=None, help="keep ncu's CSV here")
    a = ap.parse_args()
    ids = ",".join(str(100 + i) for i in range(a.prompt_len))
    cmd = ["ncu", "--clock-control", "none", "--cache-control", "none", "--metrics", METRICS, "--csv",
           os.path.join(a.build, "seqfuse"), "generate", "--model", a.model, "--prompt-ids", ids,
           "--max-new-tokens", str(a.new_tokens), "--temperature", "0", "--no-graphs", "--ignore-eos"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(p.stdout)
    ks = kernels(p.stdout)
    if p.returncode or not ks:
        sys.exit(f"ncu gave no kernels (exit {p.returncode}): {p.stderr.strip()[-400:]}")
    starts = [i for i, k in enumerate(ks) if "embed" in k["name"].lower()]
    step = ks[starts[-1]:] if starts else ks
    total_us = total_mb = 0.0
    by_name = collections.OrderedDict()
    for i, k in enumerate(step):
        us = k.get("gpu__time_duration.sum", 0.0) / 1e3
        mb = (k.get("dram__bytes_read.sum", 0.0) + k.get("dram__bytes_write.sum", 0.0)) / 1e6
        total_us += us
        total_mb += mb
        name = k["name"].split("(")[0][:80]
        s = by_name.setdefault(name, [0, 0.0, 0.0])
        s[0] += 1
        s[1] += us
        s[2] += mb
        print(f"{i:4d} {us:8.2f} us {mb:8.2f} MB {mb / max(us, 1e-9):5.2f} TB/s grid {k['grid']} block {k['block']} {name}")
    print(f"step: {len(step)} kernels, {total_us:.1f} us, {total_mb:.1f} MB")
    for name, (n, us, mb) in sorted(by_name.items(), key=lambda x: -x[1][1]):
        print(f"  {n:4d}x {us:8.1f} us {mb:8.1f} MB {mb / max(us, 1e-9):5.2f} TB/s  {name}")


if __name__ == "__main__":
    main()
