"""Helpers shared by the GPU benchmarks (bench/gpu_*.py): the commit a result belongs to,
the ceilings its fractions are taken against, and the writer of a bench/RESULTS.md section.

Pure Python (no torch): `python3 -c "import benchutil"` works on any machine.
"""
import os
import re
import subprocess

# Ceilings of the H200 the fractions are taken against (bench/RESULTS.md, preamble)
COPY_TBS = 4.2        # device-to-device copy bandwidth, TB/s
BF16_TFLOPS = 700.0   # bf16 / f16 dense matrix rate, TFLOP/s (~790 measured at 8192^3)
TF32_TFLOPS = 390.0   # TF32 matrix rate, TFLOP/s


def commit():
    """The commit a result belongs to: SF_COMMIT first (a copy of the tree on a device
    machine may carry a stale .git), else git's HEAD, marked when the tree has changes."""
    if os.environ.get("SF_COMMIT"):
        return os.environ["SF_COMMIT"]
    try:
        out = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"],
                                      stderr=subprocess.DEVNULL).decode().strip()
        dirty = subprocess.call(["git", "diff", "--quiet", "HEAD"], stderr=subprocess.DEVNULL)
        return out + ("+changes" if dirty else "")
    except Exception:  # noqa: BLE001 - no git: say so
        return "unknown"


def graph_ms(fn, calls=20):
    """GPU milliseconds per call of fn: `calls` calls captured in one CUDA
    graph (after a warm-up on the capture stream), the replay timed by triton's
    do_bench (median) and divided.  Host and launch overhead stay out: what a
    serving engine that replays graphs sees.  Needs torch and triton."""
    import torch
    import triton.testing
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(g.replay, warmup=25, rep=100, return_mode="median") / calls


def write_csv(path, rows):
    """rows (dicts with the same keys) as a CSV file with a header line."""
    with open(path, "w") as f:
        keys = list(rows[0].keys())
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(str(r[k]) for k in keys) + "\n")


def md_table(header, rows):
    """A markdown table: header is a list of column names, rows a list of lists of cells."""
    lines = ["| " + " | ".join(str(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def markers(name):
    """The comment lines that enclose section `name` of RESULTS.md."""
    return f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"


def replace_section(path, name, body):
    """Replace section `name` of the markdown file at `path` (everything between the lines
    `<!-- BEGIN name -->` and `<!-- END name -->`, the markers kept) by `body`.  A file
    without the markers gets the section appended at its end; a missing file is created.
    Returns "replaced" or "appended"."""
    begin, end = markers(name)
    block = f"{begin}\n{body.strip()}\n{end}"
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    pat = re.compile(r"^" + re.escape(begin) + r"[ \t]*\n.*?^" + re.escape(end) + r"[ \t]*$",
                     re.S | re.M)
    if len(pat.findall(text)) > 1:
        raise ValueError(f"{path}: section {name} is marked more than once")
    if pat.search(text):
        text = pat.sub(lambda _m: block, text, count=1)
        how = "replaced"
    else:
        if (begin in text) != (end in text):
            raise ValueError(f"{path}: section {name} has one marker without the other")
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block + "\n"
        how = "appended"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return how


def merge_rounds(paths, key_fields, time_fields):
    """The rows of several CSV runs of one script (rounds), one row a point:
    each field of time_fields the median over the runs, the rest from the
    first run; rows keep the first run's order.  Returns (rows, rounds)."""
    import csv
    import statistics
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(list(csv.DictReader(f)))
    out = []
    for r in runs[0]:
        key = tuple(r[k] for k in key_fields)
        same = [x for run in runs for x in run if tuple(x[k] for k in key_fields) == key]
        m = dict(r)
        for t in time_fields:
            vals = [float(x[t]) for x in same if x[t] not in ("", "nan")]
            m[t] = statistics.median(vals) if vals else float("nan")
        out.append(m)
    return out, len(runs)
