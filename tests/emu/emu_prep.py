#!/usr/bin/env python3
"""emu_prep.py - prepares CUDA sources for the host emulator (emu_rt.h):
    emu_prep.py OUT DIR [LAUNCHER.cu NEW_NAME OLD_NAME [NEW_NAME OLD_NAME ...]]
copies src/cuda/DIR/*.h, *.cuh to OUT/DIR/ with
  - extern __shared__ arrays pointed at the emulator's buffer (emu_smem) and
    static __shared__ arrays made static host arrays;
  - inline asm statements replaced: the ones with a host meaning (rcp, ex2,
    tanh approximations, 16-byte global loads with cache hints, lop3, f16x2 /
    bf16x2 fma, gpu-scope fences, a release atomic add) by it, includes of cuda_bf16.h / cuda_fp16.h /
    cuda_fp8.h, cooperative_groups.h dropped (emu_rt.h has what they provide), any other by a call that aborts naming the
    file and line (so a kernel still compiles; it fails only if it runs it);
  - kern<<<grid, block, smem, stream>>>(args); launches turned into
    emu_launch(kern, grid, block, smem, args);
and, given a launcher, writes OUT/launcher_emu.cpp: the same rewrites, and each extern "C" OLD_NAME
renamed NEW_NAME (with its uses there)."""
import glob, os, re, sys


def top_split(t):  # split at the commas outside parentheses
    out, depth, cur = [], 0, ""
    for ch in t:
        depth += ch in "(<"
        depth -= ch in ")>"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


HOST_ASM = {  # PTX opcode -> host function of its one input, giving the output
    "rcp.approx.ftz.f32": "sf_rcp_approx",
    "ex2.approx.ftz.f32": "sf_ex2",
    "ex2.approx.f32": "sf_ex2",
    "tanh.approx.f32": "sf_tanh_approx",
}
HOST_FN = {  # PTX opcode -> host function of its inputs and immediates, giving the output
    "lop3.b32": "emu_lop3",
    "fma.rn.f16x2": "emu_fma2_h",
    "fma.rn.bf16x2": "emu_fma2_b",
}
HOST_CALL = {  # PTX opcode -> host function of all its inputs (no outputs)
    "stmatrix.sync.aligned.m8n8.x4.shared.b16": "emu_stmatrix_x4<false>",
    "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16": "emu_stmatrix_x4<true>",
    "red.global.add.v2.f32": "emu_red_add_v2",
    "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes": "sf_wg::emu_tma_load4",
}


def asm_stmt_end(s, i):
    """index after the ';' of the asm statement whose '(' is at i"""
    depth, j, instr = 0, i, False
    while j < len(s):
        c = s[j]
        if instr:
            if c == "\\":
                j += 1
            elif c == '"':
                instr = False
        elif c == '"':
            instr = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                k = s.index(";", j)
                return j, k + 1
        j += 1
    raise ValueError("unbalanced asm")


def colon_split(body):
    """an asm statement's body split at the colons outside string literals"""
    out, cur, instr, esc = [], "", False, False
    for ch in body:
        if instr:
            instr = not (ch == '"' and not esc)
            esc = ch == "\\" and not esc
        elif ch == '"':
            instr = True
        elif ch == ":":
            out.append(cur)
            cur = ""
            continue
        cur += ch
    return out + [cur]


def rewrite_asm(s, fname):
    out, pos = [], 0
    for m in re.finditer(r"\basm\s*(?:volatile\s*)?\(", s):
        if m.start() < pos:
            continue
        close, end = asm_stmt_end(s, m.end() - 1)
        body = s[m.end():close]
        line = s.count("\n", 0, m.start()) + 1
        parts = colon_split(body)
        strs = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', parts[0]))
        op = strs.split()[0] if strs.split() else ""
        repl = None
        if op in HOST_ASM and len(parts) >= 3:
            o = re.search(r'"=\w"\s*\((\w+)\)', parts[1])
            i = re.search(r'"\w"\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)', parts[2])
            if o and i:
                repl = "%s = %s(%s);" % (o.group(1), HOST_ASM[op], i.group(1))
        if op in HOST_CALL and len(parts) >= 3 and not parts[1].strip():
            args = [re.sub(r'^"\w+"\s*\((.*)\)$', r"\1", a.strip(), flags=re.S) for a in top_split(parts[2])]
            repl = "%s(%s);" % (HOST_CALL[op], ", ".join(args))
        if re.fullmatch(r"ld\.global(\.nc)?(\.L1::no_allocate)?(\.L2::256B)?\.v4\.u32", op) and len(parts) >= 3:
            # a 16-byte global load (cache hints have no host meaning)
            o = re.findall(r'"=r"\s*\(([^()]+)\)', parts[1])
            i = re.search(r'"l"\s*\((.*)\)\s*$', parts[2].strip(), flags=re.S)
            if len(o) == 4 and i:
                repl = "{ const uint32_t *emu_p_ = (const uint32_t *)(%s); %s }" % (
                    i.group(1), " ".join("%s = emu_p_[%d];" % (v, j) for j, v in enumerate(o)))
        if op.startswith("setmaxnreg."):  # a register budget: nothing on the host
            repl = ";"
        if op.rstrip(";") in ("fence.acq_rel.gpu", "fence.sc.gpu"):  # CTAs run one after another here
            repl = "__threadfence();"
        if op == "atom.add.release.gpu.global.u32" and len(parts) >= 3:
            # old = atomicAdd(p, immediate)
            o = re.findall(r'"=r"\s*\(([^()]+)\)', parts[1])
            i = re.search(r'"l"\s*\((.*)\)\s*$', parts[2].strip(), flags=re.S)
            imm = re.search(r"\],\s*(\d+)\s*;", strs)
            if len(o) == 1 and i and imm:
                repl = "%s = atomicAdd((unsigned *)(%s), %su);" % (o[0], i.group(1), imm.group(1))
        if op == "ld.shared.v4.b32" and len(parts) >= 3:
            o = re.findall(r'"=r"\s*\(([^()]+)\)', parts[1])
            i = re.search(r'"r"\s*\((.*)\)\s*$', parts[2].strip(), flags=re.S)
            if len(o) == 4 and i:
                repl = "{ const uint32_t *emu_p_ = (const uint32_t *)emu_sptr(%s); %s }" % (
                    i.group(1), " ".join("%s = emu_p_[%d];" % (v, j) for j, v in enumerate(o)))
        if op in HOST_FN and len(parts) >= 3:
            # one output, inputs in order, immediates of the string after them
            o = re.findall(r'"=\w"\s*\(([^()]+)\)', parts[1])
            ins = [re.sub(r'^"\w+"\s*\((.*)\)$', r"\1", a.strip(), flags=re.S) for a in top_split(parts[2])]
            imms = re.findall(r"\b(0x[0-9a-fA-F]+)\s*;", strs)
            if len(o) == 1:
                repl = "%s = %s(%s);" % (o[0], HOST_FN[op], ", ".join(ins + imms))
        if repl is None:
            repl = 'emu_asm_unsupported("%s:%d: %s");' % (fname, line, op)
        out.append(s[pos:m.start()] + repl + "\n" * s.count("\n", m.start(), end))
        pos = end
    return "".join(out) + s[pos:]


def drop_includes(s):  # the emulator's emu_rt.h stands in for these
    return re.sub(r'^#include <(cuda_bf16|cuda_fp16|cuda_fp8|cooperative_groups)\.h>\n', "", s, flags=re.M)


def rewrite_smem(s):
    s = re.sub(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:<>]+(?:\s+[\w:<>]+)*?)\s+(\w+)\[\];",
               r"\1 *\2 = reinterpret_cast<\1 *>(emu_smem);", s)
    return re.sub(r"(?<!extern )\b__shared__\s+", "static ", s)


def rewrite_launches(s):
    return re.sub(r"([\w:]+(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\(([^;]*?)\);",
                  lambda m: "emu_launch(%s, %s, %s);" % (m.group(1), ", ".join(top_split(m.group(2))[:3]), m.group(3)),
                  s, flags=re.S)


def main():
    out, d = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.join(out, d), exist_ok=True)
    for f in sorted(glob.glob("src/cuda/%s/*.h" % d) + glob.glob("src/cuda/%s/*.cuh" % d)):
        s = rewrite_asm(rewrite_launches(rewrite_smem(drop_includes(open(f).read()))), f)
        open(os.path.join(out, d, os.path.basename(f)), "w").write(s)
    if len(sys.argv) > 3:
        f, names = sys.argv[3], sys.argv[4:]
        if not names or len(names) % 2:
            sys.exit("emu_prep: give NEW_NAME OLD_NAME pairs after the launcher")
        s = rewrite_asm(rewrite_launches(rewrite_smem(open(f).read())), f)
        for new, old in zip(names[::2], names[1::2]):
            if not re.search(r'extern "C" [\w\s\*]+\b%s\(' % old, s):
                sys.exit("emu_prep: %s has no extern \"C\" %s" % (f, old))
            s = re.sub(r"\b%s\b" % old, new, s)  # the definition and its uses
        open(os.path.join(out, "launcher_emu.cpp"), "w").write(s)


main()
