"""Hugging Face release folder from the student: the model as the original architecture, ready to serve.

Contents: safetensors shards (+ index when more than one), the original ``config.json`` completed for every
engine (``dnmopd.hf.config.engine_config``; for the Qwen3.5 VL layout with its vision tower and MTP tensors copied
unchanged from the base model), ``generation_config.json`` (the base model's, checked against the config and
the tokenizer, or derived from them), the tokenizer files with the chat template, and a Hub model card
(``README.md``, see ``model_card``). The folder is written under a temporary name, reloaded with
``transformers`` and compared with the student's logits on a probe batch, and only then given the file modes
of the umask and renamed into place.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from dnmopd.hf.config import engine_config, generation_config
from dnmopd.hf.model_card import CardConfig, Export, model_card, run_facts
from dnmopd.io import atomic_directory
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


def _verifier_rank(student) -> int:
    flags = [None] * dist.get_world_size()
    dist.all_gather_object(flags, student.is_last_stage and student.dims.tp_rank == 0)
    return max(rank for rank, flag in enumerate(flags) if flag)


def verify_release(student, folder: Path, *, probe_length: int = 32) -> float:
    """Max |logit difference| between the release reloaded by transformers and the student (all ranks).

    Casts the student to float32 in place; both sides compute in float32.
    """
    from transformers import AutoModelForCausalLM

    from dnmopd.student.logits import forward_logits

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
    name: str | None = None,
    source: str = "the student in memory",
    card: CardConfig | None = None,
    training_config: str | None = None,
    metrics: dict | None = None,
    max_shard_bytes: int = 5 * 2**30,
    tolerance: float = 1e-2,
    probe_length: int = 32,
    log=print,
) -> Path:
    """Export ``student`` to the release folder ``output`` (all ranks call; rank 0 writes). Returns its path.

    ``base_model`` is the HF folder whose vision/MTP tensors, generation config and model card are reused
    (default: the one the student was loaded from); ``tokenizer`` the tokenizer folder (default: the base
    model). ``name`` titles the model card (default: the run name in ``training_config``, else the folder
    name); ``source`` says what was exported; ``card`` sets the card's base model id and license.
    """
    output = Path(output)
    if base_model is not None and not Path(base_model).is_dir():
        raise FileNotFoundError(f"base model folder {base_model} not found")
    base = Path(base_model or student.base_model) if (base_model or student.base_model) else None
    if base is not None and not base.is_dir() and not student.arch.vision_language:
        base = None  # the recorded base folder is gone; the tokenizer must come from `tokenizer`
    tokenizer = Path(tokenizer) if tokenizer else None
    config, generation = _check_sources(student, base, tokenizer)
    rank = dist.get_rank()
    try:
        with contextlib.ExitStack() as stack:  # rank 0 builds the folder; every rank reads it for the check
            tmp = [stack.enter_context(atomic_directory(output)) if rank == 0 else None]
            dist.broadcast_object_list(tmp, src=0)
            tmp = tmp[0]
            writer = ShardWriter(tmp, max_shard_bytes) if rank == 0 else None
            for tensor_name, tensor in student.hf_tensors(source_dtypes=True):
                if writer:
                    writer.add(tensor_name, tensor)
            if rank == 0:
                log(f"wrote {writer.total_bytes / 2**20:.1f} MiB of language-model weights")
                _write_side_files(tmp, writer, base, tokenizer, config, generation)
                writer.close()
            dist.barrier()
            diff = verify_release(student, tmp, probe_length=probe_length)
            log(f"verification: max |logit difference| transformers vs megatron = {diff:.3e} (tolerance {tolerance})")
            if not diff <= tolerance:
                raise RuntimeError(f"release verification failed: max |logit difference| {diff:.3e} > {tolerance}")
            if rank == 0:
                export = _export_facts(student, source, base, diff)
                title = name or run_facts(training_config).get("name") or output.name
                text = model_card(export, card or CardConfig(), name=title, training_config=training_config,
                                  metrics=metrics)
                (tmp / "README.md").write_text(text)
    finally:
        dist.barrier()
    return output


def _export_facts(student, source: str, base: Path | None, max_logit_diff: float) -> Export:
    arch = student.arch
    architecture = arch.hf_config.get("architectures", [arch.family])[0]
    return Export(
        architecture=architecture,
        summary=f"{architecture}: {arch.num_layers} layers, hidden size {arch.hidden_size}, vocabulary "
                f"{arch.vocab_size}, {'tied' if arch.tie_embeddings else 'untied'} embeddings",
        source=source,
        tensor_dtypes=sorted(set(student.hf_dtypes.values())),
        passthrough=arch.vision_language,
        layout=f"TP={student.dims.tp_size}, PP={student.dims.pp_size}",
        max_logit_diff=max_logit_diff,
        base_folder=base,
    )


def _check_sources(student, base: Path | None, tokenizer: Path | None) -> tuple[dict, dict]:
    """Fail early (on every rank alike) when the base model or tokenizer needed by the release is missing, or
    when the config, generation config and tokenizer disagree; returns the release's config and generation
    config."""
    if student.arch.vision_language and (base is None or not base.is_dir()):
        raise FileNotFoundError(
            f"base model folder {base} not found: a vision-language student needs --base-model for its vision "
            "tower and MTP tensors"
        )
    source = tokenizer or base
    if source is None or not source.is_dir():
        raise FileNotFoundError(f"tokenizer folder {source} not found: pass --tokenizer")
    _tokenizer_files(source)
    config = engine_config(student.arch.hf_config, where=str(base / "config.json") if base else "config.json")
    base_generation = base / "generation_config.json" if base else None
    try:
        generation = generation_config(config, source, base_generation if base_generation and
                                       base_generation.is_file() else None)
    except ValueError as error:
        raise ValueError(f"release: {error}; pass a matching --tokenizer or fix the files") from None
    return config, generation


def _write_side_files(folder: Path, writer: ShardWriter, base: Path | None, tokenizer: Path | None, config: dict,
                      generation: dict) -> None:
    if base is not None and base.is_dir():
        source = SafetensorsFolder(base)
        for name in source.keys():
            if name.startswith(PASSTHROUGH_PREFIXES):
                writer.add(name, source.get(name))
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    for path in _tokenizer_files(tokenizer or base):
        shutil.copy2(path, folder / path.name)
