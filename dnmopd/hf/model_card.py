"""The model card (``README.md``) of a release: Hub metadata through ``huggingface_hub``, and what a user needs.

Metadata: ``base_model`` as a Hub id (``CardConfig.base_model``, else read from the base folder's place in a
Hugging Face cache, ``.../models--<org>--<name>/snapshots/<revision>``; never a local path: without an id it is
left out), ``base_model_relation``, ``license`` (the option, else the base model card's), ``pipeline_tag``,
``library_name`` and tags for the method and the domains. Body: the run name as title, what was trained and
exported, how to load it with transformers, vLLM and SGLang, the final metrics per domain and the training
configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

MODE_TAGS = {"opd": "on-policy-distillation", "grpo": "grpo", "sft": "seqkd"}
MODE_WORDS = {"opd": "on-policy distillation", "grpo": "GRPO", "sft": "SeqKD supervised fine-tuning"}
_LICENSE = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")


@dataclass(kw_only=True, slots=True)
class CardConfig:
    base_model: str | None = None
    """Hub id of the base model for the card's metadata, e.g. Qwen/Qwen3.5-4B (null: read from the base folder's
    place in a Hugging Face cache, else left out; a local path is never written)."""
    license: str | None = None
    """License id of the release, e.g. apache-2.0 (null: the base model card's license, else left out)."""

    def __post_init__(self):
        if self.base_model is not None:
            check_hub_id(self.base_model, "base_model")
        if self.license is not None and not _LICENSE.match(self.license):
            raise ValueError(f"license: {self.license!r} is not a Hub license id (e.g. apache-2.0, mit, other)")


def check_hub_id(value: str, option: str) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if value.startswith(("/", ".", "~")) or "\\" in value:
        raise ValueError(f"{option}: {value!r} is a local path; give the model's Hub id (org/name)")
    try:
        validate_repo_id(value)
    except HFValidationError as error:
        raise ValueError(f"{option}: {value!r} is not a Hub model id: {error}") from None


def hub_id_from_path(path: str | Path | None) -> str | None:
    """``org/name`` when ``path`` is a snapshot in a Hugging Face cache (``models--org--name/snapshots/rev``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    parts = Path(path).parts if path else ()
    for folder, child in zip(parts, parts[1:], strict=False):
        if folder.startswith("models--") and child == "snapshots":
            repo_id = folder[len("models--"):].replace("--", "/")
            try:
                validate_repo_id(repo_id)
            except HFValidationError:
                return None
            return repo_id
    return None


def base_card_data(base: Path | None) -> dict:
    """The metadata of the base model's own card (``README.md``), or {} (none, or unreadable)."""
    from huggingface_hub import ModelCard

    card = base / "README.md" if base else None
    if card is None or not card.is_file():
        return {}
    try:
        return ModelCard.load(card).data.to_dict()
    except (ValueError, TypeError, yaml.YAMLError):
        return {}  # a broken base card only loses its license and pipeline tag


@dataclass(kw_only=True, slots=True)
class Export:
    """What a release holds and how it was made (the card's facts that are not in the training config)."""

    architecture: str
    summary: str
    """e.g. "Qwen3_5ForCausalLM: 4 layers, hidden size 64, vocabulary 1024, untied embeddings"."""
    source: str
    """What was exported: the live model at the end of a run, or which checkpoint."""
    tensor_dtypes: list[str]
    passthrough: bool
    """The vision tower and MTP head were copied unchanged from the base model."""
    layout: str
    """e.g. "TP=1, PP=1"."""
    max_logit_diff: float
    base_folder: Path | None


def _tag(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def card_metadata(export: Export, options: CardConfig, run: dict) -> dict:
    """The card's Hub metadata as a plain dict (``ModelCardData`` field names)."""
    base = base_card_data(export.base_folder)
    base_model = options.base_model or hub_id_from_path(export.base_folder)
    vision = export.architecture.endswith("ForConditionalGeneration")
    mode = run.get("mode")
    tags = ["dnmopd", MODE_TAGS.get(mode), _tag(run["method"]) if mode == "opd" and run.get("method") else None,
            *map(_tag, run.get("domains", []))]
    return {
        "base_model": base_model,
        "base_model_relation": "finetune" if base_model else None,
        "license": options.license or base.get("license"),
        "pipeline_tag": base.get("pipeline_tag") or ("image-text-to-text" if vision else "text-generation"),
        "library_name": "transformers",
        "tags": list(dict.fromkeys(t for t in tags if t)),
    }


def run_facts(training_config: str | None) -> dict:
    """Name, mode, method and domains from a resolved training config (YAML text), where present."""
    data = yaml.safe_load(training_config) if training_config else None
    if not isinstance(data, dict):
        return {}
    run, method, inputs = (data[key] if isinstance(data.get(key), dict) else {} for key in ("run", "method", "data"))
    facts = {"name": run.get("name"), "mode": run.get("mode"), "method": method.get("name"),
             "domains": inputs.get("domains") or []}
    return {k: v for k, v in facts.items() if v}


def _value(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def metrics_tables(metrics: dict, domains: list[str]) -> list[str]:
    """Markdown: one row per domain for the metrics that have a ``/<domain>`` part, then the rest."""
    per_domain: dict[str, dict[str, object]] = {}
    overall = {}
    for key, value in metrics.items():
        parts = key.split("/")
        domain = next((d for d in domains if d in parts[1:]), None)
        if domain is None:
            overall[key] = value
        else:
            per_domain.setdefault("/".join(p for p in parts if p != domain), {})[domain] = value
    lines = []
    if per_domain:
        lines += ["| metric | " + " | ".join(domains) + " |", "|---" * (len(domains) + 1) + "|"]
        lines += [f"| {name} | " + " | ".join(_value(row[d]) if d in row else "" for d in domains) + " |"
                  for name, row in per_domain.items()] + [""]
    if overall:
        lines += ["| metric | value |", "|---|---|", *[f"| {k} | {_value(v)} |" for k, v in overall.items()], ""]
    return lines


def _usage(name: str, vision: bool) -> list[str]:
    loader = "AutoModelForCausalLM"
    return [
        "## Usage",
        "",
        f"`{name}` below stands for this folder, or its Hub id once uploaded.",
        "",
        "transformers:",
        "",
        "```python",
        f"from transformers import {loader}, AutoTokenizer",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{name}")',
        f'model = {loader}.from_pretrained("{name}", dtype="auto")',
        'messages = [{"role": "user", "content": "What is 7 * 6?"}]',
        "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors=\"pt\", "
        "return_dict=True)",
        "output = model.generate(**inputs, max_new_tokens=256)",
        'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
        "```",
        "",
        *(["(`AutoModelForImageTextToText` loads it with its vision tower.)", ""] if vision else []),
        "vLLM (OpenAI-compatible server):",
        "",
        f"    vllm serve {name}",
        "",
        "SGLang:",
        "",
        f"    python -m sglang.launch_server --model-path {name}",
        "",
    ]


def model_card(export: Export, options: CardConfig, *, name: str, training_config: str | None,
               metrics: dict | None) -> str:
    """The text of ``README.md`` (YAML metadata block, then the body)."""
    from huggingface_hub import ModelCard, ModelCardData

    run = run_facts(training_config)
    meta = card_metadata(export, options, run)
    data = ModelCardData(**{k: v for k, v in meta.items() if v is not None})
    vision = export.architecture.endswith("ForConditionalGeneration")
    trained = MODE_WORDS.get(run.get("mode"), "training")
    if run.get("mode") == "opd" and run.get("method"):
        trained += f" (method `{run['method']}`)"
    origin = f"[{meta['base_model']}](https://huggingface.co/{meta['base_model']})" if meta["base_model"] \
        else "a local base model"
    domains = f" on the domains {', '.join(run['domains'])}" if run.get("domains") else ""
    lines = [
        f"# {name}",
        "",
        f"Trained with dnmopd by {trained} from {origin}{domains}.",
        "",
        "## What this folder holds",
        "",
        f"- Exported from {export.source}.",
        f"- {export.summary}; weights in {', '.join(export.tensor_dtypes)} (each tensor in its base-checkpoint "
        "dtype), safetensors shards.",
        *(["- The vision tower and the multi-token-prediction head are the base model's, unchanged (only the "
           "language model was trained)."] if export.passthrough else []),
        "- `config.json` of the original architecture, `generation_config.json`, the tokenizer and its chat template.",
        f"- Verified before writing: reloaded with transformers, max |logit difference| against the megatron-core "
        f"model ({export.layout}) = {export.max_logit_diff:.3e} (float32, probe batch).",
        "",
        *_usage(name, vision),
    ]
    if metrics:
        lines += ["## Final metrics", "", "The last update's training metrics.", "",
                  *metrics_tables(metrics, run.get("domains", []))]
    if training_config:
        lines += ["## Training configuration", "", "```yaml", training_config.rstrip(), "```", ""]
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)))
