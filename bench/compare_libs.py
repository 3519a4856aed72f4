"""Summary of bench/compare_libs.sh: per point, the median over rounds of each
build, the spread of each build's rounds ((max - min) / median: the noise of
the same binary), after / before, and the peer's median of the same runs.

    python3 bench/compare_libs.py OUT_DIR
"""
import csv
import glob
import os
import statistics
import sys


def load(out, kind, tag):
    rows = {}
    for p in sorted(glob.glob(os.path.join(out, f"{kind}_{tag}_*.csv"))):
        with open(p) as f:
            for r in csv.DictReader(f):
                if kind == "attn":
                    key = f"B{r['B']} L{r['L']} H{r['H']} d{r['d']} {'causal' if r['causal'] == '1' else 'full'}"
                    rows.setdefault(key, []).append((float(r["ours_ms"]), float(r["cudnn_ms"])))
                else:
                    rows.setdefault(r["shape"], []).append((float(r["ours_ms"]), float(r["peer_ms"])))
    return rows


def spread(v):
    return (max(v) - min(v)) / statistics.median(v) if len(v) > 1 else float("nan")


def main(out):
    worst = 0.0
    for kind, peer in (("attn", "cuDNN"), ("ssd", "mamba_ssm")):
        a, b = load(out, kind, "before"), load(out, kind, "after")
        if not a or not b:
            print(f"{kind}: no data")
            continue
        print(f"{kind}: ms, median of rounds (spread of the rounds); after/before > 1 means slower")
        print(f"{'point':34s} {'before':>16s} {'after':>16s} {'after/before':>12s} {peer + ' (spread)':>20s}")
        noise, ratios = [], []
        for key in a:
            if key not in b:
                continue
            ta, tb = [x[0] for x in a[key]], [x[0] for x in b[key]]
            tp = [x[1] for x in a[key] + b[key]]
            ma, mb = statistics.median(ta), statistics.median(tb)
            ratios.append(mb / ma)
            noise += [s for s in (spread(ta), spread(tb)) if s == s]
            print(f"{key:34s} {ma:9.4f} ({100 * spread(ta):4.1f}%) {mb:9.4f} ({100 * spread(tb):4.1f}%)"
                  f" {mb / ma:12.3f} {statistics.median(tp):11.4f} ({100 * spread(tp):4.1f}%)")
        if ratios:
            print(f"{kind}: after/before {min(ratios):.3f}..{max(ratios):.3f} (median {statistics.median(ratios):.3f});"
                  f" same-binary spread of rounds: median {100 * statistics.median(noise or [0]):.1f}%,"
                  f" max {100 * max(noise or [0]):.1f}%")
            worst = max(worst, max(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out"))
