"""Attention forward at the power cap: seqfuse against the cuDNN backend of torch SDPA,
each run back to back for some seconds while nvidia-smi samples power, SM clock and
temperature, so that a throughput can be read together with the clock it ran at.

A short benchmark (bench/gpu_attn.py: triton do_bench, 25 ms warm-up, 100 ms of
repeats) sees the first fraction of a second, before the board's power limit has
pulled the clock down; run for seconds, the H200 sits at its 700 W cap at d 128 and
the clock, not the kernel, moves (stop 27: 1610-1640 MHz for seqfuse at L 16384).
This reports, per implementation and round, the mean TFLOP/s over the steady part
(after `--settle` seconds), the mean power and SM clock there, and TFLOP/s per GHz
(what the kernel does with a clock cycle).

    PYTHONPATH=python:bench SEQFUSE_LIB=build/libseqfuse.so python3 bench/attn_power.py \\
        [--d 128] [--L 16384] [--causal] [--secs 8] [--rounds 2] [--csv out.csv]
FLOPs = 4 B H L^2 d (halved when causal), B = 16384 / L, H = 2048 / d, bf16.
"""
import argparse
import csv
import datetime
import statistics
import subprocess
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import seqfuse
from benchutil import commit
from gpu_attn import attn_flops, attn_inputs


def windows(fn, flops, secs, win=0.25):
    """(wall start, TFLOP/s) of back-to-back calls in windows of about `win` s."""
    out = []
    t0 = time.time()
    while time.time() - t0 < secs:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n, ts = 0, time.time()
        e0.record()
        while time.time() - ts < win:
            for _ in range(8):
                fn()
            n += 8
            if n % 32 == 0:  # keep the queue short, so the window's wall time is the GPU's
                torch.cuda.synchronize()
        e1.record()
        torch.cuda.synchronize()
        out.append((ts, flops / (e0.elapsed_time(e1) / n * 1e-3) / 1e12))
    return out


def smi_rows(text):
    """nvidia-smi csv lines -> (epoch s, W, MHz, deg C)."""
    rows = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 4:
            continue
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").astimezone().timestamp()
            rows.append((t, float(f[1].split()[0]), float(f[2].split()[0]), float(f[3])))
        except ValueError:
            continue
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--L", type=int, default=16384)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--secs", type=float, default=8.0, help="seconds of back-to-back calls per run")
    ap.add_argument("--settle", type=float, default=1.5, help="seconds left out at the start of a run")
    ap.add_argument("--idle", type=float, default=3.0, help="seconds idle before each run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--csv")
    a = ap.parse_args()
    if a.secs <= a.settle:
        sys.exit("--secs must exceed --settle")
    d, L, causal = a.d, a.L, a.causal
    B, H = 16384 // L, 2048 // d
    q, k, v = attn_inputs(B, L, H, d)
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    flops = attn_flops(B, L, H, d, causal)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    impls = {"ours": lambda: seqfuse.flash_attn_func(q, k, v, causal=causal), "cudnn": cudnn}
    for fn in impls.values():  # autotuner and cuDNN plan outside the timing
        fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu",
                            "--format=csv,noheader", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    runs = []
    try:
        for r in range(a.rounds):
            for name, fn in impls.items():
                time.sleep(a.idle)
                fn()
                torch.cuda.synchronize()
                runs.append((name, r, windows(fn, flops, a.secs)))
    finally:
        smi.terminate()
        text, _ = smi.communicate()
    rows = smi_rows(text)
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, d {d}, L {L}, B {B}, H {H}, causal {int(causal)}, {a.secs:g} s a run, steady after {a.settle:g} s")
    print("%-6s %5s %9s %9s %7s %8s %6s %9s" % ("impl", "round", "first", "steady", "W", "SM MHz", "degC", "TF/GHz"))
    out = []
    for name, r, ws in runs:
        t0 = ws[0][0]
        steady = [tf for ts, tf in ws if ts >= t0 + a.settle]
        sm = [x for x in rows if t0 + a.settle <= x[0] <= ws[-1][0] + 0.25]
        tf = statistics.mean(steady)
        w = statistics.mean(x[1] for x in sm) if sm else float("nan")
        mhz = statistics.mean(x[2] for x in sm) if sm else float("nan")
        deg = max(x[3] for x in sm) if sm else float("nan")
        print("%-6s %5d %9.1f %9.1f %7.0f %8.0f %6.0f %9.1f" % (name, r, ws[0][1], tf, w, mhz, deg, tf / mhz * 1e3))
        out.append(dict(date=datetime.date.today().isoformat(), gpu=gpu, B=B, L=L, H=H, d=d, causal=int(causal),
                        impl=name, round=r, first_tflops=ws[0][1], steady_tflops=tf, watts=w, sm_mhz=mhz,
                        max_temp_c=deg, commit=commit()))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(out[0]))
            wr.writeheader()
            wr.writerows(out)


if __name__ == "__main__":
    main()
