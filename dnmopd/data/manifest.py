"""The release manifest: which Hub revision, and each file's size, sha256, row and domain counts.

``data/MANIFEST.json`` pins ``XINLI1997/DN-MOPD-Data``; ``data/samples/MANIFEST.json`` describes the sample
files in the same format (written by ``build_manifest``)::

    {"format": 1, "repo_id": "...", "repo_type": "dataset", "revision": "<40 hex>",
     "files": {"student/train_3domain.jsonl": {"config": "student", "prompt": "messages", "bytes": 45968876,
               "sha256": "<64 hex>", "rows": 2700, "domains": {"math": 900, "code": 900, "ifeval": 900}}, ...}}

``prompt`` is ``messages`` (a one-user-message list) or ``text`` (a plain string: the IF teacher pool).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from dnmopd.io import sha256_file

FORMAT_VERSION = 1
RELEASE_LAYOUT = {
    "student/train_3domain.jsonl": ("student", "messages"),
    "teacher/math_train.jsonl": ("teacher_math", "messages"),
    "teacher/code_train.jsonl": ("teacher_code", "messages"),
    "teacher/if_train.jsonl": ("teacher_if", "text"),
}
"""The four files (configs) of the release: path -> (config name, prompt format)."""

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file and field."""


@dataclass(frozen=True, slots=True)
class ManifestFile:
    path: str
    config: str
    prompt: str
    bytes: int
    sha256: str
    rows: int
    domains: dict[str, int]


@dataclass(frozen=True, slots=True)
class Manifest:
    repo_id: str
    repo_type: str
    revision: str
    files: dict[str, ManifestFile]

    @classmethod
    def load(cls, path: str | os.PathLike) -> Manifest:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ManifestError(f"{path}: cannot read manifest: {exc}") from None
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def from_dict(cls, raw: object, source: str = "manifest") -> Manifest:
        if not isinstance(raw, dict):
            raise ManifestError(f"{source}: top level must be an object")
        if raw.get("format") != FORMAT_VERSION:
            raise ManifestError(f"{source}: field 'format' must be {FORMAT_VERSION}, got {raw.get('format')!r}")
        for key in ("repo_id", "repo_type", "revision"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise ManifestError(f"{source}: field {key!r} must be a non-empty string")
        if not isinstance(raw.get("files"), dict) or not raw["files"]:
            raise ManifestError(f"{source}: field 'files' must be a non-empty object")
        files = {p: _file_entry(p, entry, source) for p, entry in raw["files"].items()}
        return cls(raw["repo_id"], raw["repo_type"], raw["revision"], files)

    def select(self, only: list[str] | None = None) -> list[ManifestFile]:
        """The entries named by ``only`` (paths with or without a leading ``data/``), or all of them."""
        if not only:
            return list(self.files.values())
        chosen = []
        for name in only:
            key = name.removeprefix("data/").removeprefix("./")
            if key not in self.files:
                raise ManifestError(f"--only {name!r}: not in the manifest (files: {', '.join(self.files)})")
            chosen.append(self.files[key])
        return chosen


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _file_entry(path: str, entry: object, source: str) -> ManifestFile:
    where = f"{source}: files[{path!r}]"
    if not isinstance(entry, dict):
        raise ManifestError(f"{where} must be an object")
    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise ManifestError(f"{where}: path must be relative and stay inside the data folder")
    for key in ("bytes", "rows"):
        value = entry.get(key)
        if not _is_count(value):
            raise ManifestError(f"{where}: field {key!r} must be a non-negative integer, got {value!r}")
    if not isinstance(entry.get("sha256"), str) or not _SHA256.match(entry["sha256"]):
        raise ManifestError(f"{where}: field 'sha256' must be 64 lowercase hex digits")
    if entry.get("prompt") not in ("messages", "text"):
        raise ManifestError(f"{where}: field 'prompt' must be 'messages' or 'text', got {entry.get('prompt')!r}")
    domains = entry.get("domains")
    counts = list(domains.values()) if isinstance(domains, dict) else [None]
    if not all(_is_count(c) for c in counts) or sum(counts) != entry["rows"]:
        raise ManifestError(
            f"{where}: field 'domains' must be an object of non-negative integer counts that add up to 'rows'"
        )
    return ManifestFile(path, str(entry.get("config", "")), entry["prompt"], entry["bytes"], entry["sha256"],
                        entry["rows"], dict(domains))


def file_problem(path: str | os.PathLike, entry: ManifestFile) -> str | None:
    """Why the file at ``path`` does not match its manifest entry (size first, then sha256), or None."""
    path = Path(path)
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != entry.bytes:
        return f"size {size} != {entry.bytes}"
    digest = sha256_file(path)
    if digest != entry.sha256:
        return f"sha256 {digest} != {entry.sha256}"
    return None


def build_manifest(root: str | os.PathLike, *, repo_id: str, revision: str) -> dict:
    """A manifest for the four release files found under ``root`` (used for the sample data)."""
    files = {}
    for rel, (config, prompt) in RELEASE_LAYOUT.items():
        path = Path(root) / rel
        domains: Counter[str] = Counter()
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                domains[json.loads(line)["domain"]] += 1
        files[rel] = {"config": config, "prompt": prompt, "bytes": path.stat().st_size, "sha256": sha256_file(path),
                      "rows": sum(domains.values()), "domains": dict(sorted(domains.items()))}
    return {"format": FORMAT_VERSION, "repo_id": repo_id, "repo_type": "dataset", "revision": revision,
            "files": files}
