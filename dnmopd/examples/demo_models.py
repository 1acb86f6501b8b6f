"""The models of the CPU demo, built locally and deterministically (nothing is downloaded):

    <root>/tokenizer         a tiny Qwen3.5-style BPE tokenizer with the real chat template
    <root>/student           a tiny random Qwen3.5 (3 Gated DeltaNet layers + 1 gated attention layer) that
                             can tell the three domains' prompts apart
    <root>/<domain>_teacher  the student plus one skill on its own domain's prompts

Why they are built this way: teacher d differs from the student only on domain d's prompts, by a skill the
student can express and can learn from the prompt, so the student can match every teacher at once and the
domains do not pull one shared knob in conflicting directions (as sharper copies of one base did: sharpening
towards the IF teacher overshot the math teacher). The teachers stand at different distances, as the paper's
experts do: the math teacher is close to the student, the IF teacher far, so on the student's samples
r = log p_teacher - log p_student is narrow on math and wide on IF, and DN-MOPD weights math up and IF down.
docs/demo-design.md has the search behind these choices.

How: the residual stream reserves seven channels that no random weight reads or writes. Every token embedding
holds BIAS in the bias channel; the embedding of each of domain d's characteristic tokens (`domain_tokens`)
holds MARKER in marker channel d. One head of the full-attention layer has keys that read only the bias
channel, so it attends uniformly to the context so far, and writes the running mean of marker d (times
SUMMARY_GAIN) into summary channel d: large on domain d's prompts, small elsewhere. The student's LM head
ignores the reserved channels. Teacher d's LM head reads summary channel d as LEAN[d] * W v_d / c_d (W the
student's LM head, v_d a fixed random unit direction of the ordinary channels, scaled to std 1 over the
vocabulary, c_d the mean summary at the end of domain d's sample prompts): on domain d's contexts its logits
lean by about LEAN[d] * W v_d, a shift the student's own head can express; elsewhere it is the student.

    python -m dnmopd.examples.demo_models runs/demo-models
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from dnmopd.io import atomic_directory, atomic_write

DOMAINS = ("math", "code", "ifeval")
TEACHER_POOLS = {"math": "teacher/math_train.jsonl", "code": "teacher/code_train.jsonl",
                 "ifeval": "teacher/if_train.jsonl"}
"""Sample files whose prompts define each domain's characteristic tokens."""
VOCAB_SIZE, HIDDEN, NUM_LAYERS, SEED = 1024, 64, 4, 0
EMBED_SCALE = 12.5
"""Token embeddings of std 1 (the random base has 0.08): a residual stream of unit scale, whose RMS norms do
not magnify small weight changes (with 0.08, a sampled-token update's noise dominated the student)."""
STUDENT_SHARPNESS = 6.0
"""LM-head scale of the student: peaked next-token distributions (~4 nats on its own samples)."""
TOKENS_PER_DOMAIN = 32
BIAS, MARKER = 0.3, 1.0
SUMMARY_GAIN = 4.5
"""Value and output weight of the summary head: summaries of ~2 at the end of their own domain's prompts."""
LEAN = {"math": 0.3, "code": 0.5, "ifeval": 0.9}
"""Teacher d's skill: the std over the vocabulary of its logit shift at the end of a typical domain-d prompt."""

# reserved residual channels (the last seven) and the summary head's value dimensions
BIAS_CHANNEL = HIDDEN - 7
MARKER_CHANNEL = {d: HIDDEN - 6 + i for i, d in enumerate(DOMAINS)}
SUMMARY_CHANNEL = {d: HIDDEN - 3 + i for i, d in enumerate(DOMAINS)}
RESERVED = [BIAS_CHANNEL, *MARKER_CHANNEL.values(), *SUMMARY_CHANNEL.values()]
ATTENTION_LAYER = NUM_LAYERS - 1  # the 3:1 pattern puts full attention last
HEAD_DIM = 32
GDN_HEAD_DIM = 64
"""Gated DeltaNet key and value head size: the smallest vLLM's CPU kernel serves (with bfloat16 weights)."""
MARKER_FILE = "complete.json"
SPEC = {"version": 3, "arch": "qwen3_5", "vocab_size": VOCAB_SIZE, "seed": SEED, "num_layers": NUM_LAYERS,
        "gdn_head_dim": GDN_HEAD_DIM,
        "embed_scale": EMBED_SCALE, "sharpness": STUDENT_SHARPNESS, "tokens_per_domain": TOKENS_PER_DOMAIN,
        "bias": BIAS, "marker": MARKER, "summary_gain": SUMMARY_GAIN, "lean": LEAN}

_READS = ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_a.weight", "in_proj_b.weight", "gate_proj.weight",
          "up_proj.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight")
_WRITES = ("out_proj.weight", "down_proj.weight", "o_proj.weight")


def build_demo_models(root: str | Path) -> Path:
    """Build (or reuse, when already built with the same spec) the demo's tokenizer, student and teachers."""
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    root = Path(root)
    marker = root / MARKER_FILE
    if marker.is_file() and json.loads(marker.read_text()) == json.loads(json.dumps(SPEC)):
        return root
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor="qwen3.5", vocab_size=VOCAB_SIZE)
    with tempfile.TemporaryDirectory(prefix=".base-", dir=root) as tmp:
        base = build_tiny_hf_checkpoint(Path(tmp) / "base", arch=SPEC["arch"], vocab_size=VOCAB_SIZE, seed=SEED,
                                        num_layers=NUM_LAYERS, tokenizer_dir=tokenizer,
                                        overrides={"linear_key_head_dim": GDN_HEAD_DIM,
                                                   "linear_value_head_dim": GDN_HEAD_DIM})
        student = student_weights(load_file(base / "model.safetensors"), domain_tokens(tokenizer))
        _write_copy(base, root / "student", student)
        summaries = prompt_summaries(root / "student")
        for domain in DOMAINS:
            _write_copy(base, root / f"{domain}_teacher", teacher_weights(student, domain, summaries[domain]))
    with atomic_write(marker) as handle:
        handle.write(json.dumps(SPEC))
    return root


def domain_tokens(tokenizer_dir: str | Path, per_domain: int = TOKENS_PER_DOMAIN) -> dict[str, list[int]]:
    """Each domain's characteristic token ids: of the tokens that occur at least 3 times in the domain's sample
    teacher-pool prompts and are at least e^1.5 times rarer (per token) in the other two pools, the
    `per_domain` most frequent (ties by id)."""
    from transformers import AutoTokenizer

    from dnmopd.data.chat import row_messages
    from dnmopd.data.sample_data import sample_file

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    counts = {}
    for domain, rel in TEACHER_POOLS.items():
        counts[domain] = Counter()
        for line in sample_file(rel).read_text(encoding="utf-8").splitlines():
            for message in row_messages(json.loads(line)):
                counts[domain].update(tokenizer(message["content"], add_special_tokens=False)["input_ids"])
    totals = {d: sum(c.values()) for d, c in counts.items()}
    chosen = {}
    for domain in DOMAINS:
        others = [d for d in DOMAINS if d != domain]
        rest = sum(totals[d] for d in others)
        candidates = []
        for token, n in counts[domain].items():
            n_rest = sum(counts[d][token] for d in others)
            ratio = math.log((n + 0.5) / totals[domain]) - math.log((n_rest + 0.5) / rest)
            if n >= 3 and ratio >= 1.5:
                candidates.append((-n, token))
        if len(candidates) < per_domain:
            raise ValueError(f"{TEACHER_POOLS[domain]}: only {len(candidates)} characteristic tokens, "
                             f"{per_domain} needed")
        chosen[domain] = [token for _, token in sorted(candidates)[:per_domain]]
    return chosen


def student_weights(state: dict[str, torch.Tensor], tokens: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """The random base with the reserved channels, the summary head and the sharpened LM head."""
    state = {name: value.clone() for name, value in state.items()}
    for name, value in state.items():
        if name.endswith(_READS):
            value[:, RESERVED] = 0
        elif name.endswith(_WRITES):
            value[RESERVED, :] = 0
    embed = state["model.embed_tokens.weight"]
    embed *= EMBED_SCALE
    embed[:, RESERVED] = 0
    embed[:, BIAS_CHANNEL] = BIAS
    for domain in DOMAINS:
        embed[tokens[domain], MARKER_CHANNEL[domain]] = MARKER

    attention = f"model.layers.{ATTENTION_LAYER}."
    keys = state[attention + "self_attn.k_proj.weight"]  # key/value head 0 serves query heads 0 and 1
    keys[:HEAD_DIM] = 0
    keys[:HEAD_DIM, BIAS_CHANNEL] = torch.where(torch.arange(HEAD_DIM) % 2 == 0, 1.0, -1.0)  # a constant key
    state[attention + "input_layernorm.weight"][[BIAS_CHANNEL, *MARKER_CHANNEL.values()]] = 0  # scale 1
    queries = state[attention + "self_attn.q_proj.weight"]  # per head: HEAD_DIM query rows, then HEAD_DIM gate rows
    values = state[attention + "self_attn.v_proj.weight"]
    output = state[attention + "self_attn.o_proj.weight"]
    for j, domain in enumerate(DOMAINS):  # value dimension j of head 0 carries marker d
        queries[HEAD_DIM + j] = 0  # its output gate is sigmoid(0) = 0.5
        values[j] = 0
        values[j, MARKER_CHANNEL[domain]] = SUMMARY_GAIN
        output[:, j] = 0
        output[:, HEAD_DIM + j] = 0  # head 1 shares the values: it does not write them
        output[SUMMARY_CHANNEL[domain], j] = SUMMARY_GAIN
    state["model.norm.weight"][RESERVED] = 0
    head = state["lm_head.weight"]
    head[:, RESERVED] = 0
    head *= STUDENT_SHARPNESS
    return state


def prompt_summaries(student_dir: Path) -> dict[str, float]:
    """Mean summary channel d of the student at the last position of domain d's sample training prompts
    (rounded to 2 decimals, so that the teachers do not depend on the last bits of a CPU's arithmetic)."""
    from dnmopd.data.chat import PromptTokenizer, row_messages
    from dnmopd.data.sample_data import sample_file
    from dnmopd.hf.models import load_causal_lm

    model = load_causal_lm(str(student_dir), device="cpu", dtype="float32", attn_implementation="sdpa")
    tokenizer = PromptTokenizer.from_pretrained(student_dir)
    values: dict[str, list[float]] = {d: [] for d in DOMAINS}
    with torch.no_grad():
        for line in sample_file("student/train_3domain.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            domain = row["metadata"]["domain"]
            ids = torch.tensor([tokenizer.encode(row_messages(row))])
            values[domain].append(float(model.model(input_ids=ids).last_hidden_state[0, -1, SUMMARY_CHANNEL[domain]]))
    return {d: round(sum(v) / len(v), 2) for d, v in values.items()}


def lean_direction(domain: str) -> torch.Tensor:
    """v_d: a fixed random unit vector over the ordinary (not reserved) channels."""
    generator = torch.Generator().manual_seed(SEED + 1 + DOMAINS.index(domain))
    direction = torch.randn(HIDDEN, generator=generator)
    direction[RESERVED] = 0
    return direction / direction.norm()


def teacher_weights(student: dict[str, torch.Tensor], domain: str, summary: float) -> dict[str, torch.Tensor]:
    """The student whose LM head reads summary channel d as LEAN[d] * W v_d / summary."""
    head = student["lm_head.weight"].clone()
    lean = head @ lean_direction(domain)
    head[:, SUMMARY_CHANNEL[domain]] = LEAN[domain] * lean / (lean.std() * summary)
    return {**student, "lm_head.weight": head}


def scaled_copy(source: Path, target: Path, sharpness: float) -> Path:
    """A copy of an untied HF checkpoint whose LM head (hence every logit) is multiplied by `sharpness`: the
    one-knob teachers of the release tests and the pipeline benchmark, where what the teacher knows does not
    matter."""
    state = load_file(Path(source) / "model.safetensors")
    if "lm_head.weight" not in state:
        raise ValueError(f"{source}: no untied lm_head.weight to scale")
    return _write_copy(Path(source), Path(target), {**state, "lm_head.weight": state["lm_head.weight"] * sharpness})


def _write_copy(source: Path, target: Path, state: dict[str, torch.Tensor]) -> Path:
    """A copy of the HF folder `source` with `state` as its weights, written atomically."""
    with atomic_directory(target) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the CPU demo's tiny tokenizer, student and teachers.")
    parser.add_argument("root", nargs="?", default="runs/demo-models", help="output folder (default runs/demo-models)")
    args = parser.parse_args(argv)
    from dnmopd.logs import setup_logging

    setup_logging()
    print(build_demo_models(args.root))


if __name__ == "__main__":
    main()
