"""The models of the CPU demo, built locally and deterministically (nothing is downloaded):

    <root>/tokenizer        a tiny Qwen3.5-style BPE tokenizer with the real chat template
    <root>/base             a tiny random Qwen3.5 (3 Gated DeltaNet layers + 1 gated attention layer)
    <root>/student          the base with its output logits scaled by 0.25 (a flat, uncertain student)
    <root>/<domain>_teacher the base with its output logits scaled by the domain's sharpness

Where the base puts logits z, the student puts 0.25 z and a teacher of sharpness s puts s z, so on the
student's own samples r = log p_teacher - log p_student spreads in proportion to |s - 0.25|: the math
teacher (s = 0.5) gives narrow log-ratios, the IF teacher (s = 2) wide ones, code lies between. Every
teacher is sharper than the student, so distillation has one consistent direction (sharpen, towards each
domain's teacher) and the reverse KL falls; DN-MOPD weights math up and IF down, as on the real models.

    python -m dnmopd.examples.demo_models runs/demo-models
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

from dnmopd.io import atomic_directory

STUDENT_SHARPNESS = 0.25
SHARPNESS = {"math": 0.5, "code": 1.0, "ifeval": 2.0}
MARKER = "complete.json"
SPEC = {"arch": "qwen3_5", "vocab_size": 1024, "seed": 0, "num_layers": 4, "student": STUDENT_SHARPNESS,
        "sharpness": SHARPNESS}


def build_demo_models(root: str | Path) -> Path:
    """Build (or reuse, when already built with the same spec) the demo's tokenizer, student and teachers."""
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    root = Path(root)
    marker = root / MARKER
    if marker.is_file() and json.loads(marker.read_text()) == SPEC:
        return root
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor="qwen3.5", vocab_size=SPEC["vocab_size"])
    base = build_tiny_hf_checkpoint(root / "base", arch=SPEC["arch"], vocab_size=SPEC["vocab_size"],
                                    seed=SPEC["seed"], num_layers=SPEC["num_layers"], tokenizer_dir=tokenizer)
    scaled_copy(base, root / "student", STUDENT_SHARPNESS)
    for domain, sharpness in SHARPNESS.items():
        scaled_copy(base, root / f"{domain}_teacher", sharpness)
    marker.write_text(json.dumps(SPEC))
    return root


def scaled_copy(source: Path, target: Path, sharpness: float) -> Path:
    """A copy of an untied HF checkpoint whose LM head (hence every logit) is multiplied by `sharpness`."""
    with atomic_directory(target) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
        weights = tmp / "model.safetensors"
        state = load_file(weights)
        if "lm_head.weight" not in state:
            raise ValueError(f"{source}: no untied lm_head.weight to scale")
        state["lm_head.weight"] = state["lm_head.weight"] * sharpness
        save_file(state, weights, metadata={"format": "pt"})
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the CPU demo's tiny tokenizer, student and teachers.")
    parser.add_argument("root", nargs="?", default="runs/demo-models", help="output folder (default runs/demo-models)")
    print(build_demo_models(parser.parse_args(argv).root))


if __name__ == "__main__":
    main()
