#!/usr/bin/env python3
"""Per-kernel SASS hashes of a built library, to show that a change moved code
without changing the machine code of the kernels.

Usage: tools/sass_hashes.py build/libseqfuse.so > hashes.tsv
       tools/sass_hashes.py --diff before.tsv after.tsv

Each line: arch, kernel (mangled name), sha256 of its SASS text (the
instructions with their encodings; the header line naming the function
excluded, whitespace collapsed).  --diff lists kernels whose hash changed, kernels only in one file,
and counts.
"""
import hashlib
import re
import subprocess
import sys


def hashes(lib):
    out = subprocess.run(["cuobjdump", "-sass", lib], check=True, capture_output=True, text=True).stdout
    arch, name, body, res = None, None, [], {}

    def flush():
        if name is not None:
            res[(arch, name)] = hashlib.sha256("\n".join(body).encode()).hexdigest()[:16]

    for line in out.splitlines():
        m = re.match(r"\s*arch = (sm_\w+)", line)
        if m:
            flush()  # the section's last function belongs to the previous arch
            name, body = None, []
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            flush()
            name, body = m.group(1), []
            continue
        if name is not None and line.strip().startswith("/*"):
            # whitespace collapsed: cuobjdump pads columns to the section's widest line
            body.append(" ".join(line.split()))
    flush()
    return res


def load(path):
    res = {}
    with open(path) as f:
        for line in f:
            a, n, h = line.rstrip("\n").split("\t")
            res[(a, n)] = h
    return res


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--diff":
        a, b = load(sys.argv[2]), load(sys.argv[3])
        same = [k for k in a if k in b and a[k] == b[k]]
        changed = [k for k in a if k in b and a[k] != b[k]]
        gone = [k for k in a if k not in b]
        new = [k for k in b if k not in a]
        for tag, ks in (("changed", changed), ("only before", gone), ("only after", new)):
            for k in sorted(ks):
                print(f"{tag}\t{k[0]}\t{k[1]}")
        print(f"identical {len(same)}, changed {len(changed)}, only before {len(gone)}, only after {len(new)}")
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    for (arch, name), h in sorted(hashes(sys.argv[1]).items()):
        print(f"{arch}\t{name}\t{h}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
