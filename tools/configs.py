#!/usr/bin/env python3
"""The kernel configuration tables (src/cuda/<op>/configs.h), read as data.

    tools/configs.py list            one `op:name` line per configuration row
    tools/configs.py readme          rewrite README.md's configuration list
    tools/configs.py readme --check  fail (exit 1) when README.md's list is stale

A table row is one line: `{"name", <fields>, "about"},` (see the tables).
tests/CMakeLists.txt reads the same rows with the same pattern to make one
pinned-configuration test per row.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = (("ssd_fwd", "src/cuda/ssd/configs.h"), ("attn_fwd", "src/cuda/attn/configs.h"),
          ("gemm_wq", "src/cuda/gemm_wq/configs.h"), ("gemm_swiglu", "src/cuda/gemm_swiglu/configs.h"),
          ("attn_bwd", "src/cuda/attn/bwd_configs.h"), ("dec_gemv", "src/cuda/layer/dec_gemv_configs.h"))
ROW = re.compile(r'^\s*\{"([a-z0-9]+)",.*"((?:[^"\\]|\\.)*)"\},\s*$')
BEGIN, END = "<!-- BEGIN configs (tools/configs.py readme) -->", "<!-- END configs -->"


def rows(path):
    with open(os.path.join(ROOT, path)) as f:
        return [(m.group(1), m.group(2)) for m in map(ROW.match, f) if m]


def readme_block():
    lines = [BEGIN, "```"]
    for op, path in TABLES:
        how = ("wq_pick chooses by the rows of x and the codes' layout" if op == "gemm_wq"
               else "the first row that serves a shape is the untuned default")
        lines.append(f"{op} ({path}; {how}):")
        for name, about in rows(path):
            lines.append(f"  {name:<12} {about}")
    lines += ["```", END]
    return "\n".join(lines)


def main(argv):
    if argv[:1] == ["list"]:
        for op, path in TABLES:
            for name, _ in rows(path):
                print(f"{op}:{name}")
        return 0
    if argv[:1] == ["readme"]:
        p = os.path.join(ROOT, "README.md")
        text = open(p).read()
        i, j = text.find(BEGIN), text.find(END)
        if i < 0 or j < i:
            print("README.md has no configuration block markers", file=sys.stderr)
            return 1
        new = text[:i] + readme_block() + text[j + len(END):]
        if "--check" in argv:
            if new != text:
                print("README.md's configuration list differs from the tables: run tools/configs.py readme",
                      file=sys.stderr)
                return 1
            return 0
        if new != text:
            open(p, "w").write(new)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
