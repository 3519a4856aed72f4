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
import torch
import torch.nn.functional as F

import seqfuse
from train_util import arg_parser, compare, corpus, train

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


def main():
    ap = arg_parser(L=128, batch=16)
    ap.add_argument("--dm", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    a = ap.parse_args()
    data = corpus()
    torch.manual_seed(0)
    state = LM(a.layers, a.dm, a.heads, a.kv_heads, a.L, "sdpa").state_dict()
    ours, peer = (train(LM(a.layers, a.dm, a.heads, a.kv_heads, a.L, attn), state, a, data)
                  for attn in ("seqfuse", "sdpa"))
    compare(ours, peer, "sdpa", a, f"{len(data)} bytes of text, {a.steps} steps, {a.device} {a.dtype}")


if __name__ == "__main__":
    main()
