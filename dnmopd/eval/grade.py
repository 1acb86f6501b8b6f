"""Grading a run's raw chunks, with a cache per chunk, into per-question records.

``<run>/grades/<first question:04d>.json`` = ``{"raw_sha256", "grader_revision", "correct": [[bool] per
question]}``; it is reused only while both keys still match (a regenerated chunk or another grader revision
is graded again). ``<run>/records.jsonl`` has one line per question: ``id``, ``input_sha256``, ``n``,
``correct`` (one ``0``/``1`` per answer), ``mean_tokens`` (2 decimals) and ``cap_hits`` (answers that
ended at the cap, ``finish_reason == "length"``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from dnmopd.io import atomic_write, sha256_file, write_jsonl


def _grade_chunk(raw: Path, questions: dict, grader) -> list[list[bool]]:
    rows = json.loads(raw.read_text(encoding="utf-8"))
    return [[bool(v) for v in grader.grade(questions[row["id"]], row["responses"])] for row in rows]


def grade_run(out: str | os.PathLike, chunks: Sequence[Path], questions: Sequence[dict], grader, *,
              progress: Callable[[int], None] | None = None) -> list[dict]:
    """Grade (or reuse the cached grades of) every chunk; writes and returns the per-question records."""
    out = Path(out)
    by_id = {q["id"]: q for q in questions}
    records = []
    for raw in chunks:
        cache = out / "grades" / raw.name
        raw_sha = sha256_file(raw)
        cached = json.loads(cache.read_text(encoding="utf-8")) if cache.is_file() else None
        if cached and cached.get("raw_sha256") == raw_sha and cached.get("grader_revision") == grader.revision:
            correct = cached["correct"]
        else:
            correct = _grade_chunk(raw, by_id, grader)
            with atomic_write(cache) as handle:
                handle.write(json.dumps({"raw_sha256": raw_sha, "grader_revision": grader.revision,
                                         "correct": correct}) + "\n")
        rows = json.loads(raw.read_text(encoding="utf-8"))
        for row, verdicts in zip(rows, correct, strict=True):
            records.append(question_record(row, verdicts))
        if progress:
            progress(sum(len(v) for v in correct))
    write_jsonl(out / "records.jsonl", records)
    return records


def question_record(row: dict, verdicts: Sequence[bool]) -> dict:
    if len(verdicts) != row["n"]:
        raise ValueError(f"{row['id']}: {len(verdicts)} grades for {row['n']} answers")
    return {"id": row["id"], "input_sha256": row["input_sha256"], "n": row["n"],
            "correct": "".join("1" if v else "0" for v in verdicts),
            "mean_tokens": round(sum(row["token_counts"]) / row["n"], 2),
            "cap_hits": sum(1 for reason in row["finish_reasons"] if reason == "length")}
