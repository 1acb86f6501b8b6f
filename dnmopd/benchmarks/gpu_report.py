"""The rows of `launch/gpu_check.py`'s report: one check each, appended by the sections to a JSON-lines file as they
are made (a section killed at its time limit keeps what it wrote) and gathered into gpu_check.json and gpu_check.md.

A row's status: pass or fail when it has a limit (value <= limit passes; a check that is not required warns instead
of failing), info when it only records a number, skip when it could not run here (the reason in its note).
Standard library only: the wheel installer imports it before any third-party package is importable.
"""

from __future__ import annotations

import contextlib
import json
import math
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from dnmopd.io import atomic_write

STATUSES = ("pass", "fail", "warn", "skip", "info")
REPORT_NAME = "gpu_check"


@dataclass
class Check:
    section: str
    name: str
    status: str
    value: float | int | str | None = None
    limit: float | None = None
    note: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name!r}: status must be one of {STATUSES}, got {self.status!r}")


def verdict(value, limit: float, required: bool = True) -> str:
    """pass when `value` is a finite number <= `limit` (NaN and missing values never pass)."""
    ok = isinstance(value, int | float) and math.isfinite(value) and value <= limit
    return "pass" if ok else ("fail" if required else "warn")


class RowLog:
    """Appends one section's rows to a JSON-lines file (None: keeps them in memory only) and prints each."""

    def __init__(self, path: Path | None, section: str):
        self.path, self.section, self.rows = path, section, []

    def add(self, check: Check) -> Check:
        self.rows.append(check)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(asdict(check)) + "\n")
        limit = "" if check.limit is None else f" (limit {check.limit:g})"
        print(" ".join(filter(None, (f"[{check.section}] {check.status:4s} {check.name}:", _text(check.value) + limit,
                                     check.note))), flush=True)
        return check

    def judge(self, name: str, value, limit: float, *, required: bool = True, note: str = "") -> Check:
        return self.add(Check(self.section, name, verdict(value, limit, required), value, limit, note))

    def expect(self, name: str, ok: bool, value=None, *, required: bool = True, note: str = "") -> Check:
        return self.add(Check(self.section, name, "pass" if ok else ("fail" if required else "warn"), value,
                              None, note))

    def info(self, name: str, value, note: str = "") -> Check:
        return self.add(Check(self.section, name, "info", value, None, note))

    def skip(self, name: str, reason: str) -> Check:
        return self.add(Check(self.section, name, "skip", None, None, reason))

    @contextlib.contextmanager
    def guard(self, name: str) -> Iterator[None]:
        """Run a group of checks; an exception becomes a failed row named `name` (with the traceback's end), and
        the section goes on with its next group."""
        try:
            yield
        except Exception:  # noqa: BLE001 - every failure is a row of the report
            traceback.print_exc()
            self.add(Check(self.section, name, "fail", "exception", note=traceback.format_exc()[-1500:]))


def read_rows(path: Path) -> list[Check]:
    """The rows a section appended to `path` (none if it wrote none); a malformed line is an error naming it."""
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            rows.append(Check(**json.loads(line)))
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not a check row ({error})") from None
    return rows


def _text(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def markdown(meta: dict, rows: list[Check]) -> str:
    counts = ", ".join(f"{sum(r.status == s for r in rows)} {s}" for s in STATUSES)
    lines = [f"# GPU check: {counts}", "", *(f"- {key}: {value}" for key, value in meta.items()), "",
             "| section | check | value | limit | status | note |", "|---|---|---:|---:|---|---|"]
    for r in rows:
        limit = "" if r.limit is None else f"{r.limit:g}"
        cells = (r.section, r.name, _text(r.value), limit, r.status, r.note)
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, meta: dict, rows: list[Check]) -> tuple[Path, Path]:
    """gpu_check.json and gpu_check.md under `out_dir`, each written atomically."""
    paths = (out_dir / f"{REPORT_NAME}.json", out_dir / f"{REPORT_NAME}.md")
    failed = [f"{r.section}: {r.name}" for r in rows if r.status == "fail"]
    payloads = (json.dumps({"meta": meta, "failed": failed, "checks": [asdict(r) for r in rows]}, indent=1),
                markdown(meta, rows))
    for path, payload in zip(paths, payloads, strict=True):
        with atomic_write(path) as handle:
            handle.write(payload)
    return paths
