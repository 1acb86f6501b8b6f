"""Scores from per-question records, as the paper defines them.

question score = fraction of its n answers correct; suite score = 100 x mean question score (avg@n);
domain = mean of its two suites; Total = mean of the six suites (only when all six are present); MATH-500
is reported apart.

Beside avg@n, from the same records: IFEval/IFBench ``score_loose`` (avg@n of the official loose verdicts);
math suites ``pass_at_k`` (100 x mean over questions of the unbiased estimator ``1 - C(n - c, k) / C(n, k)``
for k = 1, 2, 4, ... up to n, and n) and ``cons_at_n`` (100 x the fraction of questions whose majority vote
is correct); every suite ``eval_failures`` (answers whose grading failed, scored wrong) with their errors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from math import comb
from pathlib import Path

import numpy as np

from dnmopd.eval.protocol import DOMAINS, SIX


def question_scores(records: Sequence[dict]) -> dict[str, float]:
    """``{question id: fraction correct}``; duplicate ids are an error."""
    scores = {r["id"]: r["correct"].count("1") / len(r["correct"]) for r in records}
    if len(scores) != len(records):
        raise ValueError("records hold a question id twice")
    return scores


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one question with c of n answers correct."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def ks(n: int) -> list[int]:
    """The k of pass@k reported for n answers: powers of two below n, and n."""
    return [k for k in (2 ** i for i in range(n.bit_length())) if k < n] + [n]


def suite_summary(suite: str, records: Sequence[dict], *, grader_revision: str, deviations: Sequence[str]) -> dict:
    """The summary of one suite's records (written next to them as summary.json)."""
    scores = list(question_scores(records).values())
    answers = sum(r["n"] for r in records)
    summary = {"suite": suite, "questions": len(records), "n": records[0]["n"] if records else 0,
               "score": 100 * float(np.mean(scores)) if scores else None,
               "mean_pass1": float(np.mean(scores)) if scores else None,
               "mean_output_tokens": float(np.mean([r["mean_tokens"] for r in records])) if records else None,
               "cap_hit_rate": sum(r["cap_hits"] for r in records) / answers if answers else None}
    if records and "loose" in records[0]:
        summary["score_loose"] = 100 * float(np.mean([r["loose"].count("1") / r["n"] for r in records]))
    if records and "consensus" in records[0]:
        n = min(r["n"] for r in records)
        summary["pass_at_k"] = {str(k): 100 * float(np.mean([pass_at_k(r["n"], r["correct"].count("1"), k)
                                                             for r in records])) for k in ks(n)}
        summary["cons_at_n"] = 100 * float(np.mean([r["consensus"] for r in records]))
    failures = [{"id": r["id"], **e} for r in records for e in r.get("errors", ())]
    summary |= {"eval_failures": len(failures), "failures": failures,
                "grader_revision": grader_revision, "deviations": list(deviations)}
    return summary


def levels(suite_scores: dict[str, float]) -> dict:
    """Suite, domain and Total scores (a domain or Total with a missing suite is None)."""
    out: dict = {s: suite_scores.get(s) for s in (*SIX, "math500")}
    for domain, members in DOMAINS.items():
        out[domain] = float(np.mean([suite_scores[s] for s in members])) if all(s in suite_scores for s in members) \
            else None
    out["total"] = float(np.mean([suite_scores[s] for s in SIX])) if all(s in suite_scores for s in SIX) else None
    return out


def read_records(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
