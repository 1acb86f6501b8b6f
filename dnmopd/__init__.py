"""dnmopd: Domain-Normalized Multi-Teacher On-Policy Distillation on megatron-core."""

__version__ = "0.1.0"
