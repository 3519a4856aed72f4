"""The engine on the CPU against llama.cpp (llama-cpp-python) on the same GGUF file, the
same prompt ids, the same thread count, greedy, a fixed number of new tokens.

    python3 bench/cpu_engine.py [--model PATH] [--seqfuse build-cpu/seqfuse] [--threads 2]
        [--prompt-len 32] [--new-tokens 64] [--repeats 5] [--results bench/RESULTS.md]

Prefill and decode are timed apart on both sides: seqfuse from `seqfuse generate --cpu
--json` (the engine's own prefill / decode timers: decode tok/s = decode steps / decode
time), llama.cpp in this process around `Llama.eval` (the prompt in one call, then one
call per new token, each token the argmax of the last logits: the same steps).  The model
is loaded once per engine and run; loading is not timed.  The two engines alternate
`--repeats` times and each column is the median: on a shared machine other work comes and
goes, alternating spreads it over both.  The prompt: `--prompt-len` ids taken from the
tokenisation of a fixed English text (repeated as needed), given to both engines as ids.

--results FILE rewrites the "engine_cpu" section of FILE (a copy of bench/RESULTS.md) with
the date, the CPU model, the commit, the versions and the medians.  Needs llama_cpp and
numpy; without llama_cpp it prints seqfuse alone and says so.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil  # noqa: E402

DEFAULT_MODEL = os.path.expanduser("~/.cache/seqfuse/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = ("The history of the printing press begins in the fifteenth century, when a goldsmith in "
        "Mainz combined movable metal type, oil-based ink and a wooden screw press into a system "
        "that could produce books faster and more cheaply than any scribe. Within fifty years "
        "presses were running in more than two hundred cities across Europe. ")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def prompt_ids(llm, n):
    """n ids from the tokenisation of TEXT (repeated), with the model's BOS first when it
    has one: llama.cpp's tokenizer when there is one, else a fixed range of ids."""
    if llm is None:
        return [100 + (i * 37) % 20000 for i in range(n)]
    ids = []
    while len(ids) < n:
        ids += llm.tokenize(TEXT.encode(), add_bos=not ids, special=False)
    return ids[:n]


def run_seqfuse(exe, model, ids, new_tokens, threads, wait_policy):
    env = dict(os.environ)
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy
    cmd = [exe, "generate", "--cpu", "--json", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
           "--no-bos", "--ignore-eos", "--max-new-tokens", str(new_tokens), "--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    j = json.loads(out)
    return {"prefill": j["prefill_tok_s"], "decode": j["decode_tok_s"], "tokens": j["tokens"]}


def make_llama(model, threads, n_ctx):
    import llama_cpp
    return llama_cpp.Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                           n_batch=512, logits_all=False, verbose=False)


def last_argmax(llm):
    """The greedy token: argmax of the logits of the last token evaluated (read from
    llama.cpp's context: Llama.scores is not filled without logits_all)."""
    import llama_cpp
    import numpy as np
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))))


def run_llama(llm, ids, new_tokens):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t1 = time.perf_counter()
    toks = [last_argmax(llm)]
    for _ in range(new_tokens - 1):
        llm.eval([toks[-1]])
        toks.append(last_argmax(llm))
    t2 = time.perf_counter()
    return {"prefill": len(ids) / (t1 - t0), "decode": (new_tokens - 1) / (t2 - t1), "tokens": toks}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--seqfuse", default="build-cpu/seqfuse", help="the seqfuse command (a CPU build)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--omp-wait-policy", default="",
                    help="OMP_WAIT_POLICY for seqfuse ('', the default, keeps the environment's: spinning "
                         "waits, as llama.cpp's threads spin).  On a quiet machine spinning is faster "
                         "(2 threads: 86 vs 54 tok/s); with other work on the cores spinning threads wait "
                         "on descheduled ones at every op and both engines drop to a few tok/s: pass "
                         "'passive' there")
    ap.add_argument("--results", default=None, help="rewrite the engine_cpu section of this markdown file")
    a = ap.parse_args()
    if a.new_tokens < 2 or a.prompt_len < 1:
        sys.exit("cpu_engine.py: --new-tokens >= 2 and --prompt-len >= 1")
    llm, llama_version = None, None
    try:
        import llama_cpp
        llama_version = llama_cpp.__version__
        llm = make_llama(a.model, a.threads, a.prompt_len + a.new_tokens + 16)
    except ImportError:
        print("llama_cpp is not installed (pip install llama-cpp-python): seqfuse alone", file=sys.stderr)
    ids = prompt_ids(llm, a.prompt_len)
    sf, ll = [], []
    if llm is not None:
        run_llama(llm, ids, 4)  # warm-up
    for r in range(a.repeats):
        sf.append(run_seqfuse(a.seqfuse, a.model, ids, a.new_tokens, a.threads, a.omp_wait_policy))
        if llm is not None:
            ll.append(run_llama(llm, ids, a.new_tokens))
        print(f"round {r + 1}: seqfuse decode {sf[-1]['decode']:.1f} tok/s"
              + (f", llama.cpp decode {ll[-1]['decode']:.1f} tok/s" if ll else ""), file=sys.stderr)

    def med(rows, k):
        return statistics.median(x[k] for x in rows) if rows else float("nan")

    res = {"seqfuse_decode": med(sf, "decode"), "seqfuse_prefill": med(sf, "prefill"),
           "llama_decode": med(ll, "decode"), "llama_prefill": med(ll, "prefill")}
    ratio = res["seqfuse_decode"] / res["llama_decode"] if ll else float("nan")
    pratio = res["seqfuse_prefill"] / res["llama_prefill"] if ll else float("nan")
    same = None
    if ll:  # greedy on the same ids: how far the two token streams agree
        s, l = sf[0]["tokens"], ll[0]["tokens"]
        same = next((i for i in range(min(len(s), len(l))) if s[i] != l[i]), min(len(s), len(l)))
    print(f"decode tok/s  seqfuse {res['seqfuse_decode']:.1f}  llama.cpp {res['llama_decode']:.1f}  "
          f"ratio {ratio:.2f}x")
    print(f"prefill tok/s seqfuse {res['seqfuse_prefill']:.1f}  llama.cpp {res['llama_prefill']:.1f}  "
          f"ratio {pratio:.2f}x")
    if same is not None:
        print(f"greedy tokens agree for the first {same} of {a.new_tokens}")
    if a.results:
        date = datetime.date.today().isoformat()
        body = (f"## Engine on the CPU against llama.cpp (`engine_cpu`)\n\n"
                f"{date}, {cpu_model()}, {a.threads} threads, commit {benchutil.commit()}, "
                f"llama-cpp-python {llama_version or 'absent'}; `{os.path.basename(a.model)}`, "
                f"prompt {a.prompt_len} ids, {a.new_tokens} new tokens, greedy, median of {a.repeats} "
                f"alternating runs (`python3 bench/cpu_engine.py --threads {a.threads} --prompt-len "
                f"{a.prompt_len} --new-tokens {a.new_tokens} --repeats {a.repeats} --results ...`).  "
                f"seqfuse: f32 activations, weights kept quantised (sf_gemm_wq), OMP_WAIT_POLICY="
                f"{a.omp_wait_policy or os.environ.get('OMP_WAIT_POLICY', 'unset')}; llama.cpp: its own "
                f"quantised dot products (activations quantised to 8 bits).\n\n"
                + benchutil.md_table(
                    ["engine", "decode tok/s", "prefill tok/s"],
                    [["seqfuse", f"{res['seqfuse_decode']:.1f}", f"{res['seqfuse_prefill']:.1f}"],
                     ["llama.cpp", f"{res['llama_decode']:.1f}", f"{res['llama_prefill']:.1f}"],
                     ["seqfuse / llama.cpp", f"{ratio:.2f}x", f"{pratio:.2f}x"]])
                + (f"\n\nGreedy tokens of the two agree for the first {same} of {a.new_tokens}."
                   if same is not None else ""))
        how = benchutil.replace_section(a.results, "engine_cpu", body)
        print(f"{a.results}: engine_cpu section {how}", file=sys.stderr)


if __name__ == "__main__":
    main()
