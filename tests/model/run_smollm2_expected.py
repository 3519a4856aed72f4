"""`seqfuse generate` on the real SmolLM2-135M-Instruct Q4_1 GGUF
($SF_SMOLLM2_GGUF; exit 77, skipped, when it is not set or absent), on the
CPU, greedy: the chat prompt's tokens (our tokenizer and chat template) and
the generated tokens must equal the expected ones, with the weights kept
quantised (sf_gemm_wq) and dequantised at load.  The expected tokens were
checked against transformers running the same dequantised weights in f32
(tests/model/test_engine_smollm2.py, which needs torch); this test needs
only the standard library, so CI runs it.  Also a small `seqfuse bench-model`
sweep: every point reports positive rates.

usage: run_smollm2_expected.py SEQFUSE_EXECUTABLE"""
import json
import os
import subprocess
import sys

CASES = [
    ("What is the capital of France? Answer in one sentence.", 24,
     [504, 3575, 282, 4649, 314, 7042, 30, 2], "The capital of France is Paris."),
    ("Write a short poem about the ocean.", 32,
     [788, 260, 16862, 282, 260, 5065, 28, 837, 18778, 1238, 28, 198, 49, 1379, 282, 11746, 4558, 28, 198, 504,
      5065, 506, 253, 1379, 282, 11746, 2606, 28, 198, 49, 1379, 282], None),
]
# the chat template around the poem prompt: system message, user turn, assistant header
POEM_PROMPT_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712,
                   8182, 2, 198, 1, 4093, 198, 19161, 253, 1890, 8216, 563, 260, 5065, 30, 2, 198, 1, 520, 9531, 198]


def main():
    exe = sys.argv[1]
    gguf = os.environ.get("SF_SMOLLM2_GGUF", "")
    if not gguf or not os.path.isfile(gguf):
        print("skipped: SF_SMOLLM2_GGUF does not name the SmolLM2 GGUF (.ci/run downloads it)")
        return 77
    bad = 0
    for mode in ([], ["--dequantize"]):
        for text, n, want, want_text in CASES:
            cmd = [exe, "generate", "--model", gguf, "--chat", "--prompt", text, "--max-new-tokens", str(n),
                   "--temperature", "0", "--json", "--cpu"] + mode
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                print(f"FAIL {mode} {text!r}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
                bad += 1
                continue
            d = json.loads(r.stdout.strip().splitlines()[-1])
            ok = d["tokens"] == want and (want_text is None or d["text"] == want_text)
            if text.startswith("Write") and d["prompt_tokens"] != POEM_PROMPT_IDS:
                ok = False
                print(f"  prompt tokens differ: {d['prompt_tokens']}")
            print(f"{'ok  ' if ok else 'FAIL'} {' '.join(mode) or 'quantised'}: {text!r} -> {d['text']!r} "
                  f"({d['decode_tok_s']:.1f} tok/s)")
            if not ok:
                print(f"  got  {d['tokens']}\n  want {want}")
                bad += 1
    # `seqfuse bench-model`: a small sweep, every point timed; --ragged: prompts of several lengths
    for extra in ([], ["--ragged"]):
        r = subprocess.run([exe, "bench-model", "--model", gguf, "--cpu", "--batch", "1,2", "--prompt-len", "8,16",
                            "--new-tokens", "4", "--json"] + extra, capture_output=True, text=True, timeout=600)
        try:
            pts = json.loads(r.stdout)["points"] if r.returncode == 0 else []
        except ValueError:
            pts = []
        ok = len(pts) == 4 and all(p["prefill_tok_s"] > 0 and p["decode_tok_s"] > 0 and p["ms_per_step"] > 0
                                   and p["ragged"] == bool(extra) for p in pts)
        print(f"{'ok  ' if ok else 'FAIL'} bench-model {' '.join(extra)}: "
              f"{r.stdout.strip()[-400:] or r.stderr.strip()[-300:]}")
        bad += 0 if ok else 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
