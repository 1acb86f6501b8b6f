"""Benchmarks shipped with the package (their command lines are under ``launch/``).

    providers     one OPD-loss step through the LM head per implementation (floor, torch, torch.compile, Liger,
                  Cut Cross-Entropy, dnmopd)
    harness       timing, peak memory and float64 error of the providers; JSON and Markdown reports
                  (``launch/bench_kernels.py``)
    host_memory   the peak resident memory of one step on a CPU host
    demo_updates  the CPU demo's per-update time on each kernel backend (``launch/bench_kernels.py --demo-updates``)
"""
