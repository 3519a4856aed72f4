"""flash_attn.layers.rotary stand-in: apply_rotary_emb is seqfuse's (the same signature);
flash-attention's KV-cache tests call it to rotate their reference q and k."""
from seqfuse import apply_rotary_emb  # noqa: F401
