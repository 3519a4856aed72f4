"""A short training run of a tiny Mamba-2 LM with our chunked scan against the same run with a
peer's: a byte-level LM on the repository's own C sources, same initial weights, same batches,
only the SSD scan differs (seqfuse.mamba_chunk_scan_combined: sf_ssd_fwd forward, sf_ssd_bwd
backward under torch autograd).

The peer: mamba_ssm's mamba_chunk_scan_combined (its Triton kernels) when it imports and the
run is on CUDA; otherwise (the CPU, or no mamba_ssm) a chunked SSD written here in plain torch
ops and differentiated by torch autograd, the same algorithm as bench/gpu_ssd_bwd.py's float64
reference run in the model's dtype.  The two loss curves should agree within noise.

    PYTHONPATH=python SEQFUSE_LIB=build/libseqfuse.so python3 bench/train_tiny_mamba.py \\
        [--device cuda --dtype bfloat16] [--steps 200] [--csv out.csv]

CPU default: float32, 2 layers, d_model 64, 4 heads of 32 (expand 2), d_state 16, one group,
chunk 64, conv width 4, sequence 128, batch 8.  Prints the losses every --every steps and the
largest relative gap between the curves (smoothed over 20 steps); exit 1 when the final
smoothed losses differ by more than --tol (relative).
"""
import torch
import torch.nn.functional as F

import seqfuse
from train_util import arg_parser, compare, corpus, train

def torch_scan(x, dt, A, B, C, chunk, D, z, dt_bias):
    """Chunked SSD (one group, dt_softplus) in torch ops: y = SSD(x) + D x, times silu(z)."""
    b, L, H, P = x.shape
    N = B.shape[3]
    dt = F.softplus(dt.float() + dt_bias)
    xf, Bf, Cf = x.float(), B.float().expand(b, L, H, N), C.float().expand(b, L, H, N)
    pad = (-L) % chunk
    if pad:
        xf, dt, Bf, Cf = (F.pad(v, (0, 0) * (v.dim() - 2) + (0, pad)) for v in (xf, dt, Bf, Cf))
    nc = (L + pad) // chunk
    xc = xf.reshape(b, nc, chunk, H, P)
    dtc = dt.reshape(b, nc, chunk, H)
    Bc = Bf.reshape(b, nc, chunk, H, N)
    Cc = Cf.reshape(b, nc, chunk, H, N)
    cs = torch.cumsum(dtc * A, dim=2)                                        # b c l h
    diff = cs.permute(0, 1, 3, 2)[..., :, None] - cs.permute(0, 1, 3, 2)[..., None, :]
    mask = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=x.device))
    seg = torch.exp(diff.masked_fill(~mask, -float("inf")))
    W = torch.einsum("bclhn,bcshn->bchls", Cc, Bc) * seg * dtc.permute(0, 1, 3, 2)[..., None, :]
    y = torch.einsum("bchls,bcshp->bclhp", W, xc)
    last = cs[:, :, -1:, :]
    cst = torch.einsum("bclhn,bclh,bclhp->bchpn", Bc, torch.exp(last - cs) * dtc, xc)
    h = torch.zeros(b, H, P, N, device=x.device)
    ins = []
    for c in range(nc):
        ins.append(h)
        h = torch.exp(last[:, c, 0, :])[:, :, None, None] * h + cst[:, c]
    y = y + torch.einsum("bclhn,bchpn,bclh->bclhp", Cc, torch.stack(ins, 1), torch.exp(cs))
    y = y.reshape(b, nc * chunk, H, P)[:, :L] + D[:, None] * x.float()
    return (y * F.silu(z.float())).to(x.dtype)


def peer_scan(device):
    if device != "cpu":
        try:
            from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined as ms
            return "mamba_ssm", lambda x, dt, A, B, C, ch, D, z, bias: ms(x, dt, A, B, C, ch, D=D, z=z, dt_bias=bias,
                                                                           dt_softplus=True)
        except Exception as e:  # noqa: BLE001 - fall back to the torch scan, and say so
            print(f"mamba_ssm not importable ({type(e).__name__}: {e}); peer: the torch chunked scan")
    return "torch", torch_scan


def ours_scan(x, dt, A, B, C, chunk, D, z, dt_bias):
    return seqfuse.mamba_chunk_scan_combined(x, dt, A, B, C, chunk, D=D, z=z, dt_bias=dt_bias, dt_softplus=True)


class Mixer(torch.nn.Module):
    """Mamba-2 block: RMSNorm, in_proj to (z, x, B, C, dt), causal depthwise conv + SiLU on
    (x, B, C), the SSD scan gated by silu(z), out_proj; residual."""

    def __init__(self, dm, H, P, N, width, chunk, scan):
        super().__init__()
        self.H, self.P, self.N, self.chunk, self.scan = H, P, N, chunk, scan
        di = H * P
        self.norm = torch.nn.RMSNorm(dm)
        self.in_proj = torch.nn.Linear(dm, 2 * di + 2 * N + H, bias=False)
        self.conv = torch.nn.Conv1d(di + 2 * N, di + 2 * N, width, groups=di + 2 * N, padding=width - 1)
        self.A_log = torch.nn.Parameter(torch.log(torch.linspace(1.0, 8.0, H)))
        self.D = torch.nn.Parameter(torch.ones(H))
        self.dt_bias = torch.nn.Parameter(torch.log(torch.expm1(torch.linspace(0.01, 0.1, H))))
        self.out_proj = torch.nn.Linear(di, dm, bias=False)

    def forward(self, u):
        b, L, _ = u.shape
        H, P, N = self.H, self.P, self.N
        z, xbc, dt = self.in_proj(self.norm(u)).split([H * P, H * P + 2 * N, H], dim=-1)
        xbc = F.silu(self.conv(xbc.transpose(1, 2))[..., :L].transpose(1, 2))
        x, B, C = xbc.split([H * P, N, N], dim=-1)
        A = -torch.exp(self.A_log.float())
        y = self.scan(x.reshape(b, L, H, P), dt, A, B.reshape(b, L, 1, N), C.reshape(b, L, 1, N), self.chunk,
                      self.D.float(), z.reshape(b, L, H, P), self.dt_bias.float())
        return u + self.out_proj(y.reshape(b, L, H * P))


class LM(torch.nn.Module):
    def __init__(self, a, scan):
        super().__init__()
        self.emb = torch.nn.Embedding(256, a.dm)
        torch.nn.init.normal_(self.emb.weight, std=0.02)  # tied to the head: small initial logits
        P = 2 * a.dm // a.heads
        self.blocks = torch.nn.ModuleList(Mixer(a.dm, a.heads, P, a.dstate, 4, a.chunk, scan) for _ in range(a.layers))
        self.norm = torch.nn.RMSNorm(a.dm)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x) @ self.emb.weight.t()


def main():
    ap = arg_parser(L=128, batch=8)
    ap.add_argument("--dm", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dstate", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=64, choices=(64, 128, 256))
    a = ap.parse_args()
    if (2 * a.dm) % a.heads:
        raise SystemExit("train_tiny_mamba.py: 2 x --dm must be a multiple of --heads")
    data = corpus()
    peer_name, peer = peer_scan(a.device)
    torch.manual_seed(0)
    state = LM(a, torch_scan).state_dict()
    ours, theirs = (train(LM(a, scan), state, a, data) for scan in (ours_scan, peer))
    compare(ours, theirs, peer_name, a,
            f"{len(data)} bytes of text, {a.steps} steps, {a.device} {a.dtype}, peer: {peer_name}")


if __name__ == "__main__":
    main()
