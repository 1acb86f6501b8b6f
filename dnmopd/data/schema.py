"""Row schema of the release files (reference-behavior 5.2) and its validation.

Every line is one JSON object with exactly these keys, in this order::

    {"prompt": [{"content": "...", "role": "user"}],     # "text" files (teacher IF pool): a plain string
     "label": "...",                                     # math answer | code tests JSON | IF constraints JSON
     "domain": "math" | "code" | "ifeval",
     "teacher": <same as domain>,
     "metadata": {"domain": <same>, "data_source": "...", "src_index": <int >= 0>}}

Errors name the file, the line (1-based) and the field. ``validate_file`` either stops at the first bad row
(``on_error="fail"``) or skips bad rows and lists every one of them in its report (``"skip"``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from dnmopd.verifiers.ifeval import ConstraintError, UnknownConstraintError, parse_constraints

ROW_KEYS = ("prompt", "label", "domain", "teacher", "metadata")
METADATA_KEYS = ("domain", "data_source", "src_index")
DOMAINS = ("math", "code", "ifeval")
PROMPT_FORMATS = ("messages", "text")
ON_ERROR = ("fail", "skip")


class RowError(ValueError):
    """A row that breaks the schema: ``path:line: field 'x': problem``."""

    def __init__(self, path: str, line: int, field: str, problem: str) -> None:
        super().__init__(f"{path}:{line}: field {field!r}: {problem}")
        self.path, self.line, self.field, self.problem = path, line, field, problem


class _FieldError(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field, self.problem = field, problem


def _keys(obj: dict, expected: tuple[str, ...], prefix: str) -> None:
    for key in expected:
        if key not in obj:
            raise _FieldError(prefix + key, "missing")
    for key in obj:
        if key not in expected:
            raise _FieldError(prefix + key, f"unexpected key (allowed: {', '.join(expected)})")
    if tuple(obj) != expected:
        raise _FieldError(prefix.rstrip(".") or "<row>", f"keys out of order: {list(obj)} (expected {list(expected)})")


def _check_prompt(prompt: object, prompt_format: str) -> None:
    if prompt_format == "text":
        if not isinstance(prompt, str) or not prompt.strip():
            raise _FieldError("prompt", "must be a non-empty string in this file")
        return
    if not isinstance(prompt, list) or len(prompt) != 1:
        raise _FieldError("prompt", "must be a list holding exactly one user message")
    message = prompt[0]
    if not isinstance(message, dict) or set(message) != {"content", "role"}:
        raise _FieldError("prompt[0]", "must be an object with exactly the keys 'content' and 'role'")
    if message["role"] != "user":
        raise _FieldError("prompt[0].role", f"must be 'user', got {message['role']!r}")
    if not isinstance(message["content"], str) or not message["content"].strip():
        raise _FieldError("prompt[0].content", "must be a non-empty string")


def check_code_label(label: str) -> dict:
    """Parse a code label: JSON with ``inputs``/``outputs`` lists of equal, non-zero length (+ ``fn_name``)."""
    try:
        tests = json.loads(label)
    except ValueError as exc:
        raise _FieldError("label", f"code label is not valid JSON: {exc}") from None
    if not isinstance(tests, dict):
        raise _FieldError("label", "code label must be a JSON object with 'inputs' and 'outputs'")
    for key in ("inputs", "outputs"):
        if not isinstance(tests.get(key), list):
            raise _FieldError(f"label.{key}", "must be a list")
    if not tests["inputs"]:
        raise _FieldError("label.inputs", "must not be empty")
    if len(tests["inputs"]) != len(tests["outputs"]):
        raise _FieldError("label.outputs", f"has {len(tests['outputs'])} entries for {len(tests['inputs'])} inputs")
    if "fn_name" in tests and (not isinstance(tests["fn_name"], str) or not tests["fn_name"]):
        raise _FieldError("label.fn_name", "must be a non-empty string")
    return tests


def _check_label(label: object, domain: str) -> None:
    if not isinstance(label, str):
        raise _FieldError("label", f"must be a string, got {type(label).__name__}")
    if domain == "math" and not label.strip():
        raise _FieldError("label", "math answer is empty")
    if domain == "code":
        check_code_label(label)
    if domain == "ifeval":
        try:
            parse_constraints(label)
        except (ConstraintError, UnknownConstraintError) as exc:
            raise _FieldError("label", str(exc)) from None


def _check_metadata(metadata: object, domain: str) -> None:
    if not isinstance(metadata, dict):
        raise _FieldError("metadata", "must be an object")
    _keys(metadata, METADATA_KEYS, "metadata.")
    if metadata["domain"] != domain:
        raise _FieldError("metadata.domain", f"{metadata['domain']!r} differs from domain {domain!r}")
    if not isinstance(metadata["data_source"], str) or not metadata["data_source"]:
        raise _FieldError("metadata.data_source", "must be a non-empty string")
    index = metadata["src_index"]
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise _FieldError("metadata.src_index", f"must be a non-negative integer, got {index!r}")


def check_row(row: object, prompt_format: str = "messages") -> dict:
    """Validate one decoded row; raises ``_FieldError`` (wrapped by callers into ``RowError``)."""
    if not isinstance(row, dict):
        raise _FieldError("<row>", f"must be a JSON object, got {type(row).__name__}")
    _keys(row, ROW_KEYS, "")
    domain = row["domain"]
    if domain not in DOMAINS:
        raise _FieldError("domain", f"unknown domain {domain!r} (known: {', '.join(DOMAINS)})")
    if row["teacher"] != domain:
        raise _FieldError("teacher", f"{row['teacher']!r} differs from domain {domain!r}")
    _check_metadata(row["metadata"], domain)
    _check_prompt(row["prompt"], prompt_format)
    _check_label(row["label"], domain)
    return row


def parse_line(text: str, path: str, line: int, prompt_format: str = "messages") -> dict:
    """Decode and validate one JSONL line; raises ``RowError``."""
    try:
        try:
            row = json.loads(text)
        except ValueError as exc:
            raise _FieldError("<line>", f"not valid JSON: {exc}") from None
        return check_row(row, prompt_format)
    except _FieldError as exc:
        raise RowError(path, line, exc.field, exc.problem) from None


@dataclass(slots=True)
class ValidationReport:
    path: str
    rows: int = 0
    """Valid rows."""
    errors: list[RowError] = field(default_factory=list)
    """Every skipped row, with line and field."""
    domains: Counter[str] = field(default_factory=Counter)

    @property
    def skipped(self) -> int:
        return len(self.errors)

    def summary(self) -> str:
        counts = ", ".join(f"{d} {n}" for d, n in sorted(self.domains.items()))
        text = f"{self.path}: {self.rows} valid rows ({counts})"
        return text + (f", {self.skipped} bad rows skipped" if self.errors else "")


def iter_rows(path: str | os.PathLike, *, prompt_format: str = "messages", on_error: str = "fail",
              report: ValidationReport | None = None) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, row)`` for every valid row; bad rows raise or are recorded in ``report``."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    report = report if report is not None else ValidationReport(str(path))
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            try:
                row = parse_line(text, str(path), number, prompt_format)
            except RowError as exc:
                if on_error == "fail":
                    raise
                report.errors.append(exc)
                continue
            report.rows += 1
            report.domains[row["domain"]] += 1
            yield number, row


def validate_file(path: str | os.PathLike, *, prompt_format: str = "messages",
                  on_error: str = "fail") -> ValidationReport:
    """Check every row of a JSONL file; returns the report (raises ``RowError`` first if ``fail``)."""
    report = ValidationReport(str(path))
    for _ in iter_rows(path, prompt_format=prompt_format, on_error=on_error, report=report):
        pass
    if report.rows == 0 and not report.errors:
        raise RowError(str(path), 0, "<file>", "the file holds no rows")
    return report
