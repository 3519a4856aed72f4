"""What the short training-run comparisons share (bench/train_tiny_attn.py, train_tiny_mamba.py):
the byte-level corpus, the common options, the training loop, and the comparison of two loss
curves with its report and verdict."""
import argparse
import glob
import math
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def corpus():
    """The repository's own C sources as one byte sequence (the LMs' vocabulary is 256 bytes)."""
    text = "".join(open(p, encoding="utf-8", errors="replace").read()
                   for p in sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True)))
    return torch.tensor(list(text.encode("utf-8", errors="replace")), dtype=torch.long)


def arg_parser(L=128, batch=16):
    """Options every run takes; the caller adds its model's."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--L", type=int, default=L)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--tol", type=float, default=0.02, help="relative gap of the final smoothed losses")
    ap.add_argument("--csv", default=None)
    return ap


def train(model, state, a, data):
    """Losses of a.steps AdamW steps of model from state, on batches drawn with a fixed seed
    (the same batches for every model)."""
    model.load_state_dict(state)
    model.to(a.device, getattr(torch, a.dtype))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(a.steps):
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


def compare(ours, peer, peer_name, a, header):
    """Prints the two curves every a.every steps and their largest relative gap (smoothed over
    20 steps); writes a.csv if asked; exits 1 when the final smoothed losses differ by more
    than a.tol or ours has a NaN."""
    so, sp = smooth(ours), smooth(peer)
    print(header)
    print(f"{'step':>6s} {'seqfuse':>9s} {peer_name:>9s}")
    for i in list(range(0, a.steps, a.every)) + [a.steps - 1]:
        print(f"{i:6d} {ours[i]:9.4f} {peer[i]:9.4f}")
    gap = max(abs(x - y) / y for x, y in zip(so, sp))
    final = abs(so[-1] - sp[-1]) / sp[-1]
    print(f"largest relative gap of the smoothed curves {gap:.2e}; final {final:.2e} (tol {a.tol:g})")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write(f"step,seqfuse,{peer_name}\n")
            for i, (x, y) in enumerate(zip(ours, peer)):
                f.write(f"{i},{x},{y}\n")
    if not (final <= a.tol) or any(math.isnan(x) for x in ours):
        print("FAIL: the curves differ")
        sys.exit(1)
    print("PASS")
