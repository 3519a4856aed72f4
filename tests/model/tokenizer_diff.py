#!/usr/bin/env python3
"""Differential test: seeded random strings (fragments of many scripts,
contractions, digits, whitespace kinds, special tokens, random code points)
encoded by the C tokenizer (test_tokenizer --stdin) and by HF `tokenizers`
from the same tokenizer.json; every id must agree.

  tokenizer_diff.py TEST_TOKENIZER TOKENIZER_JSON [--count N] [--seed S] [--nfc]

--nfc: the model normalises to NFC, which the C side refuses on text NFC
could change: such refusals are counted, never a wrong id. Code points that
Python's Unicode tables leave unassigned are not drawn (PCRE2's tables may be
older than HF's: letters new in Unicode 16 split differently). Exit 77 when
`tokenizers` or the tokenizer.json is missing."""
import argparse
import os
import random
import subprocess
import sys
import unicodedata

FRAGMENTS = ["the", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "'s", "'S", "'ll", "'LL", "'t", "n't", "123", "4",
             "1234567", "caf\u00e9", "\u4f60\u597d", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4", "\U0001f600",
             "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u2764\ufe0f", "\u0645\u0631\u062d\u0628\u0627",
             "\u041f\u0440\u0438\u0432\u0435\u0442", "\u0395\u03bb\u03bb", "<|im_end|>", "<|im_start|>", "<|im",
             "<|eot|>", "<mask>", "[user]", "...", "{", "}", "x_y", "\u00a0", "\u2003", "\u3000", "\u200d", "A", "Zz",
             "0.5", "\uff11\uff12\uff13", "\u00bd", "\u00b2", "\u2167", "\u0663", "e\u0301", "\u0915\u093f",
             "\u017f", "\u212a", "\u0130", "\u00df", "\ufb01", "\u2028", "\u0085", "\x0b", "\x0c", "\x1f", "$", "+",
             "<=>", "^", "~", "|", "`", "-", "--", "_", "#", "@", "\u00ad", "\U0001d400", "\U00020000", "\ufeff",
             "\u180e", "\u2060", "!", "?", "'", "\"", "\u2019s"]


def random_text(rng):
    parts = []
    for _ in range(rng.randrange(1, 30)):
        if rng.random() < 0.25:
            while True:
                r = rng.random()
                cp = (rng.randrange(0x20, 0x250) if r < 0.4 else
                      rng.randrange(0x250, 0x3000) if r < 0.8 else rng.randrange(0x3000, 0x30000))
                if not 0xD800 <= cp < 0xE000 and unicodedata.category(chr(cp)) != "Cn":
                    break
            parts.append(chr(cp))
        else:
            parts.append(rng.choice(FRAGMENTS))
    return "".join(parts).replace("\x00", "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("tokenizer")
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=20241204)
    ap.add_argument("--nfc", action="store_true")
    a = ap.parse_args()
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("skip: the tokenizers Python package is not installed")
        return 77
    if not os.path.exists(a.tokenizer):
        print(f"skip: {a.tokenizer} not found")
        return 77
    hf = Tokenizer.from_file(a.tokenizer)
    rng = random.Random(a.seed)
    texts = [random_text(rng) for _ in range(a.count)]
    inp = "".join(t.encode("utf-8").hex() + "\n" for t in texts)
    run = subprocess.run([a.binary, "--json", a.tokenizer, "--stdin"], input=inp.encode(),
                         capture_output=True, check=True)
    got = run.stdout.decode().splitlines()
    if len(got) != len(texts):
        print(f"FAIL: {len(got)} answers for {len(texts)} texts")
        return 1
    bad = refused = 0
    for t, g in zip(texts, got):
        if g == "ERR" and a.nfc:
            refused += 1
            continue
        want = " ".join(map(str, hf.encode(t, add_special_tokens=False).ids))
        if g != want:
            bad += 1
            if bad <= 5:
                print(f"MISMATCH {t!r}\n  C:  {g}\n  HF: {want}")
    print(f"{a.tokenizer}: seed {a.seed}, {len(texts)} random texts, {bad} mismatches, {refused} NFC refusals")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
