"""The engine on the real SmolLM2-135M-Instruct Q4_1 GGUF ($SF_SMOLLM2_GGUF,
which .ci/run downloads; every test skips, visibly, when it is absent):
  - `seqfuse generate --prompt-ids` (chat prompt, greedy) matches a float
    reference, transformers running the same dequantised weights
    (from_pretrained(dir, gguf_file=name, torch_dtype=float32)), token for
    token up to the first near-tie; with the weights kept quantised
    (sf_gemm_wq) and with --dequantize;
  - the text is printed (it should read well), with the decode speed;
  - stop strings, and two chat prompts in one batch."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers needs it to read a GGUF
pytest.importorskip("gguf")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import seqfuse  # noqa: E402

GGUF = os.environ.get("SF_SMOLLM2_GGUF", "")
NEW = 40
QUESTION = "Write a short poem about the ocean."

pytestmark = pytest.mark.skipif(not os.path.isfile(GGUF), reason=f"SmolLM2 GGUF not found at {GGUF} (set SF_SMOLLM2_GGUF)")


def cli():
    lib = os.environ.get("SEQFUSE_LIB") or seqfuse.library_path
    exe = os.path.join(os.path.dirname(lib), "seqfuse")
    if not os.path.isfile(exe):
        pytest.skip(f"the seqfuse command is not next to {lib}")
    return exe


@pytest.fixture(scope="module")
def prompt_ids():
    with seqfuse.Engine(GGUF, max_seqs=1, max_seq_len=256) as e:
        ids = e.tokenize(QUESTION, chat=True)
        im_end = e.tokenize("<|im_end|>", chat=False)
        assert e.eos == 2 and e.vocab_size == 49152
        # the chat end token is the EOS: "<|im_end|>" is id 2
        assert seqfuse._engine._c.string_at(seqfuse._engine._piece(e._h, 2, seqfuse._engine._c.byref(ln := seqfuse._engine._c.c_size_t())), ln.value) == b"<|im_end|>"
        print(f"\nchat prompt: {len(ids)} ids; <|im_end|> text tokenizes to {im_end} (plain text, no specials)")
    return ids


@pytest.fixture(scope="module")
def reference(prompt_ids):
    d, name = os.path.split(GGUF)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=name, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=NEW, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, eos_token_id=2, pad_token_id=2)
    toks = out.sequences[0, len(prompt_ids):].tolist()
    logits = [x[0].double().numpy() for x in out.logits]
    return toks, logits


def run_cli(ids, *extra):
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    p = subprocess.run([cli(), "generate", "--model", GGUF, "--prompt-ids", ",".join(map(str, ids)),
                        "--max-new-tokens", str(NEW), "--temperature", "0", "--json", *extra],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    print(p.stderr.strip())
    return json.loads(p.stdout)


@pytest.mark.parametrize("mode", ["quantised", "dequantised"])
def test_greedy_matches_float_reference(prompt_ids, reference, mode):
    ref_toks, ref_logits = reference
    r = run_cli(prompt_ids, *(["--dequantize"] if mode == "dequantised" else []))
    assert r["prompt_tokens"] == prompt_ids
    ours = r["tokens"]
    print(f"[{mode}] text: {r['text']!r}")
    print(f"[{mode}] decode {r['decode_tok_s']:.2f} tok/s ({r['ms_per_token']:.1f} ms/token), "
          f"prefill {r['prefill_tok_s']:.1f} tok/s, {r['memory_mb']:.0f} MB")
    n = min(len(ours), len(ref_toks))
    for j in range(n):
        if ours[j] != ref_toks[j]:
            top2 = np.sort(ref_logits[j])[-2:]
            gap = top2[1] - top2[0]
            print(f"[{mode}] first difference at step {j}: ours {ours[j]}, reference {ref_toks[j]}, "
                  f"reference top-2 gap {gap:.2e}")
            assert gap < 2e-2, f"{mode}: step {j} differs without a near-tie (gap {gap})"
            return
    assert len(ours) == len(ref_toks), (ours, ref_toks)
    print(f"[{mode}] all {n} tokens match the float reference")


def test_stop_strings_and_batch(prompt_ids):
    """A stop string ends a sequence at the token that completes it; two chat
    prompts batched give each its greedy text alone."""
    with seqfuse.Engine(GGUF, max_seqs=2, max_seq_len=160) as e:
        full = e.generate([prompt_ids], max_new_tokens=24)[0]
        cut = e.generate([prompt_ids], max_new_tokens=24, stop=[","])[0]
        assert cut["finish"] == "stop" and "," in cut["text"], cut
        assert full["tokens"][:len(cut["tokens"])] == cut["tokens"]
        assert "," not in e.decode(cut["tokens"][:-1])
        other = e.tokenize("Name three colors.", chat=True)
        both = e.generate([prompt_ids, other], max_new_tokens=24)
        alone = e.generate([other], max_new_tokens=24)[0]
        assert both[0]["tokens"] == full["tokens"] and both[1]["tokens"] == alone["tokens"]
        print(f"\nbatch of two: {both[0]['text']!r} / {both[1]['text']!r}")
