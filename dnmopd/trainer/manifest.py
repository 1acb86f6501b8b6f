"""The run manifest: what a checkpoint was trained on, saved in it (`manifest.json`) and checked on every resume.

Built once at start-up on global rank 0, from the resolved config and what it names:

    config  every option as a dotted key (`optimizer.lr`, `teachers.models.0.name`), except OPERATIONAL ones
            (where the run lives, how it reports, its checkpoint cadence, its parallel layout, server addresses)
            and those naming inputs, which are compared by content instead:
    files   each input file (INPUT_FILES): sha256 of its bytes and, for JSONL, of every line (row)
    models  each model folder (MODEL_FOLDERS): the sha256 of its weight files (headers and evenly spaced samples
            of files over FULL_HASH_BYTES), of config.json, of the chat template and of the vocabulary, the vocab
            size and the special-token ids; a folder not readable here (a server's) by its path alone, which the
            servers' start-up check has compared with the path they serve

On resume every difference from the checkpoint's manifest is refused, with an error naming it (config key old ->
new, file and line, model field), unless an entry of `checkpoint.allow_changes` covers its key (a dotted prefix,
`*` for any list index); accepted changes are logged once and apply from the resumed step (the optimizer's
hyperparameters and LR schedule come from the config, `step/optimization.py`). docs/resume.md has the details.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import torch.distributed as dist

from dnmopd.config import to_plain
from dnmopd.data.sample_data import resolve_data_path
from dnmopd.hf.models import config_vocab_size
from dnmopd.io import sha256_file
from dnmopd.trainer import checkpoint

logger = logging.getLogger(__name__)

MANIFEST_FORMAT = "dnmopd-manifest/1"
OPERATIONAL = ("run.name", "run.output_dir", "parallel.tensor", "parallel.pipeline", "parallel.virtual_pipeline",
               "checkpoint", "logging.metrics", "logging.progress", "logging.report", "teachers.models.*.pool",
               "rollout.engine.pool", "rollout.engine.update_dir")
"""Options that do not change what is trained: never compared."""
INPUT_FILES = ("data.train_file", "logging.probe.prompt_files", "logging.probe.file", "eval.prompts",
               "method.injection.bank", "sft.data")
MODEL_FOLDERS = ("student.hf_path", "rollout.engine.model_path", "teachers.models.*.model_path")
CANNOT_CHANGE = {"run.mode": "the checkpoint holds another mode's state",
                 "optimizer.name": "the checkpoint holds another optimizer's state",
                 "data.domains": "the checkpoint's method state has a column per domain"}
"""Changes no allow_changes entry can accept, and why."""
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
FULL_HASH_BYTES = 256 << 20
SAMPLES, SAMPLE_BYTES, HEAD_BYTES = 64, 64 << 10, 1 << 20
ABSENT = "(absent)"
MODEL_FIELDS = ("weights", "config", "vocab_size", "chat_template", "special_tokens", "vocabulary")


class ManifestError(RuntimeError):
    """The checkpoint to resume was trained on other inputs than this run's, and the change is not accepted."""


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    key: str
    """The dotted config key that names the changed option or input (what allow_changes lists)."""
    description: str


def check_resume(config, resume_from: Path | None) -> dict | None:
    """Every rank calls it. Rank 0 builds this run's manifest and checks it against the one saved in `resume_from`
    (None: a fresh run); returns it on rank 0 (to be saved in every checkpoint), None elsewhere. Raises
    `ManifestError` on every rank when a change is refused."""
    manifest, refusal = None, None
    if dist.get_rank() == 0:
        manifest = build(config)
        saved = checkpoint.read_manifest(resume_from) if resume_from is not None else None
        if resume_from is not None and saved is None:
            logger.warning("%s has no manifest (saved by an older dnmopd): its inputs cannot be checked",
                           resume_from)
        elif saved is not None:
            refusal = judge(differences(saved, manifest), config.checkpoint.allow_changes, resume_from)
    shared = [refusal]
    dist.broadcast_object_list(shared, src=0)
    if shared[0] is not None:
        raise ManifestError(shared[0])
    return manifest


# ----------------------------------------------------------------------------------------------- recording
def build(config) -> dict:
    """The manifest of a run config: reads every input file and model folder it names."""
    plain = to_plain(config)
    skip = OPERATIONAL + INPUT_FILES + MODEL_FOLDERS
    manifest = {"format": MANIFEST_FORMAT,
                "config": {key: value for key, value in _flatten(plain) if not _covered(key, skip)},
                "files": {key: _file_record(resolve_data_path(Path(value)))
                          for pattern in INPUT_FILES for key, value, _ in _lookup(plain, pattern)},
                "models": {key: _model_record(Path(value), owner.get("name"))
                           for pattern in MODEL_FOLDERS for key, value, owner in _lookup(plain, pattern)}}
    return json.loads(json.dumps(manifest))  # as a checkpoint's manifest.json reads back, to compare like with like


def _flatten(value, prefix: str = ""):
    """(dotted key, leaf) pairs; lists of mappings are indexed (`teachers.models.0.name`), other lists are leaves."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}{key}.")
    elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        for index, item in enumerate(value):
            yield from _flatten(item, f"{prefix}{index}.")
    else:
        yield prefix[:-1], value


def _lookup(plain: dict, pattern: str) -> list[tuple[str, object, dict]]:
    """(key, value, mapping holding it) of every set value a pattern names (`*`: each list index); a list of paths
    gives one entry per path."""
    found = [("", plain, {})]
    for part in pattern.split("."):
        step = []
        for key, node, _ in found:
            if part == "*" and isinstance(node, list):
                step += [(f"{key}{index}.", item, node) for index, item in enumerate(node)]
            elif isinstance(node, dict) and node.get(part) is not None:
                step.append((f"{key}{part}.", node[part], node))
        found = step
    entries = []
    for key, value, owner in found:
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        entries += [(key[:-1] if index is None else f"{key}{index}", item, owner) for index, item in items]
    return entries


def _covered(key: str, patterns) -> bool:
    """Whether a pattern is a dotted prefix of `key` (`*` matches one part)."""
    parts = key.split(".")
    return any(len(p) <= len(parts) and all(a in ("*", b) for a, b in zip(p, parts, strict=False))
               for p in (pattern.split(".") for pattern in patterns))


def _file_record(path: Path) -> dict:
    if not path.is_file():
        return {"path": str(path), "sha256": None}
    data = path.read_bytes()
    record = {"path": str(path), "sha256": hashlib.sha256(data).hexdigest()}
    if path.suffix == ".jsonl":
        record["lines"] = [hashlib.sha256(line).hexdigest()[:16] for line in data.splitlines()]
    return record


def _model_record(folder: Path, name: str | None) -> dict:
    record = {"path": str(folder), "name": name, "readable": (folder / "config.json").is_file()}
    if not record["readable"]:
        return record
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError):  # weights without a tokenizer: the rest is still recorded
        tokenizer = None
    template = getattr(tokenizer, "chat_template", None)
    return {**record, "weights": _weights_digest(folder), "config": sha256_file(folder / "config.json"),
            "vocab_size": config_vocab_size(str(folder)),
            "chat_template": hashlib.sha256(template.encode()).hexdigest() if isinstance(template, str) else None,
            "special_tokens": dict(zip(tokenizer.all_special_tokens, tokenizer.all_special_ids, strict=True))
            if tokenizer is not None else None,
            "vocabulary": _digest(json.dumps(sorted(tokenizer.get_vocab().items()))) if tokenizer is not None
            else None}


def _weights_digest(folder: Path) -> str | None:
    files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    lines = [f"{p.name} {p.stat().st_size} {_weight_file_digest(p)}" for p in files]
    return _digest("\n".join(lines)) if files else None


def _weight_file_digest(path: Path) -> str:
    """sha256 of the file, or for a file over FULL_HASH_BYTES of its head (a safetensors file's whole header:
    every tensor's name, dtype, shape and offsets) and SAMPLES evenly spaced pieces of the rest."""
    size = path.stat().st_size
    if size <= FULL_HASH_BYTES:
        return sha256_file(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        head = 8 + int.from_bytes(f.read(8), "little") if path.suffix == ".safetensors" else HEAD_BYTES
        f.seek(0)
        digest.update(f.read(head))
        for index in range(SAMPLES):
            f.seek(head + (size - head - SAMPLE_BYTES) * index // (SAMPLES - 1))
            digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------------------------- comparing
def differences(old: dict, new: dict) -> list[Change]:
    """Every change from the manifest `old` (a checkpoint's) to `new` (this run's)."""
    changes = _config_changes(old["config"], new["config"])
    for key in sorted(old["files"].keys() | new["files"].keys()):
        before, after = old["files"].get(key), new["files"].get(key)
        if before is None or after is None or before["sha256"] != after["sha256"]:
            changes.append(Change(key, f"{key}: {_file_change(before, after)}"))
    for key in sorted(old["models"].keys() | new["models"].keys()):
        before, after = old["models"].get(key), new["models"].get(key)
        changes += [Change(key, f"{key}: {change}") for change in _model_changes(before, after)]
    return changes


def _config_changes(old: dict, new: dict) -> list[Change]:
    """Changed values, and keys on one side only inside a list (an added or removed teacher); other one-sided keys
    are options that a newer or older dnmopd added or removed: logged, not compared."""
    changes, unpaired = [], []
    for key in sorted(old.keys() | new.keys()):
        if (key not in old or key not in new) and not any(part.isdigit() for part in key.split(".")):
            unpaired.append(key)
        elif old.get(key, ABSENT) != new.get(key, ABSENT):
            changes.append(Change(key, f"{key}: {_show(old.get(key, ABSENT))} -> {_show(new.get(key, ABSENT))}"))
    if unpaired:
        logger.warning("options on one side only (another dnmopd version), not compared: %s", ", ".join(unpaired))
    return changes


def _show(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _file_change(before: dict | None, after: dict | None) -> str:
    if before is None or after is None:
        return f"{before['path'] if before else '(not set)'} -> {after['path'] if after else '(not set)'}"
    where = after["path"] if before["path"] == after["path"] else f"{before['path']} -> {after['path']}"
    if after["sha256"] is None:
        return f"{where} is missing"
    old, new = before.get("lines"), after.get("lines")
    if old is None or new is None:
        return f"{where}: content changed (sha256 {_short(before['sha256'])} -> {_short(after['sha256'])})"
    return f"{where}: {_rows_change(old, new)}"


def _rows_change(old: list[str], new: list[str]) -> str:
    """The changed rows (lines) of a JSONL file, named by their line numbers in the new file."""
    if sorted(old) == sorted(new):
        first = next(i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b)
        return (f"the same {len(new)} rows in another order (line {first + 1} now holds the row of line "
                f"{old.index(new[first]) + 1})")
    start = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    removed, added = len(old) - end - start, len(new) - end - start
    if removed and added:
        lines = _lines(start, added)
        return f"{lines} changed" if removed == added else f"{lines} changed (were {removed} rows)"
    if added:
        return f"{_lines(start, added)} added"
    return f"{_lines(start, removed)} of the checkpoint's file removed"


def _lines(start: int, count: int) -> str:
    return f"line {start + 1}" if count == 1 else f"lines {start + 1}-{start + count}"


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "none"


def _model_changes(before: dict | None, after: dict | None) -> list[str]:
    if before is None or after is None:
        return [f"{before['path'] if before else '(not set)'} -> {after['path'] if after else '(not set)'}"]
    where = after["path"] + (f" ({after['name']})" if after.get("name") else "")
    if not (before["readable"] and after["readable"]):
        return [] if before["path"] == after["path"] else [f"{before['path']} -> {where} (a folder not readable here: "
                                                           "compared by path)"]
    changes = []
    for field in MODEL_FIELDS:
        old, new = before.get(field), after.get(field)
        if old == new:
            continue
        if field == "special_tokens":
            old, new = old or {}, new or {}
            shown = ", ".join(f"{token} {old.get(token)} -> {new.get(token)}"
                              for token in sorted(old.keys() | new.keys()) if old.get(token) != new.get(token))
        elif field == "vocab_size":
            shown = f"{old} -> {new}"
        else:
            shown = f"sha256 {_short(old)} -> {_short(new)}"
        changes.append(f"{where}: {field.replace('_', ' ')} {shown}")
    return changes


# ----------------------------------------------------------------------------------------------- judging
def judge(changes: list[Change], allowed: list[str], directory: Path) -> str | None:
    """The refusal (None: every change accepted, and logged) of resuming `directory` with `changes`."""
    accepted = [c for c in changes if _covered(c.key, allowed) and _why_not(c.key) is None]
    refused = [c for c in changes if c not in accepted]
    unused = [entry for entry in allowed if not any(_covered(c.key, [entry]) for c in changes)]
    if unused:
        logger.warning("checkpoint.allow_changes lists %s, which did not change", ", ".join(unused))
    if not refused:
        if accepted:
            logger.warning("resuming %s with changed inputs (checkpoint.allow_changes): %s", directory,
                           "; ".join(c.description for c in accepted))
        return None
    lines = [f"  {c.description}" + (f" (cannot change in a resumed run: {why})" if (why := _why_not(c.key)) else "")
             for c in refused]
    keys = ", ".join(dict.fromkeys(c.key for c in refused if _why_not(c.key) is None))
    advice = f"to continue with them, add them to checkpoint.allow_changes: [{keys}] (docs/resume.md); " if keys else ""
    return (f"{directory} was trained on other inputs than this run's:\n" + "\n".join(lines) + "\n" + advice +
            "checkpoint.resume: fresh starts over (removing the run's checkpoints)")


def _why_not(key: str) -> str | None:
    return next((why for option, why in CANNOT_CHANGE.items() if _covered(key, [option])), None)
