"""Row schema of the release files (reference-behavior 5.2) and its validation.

Every line is one JSON object with exactly these keys, in this order::

    {"prompt": [{"content": "...", "role": "user"}],     # "text" files (teacher IF pool): a plain string
     "label": "...",                                     # math answer | code tests JSON | IF constraints JSON
     "domain": "math" | "code" | "ifeval",
     "teacher": <same as domain>,
     "metadata": {"domain": <same>, "data_source": "...", "src_index": <int >= 0>}}

Errors name the file, the line (1-based) and the field. ``validate_file`` either stops at the first bad row
(``on_error="fail"``) or skips bad rows and lists every one of them in its report (``"skip"``).

Besides the schema, a row must survive the trip through ``datasets`` (Arrow) and the verifiers: a line that is
not UTF-8, a string holding a lone surrogate (``"\\ud800"``), a key repeated in one JSON object (of the row or
of its label) and a ``src_index`` beyond 64 bits are refused here, with their field, instead of crashing later.
Labels are parsed as their verifiers parse them (``ifeval.parse_constraints``, ``code.parse_label``). A prompt
holding a chat-control token (``CONTROL_TOKEN``: ``<|im_end|>``, ``<|im_start|>`` and every other ``<|...|>``
token, ``<think>``, ``<tool_call>``...), which the tokenizer would read as a token of the chat format and so as
extra turns, is refused; so is a row that repeats an earlier one. A path that is not a regular file (a
FIFO, ``/dev/zero``) is refused before it is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from dnmopd.io import open_regular_file
from dnmopd.verifiers.code import parse_label
from dnmopd.verifiers.ifeval import ConstraintError, UnknownConstraintError, parse_constraints

ROW_KEYS = ("prompt", "label", "domain", "teacher", "metadata")
METADATA_KEYS = ("domain", "data_source", "src_index")
DOMAINS = ("math", "code", "ifeval")
PROMPT_FORMATS = ("messages", "text")
ON_ERROR = ("fail", "skip")
MAX_SRC_INDEX = 2**63 - 1
"""Arrow stores ``src_index`` as int64."""

CONTROL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>|</?(?:think|tool_call|tool_response)>|<tts_(?:pad|text_[a-z_]+)>")
"""Text a Qwen (ChatML) tokenizer reads as a special token of its chat format."""
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""Decoded JSON holds a surrogate only where its text has such an escape (UTF-8 cannot encode one)."""


class RowError(ValueError):
    """A row that breaks the schema: ``path:line: field 'x': problem``."""

    def __init__(self, path: str, line: int, field: str, problem: str) -> None:
        super().__init__(f"{path}:{line}: field {field!r}: {problem}")
        self.path, self.line, self.field, self.problem = path, line, field, problem


class _FieldError(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field, self.problem = field, problem


class _RepeatedKeys(dict):
    """A decoded JSON object in which a key occurred more than once (``json`` would keep the last value)."""

    repeated: list[str]


def _child(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _check_decoded(value: object, where: str) -> None:
    """Refuse repeated keys and lone surrogates anywhere in a decoded JSON value; ``where`` names its field."""
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value):
            raise _FieldError(where or "<row>", "holds a lone surrogate (\\ud800-\\udfff): not valid Unicode text")
    elif isinstance(value, dict):
        if isinstance(value, _RepeatedKeys):
            raise _FieldError(_child(where, value.repeated[0]), "key repeated in one JSON object")
        for key, item in value.items():
            _check_decoded(key, where)
            _check_decoded(item, _child(where, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_decoded(item, f"{where}[{i}]")


def _decode(text: str, where: str, what: str) -> object:
    """Strict JSON: no repeated keys, no lone surrogates (errors name ``where``)."""
    repeated = []

    def make_object(pairs: list[tuple[str, object]]) -> dict:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        keys = [key for key, _ in pairs]
        marked = _RepeatedKeys(obj)
        marked.repeated = sorted({key for key in keys if keys.count(key) > 1})
        repeated.append(marked)
        return marked

    try:
        value = json.loads(text, object_pairs_hook=make_object)
        if repeated or ("\\u" in text and _SURROGATE_ESCAPE.search(text)):  # else nothing to find: no walk
            _check_decoded(value, "" if where == "<line>" else where)
    except ValueError as exc:
        raise _FieldError(where, f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise _FieldError(where, f"{what} is nested too deeply") from None
    return value


def _keys(obj: dict, expected: tuple[str, ...], prefix: str) -> None:
    for key in expected:
        if key not in obj:
            raise _FieldError(prefix + key, "missing")
    for key in obj:
        if key not in expected:
            raise _FieldError(prefix + key, f"unexpected key (allowed: {', '.join(expected)})")
    if tuple(obj) != expected:
        raise _FieldError(prefix.rstrip(".") or "<row>", f"keys out of order: {list(obj)} (expected {list(expected)})")


def _check_text(text: str, field: str) -> None:
    token = CONTROL_TOKEN.search(text)
    if token:
        raise _FieldError(field, f"holds the chat-control token {token.group()!r} at character {token.start()}: "
                                 f"the tokenizer would read it as part of the chat format (an injected turn)")


def _check_prompt(prompt: object, prompt_format: str) -> None:
    if prompt_format == "text":
        if not isinstance(prompt, str) or not prompt.strip():
            raise _FieldError("prompt", "must be a non-empty string in this file")
        _check_text(prompt, "prompt")
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
    _check_text(message["content"], "prompt[0].content")


def _check_label(label: object, domain: str) -> None:
    if not isinstance(label, str):
        raise _FieldError("label", f"must be a string, got {type(label).__name__}")
    if domain == "math" and not label.strip():
        raise _FieldError("label", "math answer is empty")
    if domain == "code":
        try:
            parse_label(_decode(label, "label", "code label"))
        except ValueError as exc:  # what the code verifier cannot use
            raise _FieldError("label", str(exc)) from None
    if domain == "ifeval":
        try:
            parse_constraints(_decode(label, "label", "IF label"))
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
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= MAX_SRC_INDEX:
        raise _FieldError("metadata.src_index", f"must be an integer from 0 to 2**63 - 1, got {index!r}")


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


def parse_line(data: bytes | str, path: str, line: int, prompt_format: str = "messages") -> dict:
    """Decode and validate one JSONL line (bytes as read from the file, or text); raises ``RowError``."""
    try:
        if isinstance(data, bytes):
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = data[exc.start:exc.end]
                raise _FieldError("<line>", f"not valid UTF-8: byte {exc.start} ({bad!r}): {exc.reason}") from None
        return check_row(_decode(data, "<line>", "the line"), prompt_format)
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
    try:
        handle = open_regular_file(path)
    except OSError as exc:
        raise RowError(str(path), 0, "<file>", f"cannot be read as a row file: {exc.strerror or exc}") from None
    first_line_of = {}  # row digest -> line
    with handle:
        for number, data in enumerate(handle, start=1):
            try:
                row = parse_line(data, str(path), number, prompt_format)
                digest = hashlib.sha256(json.dumps(row).encode("utf-8")).digest()
                if digest in first_line_of:
                    raise RowError(str(path), number, "<row>", f"repeats line {first_line_of[digest]}")
                first_line_of[digest] = number
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
    if report.rows == 0:
        raise RowError(str(path), 0, "<file>", f"no valid row: all {report.skipped} rows are bad, the first: "
                                               f"{report.errors[0]}")
    return report
