"""The engine against transformers on the GPU, whole models, same run, same GPU.

Random-weight checkpoints of real models' shapes (MODELS below: SmolLM2-135M,
Llama-3.2-1B, Mamba-2 1.3B and 2.7B, a ~1B Bamba hybrid) are written by
transformers (built on the GPU in bf16, save_pretrained as bf16 safetensors,
kept in --cache and reused).  Each model is then timed by:

  ours            `seqfuse bench-model --json` on the same checkpoint (bf16
                  activations, greedy, EOS ignored): ms per decode step from the
                  engine's own stats, prefill tok/s; as built (CUDA graphs when
                  the engine has them) and, when `bench-model --help` lists
                  --no-graphs, again with --no-graphs;
  eager           transformers' generate with its default DynamicCache;
  static          transformers' generate with cache_implementation="static",
                  which compiles the decode forward (torch.compile,
                  mode reduce-overhead: CUDA graphs), warmed up twice first;
  floor           the weight bytes streamed per decode step (every tensor of
                  the checkpoint; an untied embedding table excluded, only its
                  rows are read) / the copy rate measured here (a torch
                  device-to-device copy of 2 GiB, read + write bytes / time);
  GEMMs alone     the prefill's matrix products (the engine's sf_gemm calls,
                  layer by layer with distinct weights, M = prompt tokens; the
                  list mirrors src/model/model.c: q, k, v, o, gate, up, down per
                  attention layer, in_proj and out_proj per Mamba-2 layer, the
                  LM head on the last token) through seqfuse.gemm, captured in
                  one CUDA graph: ours prefill / GEMMs alone is the overhead of
                  everything else (norms, RoPE, attention, SSD, launches).

transformers' decode step: CUDA events recorded by a stopping criterion after
every token (no synchronisation added), (last - first) / steps; its prefill:
one forward over the prompt (use_cache, logits of the last token), median of
5 (--quick: 3) after a warm-up.  Decode: batch --batches (1, 32, 128) with a 128-token
prompt, --new-tokens greedy tokens (min_new_tokens too, so no early EOS);
prefill: batch 1, prompts of --prefill-lens (512, 4096) tokens.  Prompt ids
are seeded random ids.  A peer that fails (out of memory, an unsupported
cache) is recorded with its error and the run goes on.

    PYTHONPATH=python:bench SEQFUSE_LIB=build-dev/libseqfuse.so python3 bench/gpu_engine.py \\
        [--models smollm2-135m,llama-1b,mamba2-1.3b,mamba2-2.7b,bamba-1b] [--batches 1,32,128] \\
        [--quick] [--build build-dev] [--cache DIR] [--json-out run.json] \\
        [--results RESULTS.md] [--plot engine.png]
    python3 bench/gpu_engine.py --from-json a.json b.json --results RESULTS.md --plot engine.png
        (no GPU: the section and the plot from the JSON of earlier runs; a model in several
        files merged point by point, a later measured value replacing an earlier one)

A device call is limited to 10 minutes: run the models in pieces (--models,
--batches, --json-out per piece), then --from-json over the pieces, which
merges them point by point.  The full run, one piece a call (each compiles
transformers' static decode once a batch size):

    for M in smollm2-135m llama-1b mamba2-1.3b mamba2-2.7b bamba-1b:
        python3 bench/gpu_engine.py --models $M --batches 1,32 --json-out $OUT/$M-a.json
        python3 bench/gpu_engine.py --models $M --batches 128 --no-prefill --json-out $OUT/$M-b.json
    python3 bench/gpu_engine.py --from-json $OUT/*.json --results bench/RESULTS.md --plot bench/engine_h200.png
"""
import argparse
import datetime
import importlib.util
import json
import os
import struct
import subprocess
import sys
import time

from benchutil import commit, md_table, replace_section

# name -> transformers class, config (keyword arguments of its config class), a line for the tables
MODELS = {
    "smollm2-135m": dict(
        cls="LlamaForCausalLM", config_cls="LlamaConfig",
        config=dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1,
                    eos_token_id=2),
        shape="Llama, hidden 576, 30 layers, heads 9/3, inter 1536, vocab 49152, tied"),
    "llama-1b": dict(
        cls="LlamaForCausalLM", config_cls="LlamaConfig",
        config=dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                    rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True, bos_token_id=128000,
                    eos_token_id=128001,
                    rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
        shape="Llama-3.2-1B: hidden 2048, 16 layers, heads 32/8, inter 8192, vocab 128256, tied, llama3 rope"),
    "mamba2-1.3b": dict(
        cls="Mamba2ForCausalLM", config_cls="Mamba2Config",
        config=dict(vocab_size=50288, hidden_size=2048, num_hidden_layers=48, num_heads=64, head_dim=64,
                    expand=2, n_groups=1, state_size=128, conv_kernel=4, chunk_size=256,
                    layer_norm_epsilon=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                    pad_token_id=0),
        shape="Mamba-2 1.3B: d_model 2048, 48 layers, 64 heads x 64, d_state 128, 1 group, vocab 50288, tied"),
    "mamba2-2.7b": dict(
        cls="Mamba2ForCausalLM", config_cls="Mamba2Config",
        config=dict(vocab_size=50288, hidden_size=2560, num_hidden_layers=64, num_heads=80, head_dim=64,
                    expand=2, n_groups=1, state_size=128, conv_kernel=4, chunk_size=256,
                    layer_norm_epsilon=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                    pad_token_id=0),
        shape="Mamba-2 2.7B: d_model 2560, 64 layers, 80 heads x 64, d_state 128, 1 group, vocab 50288, tied"),
    # Bamba-9B's design (Mamba-2 layers, a few attention layers, a SwiGLU MLP in every layer) at ~1.0B:
    # hidden 2048, 16 layers of which 4, 8 and 12 attend (GQA 32/8, head 64, half-rotary as Bamba),
    # Mamba-2 mixers of 64 heads x 64, d_state 128, 1 group; MLP 4096; Llama-3's vocab, tied.
    "bamba-1b": dict(
        cls="BambaForCausalLM", config_cls="BambaConfig",
        config=dict(vocab_size=128256, hidden_size=2048, intermediate_size=4096, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, attn_layer_indices=[4, 8, 12],
                    mamba_n_heads=64, mamba_d_head=64, mamba_n_groups=1, mamba_d_state=128, mamba_d_conv=4,
                    mamba_expand=2, mamba_chunk_size=256, rms_norm_eps=1e-5, max_position_embeddings=8192,
                    tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        shape="Bamba hybrid ~1B: hidden 2048, 16 layers (attention in 4, 8, 12; heads 32/8), Mamba-2 64 heads "
              "x 64, d_state 128, MLP 4096, vocab 128256, tied"),
}

PEERS = ["ours", "ours_nog", "eager", "static"]
PEER_LABEL = {"ours": "ours", "ours_nog": "ours --no-graphs", "eager": "transformers eager",
              "static": "transformers static+compile"}


# ---------------------------------------------------------------- no torch needed below

def parse_list(s, name):
    try:
        v = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"gpu_engine.py: {name} takes comma-separated positive integers, not {s!r}")
    if not v or min(v) < 1:
        raise SystemExit(f"gpu_engine.py: {name} takes comma-separated positive integers, not {s!r}")
    return v


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    ap.add_argument("--batches", default="1,32,128", help="decode batch sizes")
    ap.add_argument("--prompt-len", type=int, default=128, help="the decode runs' prompt length")
    ap.add_argument("--prefill-lens", default="512,4096", help="batch-1 prefill prompt lengths")
    ap.add_argument("--new-tokens", type=int, default=0, help="decode tokens per run (default 64; --quick 32)")
    ap.add_argument("--quick", action="store_true",
                    help="batches 1 and 32 (unless --batches), 32 new tokens, fewer repetitions")
    ap.add_argument("--peers", default="ours,eager,static",
                    help="which to time, of ours (both graph variants), eager, static, floor, gemms "
                         "(floor and gemms always run unless --no-floor / --no-gemms)")
    ap.add_argument("--no-floor", action="store_true", help="skip the copy-rate measurement")
    ap.add_argument("--no-gemms", action="store_true", help="skip the prefill GEMMs timed alone")
    ap.add_argument("--no-prefill", action="store_true", help="decode only (no prefill runs, no GEMMs alone)")
    ap.add_argument("--build", default="build-dev", help="the seqfuse build dir (its seqfuse and libseqfuse.so)")
    ap.add_argument("--cache", default=os.environ.get("SF_BENCH_CACHE", "/tmp/seqfuse_engine_ckpt"),
                    help="where the checkpoints are written and reused")
    ap.add_argument("--timeout", type=int, default=300, help="seconds for one bench-model call")
    ap.add_argument("--json-out", default=None, help="write the raw results as JSON (for --from-json)")
    ap.add_argument("--from-json", nargs="+", default=None, metavar="JSON",
                    help="no GPU: the section and the plot from earlier --json-out files")
    ap.add_argument("--results", default=None, help="rewrite the engine section of this copy of RESULTS.md")
    ap.add_argument("--plot", default=None, help="write the decode plot (PNG) here")
    a = ap.parse_args(argv)
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    bad = [m for m in a.models if m not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {', '.join(bad)}; known: {', '.join(MODELS)}")
    a.peers = [p.strip() for p in a.peers.split(",") if p.strip()]
    badp = [p for p in a.peers if p not in ("ours", "eager", "static")]
    if badp:
        ap.error(f"unknown peer(s) {', '.join(badp)}; known: ours, eager, static")
    quick_b = a.quick and a.batches == ap.get_default("batches")
    a.batches = [1, 32] if quick_b else parse_list(a.batches, "--batches")
    a.prefill_lens = [] if a.no_prefill else parse_list(a.prefill_lens, "--prefill-lens")
    if a.new_tokens == 0:
        a.new_tokens = 32 if a.quick else 64
    if a.new_tokens < 4:
        ap.error("--new-tokens must be at least 4")
    if a.prompt_len < 1:
        ap.error("--prompt-len must be positive")
    return a


def safetensors_index(path):
    """{tensor name: (dtype, shape, bytes)} of the safetensors files of a
    checkpoint directory (the headers only: 8-byte length, then JSON)."""
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    out = {}
    for f in files:
        with open(os.path.join(path, f), "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            hdr = json.loads(fh.read(n))
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            b, e = v["data_offsets"]
            out[k] = (v["dtype"], tuple(v["shape"]), e - b)
    return out


def streamed_bytes(index):
    """The bytes a decode step reads at least once: every tensor, except an
    embedding table that is not also the LM head (only its rows are read)."""
    tied = not any(k.endswith("lm_head.weight") for k in index)
    return sum(b for k, (_, _, b) in index.items() if tied or "embed" not in k and "embeddings" not in k)


def linear_shapes(cfg):
    """The (name, N, K) products of one prefill, layer by layer, as the
    engine runs them (src/model/model.c, mamba.c), then the LM head; from a
    config.json dict."""
    arch = cfg["architectures"][0]
    D = cfg["hidden_size"]
    L = cfg["num_hidden_layers"]
    out = []

    def attn(l):
        H = cfg["num_attention_heads"]
        Hkv = cfg.get("num_key_value_heads") or H
        hd = cfg.get("head_dim") or cfg.get("attn_head_dim") or D // H
        return [(f"{l}.q", H * hd, D), (f"{l}.k", Hkv * hd, D), (f"{l}.v", Hkv * hd, D), (f"{l}.o", D, H * hd)]

    def mlp(l):
        F = cfg["intermediate_size"]
        return [(f"{l}.gate", F, D), (f"{l}.up", F, D), (f"{l}.down", D, F)]

    def mamba(l, p):
        H, P = cfg[p + "n_heads" if p else "num_heads"], cfg[p + "d_head" if p else "head_dim"]
        G, N = cfg[p + "n_groups" if p else "n_groups"], cfg[p + "d_state" if p else "state_size"]
        E = H * P
        return [(f"{l}.in_proj", 2 * E + 2 * G * N + H, D), (f"{l}.out_proj", D, E)]

    for l in range(L):
        if arch == "Mamba2ForCausalLM":
            out += mamba(l, "")
        elif arch == "BambaForCausalLM":
            out += (attn(l) if l in cfg.get("attn_layer_indices", []) else mamba(l, "mamba_")) + mlp(l)
        else:
            out += attn(l) + mlp(l)
    out.append(("lm_head", cfg["vocab_size"], D))
    return out


def gemm_flops(shapes, m):
    """2 M N K over the layers' products at M rows (the LM head at 1 row)."""
    return sum(2 * (1 if n == "lm_head" else m) * N * K for n, N, K in shapes)


def bench_model_cmd(build, path, batches, lens, new_tokens, no_graphs=False):
    cmd = [os.path.join(build, "seqfuse"), "bench-model", "--model", path, "--batch", ",".join(map(str, batches)),
           "--prompt-len", ",".join(map(str, lens)), "--new-tokens", str(new_tokens), "--json"]
    return cmd + (["--no-graphs"] if no_graphs else [])


def parse_bench_json(stdout):
    """The points of `seqfuse bench-model --json`: the last line that is a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON object in bench-model's output")


def has_flag(build, flag):
    try:
        r = subprocess.run([os.path.join(build, "seqfuse"), "bench-model", "--help"], capture_output=True,
                           text=True, timeout=60)
        return flag in r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_ours(build, path, batches, lens, new_tokens, timeout, no_graphs=False):
    """bench-model's points {(batch, prompt_len): point} or raises with its stderr."""
    cmd = bench_model_cmd(build, path, batches, lens, new_tokens, no_graphs)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"bench-model exit {r.returncode}: {r.stderr.strip()[-400:]}")
    pts = parse_bench_json(r.stdout)["points"]
    return {(p["batch"], p["prompt_len"]): p for p in pts}


# ---------------------------------------------------------------- tables, section, plot

def fmt(v, nd=3):
    return "" if v is None or v != v else f"{v:.{nd}f}"


def ratio(a, b):
    return None if a is None or b is None or a != a or b != b or b == 0 else a / b


def fx(v):
    return "" if v is None else f"{v:.2f}x"


def decode_rows(name, m):
    rows = []
    for d in m.get("decode", []):
        o = d.get("ours")
        tok_s = 1e3 * d["batch"] / o if o else None
        rows.append([name, d["batch"], fmt(o), fmt(tok_s, 0), fmt(d.get("ours_nog")), fmt(d.get("eager")),
                     fmt(d.get("static")),
                     fx(ratio(d.get("eager"), o)), fx(ratio(d.get("static"), o)),
                     fmt(m.get("floor_ms")) if d["batch"] == 1 else "",
                     fx(ratio(o, m.get("floor_ms"))) if d["batch"] == 1 else ""])
    return rows


DECODE_HDR = ["model", "batch", "ours ms", "ours tok/s", "ours no-graphs ms", "eager ms", "static ms", "eager / ours",
              "static / ours", "floor ms", "ours / floor"]
PREFILL_HDR = ["model", "prompt", "ours tok/s", "eager tok/s", "ours / eager", "ours ms", "GEMMs alone ms",
               "GEMM TFLOP/s", "ours / GEMMs"]


def prefill_rows(name, m):
    rows = []
    for p in m.get("prefill", []):
        L = p["prompt_len"]
        o, e = p.get("ours_tok_s"), p.get("eager_tok_s")
        o_ms = 1e3 * L / o if o else None
        g = p.get("gemms_ms")
        rows.append([name, L, fmt(o, 0), fmt(e, 0), fx(ratio(o, e)), fmt(o_ms), fmt(g),
                     fmt(ratio(p.get("gemm_flops"), g * 1e9) if g else None, 0), fx(ratio(o_ms, g))])
    return rows


def print_model(name, m):
    print(f"\n== {name}: {MODELS[name]['shape'] if name in MODELS else ''}")
    print(f"   weights streamed per step {m.get('weight_bytes', 0) / 1e9:.3f} GB, floor {fmt(m.get('floor_ms'))} ms")
    print(md_table(DECODE_HDR, decode_rows(name, m)))
    if m.get("prefill"):
        print(md_table(PREFILL_HDR, prefill_rows(name, m)))
    for e in m.get("errors", []):
        print("   error:", e)
    sys.stdout.flush()


def section(res):
    meta = res["meta"]
    names = [n for n in MODELS if n in res["models"]] + [n for n in res["models"] if n not in MODELS]
    body = [f"{meta['date']}, {meta['gpu']}, commit {meta['commit']}, torch {meta['torch']}, transformers "
            f"{meta['transformers']}, `bench/gpu_engine.py`: random-weight bf16 checkpoints written by transformers "
            f"(shapes below), bf16 activations, greedy, EOS ignored.  Decode: ms per step at a "
            f"{meta['prompt_len']}-token "
            f"prompt, {meta['new_tokens']} new tokens; ours from `seqfuse bench-model` (as built"
            + (", and with --no-graphs" if meta.get("has_no_graphs") else "; this build has no --no-graphs")
            + "); eager: transformers' generate (DynamicCache); static: generate with "
            "cache_implementation=\"static\" (torch.compile reduce-overhead, warmed up); peers' steps from CUDA "
            "events after each token; transformers' Mamba-2 layers on "
            + (" and ".join(meta["hf_kernels"]) + "'s kernels" if meta.get("hf_kernels") else
               "its torch fallback (mamba_ssm and causal_conv1d not installed)")
            + ".  Floor: the weight bytes a step streams / the copy rate measured in the same "
            f"run ({meta.get('copy_tbs', float('nan')):.2f} TB/s, read + write of a 2 GiB copy).  Prefill: batch 1; "
            f"GEMMs alone: the prefill's sf_gemm calls at its shapes (seqfuse.gemm, one CUDA graph, distinct "
            f"weights per layer)"
            + (f" [here: {meta['gemm_impl']}]" if meta.get("gemm_impl", "seqfuse.gemm") != "seqfuse.gemm" else "")
            + ".", ""]
    body += [f"- {n}: {MODELS[n]['shape'] if n in MODELS else ''}" for n in names]
    body += ["", md_table(DECODE_HDR, [r for n in names for r in decode_rows(n, res["models"][n])])]
    pre = [r for n in names for r in prefill_rows(n, res["models"][n])]
    if pre:
        body += ["", md_table(PREFILL_HDR, pre)]
    errs = [f"- {n}: {e}" for n in names for e in res["models"][n].get("errors", [])]
    if errs:
        body += ["", "Failures recorded (the peer left empty above):", ""] + errs
    return "## The engine against transformers (`bench/gpu_engine.py`)\n\n" + "\n".join(body)


def write_results(path, res):
    how = replace_section(path, "engine", section(res))
    print(f"{path}: engine section {how}")


def write_plot(path, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n in MODELS if n in res["models"]] + [n for n in res["models"] if n not in MODELS]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.2), squeeze=False)
    colors = {"ours": "C0", "ours_nog": "C9", "eager": "C3", "static": "C1"}
    for ax, n in zip(axes[0], names):
        m = res["models"][n]
        dec = m.get("decode", [])
        peers = [p for p in PEERS if any(d.get(p) for d in dec)]
        w = 0.8 / max(len(peers), 1)
        for i, p in enumerate(peers):
            xs = [j + (i - (len(peers) - 1) / 2) * w for j in range(len(dec))]
            ys = [d.get(p) or float("nan") for d in dec]
            ax.bar(xs, ys, w, label=PEER_LABEL[p], color=colors[p])
        if m.get("floor_ms"):
            ax.axhline(m["floor_ms"], color="k", ls="--", lw=1, label="weight-streaming floor")
        ax.set_xticks(range(len(dec)))
        ax.set_xticklabels([f"batch {d['batch']}" for d in dec])
        ax.set_yscale("log")
        ax.set_title(n)
        ax.set_ylabel("ms per decode step")
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8)
    meta = res["meta"]
    fig.suptitle(f"decode step, {meta['gpu']}, bf16, prompt {meta['prompt_len']} (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"{path}: plot written")


def merge_models(into, m):
    """Adds model entry m (a later piece) to `into`: decode points by batch
    and prefill points by prompt length, a later value replacing an earlier
    one only where it is measured; errors accumulate."""
    for key, field in (("decode", "batch"), ("prefill", "prompt_len")):
        rows = {r[field]: r for r in into.get(key, [])}
        for r in m.get(key, []):
            old = rows.setdefault(r[field], {field: r[field]})
            old.update({k: v for k, v in r.items() if v is not None})
        into[key] = [rows[k] for k in sorted(rows)]
    for k in ("weight_bytes", "floor_ms"):
        if m.get(k) is not None:
            into[k] = m[k]
    into["errors"] = into.get("errors", []) + [e for e in m.get("errors", []) if e not in into.get("errors", [])]


def merge_json(paths):
    """The results of several runs (pieces) as one: meta from the first (the
    later ones' keys added where it lacks them; the commits, GPUs and copy
    rates of the pieces listed when they differ), models merged point by point."""
    res = None
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        if res is None:
            res = dict(meta=dict(r["meta"]), models={})
            for k in ("commit", "gpu"):
                res["meta"][k] = [r["meta"].get(k)]
        else:
            for k in ("commit", "gpu"):
                if r["meta"].get(k) not in res["meta"][k]:
                    res["meta"][k].append(r["meta"].get(k))
            for k, v in r["meta"].items():
                res["meta"].setdefault(k, v)
        for n, m in r["models"].items():
            merge_models(res["models"].setdefault(n, {}), m)
    for k in ("commit", "gpu"):
        res["meta"][k] = ", ".join(str(v) for v in res["meta"][k])
    return res


# ---------------------------------------------------------------- GPU side

def cuda_ms(torch, fn, reps):
    """Median ms of fn() over reps calls after one warm-up, CUDA events."""
    fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


def copy_rate_tbs(torch):
    """Device-to-device copy of 2 GiB: (read + write bytes) / time, TB/s."""
    n = 1 << 30  # bf16 elements
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    ms = cuda_ms(torch, lambda: dst.copy_(src), 10)
    return 2.0 * 2 * n / (ms * 1e-3) / 1e12


def make_checkpoint(torch, transformers, name, cache, spec=None):
    """The bf16 checkpoint of spec (default MODELS[name]) in cache/name,
    written when absent (built on the GPU when there is one); returns
    (path, whether it was written)."""
    path = os.path.join(cache, name)
    if os.path.exists(os.path.join(path, "config.json")) and any(
            f.endswith(".safetensors") for f in os.listdir(path)):
        return path, False
    spec = spec or MODELS[name]
    cfg = getattr(transformers, spec["config_cls"])(**spec["config"])
    cls = getattr(transformers, spec["cls"])
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    model = model.to(torch.bfloat16)
    tmp = path + ".tmp%d" % os.getpid()
    model.save_pretrained(tmp)
    del model
    if os.path.exists(path):
        import shutil
        shutil.rmtree(path)
    os.replace(tmp, path)
    return path, True


def load_hf(torch, transformers, name, path):
    cls = getattr(transformers, MODELS[name]["cls"])
    try:
        m = cls.from_pretrained(path, dtype=torch.bfloat16)
    except TypeError:
        m = cls.from_pretrained(path, torch_dtype=torch.bfloat16)
    return m.to("cuda").eval()


def hf_decode_ms(torch, transformers, model, batch, prompt_len, new_tokens, static, vocab, warmups):
    """ms per decode step of model.generate: CUDA events recorded after every
    token by a stopping criterion (nothing synchronised in between)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(256, vocab, (batch, prompt_len), device="cuda", generator=g)
    stamps = []
    never = torch.zeros(batch, dtype=torch.bool, device="cuda")

    class Stamp(transformers.StoppingCriteria):
        def __call__(self, input_ids, scores, **kw):
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            stamps.append(e)
            return never

    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
              do_sample=False, pad_token_id=0, stopping_criteria=transformers.StoppingCriteriaList([Stamp()]))
    if static:
        kw["cache_implementation"] = "static"
    else:
        kw["disable_compile"] = True
    with torch.no_grad():
        for _ in range(warmups):
            model.generate(ids, **kw)
        torch.cuda.synchronize()
        stamps.clear()
        out = model.generate(ids, **kw)
        torch.cuda.synchronize()
    if out.shape[1] != prompt_len + new_tokens or len(stamps) < 3:
        raise RuntimeError(f"generate made {out.shape[1] - prompt_len} tokens ({len(stamps)} stamps), "
                           f"not {new_tokens}")
    return stamps[0].elapsed_time(stamps[-1]) / (len(stamps) - 1)


def hf_prefill_tok_s(torch, model, L, vocab, reps):
    g = torch.Generator(device="cuda").manual_seed(2)
    ids = torch.randint(256, vocab, (1, L), device="cuda", generator=g)

    def fwd():
        try:
            return model(ids, use_cache=True, logits_to_keep=1)
        except TypeError:
            return model(ids, use_cache=True)

    with torch.no_grad():
        ms = cuda_ms(torch, fwd, reps)
    return 1e3 * L / ms


def gemms_alone_ms(torch, cfg, m, use_sf):
    """The prefill's products at M rows, distinct weights per layer, captured
    in one CUDA graph; median ms of its replays."""
    shapes = linear_shapes(cfg)
    gen = torch.Generator(device="cuda").manual_seed(3)
    xs, ys, calls = {}, {}, []
    for n, N, K in shapes:
        rows = 1 if n == "lm_head" else m
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
        x = xs.setdefault((rows, K), torch.randn(rows, K, device="cuda", dtype=torch.bfloat16, generator=gen))
        y = ys.setdefault((rows, N), torch.empty(rows, N, device="cuda", dtype=torch.bfloat16))
        calls.append((x, w, y))
    if use_sf:
        import seqfuse

        def fn():
            for x, w, y in calls:
                seqfuse.gemm(x, w, out=y)
    else:
        def fn():
            for x, w, y in calls:
                torch.matmul(x, w.t(), out=y)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        fn()
    torch.cuda.synchronize()
    return cuda_ms(torch, graph.replay, 10), gemm_flops(shapes, m)


def bench_one(a, torch, transformers, name, meta, m, save):
    """Fills m (the model's entry of the results) stage by stage, calling
    save() after each, so that a run cut short keeps what it measured."""
    m["errors"] = []
    t0 = time.time()

    def note(msg):
        print(f"[{name} {time.time() - t0:6.1f}s] {msg}", flush=True)
        save()

    try:
        path, made = make_checkpoint(torch, transformers, name, a.cache)
    except Exception as e:  # noqa: BLE001 - no checkpoint, no model
        m["errors"].append(f"checkpoint: {type(e).__name__}: {e}"[:400])
        note("FAILED " + m["errors"][-1])
        return m
    note(("wrote " if made else "reusing ") + path)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    vocab = cfg["vocab_size"]
    m["weight_bytes"] = streamed_bytes(safetensors_index(path))
    if meta.get("copy_tbs"):
        m["floor_ms"] = m["weight_bytes"] / (meta["copy_tbs"] * 1e12) * 1e3
    dec = {b: dict(batch=b) for b in a.batches}
    pre = {L: dict(prompt_len=L) for L in a.prefill_lens}
    m["decode"] = [dec[b] for b in a.batches]
    m["prefill"] = [pre[L] for L in a.prefill_lens]
    reps = 3 if a.quick else 5

    def attempt(what, fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a failing peer is recorded, the run goes on
            msg = f"{what}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:400]
            m["errors"].append(msg)
            note("FAILED " + msg)
            torch.cuda.empty_cache()
            return None

    # ours first, with no transformers model on the GPU
    if "ours" in a.peers:
        for key, nog in (("ours", False), ("ours_nog", True)):
            if nog and not meta["has_no_graphs"]:
                continue
            for b in a.batches:  # one call a batch: an engine sized for it, and a failure costs one point
                r = attempt(f"{key} decode b{b}", lambda: run_ours(a.build, path, [b], [a.prompt_len], a.new_tokens,
                                                                   a.timeout, nog))
                if r and (b, a.prompt_len) in r:
                    dec[b][key] = r[(b, a.prompt_len)]["ms_per_step"]
                note(f"{key} decode b{b}: {fmt(dec[b].get(key))} ms")
        if a.prefill_lens:
            for L in a.prefill_lens:
                r = attempt(f"ours prefill {L}", lambda: run_ours(a.build, path, [1], [L], 4, a.timeout))
                if r and (1, L) in r:
                    pre[L]["ours_tok_s"] = r[(1, L)]["prefill_tok_s"]
            note("ours prefill tok/s " + " ".join(f"L{L}={fmt(pre[L].get('ours_tok_s'), 0)}"
                                                  for L in a.prefill_lens))
    if not a.no_gemms and a.prefill_lens:
        for L in a.prefill_lens:
            use_sf = meta["gemm_impl"] == "seqfuse.gemm"
            r = attempt(f"GEMMs alone at {L}", lambda: gemms_alone_ms(torch, cfg, L, use_sf))
            torch.cuda.empty_cache()  # the weights of that timing
            if r:
                pre[L]["gemms_ms"], pre[L]["gemm_flops"] = r
        note("GEMMs alone ms " + " ".join(f"L{L}={fmt(pre[L].get('gemms_ms'))}" for L in a.prefill_lens))
    if "eager" in a.peers or "static" in a.peers:
        model = attempt("transformers load", lambda: load_hf(torch, transformers, name, path))
        if model is not None:
            if "eager" in a.peers and a.prefill_lens:
                for L in a.prefill_lens:
                    pre[L]["eager_tok_s"] = attempt(f"eager prefill {L}",
                                                    lambda: hf_prefill_tok_s(torch, model, L, vocab, reps))
                note("eager prefill tok/s " + " ".join(f"L{L}={fmt(pre[L].get('eager_tok_s'), 0)}"
                                                       for L in a.prefill_lens))
            if "eager" in a.peers:
                for b in a.batches:
                    dec[b]["eager"] = attempt(f"eager decode b{b}", lambda: hf_decode_ms(
                        torch, transformers, model, b, a.prompt_len, a.new_tokens, False, vocab, 1))
                    note(f"eager decode b{b}: {fmt(dec[b]['eager'])} ms")
            if "static" in a.peers:
                for b in a.batches:
                    t1 = time.time()
                    dec[b]["static"] = attempt(f"static decode b{b}", lambda: hf_decode_ms(
                        torch, transformers, model, b, a.prompt_len, a.new_tokens, True, vocab, 2))
                    note(f"static decode b{b}: {fmt(dec[b]['static'])} ms (with compile {time.time() - t1:.0f}s)")
            del model
        import torch._dynamo
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    note("done")
    return m


def main(argv=None):
    a = parse_args(argv)
    if a.from_json:
        res = merge_json(a.from_json)
        for n, m in res["models"].items():
            print_model(n, m)
        if a.results:
            write_results(a.results, res)
        if a.plot:
            write_plot(a.plot, res)
        return 0
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"gpu_engine.py: needs torch and transformers ({e})", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("gpu_engine.py: no CUDA device", file=sys.stderr)
        return 77
    if "ours" in a.peers and not os.access(os.path.join(a.build, "seqfuse"), os.X_OK):
        print(f"gpu_engine.py: no seqfuse executable in --build {a.build}", file=sys.stderr)
        return 2
    os.makedirs(a.cache, exist_ok=True)
    meta = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(), commit=commit(),
                torch=torch.__version__, transformers=transformers.__version__, prompt_len=a.prompt_len,
                new_tokens=a.new_tokens, batches=a.batches, prefill_lens=a.prefill_lens,
                has_no_graphs=("ours" in a.peers and has_flag(a.build, "--no-graphs")),
                # transformers' Mamba-2 / Bamba layers use these kernels when importable, else torch loops
                hf_kernels=[k for k in ("mamba_ssm", "causal_conv1d") if importlib.util.find_spec(k)])
    try:
        import seqfuse
        seqfuse.gemm  # noqa: B018 - the binding of this tree has it
        meta["gemm_impl"] = "seqfuse.gemm"
    except Exception as e:  # noqa: BLE001 - fall back to cuBLAS through torch, and say so
        meta["gemm_impl"] = f"torch.matmul (seqfuse binding unavailable: {type(e).__name__})"
    if not a.no_floor:
        meta["copy_tbs"] = copy_rate_tbs(torch)
        torch.cuda.empty_cache()
    print(f"{meta['gpu']}, torch {meta['torch']}, transformers {meta['transformers']}, commit {meta['commit']}; "
          f"copy {fmt(meta.get('copy_tbs'), 2)} TB/s; --no-graphs {'yes' if meta['has_no_graphs'] else 'absent'}; "
          f"GEMMs via {meta['gemm_impl']}", flush=True)
    res = dict(meta=meta, models={})

    def save():
        if a.json_out:
            with open(a.json_out + ".tmp", "w") as f:
                json.dump(res, f, indent=1)
            os.replace(a.json_out + ".tmp", a.json_out)

    for name in a.models:
        res["models"][name] = {}
        bench_one(a, torch, transformers, name, meta, res["models"][name], save)
        print_model(name, res["models"][name])
    if a.results:
        write_results(a.results, res)
    if a.plot:
        write_plot(a.plot, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
