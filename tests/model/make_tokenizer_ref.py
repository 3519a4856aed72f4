#!/usr/bin/env python3
"""Reference ids for the C tokenizer's tests, made by Hugging Face's libraries.

  make_tokenizer_ref.py fixture GGUF OUTDIR
      SmolLM2's tokenizer: the `tokenizers` library driven directly from the
      GGUF vocab/merges with the "smollm" pre-tokenizer (Digits individual +
      ByteLevel GPT-2 regex, as SmolLM2's tokenizer.json); writes
      OUTDIR/tokenizer_ref_smollm2.json (the corpus and its ids, committed).
      transformers' AutoTokenizer(gguf_file=) is compared and its
      differences printed: its conversion drops the Digits step.
  make_tokenizer_ref.py json GGUF OUTDIR
      writes that tokenizer as OUTDIR/tokenizer.json plus a
      tokenizer_config.json (bos, eos, chat template from the GGUF): the JSON
      path is tested at build time against the same committed ids. Exit 77
      when tokenizers/gguf or the GGUF file is missing (GGUF "-": the path
      in $SF_SMOLLM2_GGUF).
  make_tokenizer_ref.py tiny OUTDIR
      a small byte-level BPE trained by `tokenizers` (Llama-3 Split regex,
      ignore_merges, added tokens with lstrip/rstrip) and its expected ids:
      OUTDIR/tiny_tokenizer.json and OUTDIR/tokenizer_ref_tiny.json.
"""
import json
import os
import sys

# The test corpus: every script and shape the pre-tokenizer treats apart.
CORPUS = [
    "Hello world",
    "Hello, world! How are you doing today?",
    " leading space and trailing space ",
    "The quick brown fox jumps over the lazy dog.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "12345 67 890 3.14159 1,000,000 2024-12-04",
    "numbers123abc456",
    "a  b   c    d\t\te\n\nf\r\n g",
    "   \n\n\t   ",
    "trailing spaces    ",
    "I'm sure you'll see they've done it, we'd said, isn't it? It's HE'LL and I'M",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe \u00e0 la cr\u00e8me br\u00fbl\u00e9e",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "Emoji: \U0001f600\U0001f680 \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f \U0001f1eb\U0001f1f7",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "Mixed: English, \u4e2d\u6587, \u0627\u0644\u0639\u0631\u0628\u064a\u0629, 123, and \U0001f600!",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text <|im_end|>end",
    "<|im_start|><|im_start|>",
    "<|im_start",
    "symbols: @#$%^&*()_+-=[]{}|;':\",./<>?`~\u00a7\u00b1",
    "URL https://example.com/path?q=1&r=2#frag and email a.b@c.org",
    "\u00bd \u00b2 \u2167 \u0663\u0664 full-width \uff11\uff12\uff13",
    "a\u00a0b\u2003c\u3000d",
    "x" * 300,
    " " * 70 + "x" + "\n" * 9 + "y\t\t \n",
    "controls a\x04b\x06 c\x1d !\x04! \x7f\u00ad",
    "The year 1999 had 365 days; 2000 had 366.",
    "",
]

def gguf_vocab(path):
    from gguf import GGUFReader
    r = GGUFReader(path)

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    def scalar(key):
        f = r.fields[key]
        return f.parts[f.data[0]]
    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    merges = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.merges")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    meta = {"pre": bytes(scalar("tokenizer.ggml.pre")).decode(),
            "bos": int(scalar("tokenizer.ggml.bos_token_id")[0]),
            "eos": int(scalar("tokenizer.ggml.eos_token_id")[0]),
            "chat_template": bytes(scalar("tokenizer.chat_template")).decode()}
    return tokens, merges, types, meta


def smollm_tokenizer(gguf):
    """The `tokenizers` library from the raw GGUF vocabulary with the
    "smollm" pre-tokenizer: Digits(individual) then ByteLevel's GPT-2 regex,
    as SmolLM2's own tokenizer.json has it (llama.cpp: "\\p{N}" then the
    GPT-2 regex)."""
    from tokenizers import Tokenizer, AddedToken, pre_tokenizers, decoders
    from tokenizers.models import BPE
    tokens, merges, types, meta = gguf_vocab(gguf)
    assert meta["pre"] == "smollm", meta["pre"]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(BPE(vocab, [tuple(m.split(" ", 1)) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, ty in enumerate(types) if ty == 3])
    return tok, tokens, meta


def fixture(gguf, outdir):
    tok, _, _ = smollm_tokenizer(gguf)
    cases = []
    for s in CORPUS:
        ids = tok.encode(s, add_special_tokens=False).ids
        cases.append({"text": s, "ids": ids})
    # parse_special=0: control tokens written in the text are plain text
    tok.encode_special_tokens = True
    for c in cases:
        c["ids_no_special"] = tok.encode(c["text"], add_special_tokens=False).ids
    # transformers' GGUF conversion drops the Digits step of "smollm" (it
    # builds a bare ByteLevel): report where it differs, it is not the oracle
    try:
        from transformers import AutoTokenizer
        d, name = os.path.split(os.path.abspath(gguf))
        ht = AutoTokenizer.from_pretrained(d, gguf_file=name)
        for c in cases:
            got = ht(c["text"], add_special_tokens=False)["input_ids"]
            if got != c["ids"]:
                print(f"note: transformers' GGUF conversion differs on {c['text']!r}")
    except ImportError:
        pass
    with open(os.path.join(outdir, "tokenizer_ref_smollm2.json"), "w", encoding="utf-8") as f:
        json.dump({"model": "SmolLM2-135M-Instruct", "cases": cases}, f, ensure_ascii=True, indent=0)


def save_json(gguf, outdir):
    for name in ("tokenizer.json", "tokenizer_config.json"):   # never test a stale copy
        if os.path.exists(os.path.join(outdir, name)):
            os.remove(os.path.join(outdir, name))
    try:
        import tokenizers  # noqa: F401
        import gguf as _gguf  # noqa: F401
    except ImportError:
        print("skip: the tokenizers or gguf Python package is not installed")
        sys.exit(77)
    if gguf == "-":
        gguf = os.environ.get("SF_SMOLLM2_GGUF", "")
    if not gguf or not os.path.exists(gguf):
        print(f"skip: {gguf} not found (set SF_SMOLLM2_GGUF)")
        sys.exit(77)
    tok, tokens, meta = smollm_tokenizer(gguf)
    os.makedirs(outdir, exist_ok=True)
    tok.save(os.path.join(outdir, "tokenizer.json"))
    with open(os.path.join(outdir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": tokens[meta["bos"]], "eos_token": tokens[meta["eos"]],
                   "chat_template": meta["chat_template"]}, f)


def tiny(outdir):
    from tokenizers import Tokenizer, AddedToken, Regex, pre_tokenizers, trainers, decoders
    from tokenizers.models import BPE
    llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(llama3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    train = ["the cat sat on the mat", "hello world hello there", "it's 2024, they're 100% sure",
             "def main():\n    return 0\n", "caf\u00e9 \u00fcber", "the theme of the thesis"] * 20
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(train, trainer)
    tok.add_special_tokens([AddedToken("<|eot|>", special=True, normalized=False),
                            AddedToken("<mask>", special=True, lstrip=True, rstrip=True,
                                       normalized=False)])
    tok.add_tokens([AddedToken("[user]", special=False, normalized=False)])
    path = os.path.join(outdir, "tiny_tokenizer.json")
    tok.save(path)
    extra = ["the theme", "hello <mask> world", "a<|eot|>b", "x [user] y", "they're 1234567 cats"]
    cases = []
    for s in CORPUS[:20] + extra:
        ids = tok.encode(s, add_special_tokens=False).ids
        cases.append({"text": s, "ids": ids})
    with open(os.path.join(outdir, "tokenizer_ref_tiny.json"), "w", encoding="utf-8") as f:
        json.dump({"model": "tiny", "cases": cases}, f, ensure_ascii=True, indent=0)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "fixture":
        fixture(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "json":
        save_json(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "tiny":
        tiny(sys.argv[2])
    else:
        sys.exit(__doc__)
