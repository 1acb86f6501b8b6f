"""Microbenchmarks of the fused OPD loss against PyTorch, torch.compile, Liger-Kernel and Cut Cross-Entropy.

``providers`` holds the implementations, ``harness`` the timing/memory/error method and the reports; the
command line is ``launch/bench_kernels.py``.
"""
