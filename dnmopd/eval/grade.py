"""Grading a run's raw chunks, with a cache per chunk, into per-question records.

``<run>/grades/<first question:04d>.json`` = ``{"raw_sha256", "grader_revision", "verdicts": [[verdict] per
question]}`` with each answer's `Verdict` as a dict of its set fields; it is reused only while both keys still
match (a regenerated chunk or another grader revision is graded again). ``<run>/records.jsonl`` has one line
per question: ``id``, ``input_sha256``, ``n``, ``correct`` (one ``0``/``1`` per answer), ``mean_tokens`` (2
decimals) and ``cap_hits`` (answers that ended at the cap, ``finish_reason == "length"``), the paper's
record; then ``loose`` (IF suites: ``0``/``1`` per answer by the loose rule), ``consensus`` (math suites:
whether the majority vote of the n answers is correct, see `consensus`) and ``errors`` (``{"answer", "error"}``
of each answer whose grading failed: it is wrong, and counted in the suite's ``eval_failures``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from dnmopd.eval.graders.math import CORRECT_VOTE
from dnmopd.eval.graders.verdict import Verdict
from dnmopd.io import atomic_write, sha256_file, write_jsonl


def _grade_chunk(rows: list, questions: dict, grader) -> list[list[Verdict]]:
    return [list(grader.grade(questions[row["id"]], row["responses"])) for row in rows]


def _stored(verdict: Verdict) -> dict:
    return {key: value for key, value in asdict(verdict).items() if value is not None}


def grade_run(out: str | os.PathLike, chunks: Sequence[Path], questions: Sequence[dict], grader, *,
              progress: Callable[[int], None] | None = None) -> list[dict]:
    """Grade (or reuse the cached grades of) every chunk; writes and returns the per-question records."""
    out = Path(out)
    by_id = {q["id"]: q for q in questions}
    records = []
    for raw in chunks:
        cache = out / "grades" / raw.name
        raw_sha = sha256_file(raw)
        rows = json.loads(raw.read_text(encoding="utf-8"))
        cached = json.loads(cache.read_text(encoding="utf-8")) if cache.is_file() else None
        if cached and cached.get("raw_sha256") == raw_sha and cached.get("grader_revision") == grader.revision:
            verdicts = [[Verdict(**v) for v in question] for question in cached["verdicts"]]
        else:
            verdicts = _grade_chunk(rows, by_id, grader)
            with atomic_write(cache) as handle:
                handle.write(json.dumps({"raw_sha256": raw_sha, "grader_revision": grader.revision,
                                         "verdicts": [[_stored(v) for v in q] for q in verdicts]}) + "\n")
        for row, question in zip(rows, verdicts, strict=True):
            records.append(question_record(row, question, measures=getattr(grader, "measures", ())))
        if progress:
            progress(sum(len(v) for v in verdicts))
    write_jsonl(out / "records.jsonl", records)
    return records


def consensus(verdicts: Sequence[Verdict]) -> bool:
    """cons@n of one question: the most frequent vote among answers that have one (every answer equal to the
    reference is one vote class; ties go to the class voted first) is the reference's."""
    votes = Counter(v.vote for v in verdicts if v.vote is not None)
    return bool(votes) and votes.most_common(1)[0][0] == CORRECT_VOTE


def _bits(values) -> str:
    return "".join("1" if v else "0" for v in values)


def question_record(row: dict, verdicts: Sequence[Verdict], *, measures: Sequence[str] = ()) -> dict:
    """The record of one question; ``measures`` (a grader's) adds ``loose`` and/or ``consensus``."""
    if len(verdicts) != row["n"]:
        raise ValueError(f"{row['id']}: {len(verdicts)} grades for {row['n']} answers")
    record = {"id": row["id"], "input_sha256": row["input_sha256"], "n": row["n"],
              "correct": _bits(v.correct for v in verdicts),
              "mean_tokens": round(sum(row["token_counts"]) / row["n"], 2),
              "cap_hits": sum(1 for reason in row["finish_reasons"] if reason == "length")}
    if "loose" in measures:
        record["loose"] = _bits(bool(v.loose) for v in verdicts)
    if "consensus" in measures:
        record["consensus"] = consensus(verdicts)
    record["errors"] = [{"answer": j, "error": v.error} for j, v in enumerate(verdicts) if v.error is not None]
    return record
