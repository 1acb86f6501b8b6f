"""Run modes of the trainer: opd, grpo, sft (see base)."""
