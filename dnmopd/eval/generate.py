"""Sampling the answers of one model on one suite, in chunks that are written atomically and resumable.

``<run>/MANIFEST.json`` records everything that determines the answers (protocol, model, suite, cap, n,
chunk, catalog hash, sampling, chat template hash, engine, deviations); a run resumed with any of them
different is refused. ``<run>/raw/<first question:04d>.json`` holds one chunk: per question ``id``,
``input_sha256``, ``model``, ``cap``, ``n``, ``responses``, ``token_counts`` and ``finish_reasons``. Answer
``j`` of question ``q`` is sampled with seed ``42 + q * n + j`` whatever the chunking, and detokenized with
special tokens skipped (MATH-500 answers are stripped, the others kept exactly as generated). Every prompt is
checked to fit ``prompt + cap <= 32768`` before anything is generated: prompts are never trimmed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from dnmopd.data.chat import PromptTokenizer
from dnmopd.eval.protocol import CONTEXT, ENABLE_THINKING, PROTOCOL_ID, SEED, SUITES, TEMPERATURE, TOP_K, TOP_P
from dnmopd.io import atomic_write
from dnmopd.rollout.base import RolloutEngine, RolloutRequest, SamplingParams


class ResumeError(ValueError):
    """An output folder holds a run of another protocol, model, suite, cap or catalog."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What one generation run is: who answers which questions how."""

    name: str
    model: str
    suite: str
    cap: int
    n: int
    questions: int
    catalog_sha256: str
    engine: str
    deviations: tuple[str, ...]

    @property
    def chunk(self) -> int:
        return SUITES[self.suite].chunk

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=TEMPERATURE, top_p=TOP_P, top_k=TOP_K, max_new_tokens=self.cap, seed=SEED)


def _packages() -> dict:
    out = {}
    for name in ("torch", "transformers", "vllm", "sglang", "dnmopd"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def manifest(spec: RunSpec, tokenizer: PromptTokenizer) -> dict:
    template = tokenizer.tokenizer.chat_template
    return {"protocol": PROTOCOL_ID, "name": spec.name, "model": spec.model, "suite": spec.suite, "cap": spec.cap,
            "n": spec.n, "chunk": spec.chunk, "questions": spec.questions, "catalog_sha256": spec.catalog_sha256,
            "sampling": {"temperature": TEMPERATURE, "top_p": TOP_P, "top_k": TOP_K, "seed": SEED,
                         "max_tokens": spec.cap},
            "enable_thinking": ENABLE_THINKING, "engine": spec.engine,
            "chat_template_sha256": (hashlib.sha256(template.encode()).hexdigest() if isinstance(template, str)
                                     else None),
            "deviations": list(spec.deviations)}


def write_manifest(out: Path, params: dict) -> None:
    """Write the run's manifest once; a resume must match it exactly (package versions are kept apart)."""
    path = out / "MANIFEST.json"
    if path.exists():
        recorded = json.loads(path.read_text(encoding="utf-8"))
        recorded.pop("packages", None)
        if recorded != params:
            changed = sorted(k for k in set(recorded) | set(params) if recorded.get(k) != params.get(k))
            differences = ", ".join(f"{k}: {recorded.get(k)!r} -> {params.get(k)!r}" for k in changed)
            raise ResumeError(f"{path} records another run ({differences}); "
                              "refusing a mixed-protocol resume (use another output folder)")
        return
    with atomic_write(path) as handle:
        handle.write(json.dumps({**params, "packages": _packages()}, indent=2) + "\n")


def check_chunk(rows: list, questions: Sequence[dict], spec: RunSpec, path: Path) -> None:
    """A chunk on disk must answer exactly its questions with n answers each, for this model and cap."""
    if len(rows) != len(questions):
        raise ResumeError(f"{path}: {len(rows)} questions, expected {len(questions)}")
    for row, question in zip(rows, questions, strict=True):
        if (row.get("id"), row.get("input_sha256")) != (question["id"], question["input_sha256"]):
            raise ResumeError(f"{path}: question {row.get('id')!r} is not {question['id']!r} of the catalog")
        if (row.get("model"), row.get("cap"), row.get("n")) != (spec.name, spec.cap, spec.n):
            raise ResumeError(f"{path}: {question['id']} was sampled by another model, cap or n")
        for key in ("responses", "token_counts", "finish_reasons"):
            if not isinstance(row.get(key), list) or len(row[key]) != spec.n:
                raise ResumeError(f"{path}: {question['id']}: {key} must hold {spec.n} entries")


def chunk_starts(count: int, chunk: int) -> list[int]:
    return list(range(0, count, chunk))


def raw_path(out: Path, start: int) -> Path:
    return out / "raw" / f"{start:04d}.json"


def generate(engine: RolloutEngine, tokenizer: PromptTokenizer, questions: Sequence[dict], spec: RunSpec,
             out: str | os.PathLike, *, progress: Callable[[int], None] | None = None) -> list[Path]:
    """Sample every missing chunk of the run into ``out``; returns the chunk files in question order."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, manifest(spec, tokenizer))
    starts = chunk_starts(len(questions), spec.chunk)
    pending = []
    for start in starts:
        path, batch = raw_path(out, start), questions[start:start + spec.chunk]
        if path.exists():
            check_chunk(json.loads(path.read_text(encoding="utf-8")), batch, spec, path)
            if progress:
                progress(len(batch) * spec.n)
        else:
            pending.append(start)
    if pending:
        prompt_ids = [tokenizer.encode(q["messages"]) for q in questions]
        if spec.suite != "math500":
            for question, ids in zip(questions, prompt_ids, strict=True):
                if len(ids) + spec.cap > CONTEXT:
                    raise ValueError(f"{question['id']}: {len(ids)} prompt tokens + cap {spec.cap} exceed the "
                                     f"protocol's context of {CONTEXT} (prompts are never trimmed)")
        for start in pending:
            _generate_chunk(engine, tokenizer, questions, prompt_ids, start, spec, out, progress)
    return [raw_path(out, start) for start in starts]


def _generate_chunk(engine, tokenizer, questions, prompt_ids, start, spec, out, progress) -> None:
    batch = range(start, min(start + spec.chunk, len(questions)))
    requests = [RolloutRequest(tuple(prompt_ids[q]), sample_id=q * spec.n + j) for q in batch for j in range(spec.n)]
    rollouts = {r.sample_id: r for r in engine.generate_batch(requests, spec.sampling())}
    rows = []
    for q in batch:
        answers = [rollouts[q * spec.n + j] for j in range(spec.n)]
        texts = [tokenizer.tokenizer.decode(a.response_ids, skip_special_tokens=True) for a in answers]
        rows.append({"id": questions[q]["id"], "input_sha256": questions[q]["input_sha256"], "model": spec.name,
                     "cap": spec.cap, "n": spec.n,
                     "responses": [t.strip() for t in texts] if spec.suite == "math500" else texts,
                     "token_counts": [len(a.response_ids) for a in answers],
                     "finish_reasons": [a.finish_reason for a in answers]})
    check_chunk(rows, questions[start:start + spec.chunk], spec, raw_path(out, start))
    with atomic_write(raw_path(out, start)) as handle:
        handle.write(json.dumps(rows, ensure_ascii=False, allow_nan=False, indent=2) + "\n")
    if progress:
        progress(len(requests))
