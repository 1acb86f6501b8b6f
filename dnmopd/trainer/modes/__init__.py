"""Run modes of the trainer (`run.mode`), each one file over the interface in `base`.

    base  the Mode interface, the registry `mode_class`, Collected and StepCounts
    opd   on-policy distillation of the student (DN-MOPD and its controls)
    grpo  GRPO of a domain teacher on verifier rewards
    sft   SeqKD-SFT on teacher answers
"""
