"""A stand-in `mamba_ssm` package: the ops that mamba_ssm's published tests import, served by
seqfuse, so those tests can run against the seqfuse binding.  Not mamba_ssm: only the modules
under ops/triton that the suites in bench/peers/README.md need exist here."""
__version__ = "seqfuse-standin"
