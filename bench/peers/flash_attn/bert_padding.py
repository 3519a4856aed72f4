"""flash_attn.bert_padding stand-in: pad_input / unpad_input, written from their documented
behaviour with differentiable PyTorch indexing (gradients flow through both, as the tests
need when they pad the unpadded outputs and gradients back)."""
import torch
import torch.nn.functional as F


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """hidden_states (batch, seqlen, ...), attention_mask (batch, seqlen) bool / int (1 = valid),
    unused_mask (batch, seqlen) optional (1 = allocated but unused: kept in the packed rows).
    Returns (packed (total, ...), indices (total,) into the flattened batch * seqlen rows,
    cu_seqlens (batch+1,) int32, max_seqlen int, seqused (batch,) int32 = valid tokens a row)."""
    keep = attention_mask + unused_mask if unused_mask is not None else attention_mask
    seqlens = keep.sum(dim=-1, dtype=torch.int32)
    seqused = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(keep.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    b, s = hidden_states.shape[:2]
    rows = hidden_states.reshape(b * s, *hidden_states.shape[2:])
    return rows.index_select(0, indices), indices, cu_seqlens, max_seqlen, seqused


def pad_input(hidden_states, indices, batch, seqlen):
    """hidden_states (total, ...) -> (batch, seqlen, ...): row r goes to flattened position
    indices[r]; every other position is zero."""
    rest = hidden_states.shape[1:]
    out = hidden_states.new_zeros((batch * seqlen, *rest))
    out = out.index_copy(0, indices, hidden_states)
    return out.reshape(batch, seqlen, *rest)
