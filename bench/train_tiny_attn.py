"""A short training run with our attention against the same run with torch SDPA: a tiny
character-level transformer LM on the repository's own C sources, same initial weights, same
batches, only the attention differs (seqfuse.flash_attn_func forward + sf_attn_bwd backward,
or F.scaled_dot_product_attention).  The two loss curves should agree within noise.

    PYTHONPATH=python SEQFUSE_LIB=build/libseqfuse.so python3 bench/train_tiny_attn.py \
        [--device cuda --dtype bfloat16] [--steps 300] [--csv out.csv]

CPU default: float32, 2 layers, d_model 128, 4 heads of 32, GQA 2 query heads a KV head,
sequence 128, batch 16.  Prints the losses every --every steps and the largest relative gap
between the curves (smoothed over 20 steps); exit 1 when the final smoothed losses differ by
more than --tol (relative).
"""
import argparse
import glob
import math
import os
import sys

import torch
import torch.nn.functional as F

import seqfuse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def corpus():
    text = "".join(open(p, encoding="utf-8", errors="replace").read()
                   for p in sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True)))
    data = torch.tensor(list(text.encode("utf-8", errors="replace")), dtype=torch.long)
    return data


class Block(torch.nn.Module):
    def __init__(self, dm, H, Hkv, attn):
        super().__init__()
        self.H, self.Hkv, self.d, self.attn = H, Hkv, dm // H, attn
        self.n1 = torch.nn.LayerNorm(dm)
        self.qkv = torch.nn.Linear(dm, (H + 2 * Hkv) * self.d, bias=False)
        self.o = torch.nn.Linear(dm, dm, bias=False)
        self.n2 = torch.nn.LayerNorm(dm)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dm, 4 * dm), torch.nn.GELU(), torch.nn.Linear(4 * dm, dm))

    def forward(self, x):
        B, L, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.H * self.d, self.Hkv * self.d, self.Hkv * self.d], dim=-1)
        q = q.view(B, L, self.H, self.d)
        k = k.view(B, L, self.Hkv, self.d)
        v = v.view(B, L, self.Hkv, self.d)
        if self.attn == "seqfuse":
            a = seqfuse.flash_attn_func(q, k, v, causal=True)
        else:
            rep = self.H // self.Hkv
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(rep, 2).transpose(1, 2),
                                               v.repeat_interleave(rep, 2).transpose(1, 2),
                                               is_causal=True).transpose(1, 2)
        x = x + self.o(a.reshape(B, L, -1))
        return x + self.mlp(self.n2(x))


class LM(torch.nn.Module):
    def __init__(self, layers, dm, H, Hkv, L, attn):
        super().__init__()
        self.emb = torch.nn.Embedding(256, dm)
        self.pos = torch.nn.Parameter(torch.randn(L, dm) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(dm, H, Hkv, attn) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dm)
        self.head = torch.nn.Linear(dm, 256, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def run(attn, a, data, state):
    torch.manual_seed(0)
    model = LM(a.layers, a.dm, a.heads, a.kv_heads, a.L, attn)
    model.load_state_dict(state)
    model.to(a.device, getattr(torch, a.dtype))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    losses = []
    for step in range(a.steps):
        ix = torch.randint(0, len(data) - a.L - 1, (a.batch,), generator=g)
        x = torch.stack([data[i:i + a.L] for i in ix]).to(a.device)
        y = torch.stack([data[i + 1:i + a.L + 1] for i in ix]).to(a.device)
        loss = F.cross_entropy(model(x).float().view(-1, 256), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def smooth(xs, w=20):
    return [sum(xs[max(0, i - w + 1):i + 1]) / len(xs[max(0, i - w + 1):i + 1]) for i in range(len(xs))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dm", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--L", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--tol", type=float, default=0.02, help="relative gap of the final smoothed losses")
    ap.add_argument("--csv", default=None)
    a = ap.parse_args()
    data = corpus()
    torch.manual_seed(0)
    state = LM(a.layers, a.dm, a.heads, a.kv_heads, a.L, "sdpa").state_dict()
    ours = run("seqfuse", a, data, state)
    peer = run("sdpa", a, data, state)
    so, sp = smooth(ours), smooth(peer)
    print(f"{len(data)} bytes of text, {a.steps} steps, {a.device} {a.dtype}")
    print(f"{'step':>6s} {'seqfuse':>9s} {'sdpa':>9s}")
    for i in list(range(0, a.steps, a.every)) + [a.steps - 1]:
        print(f"{i:6d} {ours[i]:9.4f} {peer[i]:9.4f}")
    gap = max(abs(x - y) / y for x, y in zip(so, sp))
    final = abs(so[-1] - sp[-1]) / sp[-1]
    print(f"largest relative gap of the smoothed curves {gap:.2e}; final {final:.2e} (tol {a.tol:g})")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("step,seqfuse,sdpa\n")
            for i, (x, y) in enumerate(zip(ours, peer)):
                f.write(f"{i},{x},{y}\n")
    if not (final <= a.tol) or any(math.isnan(x) for x in ours):
        print("FAIL: the curves differ")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
