"""One model through the protocol: generate, grade, score, report; and the call the trainer makes.

``evaluate(config)`` runs ``launch/evaluate.py run``. A suite's run is three steps, `plan_suite` (catalog,
spec and grader, checked), `generate_suite` and `grade_suite`; evaluation during training
(``dnmopd.trainer.measurements.evaluation``) plans at start-up and runs the two others on the trainer's own engine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dnmopd.data.chat import PromptTokenizer
from dnmopd.eval.catalog import load_catalog
from dnmopd.eval.generate import RunSpec, generate
from dnmopd.eval.grade import grade_run
from dnmopd.eval.graders import grader_for
from dnmopd.eval.protocol import CAPS, SUITES
from dnmopd.eval.report import plot_suites, print_summary, write_json
from dnmopd.eval.scores import levels, read_records, suite_summary
from dnmopd.rollout.base import RolloutEngine


@contextlib.contextmanager
def _bar(enabled: bool, description: str, total: int) -> Iterator:
    if not enabled:
        yield lambda k: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(description, total=total)
        yield lambda k: progress.advance(task, k)


@dataclass(frozen=True, slots=True)
class SuitePlan:
    """One suite's run, checked before anything is generated: its questions, spec, output folder and grader."""

    questions: list[dict]
    spec: RunSpec
    out: Path
    grader: object


def plan_suite(suite: str, *, name: str, model: str, engine_name: str, data_dir: Path, output_dir: Path, cap: int,
               n: int | None = None, limit: int | None = None, code_options: dict | None = None) -> SuitePlan:
    """Load and check the catalog, build the grader and check it covers every question (an unusable catalog,
    grader or data file fails here, before spending generation time)."""
    catalog = load_catalog(suite, data_dir)
    questions = catalog.rows[:limit] if limit else catalog.rows
    protocol = SUITES[suite]
    n = n or protocol.n
    deviations = [d for d, off in (
        (f"cap {cap} (protocol: {' or '.join(map(str, CAPS))})", cap not in CAPS),
        (f"n {n} (protocol: {protocol.n})", n != protocol.n),
        (f"first {len(questions)} of {len(catalog.rows)} questions", len(questions) < len(catalog.rows)),
        ("shipped sample catalog, not the pinned source", catalog.sample)) if off]
    spec = RunSpec(name=name, model=model, suite=suite, cap=cap, n=n, questions=len(questions),
                   catalog_sha256=catalog.sha256, engine=engine_name, deviations=tuple(deviations))
    grader = grader_for(catalog, nltk_data=data_dir / "nltk_data", code_options=code_options)
    if hasattr(grader, "check_coverage"):
        grader.check_coverage(questions)
    return SuitePlan(questions, spec, output_dir / name / suite / f"cap{cap}", grader)


def generate_suite(engine: RolloutEngine, tokenizer: PromptTokenizer, plan: SuitePlan, *,
                   progress: bool = False) -> list[Path]:
    """Sample the plan's answers (resumably); returns its raw chunk files."""
    with _bar(progress, f"{plan.spec.suite}: generating", len(plan.questions) * plan.spec.n) as advance:
        return generate(engine, tokenizer, plan.questions, plan.spec, plan.out, progress=advance)


def grade_suite(plan: SuitePlan, chunks: list[Path], *, progress: bool = False) -> dict:
    """Grade the chunks (cached), write records.jsonl and summary.json; returns the summary."""
    with _bar(progress, f"{plan.spec.suite}: grading", len(plan.questions) * plan.spec.n) as advance:
        records = grade_run(plan.out, chunks, plan.questions, plan.grader, progress=advance)
    summary = suite_summary(plan.spec.suite, records, grader_revision=plan.grader.revision,
                            deviations=list(plan.spec.deviations))
    write_json(plan.out / "summary.json", summary)
    return summary


def run_suite(engine: RolloutEngine, tokenizer: PromptTokenizer, suite: str, *, progress: bool = False,
              **options) -> dict:
    """Generate and grade one suite (``options``: those of `plan_suite`); writes raw chunks, grades,
    records.jsonl and summary.json; returns the summary."""
    plan = plan_suite(suite, **options)
    return grade_suite(plan, generate_suite(engine, tokenizer, plan, progress=progress), progress=progress)


def model_row(name: str, summaries: dict[str, dict]) -> dict:
    answers = sum(s["questions"] * s["n"] for s in summaries.values())
    hits = sum(s["cap_hit_rate"] * s["questions"] * s["n"] for s in summaries.values())
    return {"name": name, "levels": levels({s: v["score"] for s, v in summaries.items()}),
            "cap_hit_rate": hits / answers if answers else 0.0,
            "deviations": [f"{s}: {d}" for s, v in summaries.items() for d in v["deviations"]], "suites": summaries}


def default_name(model: str | os.PathLike) -> str:
    """The name of a model's results: its folder's name, or for a trainer release (``<run_dir>/release``)
    its run's name."""
    folder = Path(model).resolve()
    return folder.parent.name if folder.name == "release" and folder.parent.name else folder.name


def evaluate(config) -> dict:
    """``launch/evaluate.py run``: every configured suite, then the table, the JSON summary and the plot. A
    server engine must pass its start-up check (each replica's health route) before anything is planned."""
    name = config.name or default_name(config.model)
    tokenizer = PromptTokenizer.from_pretrained(config.model)
    engine = config.engine.config.build()
    summaries = {}
    try:
        engine.check()
        for suite in config.suites:
            summaries[suite] = run_suite(
                engine, tokenizer, suite, name=name, model=config.model, engine_name=config.engine.backend,
                data_dir=config.data_dir, output_dir=config.output_dir, cap=config.max_tokens, n=config.n,
                limit=config.limit, code_options={"timeout_s": config.code.timeout_s,
                                                  "memory_bytes": config.code.memory_bytes,
                                                  "workers": config.code.workers,
                                                  "min_isolation": config.code.min_isolation},
                progress=config.progress)
    finally:
        engine.close()
    row = model_row(name, summaries)
    write_json(config.output_dir / name / f"summary_cap{config.max_tokens}.json", row)
    rows = collect_models(config.output_dir, config.max_tokens)
    print_summary([row], cap=config.max_tokens)
    plot_suites(rows, config.output_dir / f"suites_cap{config.max_tokens}.png", cap=config.max_tokens)
    return row


def collect_models(output_dir: Path, cap: int) -> list[dict]:
    """The model rows of every model evaluated under ``output_dir`` at ``cap`` (for the plot)."""
    import json

    paths = sorted(Path(output_dir).glob(f"*/summary_cap{cap}.json"))
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


def suite_question_scores(model_dir: str | os.PathLike, cap: int, suites: Sequence[str] = tuple(SUITES)) -> dict:
    """``{suite: {question id: score}}`` of a model's results folder (the suites it has records of)."""
    from dnmopd.eval.scores import question_scores

    out = {}
    for suite in suites:
        path = Path(model_dir) / suite / f"cap{cap}" / "records.jsonl"
        if path.is_file():
            out[suite] = question_scores(read_records(path))
    return out
