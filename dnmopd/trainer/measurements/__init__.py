"""What the trainer measures and shows.

    metric_table  every logged metric declared once: how the data-parallel ranks' values combine, what it means
    metrics       the sinks: metrics.jsonl, TensorBoard, Weights & Biases
    schedule      Measurements: when the probe and the evaluation run within an update
    probe         the fixed probe set's exact full-vocabulary KL to the routed teachers
    evaluation    evaluation during training through the run's rollout engine
    progress      rank 0's live display
    report        the run's PNG plots, drawn from metrics.jsonl
"""
