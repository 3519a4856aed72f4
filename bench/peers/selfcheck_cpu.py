"""The stand-ins checked on the CPU, without a GPU: seqfuse's float32 CPU backends through the
stand-in packages against the peers' own references (flash-attention's attention_ref,
generate_qkv and padding masks from its test module; mamba_ssm's selective_state_update_ref
and rms_norm_ref), outputs and gradients (attention: seqfuse's backward against autograd through
attention_ref), plus the refusals.

    SEQFUSE_LIB=build/libseqfuse.so PYTHONPATH=bench/peers:python:.peers/site \\
        python3 bench/peers/selfcheck_cpu.py

Needs torch and .peers/ (bench/peers/prepare.sh).  Exits 1 on any mismatch.
"""
import importlib.util
import math
import os
import sys

import torch
from einops import repeat

import seqfuse
from flash_attn import flash_attn_func, flash_attn_kvpacked_func, flash_attn_varlen_func
from mamba_ssm.ops.triton.layernorm_gated import layernorm_fn, rms_norm_ref
from mamba_ssm.ops.triton.selective_state_update import (selective_state_update,
                                                          selective_state_update_ref)
from peer_refs import peer_file

TOL = 1e-4
bad = []


def peer_test_module():
    """flash-attention's test module, imported from .peers/ (it asks the GPU's compute
    capability at import: answered 9.0 when there is no GPU)."""
    if not torch.cuda.is_available():
        torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    path = peer_file("flash-attention/tests/test_flash_attn.py")
    spec = importlib.util.spec_from_file_location("peer_test_flash_attn", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def report(name, out, ref, grads=None, grads_ref=None):
    e = (out - ref).abs().max().item()
    eg = max(((a - b).abs().max().item() for a, b in zip(grads, grads_ref)), default=0.0) \
        if grads is not None else 0.0
    ok = e < TOL and eg < TOL
    print(f"{'ok ' if ok else 'BAD'} {name:44s} out {e:.1e}  grad {eg:.1e}")
    if not ok:
        bad.append(name)


def ad(out, ins, g):
    return torch.autograd.grad(out, ins, g)


def attention(T):
    cases = [(113, 203, 6, 2, 59, False, (-1, -1)), (128, 97, 4, 1, 40, True, (-1, -1)),
             (64, 200, 6, 6, 32, True, (17, 3)), (3, 799, 4, 4, 64, False, (5, 9)),
             (256, 5, 2, 2, 16, True, (-1, -1)), (20, 64, 2, 2, 16, False, torch.tensor([3, 1]))]
    for sq, sk, H, Hk, d, causal, win in cases:
        tag = f"{sq}x{sk} H {H}/{Hk} d {d}{' causal' if causal else ''} w {tuple(map(int, win))}"
        q = torch.randn(2, sq, H, d, requires_grad=True)
        k, v = (torch.randn(2, sk, Hk, d, requires_grad=True) for _ in range(2))
        out, lse, probs = flash_attn_func(q, k, v, 0.0, causal=causal, window_size=win,
                                          return_attn_probs=True)
        assert probs is None and tuple(lse.shape) == (2, H, sq)
        ref, _ = T.attention_ref(q, k, v, causal=causal, window_size=win)
        g = torch.randn_like(out)
        report("dense " + tag, out, ref, ad(out, (q, k, v), g), ad(ref, (q, k, v), g))

        kv = torch.randn(2, sk, 2, Hk, d, requires_grad=True)
        out = flash_attn_kvpacked_func(q, kv, causal=causal, window_size=win)
        ref, _ = T.attention_kvpacked_ref(q, kv, causal=causal, window_size=win)
        report("kvpacked " + tag, out, ref, ad(out, (q, kv), g), ad(ref, (q, kv), g))

        # packed sequences through the test's generate_qkv and the stand-in's bert_padding
        qm = T.generate_random_padding_mask(sq, 2, "cpu", mode="random")
        km = T.generate_random_padding_mask(sk, 2, "cpu", mode="random")
        qu, ku, vu, cq, ck, mq, mk, qq, kk, vv, opad, dqpad, dkpad = T.generate_qkv(q, k, v,
                                                                                  qm, km)
        out = opad(flash_attn_varlen_func(qu, ku, vu, cq, ck, mq, mk, 0.0, causal=causal,
                                          window_size=win))
        ref, _ = T.attention_ref(qq, kk, vv, qm, km, causal=causal, window_size=win)
        dq, dk, dv = ad(out, (qu, ku, vu), g)
        report("varlen " + tag, out, ref, (dqpad(dq), dkpad(dk), dkpad(dv)),
               ad(ref, (qq, kk, vv), g))

    # ALiBi and softcap together, through the stand-in (our forward and backward)
    for causal in (False, True):
        q = (torch.randn(2, 50, 4, 32) * 10).requires_grad_()
        k, v = (torch.randn(2, 70, 2, 32, requires_grad=True) for _ in range(2))
        sl = torch.rand(2, 4) * 0.3
        bias = T.attn_bias_from_alibi_slopes(sl, 50, 70, causal=causal)
        mine = flash_attn_func(q, k, v, causal=causal, window_size=(9, 4), softcap=50.0, alibi_slopes=sl)
        ref, _ = T.attention_ref(q, k, v, attn_bias=bias, causal=causal, window_size=(9, 4),
                                 softcap=50.0)
        g = torch.randn_like(mine)
        report(f"dense ALiBi + softcap{' causal' if causal else ''}", mine, ref,
               ad(mine, (q, k, v), g), ad(ref, (q, k, v), g))


def kvcache(T):
    """flash_attn_with_kvcache through the stand-in against the test module's attention_ref
    over the cache the call should leave (new k rotated at cache_seqlens + j, v as given),
    with its key padding mask, leftpad and ALiBi bias: contiguous caches of any length
    (with cache_batch_idx, cache_leftpad), paged ones, rotary (NeoX, GPT-J, partial), causal,
    a window, head dims not a multiple of 8."""
    from flash_attn import flash_attn_with_kvcache
    from flash_attn.layers.rotary import apply_rotary_emb
    # sq, sk, d, Hk (of 6 heads), new tokens (0: none), page size (0: contiguous), batch idx,
    # leftpad, rotary fraction, interleaved, causal, window, alibi
    cases = [(1, 339, 59, 3, 1, 0, False, False, 0.0, False, True, None, False),
             (3, 1024, 64, 1, 3, 0, True, False, 0.5, True, True, None, False),
             (3, 799, 32, 6, 2, 0, False, True, 1.0, False, True, None, False),
             (64, 800, 80, 3, 64, 0, False, True, 0.5, False, True, None, True),
             (1, 128, 59, 6, 0, 0, True, True, 0.0, False, False, (20, 5), False),
             (16, 200, 48, 3, 16, 64, False, False, 0.5, True, True, None, True),
             (3, 799, 59, 1, 3, 256, False, False, 0.0, False, False, (30, 2), False)]
    b = 2
    for sq, sk, d, Hk, new, ps, has_idx, has_lp, rf, inter, causal, win, alibi in cases:
        tag = (f"kvcache {sq}x{sk} d {d} Hk {Hk} new {new} {'paged ' + str(ps) if ps else 'contiguous'}"
               f"{' idx' if has_idx else ''}{' leftpad' if has_lp else ''}{' rot %.1f' % rf if rf else ''}"
               f"{' causal' if causal else ''}{' window' if win else ''}{' alibi' if alibi else ''} (grad: caches)")
        bc = 2 * b if has_idx else b
        rd = int(rf * d) // 16 * 16
        q = torch.randn(b, sq, 6, d)
        k, v = (torch.randn(b, new, Hk, d), torch.randn(b, new, Hk, d)) if new else (None, None)
        kc, vc = torch.randn(bc, sk, Hk, d), torch.randn(bc, sk, Hk, d)
        idx = torch.randperm(bc, dtype=torch.int32)[:b] if has_idx else None
        cs = torch.randint(0 if new else 1, sk - (sq if (causal or win) and rd else new) + 1, (b,),
                           dtype=torch.int32)
        lp = torch.stack([torch.randint(0, int(c), (1,))[0] if c > 0 else torch.tensor(0)
                          for c in cs]).to(torch.int32) if has_lp else None
        ar = torch.arange(sk)[None, :]
        mask = ar < cs[:, None] + new
        if has_lp:
            mask &= ar >= lp[:, None]
        cos = sin = None
        q_ro, k_ro = q, k
        if rd:
            ang = torch.rand(sk, rd // 2) * 2 * math.pi
            cos, sin = torch.cos(ang), torch.sin(ang)
            if causal or win:
                q_ro = apply_rotary_emb(q, cos, sin, seqlen_offsets=cs, interleaved=inter)
            else:  # every query token at cache_seqlens
                q_ro = apply_rotary_emb(q.reshape(b, 1, sq * 6, d), cos, sin, seqlen_offsets=cs,
                                        interleaved=inter).reshape(b, sq, 6, d)
            k_ro = apply_rotary_emb(k, cos, sin, seqlen_offsets=cs, interleaved=inter)
        want_k = (kc[idx.long()] if has_idx else kc).clone()
        want_v = (vc[idx.long()] if has_idx else vc).clone()
        if new:
            upd = (cs[:, None] <= ar) & (ar < cs[:, None] + new)
            want_k[upd] = k_ro.reshape(-1, Hk, d)
            want_v[upd] = v.reshape(-1, Hk, d)
        slopes = torch.rand(b, 6) * 0.3 if alibi else None
        bias = T.attn_bias_from_alibi_slopes(slopes, sq, sk, None, mask, causal=causal, key_leftpad=lp) \
            if alibi else None
        if ps:  # the contiguous cache in shuffled pages of ps tokens
            npg = -(-sk // ps)
            table = torch.randperm(3 * b * npg, dtype=torch.int32)[:b * npg].reshape(b, npg)
            kp, vp = torch.randn(3 * b * npg, ps, Hk, d), torch.randn(3 * b * npg, ps, Hk, d)
            pad = npg * ps - sk
            kp[table.flatten().long()] = torch.cat([kc, torch.zeros(b, pad, Hk, d)], 1).reshape(-1, ps, Hk, d)
            vp[table.flatten().long()] = torch.cat([vc, torch.zeros(b, pad, Hk, d)], 1).reshape(-1, ps, Hk, d)
            out = flash_attn_with_kvcache(q, kp, vp, k, v, cos, sin, cache_seqlens=cs, block_table=table,
                                          causal=causal, window_size=win or (-1, -1),
                                          rotary_interleaved=inter, alibi_slopes=slopes)
            got_k = kp[table.flatten().long()].reshape(b, npg * ps, Hk, d)[:, :sk]
            got_v = vp[table.flatten().long()].reshape(b, npg * ps, Hk, d)[:, :sk]
        else:
            out = flash_attn_with_kvcache(q, kc, vc, k, v, cos, sin, cache_seqlens=cs, cache_batch_idx=idx,
                                          cache_leftpad=lp, causal=causal, window_size=win or (-1, -1),
                                          rotary_interleaved=inter, alibi_slopes=slopes)
            got_k = kc[idx.long()] if has_idx else kc
            got_v = vc[idx.long()] if has_idx else vc
        g = 6 // Hk
        ref, _ = T.attention_ref(q_ro, repeat(want_k, "b s h d -> b s (h g) d", g=g),
                                 repeat(want_v, "b s h d -> b s (h g) d", g=g), None, mask, bias, 0.0, None,
                                 causal=causal, window_size=win or (-1, -1), key_leftpad=lp)
        report(tag, out, ref, [got_k, got_v], [want_k, want_v])


def mamba():
    b, H, P, N, G = 3, 8, 64, 16, 2
    for has_z in (False, True):
        state, x = torch.randn(b, H, P, N), torch.randn(b, H, P)
        dt = repeat(torch.randn(b, H), "b h -> b h p", p=P)
        dt_bias = repeat(torch.rand(H) - 4.0, "h -> h p", p=P)
        A = repeat(-torch.rand(H) - 1.0, "h -> h p n", p=P, n=N)
        D = repeat(torch.randn(H), "h -> h p", p=P)
        B, C = torch.randn(b, G, N), torch.randn(b, G, N)
        z = torch.randn_like(x) if has_z else None
        sref = state.clone()
        out = selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                     dt_softplus=True)
        ref = selective_state_update_ref(sref, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                         dt_softplus=True)
        report(f"selective_state_update, tied{' z' if has_z else ''} (grad: state)", out, ref,
               [state], [sref])
    for nbg in (True, False):
        for gs in (None, 64):
            x, z = (torch.randn(4, 32, 256, requires_grad=True) for _ in range(2))
            w = torch.randn(256, requires_grad=True)
            out = layernorm_fn(x, w, None, z=z, eps=1e-5, group_size=gs, norm_before_gate=nbg,
                               is_rms_norm=True)
            ref = rms_norm_ref(x, w, None, z=z, eps=1e-5, group_size=gs, norm_before_gate=nbg)
            g = torch.randn_like(out)
            report(f"rmsnorm norm_before_gate={nbg} group {gs}", out, ref,
                   ad(out, (x, z, w), g), ad(ref, (x, z, w), g))


def refusals():
    q = torch.randn(2, 8, 4, 16)
    calls = {
        "dropout": lambda: flash_attn_func(q, q, q, 0.17),
        "untied A": lambda: selective_state_update(
            torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8), torch.randn(2, 4, 8),
            -torch.rand(4, 8, 16), torch.randn(2, 1, 16), torch.randn(2, 1, 16)),
        "Mamba-1 (rank 2)": lambda: selective_state_update(
            torch.randn(2, 64, 16), torch.randn(2, 64), torch.randn(2, 64), -torch.rand(64, 16),
            torch.randn(2, 16), torch.randn(2, 16)),
        "layer norm": lambda: layernorm_fn(torch.randn(2, 64), torch.randn(64), None),
        "norm bias": lambda: layernorm_fn(torch.randn(2, 64), torch.randn(64), torch.randn(64),
                                          is_rms_norm=True),
    }
    for name, fn in calls.items():
        try:
            fn()
            got = "accepted"
        except seqfuse.SeqfuseError as e:
            got = e.status_name
        ok = got == "SF_ERR_UNSUPPORTED"
        print(f"{'ok ' if ok else 'BAD'} refused: {name:35s} {got}")
        if not ok:
            bad.append(name)


def rotary():
    """flash_attn.layers.rotary.apply_rotary_emb as the KV-cache tests call it (per-sequence
    offsets, NeoX and GPT-J, partial rotary dim) against the rotation written out in torch."""
    from flash_attn.layers.rotary import apply_rotary_emb
    b, s, H, d, rd = 2, 9, 3, 16, 12
    x = torch.randn(b, s, H, d)
    ang = torch.rand(40, rd // 2) * 6.0
    cos, sin = torch.cos(ang), torch.sin(ang)
    offs = torch.tensor([3, 17])
    for inter in (False, True):
        pos = torch.arange(s)[None, :] + offs[:, None]                      # b s
        c, sn = cos[pos][:, :, None, :], sin[pos][:, :, None, :]
        r = x[..., :rd]
        x1, x2 = (r[..., 0::2], r[..., 1::2]) if inter else (r[..., :rd // 2], r[..., rd // 2:])
        y1, y2 = x1 * c - x2 * sn, x1 * sn + x2 * c
        rot = torch.stack((y1, y2), dim=-1).flatten(-2) if inter else torch.cat((y1, y2), dim=-1)
        ref = torch.cat((rot, x[..., rd:]), dim=-1)
        out = apply_rotary_emb(x, cos, sin, seqlen_offsets=offs, interleaved=inter)
        report(f"apply_rotary_emb {'GPT-J' if inter else 'NeoX'} offsets", out, ref)


if __name__ == "__main__":
    torch.manual_seed(0)
    print(f"seqfuse {seqfuse.version()} ({seqfuse.library_path}), torch {torch.__version__}, "
          f"peers' files in {os.path.dirname(peer_file('SOURCES.txt'))}")
    T = peer_test_module()
    attention(T)
    kvcache(T)
    mamba()
    rotary()
    refusals()
    print("all ok" if not bad else f"{len(bad)} mismatches: {bad}")
    sys.exit(1 if bad else 0)
