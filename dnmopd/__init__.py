"""dnmopd: Domain-Normalized Multi-Teacher On-Policy Distillation on megatron-core."""

from pathlib import Path

__version__ = "0.1.0"

CHECKOUT = Path(__file__).resolve().parent.parent
"""The source checkout around this package (meaningful only when running from a checkout, not an install)."""
