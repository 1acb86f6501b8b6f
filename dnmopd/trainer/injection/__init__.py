"""Annealed teacher-trajectory injection's bank.

    bank     the file format: one verified teacher answer per student prompt, keyed by the prompt's token ids
    builder  builds a run's bank from its config (`launch/build_injection_bank.py`)
"""
