"""Reproducible generator of instruction-following prompts with verifiable constraint labels.

Each prompt is a base task (a form filled with a topic) followed by one to three constraints drawn from the
19 types of ``dnmopd.verifiers.ifeval``:

    <base task>

    Follow ALL of these requirements exactly:
    - <instruction 1>
    - <instruction 2>

Labels, instruction sentences and this layout are the release's (``teacher/if_train.jsonl``); the forms, topics
and pairing rules are our own, so the prompts themselves differ from the released ones.

Everything is drawn from one ``random.Random(seed)``, so ``generate(n, seed)`` is a pure function of its
arguments. Pairs of types that cannot hold together (or make the task degenerate) are never combined; a
constraint set is never satisfied by an empty answer; exact duplicate prompts are rejected.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from dnmopd.verifiers.ifeval import CONSTRAINT_TYPES, score

DEFAULT_SEED = 20260803
DATA_SOURCE = "synthetic-ifeval-v1"

FORMS = (
    "Write a short description of {topic}.",
    "Explain {topic} to a curious twelve-year-old.",
    "Give three practical tips about {topic}.",
    "Write a brief story that involves {topic}.",
    "Summarize the main ideas behind {topic}.",
    "Write a short note to a friend about {topic}.",
    "Describe the history of {topic} in a few lines.",
    "Argue for or against {topic}.",
)
TOPICS = (
    "a lighthouse keeper's daily routine", "composting at home", "the water cycle", "learning a new language",
    "city bicycle lanes", "the night sky in winter", "a small bakery", "saving money as a student",
    "volcanoes", "the first day at a new job", "honeybees", "public libraries", "a rainy afternoon",
    "mountain hiking safety", "the invention of the printing press", "keeping a journal", "tidal pools",
    "board games with family", "recycling electronics", "a train journey across the country",
    "growing tomatoes", "the importance of sleep", "an old wooden bridge", "street markets",
    "paper airplanes", "the migration of birds", "a village festival", "remote work",
    "the moon landing", "cooking with leftovers",
)
KEYWORDS = ("harbour", "lantern", "quietly", "gravity", "orange", "signal", "wooden", "market")
STARTS = ("Answer:", "Here is my reply:", "In short:")
ENDS = ("THE END", "-- done --", "That is all.")

_NUM_CONSTRAINTS = (1, 2, 2, 3)
_EXCLUSIVE = {
    frozenset(pair) for pair in [
        ("all_caps", "all_lowercase"), ("word_count_min", "word_count_max"), ("must_include", "must_exclude"),
        ("all_caps", "starts_with"), ("all_caps", "ends_with"),
        ("all_lowercase", "starts_with"), ("all_lowercase", "ends_with"),
        ("wrapped_in", "starts_with"), ("wrapped_in", "ends_with"), ("wrapped_in", "repeat_first"),
        ("starts_with", "repeat_first"),
    ] + [("valid_json", other) for other in (
        "bullet_count", "numbered_count", "paragraph_count", "sentence_count", "highlight_count",
        "wrapped_in", "starts_with", "ends_with", "repeat_first")]
    + [("forbidden_chars", other) for other in ("must_include", "repeat_first", "starts_with", "ends_with")]
}
"""Pairs never combined: contradictory, or (valid_json) meaningless together."""


def _quoted_words(values: list[str]) -> str:
    return ", ".join(f'the word "{v}"' for v in values)


def _letters(values: list[str]) -> str:
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"the letter {quoted}" if len(values) == 1 else f"the letters {quoted}"


# type -> (parameter sampler (rng, base task) -> params, instruction renderer params -> text)
_SPECS: dict[str, tuple[Callable[[random.Random, str], dict], Callable[..., str]]] = {
    "word_count_min": (lambda rng, _: {"n": rng.choice((30, 40, 60, 80))},
                       lambda n: f"Use at least {n} words."),
    "word_count_max": (lambda rng, _: {"n": rng.choice((60, 90, 120, 160))},
                       lambda n: f"Use at most {n} words."),
    "sentence_count": (lambda rng, _: {"n": rng.choice((2, 3, 4, 5))},
                       lambda n: f"Answer in exactly {n} sentences."),
    "bullet_count": (lambda rng, _: {"n": rng.choice((2, 3, 4))},
                     lambda n: f"Answer as exactly {n} bullet points, each starting with '- '."),
    "numbered_count": (lambda rng, _: {"n": rng.choice((2, 3, 4))},
                       lambda n: f"Answer as exactly {n} numbered items, like '1. '."),
    "paragraph_count": (lambda rng, _: {"n": rng.choice((2, 3, 4))},
                        lambda n: f"Answer in exactly {n} paragraphs separated by a blank line."),
    "highlight_count": (lambda rng, _: {"n": rng.choice((1, 2, 3))},
                        lambda n: f"Highlight at least {n} sections using **double asterisks**."),
    "placeholder_count": (lambda rng, _: {"n": rng.choice((1, 2, 3))},
                          lambda n: f"Include at least {n} placeholders in square brackets, like [name]."),
    "must_include": (lambda rng, _: {"values": rng.sample(KEYWORDS, rng.choice((1, 2)))},
                     lambda values: f"Your answer must contain {_quoted_words(values)}."),
    "must_exclude": (lambda rng, _: {"values": rng.sample(KEYWORDS, rng.choice((1, 2)))},
                     lambda values: f"Your answer must not contain {_quoted_words(values)}."),
    "forbidden_chars": (lambda rng, _: {"values": [rng.choice(("e", "a", "z"))]},
                        lambda values: f"Do not use {_letters(values)} anywhere."),
    "all_caps": (lambda rng, _: {}, lambda: "Write your entire answer in capital letters."),
    "all_lowercase": (lambda rng, _: {}, lambda: "Write your entire answer in lowercase letters only."),
    "starts_with": (lambda rng, _: {"value": rng.choice(STARTS)},
                    lambda value: f'Begin your answer with "{value}".'),
    "ends_with": (lambda rng, _: {"value": rng.choice(ENDS)},
                  lambda value: f'End your answer with "{value}".'),
    "no_commas": (lambda rng, _: {}, lambda: "Do not use any commas."),
    "valid_json": (lambda rng, _: {}, lambda: "Reply with valid JSON and nothing else."),
    "wrapped_in": (lambda rng, _: {"open": "<<", "close": ">>"},
                   lambda open, close: f"Wrap your entire answer in {open} and {close}."),
    "repeat_first": (lambda rng, base: {"value": base},
                     lambda value: f'Begin by repeating this exactly: "{value}"'),
}
assert set(_SPECS) == set(CONSTRAINT_TYPES), "every checker type needs a generator entry"
TYPES = tuple(_SPECS)


@dataclass(frozen=True, slots=True)
class IfPrompt:
    prompt: str
    constraints: list[dict]

    @property
    def label(self) -> str:
        """The release's label: the constraint list as a JSON string."""
        return json.dumps(self.constraints)


def instruction(spec: dict) -> str:
    """The sentence that asks for one constraint."""
    return _SPECS[spec["type"]][1](**{k: v for k, v in spec.items() if k != "type"})


def render_prompt(base: str, constraints: list[dict]) -> str:
    lines = "\n".join(f"- {instruction(spec)}" for spec in constraints)
    return f"{base}\n\nFollow ALL of these requirements exactly:\n{lines}"


def _compatible(kind: str, chosen: list[str]) -> bool:
    return kind not in chosen and all(frozenset((kind, other)) not in _EXCLUSIVE for other in chosen)


def _draw_types(rng: random.Random) -> list[str]:
    target = rng.choice(_NUM_CONSTRAINTS)
    chosen: list[str] = []
    while len(chosen) < target or all(CONSTRAINT_TYPES[k].vacuous_on_empty for k in chosen):
        candidates = [k for k in TYPES if _compatible(k, chosen)]
        chosen.append(rng.choice(candidates))
    return chosen


def generate_one(rng: random.Random) -> IfPrompt:
    base = rng.choice(FORMS).format(topic=rng.choice(TOPICS))
    constraints = []
    for kind in _draw_types(rng):
        constraints.append({"type": kind, **_SPECS[kind][0](rng, base)})
    if score("", constraints).passed:
        raise AssertionError(f"generated constraints are satisfied by an empty answer: {constraints}")
    return IfPrompt(prompt=render_prompt(base, constraints), constraints=constraints)


def generate(n: int, seed: int = DEFAULT_SEED) -> list[IfPrompt]:
    """``n`` distinct IF prompts, a pure function of ``(n, seed)``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    prompts: list[IfPrompt] = []
    seen: set[str] = set()
    for _ in range(50 * max(n, 1)):
        if len(prompts) == n:
            break
        item = generate_one(rng)
        if item.prompt not in seen:
            seen.add(item.prompt)
            prompts.append(item)
    if len(prompts) < n:
        raise RuntimeError(f"could only generate {len(prompts)} distinct IF prompts of the {n} requested")
    return prompts
