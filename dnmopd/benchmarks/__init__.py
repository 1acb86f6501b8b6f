"""Benchmarks shipped with the package (their command lines are under ``launch/``).

    providers     one OPD-loss step through the LM head per implementation (floor, torch, torch.compile, Liger,
                  Cut Cross-Entropy, dnmopd)
    harness       timing, peak memory and float64 error of the providers; JSON and Markdown reports
                  (``launch/bench_kernels.py``)
    host_memory   the peak resident memory of one step on a CPU host
    demo_updates  the CPU demo's per-update time on each kernel backend (``launch/bench_kernels.py --demo-updates``)
    paper_batch   the paper's student batch: its length mix and the random students timed on it
                  (``launch/bench_student.py``, the GPU check's throughput)
    gpu_report    the GPU check's rows (pass, fail, warn, skip, info) and its JSON and Markdown report
                  (``launch/gpu_check.py``)
    trainer_check the GPU check's trainer end to end: exact resume, release reload, the same update on the CPU
    update_throughput  the GPU check's student update in tokens/s, megatron-core against transformers
"""
