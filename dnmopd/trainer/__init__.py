"""The trainer: one update loop for on-policy distillation, GRPO teachers and SeqKD-SFT.

    config        the run config tree (YAML -> dataclasses)          entry      one run, in the CPU layer
    trainer       composition root and the update loop               modes/     opd, grpo, sft
    prompts       prompt set (rendered, tokenized)                   experience rollout + scoring + verdicts
    batch         padded tensors, micro-batches, broadcast           method     routing + multipliers
    forward_backward  megatron schedules around the fused losses     objectives the fused-kernel losses
    optimization  megatron DDP, optimizer, LR schedule               checkpoint resumable checkpoints
    metrics       metrics.jsonl / TensorBoard / W&B                  report     PNG plots of a run
    progress      rank-0 display                                     injection_bank(_builder)  annealed injection data
"""
