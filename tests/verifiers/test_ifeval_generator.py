"""IF prompt generator: reproducible from its seed, valid and satisfiable-looking constraint sets."""

from __future__ import annotations

import json
import lzma
from collections import Counter
from pathlib import Path

from dnmopd.data import ifeval_generator as gen
from dnmopd.verifiers import ifeval
from dnmopd.verifiers.ifeval import CONSTRAINT_TYPES, parse_constraints, score, verify

PROMPTS = gen.generate(1500, seed=5)
RELEASE_COPY = Path(__file__).resolve().parents[2] / "tests/fixtures/data/release/teacher/if_train.jsonl.xz"


def test_same_seed_same_prompts_other_seed_other_prompts():
    again = gen.generate(1500, seed=5)
    assert [(p.prompt, p.label) for p in again] == [(p.prompt, p.label) for p in PROMPTS]
    assert [p.prompt for p in gen.generate(50, seed=6)] != [p.prompt for p in PROMPTS[:50]]
    assert [p.prompt for p in gen.generate(50, seed=5)] == [p.prompt for p in PROMPTS[:50]]  # prefix-stable


def test_prompts_are_distinct_and_labels_valid():
    assert len({p.prompt for p in PROMPTS}) == len(PROMPTS)
    for p in PROMPTS:
        constraints = parse_constraints(p.label)
        assert constraints == p.constraints and json.loads(p.label) == p.constraints
        kinds = [c["type"] for c in constraints]
        assert 1 <= len(kinds) <= 4 and len(set(kinds)) == len(kinds)
        assert all(frozenset((a, b)) not in gen._EXCLUSIVE for a in kinds for b in kinds if a != b)
        assert not score("", constraints).passed


def test_every_type_is_generated_and_constraint_counts_follow_1_2_2_3():
    kinds = Counter(c["type"] for p in PROMPTS for c in p.constraints)
    assert set(kinds) == set(CONSTRAINT_TYPES)
    sizes = Counter(len(p.constraints) for p in PROMPTS)
    assert sizes[2] > sizes[1] and sizes[2] > sizes[3] > 0


def test_prompt_text_layout():
    p = next(p for p in PROMPTS if any(c["type"] == "repeat_first" for c in p.constraints))
    base, rest = p.prompt.split("\n\nFollow ALL of these requirements exactly:\n")
    assert rest == "\n".join(f"- {gen.instruction(c)}" for c in p.constraints)
    assert next(c for c in p.constraints if c["type"] == "repeat_first")["value"] == base
    assert base in {f.format(topic=t) for f in gen.FORMS for t in gen.TOPICS}


def test_labels_and_instructions_are_written_as_in_the_release():
    released = [json.loads(line) for line in lzma.decompress(RELEASE_COPY.read_bytes()).decode().splitlines()]
    for row in released:  # every released prompt is its base task plus the rendering of its label
        base = row["prompt"].split("\n\nFollow ALL of these requirements exactly:\n")[0]
        assert gen.render_prompt(base, json.loads(row["label"])) == row["prompt"]
    forbidden = next(c for p in PROMPTS for c in p.constraints if c["type"] == "forbidden_chars")
    assert set(forbidden) == {"type", "values"} and len(forbidden["values"]) == 1
    param_names = {(c["type"], *sorted(c)) for p in PROMPTS for c in p.constraints}
    assert param_names == {(c["type"], *sorted(c)) for r in released for c in json.loads(r["label"])}


def test_the_generator_checks_with_the_verifier_itself():
    assert gen.score is ifeval.score and set(gen.TYPES) == set(ifeval.CONSTRAINT_TYPES)


def test_a_compliant_answer_passes_a_generated_label():
    p = next(p for p in PROMPTS if [c["type"] for c in p.constraints] == ["wrapped_in"])
    assert verify("<<Here is a short answer.>><|im_end|>", p.label)
