"""A stand-in `flash_attn` package that serves flash-attention's API from seqfuse, so that
flash-attention's published tests can run against the seqfuse binding.  Not flash-attention:
see flash_attn_interface.py for the mapping and bench/peers/README.md for the runs."""
__version__ = "2.8.4+seqfuse-standin"  # the flash-attention API version the tests were taken from

from flash_attn.flash_attn_interface import (  # noqa: E402,F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)
