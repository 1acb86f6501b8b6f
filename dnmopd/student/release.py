"""Hugging Face release folder from the student: the model as the original architecture, ready to serve.

Contents: safetensors shards (+ index when more than one), the original ``config.json`` (for the Qwen3.5 VL
layout with its vision tower and MTP tensors copied unchanged from the base model), ``generation_config.json``,
the tokenizer files with the chat template, and a model card (``README.md``) with the training configuration,
final metrics and the verification result. The folder is written under a temporary name, reloaded with
``transformers`` and compared with the student's logits on a probe batch, and only then renamed into place.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from dnmopd.student.weights import PASSTHROUGH_PREFIXES, SafetensorsFolder

_MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors.index.json", "README.md"}


class ShardWriter:
    """Stream tensors into ``model-0000i-of-0000N.safetensors`` files of at most ``max_shard_bytes`` each."""

    def __init__(self, folder: Path, max_shard_bytes: int):
        self.folder, self.max_shard_bytes = folder, max_shard_bytes
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = 0
        self.shards: list[list[str]] = []
        self.total_bytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + size > self.max_shard_bytes:
            self._flush()
        self.pending[name] = tensor.detach().to("cpu", copy=True).contiguous()
        self.pending_bytes += size
        self.total_bytes += size

    def _flush(self) -> None:
        save_file(self.pending, self.folder / f"shard-{len(self.shards)}.tmp", metadata={"format": "pt"})
        self.shards.append(list(self.pending))
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> None:
        if self.pending or not self.shards:
            self._flush()
        count = len(self.shards)
        if count == 1:
            (self.folder / "shard-0.tmp").rename(self.folder / "model.safetensors")
            return
        weight_map = {}
        for i, names in enumerate(self.shards):
            file = f"model-{i + 1:05d}-of-{count:05d}.safetensors"
            (self.folder / f"shard-{i}.tmp").rename(self.folder / file)
            weight_map.update(dict.fromkeys(names, file))
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
        (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _tokenizer_files(source: Path) -> list[Path]:
    """The tokenizer files of ``source`` (an error unless they include a tokenizer and a chat template)."""
    files = [p for p in source.iterdir() if p.is_file() and p.name not in _MODEL_FILES]
    files = [p for p in files if not p.name.endswith(".safetensors") and p.name != "student.json"]
    names = {p.name for p in files}
    if not names & {"tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model"}:
        raise FileNotFoundError(f"{source}: no tokenizer files; pass the tokenizer folder with --tokenizer")
    config = json.loads((source / "tokenizer_config.json").read_text()) if "tokenizer_config.json" in names else {}
    if "chat_template.jinja" not in names and "chat_template.json" not in names and "chat_template" not in config:
        raise FileNotFoundError(f"{source}: the tokenizer has no chat template (chat_template.jinja)")
    return files


def _generation_config(student, base: Path | None) -> dict:
    if base is not None and (base / "generation_config.json").is_file():
        return json.loads((base / "generation_config.json").read_text())
    text = student.arch.text_config
    ids = {k: text[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if text.get(k) is not None}
    return {"_from_model_config": True, **ids}


def model_card(student, *, name: str, training_config: str | None, metrics: dict | None, max_logit_diff: float) -> str:
    arch = student.arch
    lines = [
        "---",
        "library_name: transformers",
        *([f"base_model: {Path(student.base_model).name}"] if student.base_model else []),
        "tags: [dnmopd, on-policy-distillation]",
        "---",
        f"# {name}",
        "",
        f"Student trained with dnmopd (domain-normalized multi-teacher on-policy distillation)"
        f"{' from ' + Path(student.base_model).name if student.base_model else ''}.",
        "",
        "## Architecture",
        "",
        f"{arch.hf_config.get('architectures', [arch.family])[0]}: {arch.num_layers} layers, hidden size "
        f"{arch.hidden_size}, vocabulary {arch.vocab_size}, "
        f"{'tied' if arch.tie_embeddings else 'untied'} embeddings.",
        "",
    ]
    if metrics:
        lines += ["## Final metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in metrics.items()] + [""]
    if training_config:
        lines += ["## Training configuration", "", "```yaml", training_config.rstrip(), "```", ""]
    saved = student.dims
    lines += [
        "## Conversion",
        "",
        f"Exported from a megatron-core distributed checkpoint (loaded at TP={saved.tp_size}, PP={saved.pp_size}).",
        f"Verified by reloading with transformers: max |logit difference| vs megatron = {max_logit_diff:.3e} "
        "(float32, probe batch).",
        "",
    ]
    return "\n".join(lines)


def _verifier_rank(student) -> int:
    flags = [None] * dist.get_world_size()
    dist.all_gather_object(flags, student.is_last_stage and student.dims.tp_rank == 0)
    return max(rank for rank, flag in enumerate(flags) if flag)


def verify_release(student, folder: Path, *, probe_length: int = 32) -> float:
    """Max |logit difference| between the release reloaded by transformers and the student (all ranks).

    Casts the student to float32 in place; both sides compute in float32.
    """
    from transformers import AutoModelForCausalLM

    from dnmopd.student.pipeline import forward_logits

    for chunk in student.chunks:
        chunk.float()
    ids = torch.randint(0, student.arch.vocab_size, (2, probe_length), generator=torch.Generator().manual_seed(0))
    logits = forward_logits(student, ids)
    verifier = _verifier_rank(student)
    result = [None]
    if dist.get_rank() == verifier:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(logits.device)
        with torch.no_grad():
            reference = model(ids.to(logits.device)).logits
        result = [(reference - logits).abs().max().item()]
    dist.broadcast_object_list(result, src=verifier)
    return result[0]


def write_release(
    student,
    output: str | Path,
    *,
    base_model: str | Path | None = None,
    tokenizer: str | Path | None = None,
    training_config: str | None = None,
    metrics: dict | None = None,
    max_shard_bytes: int = 5 * 2**30,
    tolerance: float = 1e-2,
    probe_length: int = 32,
    log=print,
) -> Path:
    """Export ``student`` to the release folder ``output`` (all ranks call; rank 0 writes). Returns its path."""
    output = Path(output)
    base = Path(base_model or student.base_model) if (base_model or student.base_model) else None
    tokenizer = Path(tokenizer) if tokenizer else None
    _check_sources(student, base, tokenizer)
    rank = dist.get_rank()
    tmp = output.with_name(f".{output.name}.tmp")
    if rank == 0:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    dist.barrier()
    try:
        writer = ShardWriter(tmp, max_shard_bytes) if rank == 0 else None
        for name, tensor in student.hf_tensors(source_dtypes=True):
            if writer:
                writer.add(name, tensor)
        if rank == 0:
            log(f"wrote {writer.total_bytes / 2**20:.1f} MiB of language-model weights")
            _write_side_files(student, tmp, writer, base, tokenizer)
            writer.close()
        dist.barrier()
        diff = verify_release(student, tmp, probe_length=probe_length)
        log(f"verification: max |logit difference| transformers vs megatron = {diff:.3e} (tolerance {tolerance})")
        if not diff <= tolerance:
            raise RuntimeError(f"release verification failed: max |logit difference| {diff:.3e} > {tolerance}")
        if rank == 0:
            card = model_card(
                student, name=output.name, training_config=training_config, metrics=metrics, max_logit_diff=diff
            )
            (tmp / "README.md").write_text(card)
            if output.exists():
                shutil.rmtree(output)
            tmp.rename(output)
    finally:
        dist.barrier()
        if rank == 0 and tmp.exists():
            shutil.rmtree(tmp)
    return output


def _check_sources(student, base: Path | None, tokenizer: Path | None) -> None:
    """Fail early (on every rank alike) when the base model or tokenizer needed by the release is missing."""
    if student.arch.vision_language and (base is None or not base.is_dir()):
        raise FileNotFoundError(
            f"base model folder {base} not found: a vision-language student needs --base-model for its vision "
            "tower and MTP tensors"
        )
    source = tokenizer or base
    if source is None or not source.is_dir():
        raise FileNotFoundError(f"tokenizer folder {source} not found: pass --tokenizer")
    _tokenizer_files(source)


def _write_side_files(student, folder: Path, writer: ShardWriter, base: Path | None, tokenizer: Path | None) -> None:
    if base is not None and base.is_dir():
        source = SafetensorsFolder(base)
        for name in source.keys():
            if name.startswith(PASSTHROUGH_PREFIXES):
                writer.add(name, source.get(name))
    (folder / "config.json").write_text(json.dumps(student.arch.hf_config, indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps(_generation_config(student, base), indent=2) + "\n")
    for path in _tokenizer_files(tokenizer or base):
        shutil.copy2(path, folder / path.name)
