"""Weight-space merges of Hugging Face checkpoints: the paper's ParamMerge-Avg and ParamMerge-TA baselines.

    merge = CheckpointMerge.Config(method="task_arithmetic", base="Qwen3.5-2B",
                                   experts=["teacher-math", "teacher-code", "teacher-if"]).build()
    merge.write("releases/param-merge-ta")

* ``average``: ``theta = (1/K) * sum_k theta_k``, the uniform mean of the K experts;
* ``task_arithmetic``: ``theta = theta_0 + lam * sum_k (theta_k - theta_0)`` from the base ``theta_0``.

The merge streams tensor by tensor: each tensor is read lazily (memory-mapped) from every input's safetensors
shards, summed in float32 (float64 for float64 tensors) and saved in the first expert's dtype, so memory holds
the output shard being filled plus at most three float32 copies of one tensor (accumulator, base, expert
difference). Every check except the equality of integer tensors runs before any weight is read:

* every input holds the same tensor names with the same shapes, except base-only ``mtp.*`` tensors (the
  multi-token-prediction head of the released Qwen3.5 checkpoints, which fine-tuned experts usually lack),
  which are left out of the output rather than copied stale from the base;
* integer and bool tensors are copied, never averaged, and must be equal in every input (checked while
  merging); float8 and other quantized dtypes are refused, since their scales live in separate tensors;
* ``config.json``, ``generation_config.json``, tokenizer and other side files are copied from the base (else the
  first expert) after checking that every input holding them has equal copies (JSON compared as data,
  ignoring the ``transformers_version`` and ``_name_or_path`` stamps).

The output (safetensors shards with an index, side files, a ``README.md`` model card naming the method,
inputs and lambda; its ``base_model`` lists the inputs' Hub ids when all are known from their Hugging Face
cache paths) is written under a temporary sibling name, given the file modes of the umask and renamed into
place at the end.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open

from dnmopd.hf.model_card import hub_id_from_path
from dnmopd.hf.release import ShardWriter
from dnmopd.io import atomic_directory
from dnmopd.student.weights import SafetensorsFolder

METHODS = ("average", "task_arithmetic")
DEFAULT_MAX_SHARD_BYTES = 4_800_000_000
"""4,800 MB shards, as the paper's merged checkpoints."""
EXCLUDED_PREFIX = "mtp."
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
_INTEGER_DTYPES = {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"}
_STAMP_KEYS = {"transformers_version", "_name_or_path"}
_WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json", ".pt", ".pth")
_AVERAGE_TOLERANCE = 0.01


class CheckpointMerge:
    @dataclass(kw_only=True, slots=True)
    class Config:
        method: str = "average"
        """``average`` (uniform mean of the experts) or ``task_arithmetic`` (from ``base``)."""
        experts: list[str] = field(default_factory=list)
        """HF folders of the experts (at least two); the first one's dtype is kept per tensor."""
        base: str | None = None
        """HF folder of the base model: required by ``task_arithmetic``; with ``average`` it is only checked
        and supplies the config and tokenizer files."""
        lam: float | None = None
        """Task-arithmetic scale lambda (default 1.0, the paper's). Must be finite, > 0 and not within 1 % of
        1/K, which would turn task arithmetic into the average (the paper refuses 1/3 for three experts)."""
        max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
        """Largest safetensors shard of the output, in bytes."""

        def __post_init__(self) -> None:
            if self.method not in METHODS:
                raise ValueError(f"CheckpointMerge.Config.method must be one of {METHODS}, got {self.method!r}")
            if len(self.experts) < 2:
                raise ValueError(f"CheckpointMerge.Config.experts: a merge needs at least two, got {self.experts}")
            paths = [Path(p).resolve() for p in [*self.experts, *([self.base] if self.base else [])]]
            if len(set(paths)) != len(paths):
                raise ValueError(f"CheckpointMerge.Config: a folder is listed twice in experts/base: {paths}")
            if self.max_shard_bytes <= 0:
                raise ValueError(f"CheckpointMerge.Config.max_shard_bytes must be > 0, got {self.max_shard_bytes}")
            if self.method == "average":
                if self.lam is not None:
                    raise ValueError("CheckpointMerge.Config.lam applies to method 'task_arithmetic' only")
                return
            if self.base is None:
                raise ValueError("CheckpointMerge.Config.base: method 'task_arithmetic' needs the base model")
            check_lambda(self.scale, len(self.experts))

        @property
        def scale(self) -> float:
            """Lambda of task arithmetic (1.0 unless set)."""
            return 1.0 if self.lam is None else self.lam

        def build(self) -> CheckpointMerge:
            return CheckpointMerge(self)

    def __init__(self, config: CheckpointMerge.Config):
        self.config = config
        self.experts = [_Checkpoint.open(p, f"expert {i + 1}") for i, p in enumerate(config.experts)]
        self.base = _Checkpoint.open(config.base, "base") if config.base else None
        self.names, self.excluded = plan_tensors(self.experts, self.base)
        self.source = self.base or self.experts[0]
        self.side_files, self.notes = check_side_files(self.source, self.inputs)

    @property
    def inputs(self) -> list[_Checkpoint]:
        return [*([self.base] if self.base else []), *self.experts]

    def write(self, output: str | Path, *, log=print) -> Path:
        """Merge into the folder ``output`` (replaced if it exists) and return its path."""
        output = Path(output)
        if any(output.resolve() == c.path.resolve() for c in self.inputs):
            raise ValueError(f"{output}: the output folder is one of the inputs")
        for note in self.notes:
            log(f"note: {note}")
        if self.excluded:
            log(f"leaving out {len(self.excluded)} base-only {EXCLUDED_PREFIX}* tensors (absent from the experts)")
        with atomic_directory(output) as tmp:
            writer = ShardWriter(tmp, self.config.max_shard_bytes)
            self._merge_into(writer, log)
            writer.close()
            for path in self.side_files:
                shutil.copy2(path, tmp / path.name)
            (tmp / "README.md").write_text(self.model_card(output.name))
        log(f"wrote {output} ({writer.total_bytes / 2**30:.2f} GiB, {len(writer.shards)} shard(s))")
        return output

    def _merge_into(self, writer: ShardWriter, log) -> None:
        total = len(self.names)
        step = max(1, total // 20)
        log(f"{self.config.method}: merging {total} tensors of {len(self.experts)} experts")
        for i, name in enumerate(self.names, 1):
            writer.add(name, self.merged_tensor(name))
            if i % step == 0 or i == total:
                log(f"  {i}/{total} tensors, {writer.total_bytes / 2**30:.2f} GiB")

    def merged_tensor(self, name: str) -> torch.Tensor:
        """The merged value of tensor ``name``, in the first expert's dtype."""
        first = self.experts[0].folder.get(name)
        if self.experts[0].dtypes[name] in _INTEGER_DTYPES:
            for other in [c for c in self.inputs if c is not self.experts[0]]:
                value = other.folder.get(name)
                if value.dtype != first.dtype or not torch.equal(value, first):
                    raise ValueError(
                        f"integer tensor {name!r} differs between {self.experts[0].file(name)} and "
                        f"{other.file(name)}: integer tensors are copied, never averaged, so they must be equal"
                    )
            return first
        accumulator = torch.promote_types(torch.float32, first.dtype)
        total = torch.zeros(first.shape, dtype=accumulator)
        if self.config.method == "average":
            for expert in self.experts:
                total.add_(expert.folder.get(name).to(accumulator))
            return total.div_(len(self.experts)).to(first.dtype)
        theta0 = self.base.folder.get(name).to(accumulator)
        for expert in self.experts:
            total.add_(expert.folder.get(name).to(accumulator, copy=True).sub_(theta0))
        return total.mul_(self.config.scale).add_(theta0).to(first.dtype)

    def model_card(self, name: str) -> str:
        if self.config.method == "average":
            formula = f"theta = (1/{len(self.experts)}) * sum_k theta_k (uniform average, ParamMerge-Avg)"
        else:
            formula = (
                f"theta = theta_0 + {self.config.scale!r} * sum_k (theta_k - theta_0) (task arithmetic, ParamMerge-TA)"
            )
        from huggingface_hub import ModelCardData

        hub_ids = [hub_id_from_path(c.path.resolve()) for c in self.inputs]
        merged_from = {"base_model": hub_ids, "base_model_relation": "merge"} if all(hub_ids) else {}
        metadata = ModelCardData(library_name="transformers", tags=["dnmopd", "model-merging"], **merged_from)
        lines = [
            "---",
            metadata.to_yaml(),
            "---",
            f"# {name}",
            "",
            f"Weight-space merge of {len(self.experts)} checkpoints with dnmopd, method `{self.config.method}`:",
            "",
            f"    {formula}",
            "",
            "## Inputs",
            "",
            "| role | folder |",
            "|---|---|",
            *[f"| {c.role} | {c.path} |" for c in self.inputs],
            "",
            "## Details",
            "",
            f"- {len(self.names)} tensors, summed in float32 and saved in the first expert's dtype"
            + (f"; lambda = {self.config.scale!r}." if self.config.method == "task_arithmetic" else "."),
        ]
        integers = sum(self.experts[0].dtypes[n] in _INTEGER_DTYPES for n in self.names)
        if integers:
            lines.append(f"- {integers} integer tensors (equal in every input) copied unchanged.")
        if self.excluded:
            lines.append(
                f"- Left out: {len(self.excluded)} `{EXCLUDED_PREFIX}*` tensors of the base (multi-token-prediction "
                "head) that the experts do not have."
            )
        copied = ", ".join(f"`{p.name}`" for p in self.side_files)
        lines.append(f"- Copied from the {self.source.role} after checking the inputs' copies are equal: {copied}.")
        lines += [f"- Note: {note}." for note in self.notes]
        return "\n".join(lines) + "\n"


def check_lambda(lam: float, num_experts: int) -> None:
    """Refuse a task-arithmetic lambda that is not finite and > 0, or that is within 1 % of 1/K.

    With lambda = 1/K the base cancels and task arithmetic is the uniform average: such a value is almost always
    meant as ``method=average`` (or a mistaken per-expert weight), so it is refused rather than run under the
    wrong name. Lambda <= 0 does not move towards any expert (0 returns the base).
    """
    if not math.isfinite(lam) or lam <= 0:
        raise ValueError(f"CheckpointMerge.Config.lam must be finite and > 0, got {lam}")
    if abs(lam * num_experts - 1) <= _AVERAGE_TOLERANCE:
        raise ValueError(
            f"CheckpointMerge.Config.lam = {lam} is (within 1 %) 1/{num_experts}, which makes task arithmetic "
            f"over {num_experts} experts the uniform average: use method 'average' for that, or the paper's "
            "lam = 1.0"
        )


@dataclass
class _Checkpoint:
    role: str
    path: Path
    folder: SafetensorsFolder
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    """Safetensors dtype codes (``BF16``, ``I64``, ...)."""

    @classmethod
    def open(cls, path: str | Path, role: str) -> _Checkpoint:
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"{role} {path}: not a folder")
        folder = SafetensorsFolder(path)
        shapes, dtypes = {}, {}
        for file in sorted(set(folder.file_of.values())):
            if not file.is_file():
                raise FileNotFoundError(f"{role} {path}: the index lists {file.name}, which is missing")
            with safe_open(file, "pt") as f:
                for name in f.keys():
                    tensor = f.get_slice(name)
                    shapes[name], dtypes[name] = tuple(tensor.get_shape()), tensor.get_dtype()
        for name, file in folder.file_of.items():
            if name not in shapes:
                raise ValueError(f"{path}: the index lists tensor {name!r} in {file}, which does not hold it")
        order = list(folder.file_of)
        return cls(role, path, folder, {n: shapes[n] for n in order}, {n: dtypes[n] for n in order})

    def file(self, name: str) -> Path:
        return self.folder.file_of[name]


def plan_tensors(experts: list[_Checkpoint], base: _Checkpoint | None) -> tuple[list[str], list[str]]:
    """The names to merge (the first expert's order) and the base-only ``mtp.*`` names left out.

    Refuses any other difference in names, shapes or dtype kinds between the inputs, naming tensor and files.
    """
    first = experts[0]
    in_experts = set().union(*(e.shapes for e in experts))
    excluded = [n for n in base.shapes if n.startswith(EXCLUDED_PREFIX) and n not in in_experts] if base else []
    for other in [*experts[1:], *([base] if base else [])]:
        _check_same_names(first, other, set(other.shapes) - set(excluded))
    for name in first.shapes:
        for other in [*experts[1:], *([base] if base else [])]:
            if other.shapes[name] != first.shapes[name]:
                raise ValueError(
                    f"tensor {name!r} has shape {list(first.shapes[name])} in {first.file(name)} but "
                    f"{list(other.shapes[name])} in {other.file(name)}"
                )
        _check_dtypes(name, [first, *experts[1:], *([base] if base else [])])
    return list(first.shapes), excluded


def _check_same_names(first: _Checkpoint, other: _Checkpoint, names: set[str]) -> None:
    for holder, lacking, missing in (
        (first, other, set(first.shapes) - names),
        (other, first, names - set(first.shapes)),
    ):
        if missing:
            shown = sorted(missing)
            more = f" (and {len(shown) - 1} more: {shown[1:5]}{'...' if len(shown) > 5 else ''})" if shown[1:] else ""
            raise ValueError(
                f"tensor {shown[0]!r}{more} is in {holder.role} {holder.file(shown[0])} but not in "
                f"{lacking.role} {lacking.path}"
            )


def _check_dtypes(name: str, inputs: list[_Checkpoint]) -> None:
    kinds = set()
    for checkpoint in inputs:
        code = checkpoint.dtypes[name]
        if code not in _FLOAT_DTYPES and code not in _INTEGER_DTYPES:
            raise ValueError(
                f"tensor {name!r} in {checkpoint.file(name)} has dtype {code}: quantized tensors cannot be merged "
                "one by one (their scales are separate tensors); merge the unquantized checkpoints"
            )
        kinds.add("float" if code in _FLOAT_DTYPES else "integer")
    if len(kinds) > 1:
        codes = ", ".join(f"{c.dtypes[name]} in {c.file(name)}" for c in inputs)
        raise ValueError(f"tensor {name!r} is a float tensor in some inputs and an integer one in others: {codes}")


def _side_files(folder: Path) -> dict[str, Path]:
    """Config, tokenizer and other non-weight files of an HF folder (not hidden files or a model card)."""
    return {
        p.name: p
        for p in sorted(folder.iterdir())
        if p.is_file()
        and not p.name.startswith(".")
        and p.name != "README.md"
        and not p.name.endswith(_WEIGHT_SUFFIXES)
    }


def check_side_files(source: _Checkpoint, inputs: list[_Checkpoint]) -> tuple[list[Path], list[str]]:
    """The source's side files to copy, after checking every other input's copies are equal.

    Returns the files and notes on files that could not be compared (missing from some input). ``config.json``
    must be in every input.
    """
    for checkpoint in inputs:
        if not (checkpoint.path / "config.json").is_file():
            raise FileNotFoundError(f"{checkpoint.role} {checkpoint.path}: no config.json")
    files = _side_files(source.path)
    notes = []
    for other in inputs:
        if other is source:
            continue
        theirs = _side_files(other.path)
        for name in sorted(set(files) | set(theirs)):
            if name not in theirs:
                notes.append(f"{name} of the {source.role} not compared: {other.role} {other.path} has none")
            elif name not in files:
                notes.append(f"{name} of {other.role} {other.path} not copied: the {source.role} has none")
            elif difference := file_difference(files[name], theirs[name]):
                raise ValueError(
                    f"{name} differs between {source.role} {source.path} and {other.role} {other.path}: {difference}"
                )
    return list(files.values()), notes


def file_difference(a: Path, b: Path) -> str | None:
    """What differs between two files (JSON compared as data without writer stamps), or None if equal."""
    if a.suffix == ".json":
        try:
            data = [json.loads(p.read_text()) for p in (a, b)]
        except (json.JSONDecodeError, UnicodeDecodeError):
            data = None
        if data is not None:
            data = [{k: v for k, v in d.items() if k not in _STAMP_KEYS} if isinstance(d, dict) else d for d in data]
            differences = json_differences(*data)
            return "; ".join(differences[:5]) + ("; ..." if len(differences) > 5 else "") if differences else None
    return None if a.read_bytes() == b.read_bytes() else "the contents differ"


def json_differences(a, b, path: str = "") -> list[str]:
    """Dotted paths (with both values) where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                found.append(f"{where} ({_short(a, key)} vs {_short(b, key)})")
            else:
                found += json_differences(a[key], b[key], where)
        return found
    return [] if a == b else [f"{path or '<top level>'} ({_short(a)} vs {_short(b)})"]


def _short(value, key=None) -> str:
    """``value`` (or ``value[key]``, "absent" when missing) as JSON, cut to 60 characters."""
    if key is not None:
        if key not in value:
            return "absent"
        value = value[key]
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
