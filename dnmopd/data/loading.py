"""Load a release (or sample) file through ``datasets`` (the JSON builder, offline), after validating it.

Validation reads the raw lines first (``datasets`` would lose key order and accept wrong types); then the
JSON builder loads the same file, in memory-mapped Arrow form or, for the 917 MB code pool, streaming.
With ``on_error="skip"`` the bad rows are left out of a cleaned copy that ``datasets`` loads instead, and
the report lists each of them; nothing is dropped silently.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from dnmopd.data.manifest import RELEASE_LAYOUT
from dnmopd.data.schema import ValidationReport, iter_rows, validate_file
from dnmopd.io import write_jsonl

logger = logging.getLogger(__name__)

STREAMING_FILES = ("teacher/code_train.jsonl",)
"""Release files streamed by default (test cases make the code pool 917 MB)."""


def prompt_format_of(path: str | os.PathLike) -> str:
    """``text`` for the IF teacher pool (plain-string prompts), ``messages`` for every other file."""
    posix = Path(path).as_posix()
    for rel, (_, prompt_format) in RELEASE_LAYOUT.items():
        if posix.endswith(rel):
            return prompt_format
    return "messages"


def load_prompts(path: str | os.PathLike, *, prompt_format: str | None = None, on_error: str = "fail",
                 streaming: bool | None = None, cache_dir: str | os.PathLike | None = None):
    """Validate and load a prompt file; returns ``(dataset, ValidationReport)``.

    ``prompt_format`` defaults from the file name (``prompt_format_of``); ``streaming`` defaults to True for
    the code pool; ``cache_dir`` is where ``datasets`` keeps its Arrow cache (and the cleaned copy, if any).
    """
    import datasets

    path = Path(path)
    prompt_format = prompt_format or prompt_format_of(path)
    streaming = any(path.as_posix().endswith(f) for f in STREAMING_FILES) if streaming is None else streaming
    report = validate_file(path, prompt_format=prompt_format, on_error=on_error)
    source = path
    if report.errors:
        for error in report.errors:
            logger.warning("skipped %s", error)
        source = _cleaned_copy(path, prompt_format, cache_dir)
    logger.info(report.summary())
    dataset = datasets.load_dataset("json", data_files=str(source), split="train", streaming=streaming,
                                    cache_dir=None if cache_dir is None else str(cache_dir))
    return dataset, report


def _cleaned_copy(path: Path, prompt_format: str, cache_dir: str | os.PathLike | None) -> Path:
    """The valid rows of ``path`` in a side file under ``cache_dir`` (default: the ``datasets`` cache)."""
    import datasets

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    target_dir = Path(cache_dir if cache_dir is not None else datasets.config.HF_DATASETS_CACHE) / "dnmopd-valid-rows"
    target = target_dir / f"{path.stem}-{key}.jsonl"
    rows = (row for _, row in iter_rows(path, prompt_format=prompt_format, on_error="skip",
                                        report=ValidationReport(str(path))))
    write_jsonl(target, rows)
    return target

