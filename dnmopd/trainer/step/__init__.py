"""The student's update on a batch.

    batch             the padded tensors of a rank's scored samples, micro-batches, the batch broadcast
    forward_backward  the student's forward/backward through megatron's schedules, packed or padded
    objectives        the per-micro-batch losses, each a fused LM-head kernel call, and their metrics
    optimization      megatron data parallelism, the optimizer and the learning-rate schedule
"""
