"""The clip parameters of the clipped surrogate (the OPD and GRPO losses), checked in one place for the kernel
that applies them and the configs that set them."""

from __future__ import annotations


def validate_clip(eps_low: float, eps_high: float, dual_clip: float | None) -> None:
    """The clip parameters of the loss: 0 <= eps_low < 1, eps_high >= 0, dual_clip > 1 or None."""
    if not 0 <= eps_low < 1:
        raise ValueError(f"eps_low must lie in [0, 1), got {eps_low}")
    if not eps_high >= 0:
        raise ValueError(f"eps_high must be >= 0, got {eps_high}")
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
