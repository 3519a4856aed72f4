"""flash_attn.layers.rotary stand-in: imported by flash-attention's tests at import time and
called only by the KV-cache tests, which are outside the stand-in's scope."""
from seqfuse import SF_ERR_UNSUPPORTED, SeqfuseError


def apply_rotary_emb(*args, **kwargs):
    raise SeqfuseError(SF_ERR_UNSUPPORTED, "flash_attn stand-in: apply_rotary_emb is not provided "
                                           "by seqfuse")
