"""The fixed probe set: the exact full-vocabulary reverse KL from the student to each domain's routed teacher on
held-out prompts with responses sampled once, the same at every measurement (`logging.probe_every`), so that
its curve moves only when the student does (the training batches' own KL moves with their prompts).

    prompts     per domain, the first `prompts_per_domain` prompts in file order of `logging.probe.prompt_files`
                that are not training prompts; without files, the first ones of data.train_file, which are
                then held out of training (the sampler never draws them)
    responses   `responses_per_prompt` per prompt, sampled once by the initial student with the run's sampling
                temperature and the probe's own seed (no rollout uses it), scored by the teachers the method
                routes to, and stored with the routed teacher in <run_dir>/probe.json, which a resumed run (or
                `logging.probe.file`, another run's probe) reads back
    measurement the routed teacher's final hidden states are recomputed once per process (teachers are frozen);
                each measurement runs the student forward on this rank's share of the probe and the fused
                reverse-KL kernel of the full-vocabulary loss (`FullVocabReverseKL`, TP-sharded like training),
                at the sampling temperature as that loss does; `probe_kl/<domain>` is the token mean over the
                domain's probe tokens, `probe_kl/all` over all of them
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from dnmopd.core.routing import POOL
from dnmopd.data.prompts import Prompt, PromptSet
from dnmopd.io import atomic_write
from dnmopd.rollout.base import RolloutRequest
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.trainer.context import Layout
from dnmopd.trainer.measurements.metric_table import MetricTable
from dnmopd.trainer.step.batch import TrainBatch, broadcast_batch
from dnmopd.trainer.step.forward_backward import sum_metrics
from dnmopd.trainer.step.objectives import FullVocabReverseKL, attach_full_vocab_targets

logger = logging.getLogger(__name__)

PROBE_FILE = "probe.json"
PROBE_METRICS = MetricTable(
    ("probe_kl/all", "mean", "Exact full-vocabulary KL(student || routed teacher) per token of the fixed probe "
                             "set (logging.probe), all domains, after the update (nats)."),
    ("probe_kl/{domain}", "mean", "The same over the domain's probe tokens."),
)


@dataclass(kw_only=True, slots=True)
class ProbeConfig:
    prompt_files: list[Path] = field(default_factory=list)
    """Prompt files (rows as data.train_file; `samples:<file>` names embedded sample data) the probe prompts are
    taken from, skipping training prompts. Empty: the first prompts of data.train_file, held out of training."""
    prompts_per_domain: int = 8
    """Probe prompts of each domain of data.domains."""
    responses_per_prompt: int = 2
    """Responses sampled once per probe prompt by the initial student."""
    max_new_tokens: int | None = None
    """Most tokens per probe response (None: rollout.sampling.max_new_tokens)."""
    seed: int = 1_000_003
    """Sampling seed of the probe responses (response k of prompt i uses seed + i * responses_per_prompt + k);
    unseeded when rollout.sampling.seed is null (e.g. SGLang servers without deterministic inference)."""
    file: Path | None = None
    """A probe.json written by another run to measure instead of sampling one (it must match the options
    above and the run's student tokenizer); None: <run_dir>/probe.json, sampled at the run's start."""

    def __post_init__(self):
        for name in ("prompts_per_domain", "responses_per_prompt"):
            if getattr(self, name) < 1:
                raise ValueError(f"logging.probe.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"logging.probe.max_new_tokens must be >= 1 or null, got {self.max_new_tokens}")

    def spec(self, max_new_tokens: int, temperature: float) -> dict:
        """What the stored probe must have been built with to be measured by this run."""
        return {"prompt_files": [str(p) for p in self.prompt_files], "prompts_per_domain": self.prompts_per_domain,
                "responses_per_prompt": self.responses_per_prompt, "max_new_tokens": max_new_tokens,
                "temperature": temperature, "seed": self.seed}


def split_prompts(config: ProbeConfig, train: PromptSet, domains: list[str], load) -> tuple[list[Prompt], PromptSet]:
    """(probe prompts, training prompts): `load(path)` reads a prompt file as the training set is read."""
    if config.prompt_files:
        taken = {p.prompt_ids for p in train.prompts}
        pools = [(str(path), load(path)) for path in config.prompt_files]
    else:
        taken, pools = set(), [("data.train_file", train)]
    chosen = []
    for domain in domains:
        found = [(source, p) for source, pool in pools for p in pool.prompts
                 if p.domain == domain and p.prompt_ids not in taken][: config.prompts_per_domain]
        if len(found) < config.prompts_per_domain:
            raise ValueError(f"logging.probe: {[s for s, _ in pools]} hold {len(found)} {domain} prompts that are "
                             f"not training prompts, prompts_per_domain={config.prompts_per_domain}")
        chosen += found
    if config.prompt_files:
        return [p for _, p in chosen], train
    held_out = {id(p) for _, p in chosen}
    return [p for _, p in chosen], PromptSet([p for p in train.prompts if id(p) not in held_out])


def sample_probe(prompts: list[Prompt], engine, sampling, teachers: dict, method, spec: dict) -> dict:
    """Sample the probe's responses with `engine` (the initial student) and route each to its target."""
    n = spec["responses_per_prompt"]
    seed = None if sampling.seed is None else spec["seed"]  # an engine that refuses seeds samples unseeded
    params = dataclasses.replace(sampling, max_new_tokens=spec["max_new_tokens"], seed=seed)
    requests = [RolloutRequest(p.prompt_ids, sample_id=i * n + k) for i, p in enumerate(prompts) for k in range(n)]
    rollouts = sorted(engine.generate_batch(requests, params), key=lambda r: r.sample_id)
    rows = []
    for rollout in rollouts:
        prompt = prompts[rollout.sample_id // n]
        request = ScoreRequest((*prompt.prompt_ids, *rollout.response_ids), len(prompt.prompt_ids))
        scores = {name: teachers[name].score_batch([request])[0].logprobs
                  for name in method.teachers_needed(prompt.domain)}
        _, (target,) = method.targets([prompt.domain], [scores], [len(rollout.response_ids)])
        rows.append({"domain": prompt.domain, "row": prompt.index, "target": target,
                     "prompt_ids": list(prompt.prompt_ids), "response_ids": list(rollout.response_ids)})
    return {"spec": spec, "rows": rows}


def probe_rows(config, run_dir: Path, *, resumed_at: int, vocab_size: int, sample) -> list[dict]:
    """The probe's rows, from logging.probe.file or <run_dir>/probe.json, which `sample(spec)` (rank 0 only;
    None elsewhere) writes first when the run starts without one. Every rank calls it."""
    options, sampling = config.logging.probe, config.rollout.sampling
    spec = options.spec(options.max_new_tokens or sampling.max_new_tokens, sampling.temperature)
    path = options.file or run_dir / PROBE_FILE
    if not path.exists():
        if options.file is not None:
            raise FileNotFoundError(f"logging.probe.file: {path} not found")
        if resumed_at > 0:
            raise ValueError(f"logging.probe_every: {path} is missing and the run resumes at update {resumed_at}; "
                             "the probe is sampled by the initial student, so it can only start with the run "
                             "(start over, or set logging.probe_every 0)")
        if sample is not None:
            started = time.time()
            probe = sample(spec)
            with atomic_write(path) as f:
                json.dump(probe, f)
            logger.info("%s: %d probe responses sampled and routed in %.1f s", path, len(probe["rows"]),
                        time.time() - started)
    dist.barrier()
    return read_probe(path, spec, list(config.data.domains), config.teachers.names(), vocab_size)["rows"]


def read_probe(path: Path, spec: dict, domains: list[str], teachers: list[str], vocab_size: int) -> dict:
    """The stored probe, checked against the run's options, domains, teachers and vocabulary."""
    try:
        probe = json.loads(path.read_text())
        rows = probe["rows"]
        stored = probe["spec"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a probe set ({error})") from error
    if stored != spec:
        changed = sorted(k for k in {*spec, *stored} if spec.get(k) != stored.get(k))
        raise ValueError(f"{path}: built with logging.probe {[f'{k}={stored.get(k)!r}' for k in changed]}, this run "
                         f"asks for {[f'{k}={spec.get(k)!r}' for k in changed]}: remove the file to sample a new "
                         "probe (only before the first update) or restore the options")
    for i, row in enumerate(rows):
        ids = [*row.get("prompt_ids", []), *row.get("response_ids", [])]
        if row.get("domain") not in domains or row.get("target") not in (*teachers, POOL) or \
                not row.get("prompt_ids") or not row.get("response_ids") or \
                not all(isinstance(t, int) and 0 <= t < vocab_size for t in ids):
            raise ValueError(f"{path}: row {i} has a domain outside {domains}, a target outside {teachers} and "
                             f"{POOL!r}, an empty prompt or response, or token ids outside [0, {vocab_size})")
    return probe


def probe_batch(rows: list[dict], teachers: dict, teacher_names: list[str], domains: list[str]) -> TrainBatch:
    """The rows as a batch with the full-vocabulary targets the loss reads (`attach_full_vocab_targets`): the
    final hidden states of each response's routed teacher, or of every teacher for the pool mixture."""
    scorers = {name: InProcessTeacher(dataclasses.replace(t.config, return_hidden_states=True), model=t.model)
               for name, t in teachers.items()}
    batch = TrainBatch.from_rows([r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows],
                                 [torch.zeros(len(r["response_ids"])) for r in rows],
                                 [torch.zeros(len(r["response_ids"])) for r in rows],
                                 [domains.index(r["domain"]) for r in rows])
    hidden: list[dict[str, torch.Tensor]] = [{} for _ in rows]
    for name in teacher_names:
        mine = [i for i, r in enumerate(rows) if r["target"] in (name, POOL)]
        scores = scorers[name].score_batch([ScoreRequest((*rows[i]["prompt_ids"], *rows[i]["response_ids"]),
                                                         len(rows[i]["prompt_ids"])) for i in mine])
        for i, score in zip(mine, scores, strict=True):
            hidden[i][name] = score.hidden_states.float().cpu()
    attach_full_vocab_targets(batch, [r["target"] for r in rows], hidden, teacher_names)
    return batch


def build_probe(config, run_dir: Path, *, resumed_at: int, layout: Layout, dims, vocab_size: int,
                prompts: list[Prompt], engine, teachers: dict, method, teacher_heads: list[torch.Tensor], head,
                forward) -> FixedProbe:
    """This rank's share of the fixed probe set, sampled from `prompts` by rank 0's rollout `engine` (still the
    initial student) unless stored, routed by `method` to the `teachers` whose hidden states and LM heads
    (`teacher_heads`, on the last pipeline stage) its measurement uses. Every rank calls it, after the run's
    resume (`resumed_at`) and before the engine's resync to its weights; the model-parallel leaders hold the
    engine and the teachers and send the batch to their group (`dims.pg.mp`)."""
    def sample(spec):
        return sample_probe(prompts, engine, config.rollout.sampling, teachers, method, spec)

    rows = probe_rows(config, run_dir, resumed_at=resumed_at, vocab_size=vocab_size,
                      sample=sample if layout.rank == 0 else None)
    if len(rows) < layout.dp_size:
        raise ValueError(f"{len(rows)} probe responses for {layout.dp_size} data-parallel ranks (logging.probe)")
    names, domains = config.teachers.names(), list(config.data.domains)
    mine = rows[layout.dp_rank:: layout.dp_size]
    batch = probe_batch(mine, teachers, names, domains) if layout.is_leader else None
    leader = min(dist.get_process_group_ranks(dims.pg.mp))
    return FixedProbe(broadcast_batch(batch, leader, dims.pg.mp), teacher_heads, tuple(domains),
                      every=config.logging.probe_every, updates=config.train.updates,
                      head=head, forward=forward, pp_group=dims.pg.pp)


class FixedProbe:
    """This rank's share of the probe set and its measurement (every model-parallel rank holds the batch)."""

    def __init__(self, batch: TrainBatch, teacher_heads: list[torch.Tensor], domains: tuple[str, ...], *,
                 every: int, updates: int, head, forward, pp_group):
        self.batch, self.teacher_heads, self.domains = batch, teacher_heads, domains
        self.every, self.updates = every, updates
        self.head, self.forward, self.pp_group = head, forward, pp_group

    def due(self, update: int) -> bool:
        """Measured after the first update, every `every` updates and after the last."""
        return update == 0 or (update + 1) % self.every == 0 or update + 1 == self.updates

    def measure(self) -> dict:
        """This rank's parts (Mean) of probe_kl/* under the current weights."""
        for chunk in self.forward.model:
            chunk.eval()
        objective = FullVocabReverseKL(self.head, self.teacher_heads, num_responses=self.batch.size,
                                       domains=self.domains)
        with torch.no_grad():
            outputs = self.forward.run(self.batch, objective, forward_only=True)
        totals = sum_metrics(outputs, objective.sizes, self.pp_group)
        return {key.replace("kl_full/", "probe_kl/"): value
                for key, value in objective.metrics(totals, 1).items() if key.startswith("kl_full/")}
