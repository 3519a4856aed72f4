"""The peers section of bench/RESULTS.md from the JSON summaries of run_peer_suites.sh.

    python3 bench/peers/results.py OUT/peers_*.json                 # a short table on stdout
    python3 bench/peers/results.py OUT/peers_*.json --results bench/RESULTS.md

--results PATH writes (or replaces) the section between <!-- BEGIN peers --> and
<!-- END peers --> of PATH with bench/benchutil.py's replace_section.  Pure Python: it runs
on any machine, from the JSON files alone.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchutil import commit, md_table, replace_section  # noqa: E402

COLS = ["suite", "test function", "parametrisations", "sampled", "passed",
        "refused (UNSUPPORTED)", "failed", "skipped", "s"]
KEYS = ("total", "sampled", "passed", "refused", "failed", "skipped")


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    return runs


def rows(runs):
    out, tot = [], dict.fromkeys(KEYS, 0)
    for r in runs:
        for name, f in r["functions"].items():
            out.append([r["suite"], name] + [f[k] for k in KEYS] + [f"{f['seconds']:.0f}"])
            for k in KEYS:
                tot[k] += f[k]
    out.append(["**all**", ""] + [f"**{tot[k]}**" for k in KEYS] + [""])
    return out, tot


def cut_short(runs):
    """One sentence per suite whose run did not finish (time limit, crash)."""
    notes = []
    for r in runs:
        if not r.get("finished"):
            sampled = sum(f["sampled"] for f in r["functions"].values())
            notes.append(f"{r['suite']}: cut short after {r['completed']} of {sampled} sampled "
                         f"tests ({r['seconds']:.0f} s); the counts are those run.")
    return notes


def section(runs):
    env = runs[0]["env"]
    table, _ = rows(runs)
    peers = "; ".join(env.get("peers", [])) or "unknown"
    n = runs[0]["max_per_test"]
    sampling = (f"at most {n} a test function, seed {runs[0]['seed']}" if n else "every case")
    secs = sum(r["seconds"] for r in runs)
    out = ["## The peers' test suites against the binding", "",
           md_table(["date", "GPU", "commit", "torch", "peers' files", "sampling", "time"],
                    [[env.get("date", "?"), env.get("gpu", "?"), env.get("commit") or commit(),
                      env.get("torch", "?"), peers, sampling, f"{secs:.0f} s"]]), "",
           "flash-attention's tests/test_flash_attn.py (test_flash_attn_output, _varlen_output, "
           "_causal, _splitkv) and mamba_ssm's tests/ops/triton/test_selective_state_update.py and "
           "test_layernorm_gated.py, unchanged, run through stand-in `flash_attn` and `mamba_ssm` "
           "packages (bench/peers/) that call the seqfuse binding; the peers' references are "
           "their own, read from their files.  Attention gradients are ours (the stand-in's "
           "flash_attn functions are seqfuse's differentiable ones: sf_attn_bwd), so flash-attention's "
           "gradient asserts check our backward; the norm stand-ins' gradients are a float32 PyTorch "
           "recomputation (their asserts check our forward).  Refused: the binding raised SeqfuseError SF_ERR_UNSUPPORTED; "
           "skipped: the test's own skip.  Autotuning off (SF_AUTOTUNE=0: the heuristic "
           "configuration).  Written by `bench/peers/run_peer_suites.sh`.", "",
           md_table(COLS, table)]
    notes = cut_short(runs)
    if notes:
        out += [""] + [f"- {s}" for s in notes]
    reasons = []
    for r in runs:
        for name, f in r["functions"].items():
            top = sorted(f["refusals"].items(), key=lambda kv: -kv[1])[:3]
            reasons += [f"- {name}: {c} x `{why}`" for why, c in top]
    if reasons:
        out += ["", "Most frequent refusals (numbers shown as N):", ""] + reasons
    fails = []
    for r in runs:
        for name, f in r["functions"].items():
            for x in f["failures"][:2]:
                msg = x["message"].replace("\n", " ").replace("|", "\\|")[:240]
                fails.append(f"- {x['test']}: `{msg}`")
    if fails:
        out += ["", "First failures (up to two a function; all in the JSON summaries):", ""] + fails
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+", help="JSON summaries (SF_PEERS_JSON of each suite's run)")
    ap.add_argument("--results", metavar="PATH", help="write the peers section of PATH")
    a = ap.parse_args()
    runs = load(a.json)
    table, tot = rows(runs)
    plain = [[str(c).replace("*", "") for c in r] for r in [COLS] + table]
    w = [max(len(r[i]) for r in plain) for i in range(len(COLS))]
    for r in plain:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
    for s in cut_short(runs):
        print(s)
    if a.results:
        how = replace_section(a.results, "peers", section(runs))
        print(f"{a.results}: peers section {how}")
    return 1 if tot["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
