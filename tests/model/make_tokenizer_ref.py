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
      small byte-level BPEs trained by `tokenizers` under several
      pre-tokenizers (see tiny()), with added tokens (lstrip/rstrip, special
      or not) and their expected ids: OUTDIR/<name>.tokenizer.json and
      OUTDIR/<name>.ref.json.
  make_tokenizer_ref.py nfc src/model/tokenizer_nfc.h
      the character classes of the NFC guard (see nfc_header()).
  make_tokenizer_ref.py hf_dir REFDIR OUTDIR
      a tiny transformers checkpoint directory holding the Llama-3-style
      tokenizer.json (sfm_tokenizer_open on a HF directory; exit 77 without
      torch / transformers).
  make_tokenizer_ref.py tiny_gguf REFDIR OUTDIR
      some of those vocabularies as GGUF files (tokenizer.ggml.pre
      llama-bpe, qwen2, default, gpt2, smollm) on a one-layer random llama:
      OUTDIR/<name>.gguf, written at test time (exit 77 without gguf).
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


LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
EXTRA = ["the theme", "hello <mask> world", "a<|eot|>b", "x [user] y", "they're 1234567 cats",
         "the-final--countdown", "a1b22c333 d", "zzqzz qq z", "x--y 12-3 ", "e\u0301t\u00e9",
         "\u0928\u092e\u0938\u094d\u0924\u0947 \u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627",
         "\u0a5e \u2126 \u1100\u1161"]


# tiny variants also written as GGUF files, with their tokenizer.ggml.pre
GGUF_PRE = {"llama3": "llama-bpe", "qwen2": "qwen2", "default": "default", "gpt2": "gpt2",
            "smollm": "smollm"}


def tiny(outdir):
    """Small byte-level BPEs (one trained vocabulary, 300 tokens) under the
    pre-tokenizers of Llama-3, Qwen2 (with NFC), GPT-2 with a prefix space,
    llama.cpp's default list, and every Split behaviour; each written as
    OUTDIR/<name>.tokenizer.json with its ids in OUTDIR/<name>.ref.json."""
    from tokenizers import Tokenizer, AddedToken, Regex, pre_tokenizers as pt, normalizers, trainers, decoders
    from tokenizers.models import BPE
    sets = nfc_sets()
    base = Tokenizer(BPE())
    base.pre_tokenizer = pt.ByteLevel(add_prefix_space=False)
    train = ["the cat sat on the mat", "hello world hello there", "it's 2024, they're 100% sure",
             "def main():\n    return 0\n", "caf\u00e9 \u00fcber", "the theme of the thesis",
             "the-final--countdown 12-3"] * 20
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pt.ByteLevel.alphabet(),
                                  special_tokens=["<s>", "</s>"], show_progress=False)
    base.train_from_iterator(train, trainer)
    model = json.loads(base.to_str())["model"]
    vocab = model["vocab"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model["merges"]]
    bl = pt.ByteLevel(add_prefix_space=False, use_regex=False)
    variants = {
        "llama3": (None, pt.Sequence([pt.Split(Regex(LLAMA3), "isolated"), bl]), True),
        "qwen2": (normalizers.NFC(), pt.Sequence([pt.Split(Regex(QWEN2), "isolated"), bl]), False),
        "gpt2": (None, pt.ByteLevel(add_prefix_space=False, use_regex=True), False),
        "smollm": (None, pt.Sequence([pt.Digits(individual_digits=True),
                                      pt.ByteLevel(add_prefix_space=False, use_regex=True)]), False),
        "gpt2_prefix": (None, pt.ByteLevel(add_prefix_space=True, use_regex=True), False),
        "default": (None, pt.Sequence([pt.Split(Regex(r"[\p{P}\$\+<=>\^~\|]+"), "isolated"),
                                       pt.Split(Regex(GPT2), "isolated"),
                                       pt.Split(Regex(r"\p{N}+"), "isolated"),
                                       pt.Split(Regex(r"[0-9][0-9][0-9]"), "isolated"), bl]), False),
        "behaviours": (None, pt.Sequence([pt.Split("-", "merged_with_previous"),
                                          pt.Split(Regex(r"\d"), "merged_with_next"),
                                          pt.Split(Regex(r"z+|q"), "contiguous"),
                                          pt.Split(Regex(r"[aeiou]"), "isolated", invert=True),
                                          pt.ByteLevel(add_prefix_space=False, use_regex=True)]), False),
        "removed": (None, pt.Sequence([pt.Split(Regex(r"\s"), "removed"),
                                       pt.Split(Regex(r"\p{L}+"), "removed", invert=True),
                                       pt.Digits(individual_digits=False), bl]), False),
    }
    for name, (norm, pre, ignore) in variants.items():
        tok = Tokenizer(BPE(vocab, merges, ignore_merges=ignore))
        tok.normalizer = norm
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        # lstrip / rstrip where GGUF (which cannot say them) is not compared
        strip = name not in GGUF_PRE
        tok.add_special_tokens([AddedToken("<|eot|>", special=True, normalized=False),
                                AddedToken("<mask>", special=True, lstrip=strip, rstrip=strip,
                                           normalized=False)])
        tok.add_tokens([AddedToken("[user]", special=False, normalized=False)])
        tok.save(os.path.join(outdir, name + ".tokenizer.json"))
        cases = []
        for s in CORPUS[:21] + EXTRA:
            c = {"text": s}
            if norm is not None and nfc_refused(s, sets):
                c["refused"] = True   # the C tokenizer does not implement NFC: it says so
            else:
                c["ids"] = tok.encode(s, add_special_tokens=False).ids
            cases.append(c)
        with open(os.path.join(outdir, name + ".ref.json"), "w", encoding="utf-8") as f:
            json.dump({"model": "tiny " + name, "cases": cases}, f, ensure_ascii=True, indent=0)


def tiny_gguf(refdir, outdir):
    """The tiny vocabularies as GGUF metadata on a one-layer llama of random
    weights (the loader needs a model): OUTDIR/<name>.gguf, compared with the
    same <name>.ref.json ids as the tokenizer.json files."""
    try:
        import numpy as np
        import gguf
    except ImportError:
        print("skip: the gguf / numpy Python packages are not installed")
        sys.exit(77)
    os.makedirs(outdir, exist_ok=True)
    # and three files the GGUF front end must refuse: a SentencePiece
    # vocabulary, an unknown pre-tokenizer, a merge naming a missing token
    files = dict((k, (k, pre, "gpt2", False)) for k, pre in GGUF_PRE.items())
    files.update({"bad_model": ("llama3", "llama-bpe", "llama", False),
                  "bad_pre": ("llama3", "no-such-pre", "gpt2", False),
                  "bad_merge": ("llama3", "llama-bpe", "gpt2", True)})
    for name in files:   # never test a stale copy
        if os.path.exists(os.path.join(outdir, name + ".gguf")):
            os.remove(os.path.join(outdir, name + ".gguf"))
    rng = np.random.default_rng(0)
    hidden, ffn, heads = 8, 16, 2
    for name, (src, pre, model, bad_merge) in files.items():
        with open(os.path.join(refdir, src + ".tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        toks = {i: t for t, i in tj["model"]["vocab"].items()}
        types = {}
        for a in tj["added_tokens"]:
            toks[a["id"]] = a["content"]
            types[a["id"]] = 3 if a["special"] else 4
        n = max(toks) + 1
        merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
        if bad_merge:
            merges[7] = "Zq \u0100"
        w = gguf.GGUFWriter(os.path.join(outdir, name + ".gguf"), "llama")
        w.add_block_count(1)
        w.add_context_length(64)
        w.add_embedding_length(hidden)
        w.add_feed_forward_length(ffn)
        w.add_head_count(heads)
        w.add_head_count_kv(heads)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_freq_base(10000.0)
        w.add_rope_dimension_count(hidden // heads)
        w.add_vocab_size(n)
        w.add_tokenizer_model(model)
        w.add_tokenizer_pre(pre)
        w.add_token_list([toks[i] for i in range(n)])
        w.add_token_types([types.get(i, 1) for i in range(n)])
        w.add_token_merges(merges)
        w.add_bos_token_id(tj["model"]["vocab"]["<s>"])
        w.add_eos_token_id(tj["model"]["vocab"]["</s>"])

        def t(nm, *shape):
            w.add_tensor(nm, rng.standard_normal(shape).astype(np.float32))
        t("token_embd.weight", n, hidden)
        t("output_norm.weight", hidden)
        for nm, shape in [("attn_norm", (hidden,)), ("attn_q", (hidden, hidden)), ("attn_k", (hidden, hidden)),
                          ("attn_v", (hidden, hidden)), ("attn_output", (hidden, hidden)), ("ffn_norm", (hidden,)),
                          ("ffn_gate", (ffn, hidden)), ("ffn_up", (ffn, hidden)), ("ffn_down", (hidden, ffn))]:
            t("blk.0." + nm + ".weight", *shape)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def nfc_sets():
    """(characters with NFC_Quick_Check No or Maybe, non-starters)."""
    import unicodedata as u
    qc, ccc = set(), set()
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        ch = chr(cp)
        if u.normalize("NFC", ch) != ch:
            qc.add(cp)   # NFC_QC = No
        if u.combining(ch):
            ccc.add(cp)
        d = u.decomposition(ch)
        if d and not d.startswith("<") and len(d.split()) == 2 and u.normalize("NFC", ch) == ch:
            qc.add(int(d.split()[1], 16))   # NFC_QC = Maybe: composes with what precedes it
    qc |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))   # Hangul V and T jamo
    return qc, ccc


def nfc_refused(s, sets):
    """What the C tokenizer's NFC guard refuses."""
    qc, ccc = sets
    return any(ord(c) in qc for c in s) or any(ord(a) in ccc and ord(b) in ccc for a, b in zip(s, s[1:]))


def nfc_header(path):
    """src/model/tokenizer_nfc.h: the code points NFC can change. Text
    without a character whose NFC_Quick_Check is No or Maybe, and without two
    non-starters (canonical combining class != 0) in a row, is its own NFC."""
    import unicodedata as u

    def ranges(cps):
        out = []
        for c in sorted(cps):
            if out and out[-1][1] == c - 1:
                out[-1][1] = c
            else:
                out.append([c, c])
        return out

    def pcre_class(cps):
        items = [f"\\\\x{{{a:x}}}" + (f"-\\\\x{{{b:x}}}" if b > a else "") for a, b in ranges(cps)]
        lines, line = [], ""
        for it in items:
            if len(line) + len(it) > 96:
                lines.append(line)
                line = ""
            line += it
        lines.append(line)
        return "\n".join(f'    "{x}"' for x in lines)

    qc, ccc = nfc_sets()
    with open(path, "w", encoding="ascii") as f:
        f.write(f"""/* Generated by tests/model/make_tokenizer_ref.py nfc from Python's Unicode
 * {u.unidata_version} tables: do not edit. PCRE2 class bodies of the characters
 * whose NFC_Quick_Check is No or Maybe, and of the non-starters (canonical
 * combining class != 0). */
#ifndef SF_MODEL_TOKENIZER_NFC_H
#define SF_MODEL_TOKENIZER_NFC_H

#define TOK_NFC_QC_CLASS \\
{pcre_class(qc).replace(chr(10), " " + chr(92) + chr(10))}

#define TOK_NFC_CCC_CLASS \\
{pcre_class(ccc).replace(chr(10), " " + chr(92) + chr(10))}

#endif
""")


def hf_dir(refdir, outdir):
    """A one-layer random LlamaForCausalLM saved by transformers with the
    tiny Llama-3-style tokenizer.json beside it and no tokenizer_config.json:
    bos / eos then come from config.json (sfm_tokenizer_open)."""
    try:
        import shutil
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        print("skip: torch / transformers are not installed")
        sys.exit(77)
    if os.path.exists(outdir):
        shutil.rmtree(outdir)
    with open(os.path.join(refdir, "llama3.tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    n = max(max(tj["model"]["vocab"].values()), max(a["id"] for a in tj["added_tokens"])) + 1
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=n, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      bos_token_id=tj["model"]["vocab"]["<s>"], eos_token_id=tj["model"]["vocab"]["</s>"])
    LlamaForCausalLM(cfg).save_pretrained(outdir, safe_serialization=True)
    shutil.copy(os.path.join(refdir, "llama3.tokenizer.json"), os.path.join(outdir, "tokenizer.json"))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "fixture":
        fixture(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "json":
        save_json(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "tiny":
        tiny(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "nfc":
        nfc_header(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "hf_dir":
        hf_dir(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "tiny_gguf":
        tiny_gguf(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
