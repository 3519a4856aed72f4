"""Where a kernel's time goes, instruction by instruction: reads the per-instruction
table that Nsight Compute exports from a report with SourceCounters, and prints the
instructions with the most warp-stall samples and the samples per straight-line region
(the code between barriers, wgmma batches and waits, and loop heads).

    SF_AUTOTUNE_FORCE=ssd_fwd:wg8 ncu --clock-control none --kernel-name regex:ssd_out \\
        --launch-skip 1 --launch-count 1 --section SourceCounters -f -o /tmp/k \\
        python3 bench/ncu_ssd_out.py
    ncu -i /tmp/k.ncu-rep --page source --csv --print-source sass | gzip > k_src.csv.gz
    python3 bench/ncu_regions.py k_src.csv.gz [--top 30]

Addresses are offsets from the kernel's first instruction, as in `cuobjdump -sass` of the
same build.  Samples are "Warp Stall Sampling (All Samples)": where warps were found,
issuing or stalled; the stall columns say why.
"""
import argparse
import csv
import gzip
import re

LANDMARK = re.compile(r"BAR\.SYNC|WARPGROUP\.DEPBAR|DEPBAR\.LE|EXIT")  # cut after
START = re.compile(r"WARPGROUP\.ARRIVE")  # cut before (a wgmma batch starts)


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr, data = rows[head], [r for r in rows[head + 1:] if r and r[0].startswith("0x")]
    col = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    base = int(data[0][0], 16)
    out = []
    for r in data:
        def num(name):
            v = r[col[name]] if name in col else ""
            return int(v.replace(",", "")) if v.replace(",", "").isdigit() else 0
        out.append({
            "addr": int(r[0], 16) - base,
            "src": r[col["Source"]].strip(),
            "samples": num("Warp Stall Sampling (All Samples)"),
            "executed": num("Instructions Executed"),
            "stalls": {s[6:]: num(s) for s in stalls},
        })
    return out


def why(ins, share=0.15):
    s = ins["samples"]
    return " ".join(f"{k}={v}" for k, v in sorted(ins["stalls"].items(), key=lambda kv: -kv[1])
                    if v > share * s and v > 0)


def regions(instrs):
    """Cut after every landmark, before every wgmma batch and before the target of every
    backward branch."""
    targets = set()
    for ins in instrs:
        m = re.search(r"BRA\s+(0x[0-9a-f]+)", ins["src"])
        if m and int(m.group(1), 16) < ins["addr"]:
            targets.add(int(m.group(1), 16))
    cur, out = [], []
    for ins in instrs:
        if (ins["addr"] in targets or START.search(ins["src"])) and cur:
            out.append(cur)
            cur = []
        cur.append(ins)
        if LANDMARK.search(ins["src"]):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    instrs = load(args.csv)
    total = sum(i["samples"] for i in instrs) or 1
    print(f"{len(instrs)} instructions, {total} samples, "
          f"{sum(i['executed'] for i in instrs)} warp-instructions executed")
    print(f"\ntop {args.top} instructions by samples:")
    for ins in sorted(instrs, key=lambda i: -i["samples"])[:args.top]:
        print(f"  {ins['addr']:06x} {ins['samples']:7d} {100 * ins['samples'] / total:5.1f}%  "
              f"{ins['src'][:48]:48s} {why(ins)}")
    print("\nregions (cut at barriers, wgmma batches and waits, copy waits, loop heads), by samples:")
    regs = regions(instrs)
    for reg in sorted(regs, key=lambda r: -sum(i["samples"] for i in r))[:args.top]:
        s = sum(i["samples"] for i in reg)
        ex = sum(i["executed"] for i in reg)
        agg = {}
        for i in reg:
            for k, v in i["stalls"].items():
                agg[k] = agg.get(k, 0) + v
        top = ", ".join(f"{k} {100 * v / max(s, 1):.0f}%" for k, v in
                        sorted(agg.items(), key=lambda kv: -kv[1])[:3])
        print(f"  {reg[0]['addr']:06x}-{reg[-1]['addr']:06x} {len(reg):5d} instr "
              f"{s:7d} samples {100 * s / total:5.1f}%  {ex:11d} executed  [{top}]")


if __name__ == "__main__":
    main()
