"""The trainer: one update loop for on-policy distillation, GRPO teachers and SeqKD-SFT, in rooms by job.

    trainer        the composition root (`Trainer._build`) and the update loop
    entry          one run, inside megatron-core's CPU layer when there is no GPU
    config         the run config tree (YAML -> dataclasses) and the rules that cross its sections
    context        ModeContext: what a mode sees of the run
    method         a distillation method: routing + multipliers (+ injection) + loss options
    rollout_ahead  which batch each update trains on, collected now or during the previous update
    collectives    small all-reduces and broadcasts that work under gloo and NCCL
    checkpoint     resumable checkpoints
    manifest       what a checkpoint was trained on, checked on resume (checkpoint.allow_changes)
    run_lock       one trainer per run folder; workers that die with their launcher

    modes/         opd, grpo, sft: each one's batch, preparation, loss and metrics
    experience/    rollout -> teacher scoring -> verdicts (collector), the verifiers service (verification),
                   in-process teacher answers (teacher_answers: SeqKD data, the injection bank)
    step/          the student's update on a batch: tensors and micro-batches (batch), megatron's schedules
                   (forward_backward), the fused-kernel losses (objectives), optimizer and LR (optimization)
    measurements/  what is measured and logged: declared metrics (metric_table), their sinks (metrics), the
                   fixed probe (probe), evaluation during training (evaluation), when each runs (schedule),
                   the live display (progress), the run's plots (report)
    injection/     annealed injection's bank: its file format (bank) and its builder (builder)
"""
