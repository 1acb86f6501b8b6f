"""Evaluation under the paper's frozen protocol ``dn-mopd-eval-v1`` (docs/evaluation.md), in data-flow order:

``protocol`` (every constant) -> ``sources`` (pinned files, fetched and verified) -> ``catalog`` (questions
built from them, hash-checked; ``lcb`` decodes LiveCodeBench problems) -> ``generate`` (answers through a
``dnmopd.rollout`` engine, chunked and resumable) -> ``graders`` + ``grade`` (cached verdicts, per-question
records) -> ``scores`` (avg@n, domains, Total) -> ``report`` (table, JSON, plot) and ``bootstrap`` (paired
intervals). ``runner`` ties them together (``plan_suite``, ``generate_suite``, ``grade_suite``: also the steps of
evaluation during training, ``dnmopd.trainer.measurements.evaluation``).
"""
