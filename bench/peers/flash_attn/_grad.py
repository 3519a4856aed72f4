"""Gradients for the stand-in's attention: plain PyTorch in float32.

seqfuse's attention forward has no backward yet, while flash-attention's tests
take gradients of the output before they assert on it.  The stand-in's
autograd functions therefore run OUR forward and, in backward, recompute the
attention in float32 with PyTorch and differentiate that.  The gradients are
PyTorch's, the forward is ours: the suites' counts check the forward.

The maths follows flash-attention's documented semantics:
  s = (q k^T) * scale              scale = softmax_scale or 1/sqrt(d)
  s = softcap * tanh(s / softcap)  when softcap > 0
  s = s - slope * |i + Lk - Lq - j|    with alibi_slopes ((H,) or (b, H))
  key j visible to query i iff  i + Lk - Lq - wl <= j <= i + Lk - Lq + wr
      (causal: wr = 0; a negative bound is unbounded)
  rows that see no key give 0.
K/V heads are shared by H / Hkv consecutive query heads (GQA / MQA).
"""
import math

import torch


def _int(v):
    return int(v.item()) if isinstance(v, torch.Tensor) else int(v)


def window(causal, window_size):
    wl, wr = (_int(w) for w in window_size)
    if causal:
        wr = 0
    return wl, wr


def dense_f32(q, k, v, scale, causal, window_size, softcap, alibi_slopes):
    """softmax attention of q (b, Lq, H, d), k / v (b, Lk, Hkv, d) in float32;
    returns (b, Lq, H, d) float32.  Differentiable (autograd) in q, k, v."""
    b, Lq, H, d = q.shape
    Lk, Hkv = k.shape[1], k.shape[2]
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=2)
        v = v.repeat_interleave(H // Hkv, dim=2)
    # q scaled before the product, as the tests' attention_ref does (the same roundings)
    qs = q / math.sqrt(d) if scale is None else q * scale
    s = torch.einsum("bthd,bshd->bhts", qs, k)
    if softcap and softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    i = torch.arange(Lq, device=q.device).view(Lq, 1) + (Lk - Lq)  # query row's diagonal key
    j = torch.arange(Lk, device=q.device).view(1, Lk)
    if alibi_slopes is not None:
        sl = alibi_slopes.float().reshape(-1 if alibi_slopes.dim() == 2 else 1, H, 1, 1)
        s = s - sl * (i - j).abs().float()
    wl, wr = window(causal, window_size)
    hidden = torch.zeros(Lq, Lk, dtype=torch.bool, device=q.device)
    if wr >= 0:
        hidden |= j > i + wr
    if wl >= 0:
        hidden |= j < i - wl
    empty = hidden.all(dim=-1, keepdim=True)  # rows with no visible key: output 0
    # Empty rows get finite scores before the softmax (no NaN in the backward), then 0.
    s = s.masked_fill(hidden & ~empty, float("-inf")).masked_fill(empty, 0.0)
    p = torch.softmax(s, dim=-1).masked_fill(empty, 0.0)
    return torch.einsum("bhts,bshd->bthd", p, v)


def varlen_f32(q, k, v, cu_q, cu_k, scale, causal, window_size, softcap, alibi_slopes):
    """The same over packed sequences: q (total_q, H, d), k / v (total_k, Hkv, d),
    sequence i = rows cu_q[i]:cu_q[i+1] of q and cu_k[i]:cu_k[i+1] of k / v."""
    cq = [int(x) for x in cu_q.tolist()]
    ck = [int(x) for x in cu_k.tolist()]
    outs = []
    for i in range(len(cq) - 1):
        sl = None
        if alibi_slopes is not None:
            sl = alibi_slopes[i] if alibi_slopes.dim() == 2 else alibi_slopes
        outs.append(dense_f32(q[cq[i]:cq[i + 1]].unsqueeze(0), k[ck[i]:ck[i + 1]].unsqueeze(0),
                              v[ck[i]:ck[i + 1]].unsqueeze(0), scale, causal, window_size,
                              softcap, sl)[0])
    return torch.cat(outs, dim=0) if outs else q.new_zeros(q.shape, dtype=torch.float32)


def grads(fn, dout, tensors, *args):
    """d(fn(tensors..., *args)) / d(tensors) for the output gradient dout, computed in
    float32 and returned in each tensor's dtype."""
    with torch.enable_grad():
        xs = [t.detach().float().requires_grad_() for t in tensors]
        out = fn(*xs, *args)
        gs = torch.autograd.grad(out, xs, dout.float())
    return [g.to(t.dtype) for g, t in zip(gs, tensors)]
