"""The CPU demo's design harness: the paper's DN-MOPD update on the demo models, in plain torch, measured.

It runs the trainer's own pipeline up to the train batch (prompt set and sampler, the in-process rollout
engine and teachers through `ExperienceCollector`, label routing, DN statistics and multipliers, `TrainBatch`)
and replaces only the Megatron student by the Hugging Face student (the losses are the trainer's fused
kernels, on their native torch path), so that its curves transfer to `launch/pretrain_dnmopd.py` with the same
config.
Per update it records

- probe_kl/<domain>: the exact full-vocabulary reverse KL(student || routed teacher), averaged over the
  response tokens of a fixed probe set (held-out prompts of each domain with responses sampled once from
  the initial student), for the weights after 0, 1, ..., U updates;
- kl/<domain>: the trainer's sampled-token estimate on the update's own batch, and the DN diagnostics;
- with --snr: the cosine between the sampled-token loss gradient and the exact full-vocabulary gradient of
  w_d * KL on the same batch (same responses, multipliers and response-mean reduction): the fraction of the
  update that points where the expected update points;
- process CPU seconds per phase (rollout + scoring, train step, probe), which do not depend on what else
  runs on the machine.

    python docs/demo-design/harness.py --config configs/demo_cpu.yaml --set train.updates=20 \
        --out runs/demo-design/demo.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

from dnmopd.config import dump_yaml, load_config
from dnmopd.core.statistics import SUM, TOKENS
from dnmopd.data.chat import PromptTokenizer
from dnmopd.data.prompts import PromptSet
from dnmopd.data.sample_data import resolve_data_path
from dnmopd.hf.models import load_causal_lm
from dnmopd.kernels import domain_stats, fused_opd_loss, fused_reverse_kl
from dnmopd.rollout.base import RolloutRequest
from dnmopd.rollout.inprocess import InProcessRollout
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.experience.collector import ExperienceCollector
from dnmopd.trainer.method import Method
from dnmopd.trainer.step.batch import TrainBatch

PROBE_FILES = {"math": "samples:teacher/math_train.jsonl", "code": "samples:teacher/code_train.jsonl",
               "ifeval": "samples:teacher/if_train.jsonl"}
PROBE_SEED = 10**6  # probe responses draw sample seeds from here on, apart from every rollout's


# ------------------------------------------------------------------------------------------- the models
def response_logits(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """[N, V] logits that predict the response tokens (row-major over batch.response_mask)."""
    lengths = batch.prompt_lens + batch.response_lens
    attention = (torch.arange(batch.tokens.shape[1])[None, :] < lengths[:, None]).long()
    logits = model(input_ids=batch.tokens, attention_mask=attention).logits
    rows, cols = batch.response_mask.nonzero(as_tuple=True)
    return logits[rows, batch.prompt_lens[rows] + cols - 1].float()


def response_hidden(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """[N, D] final hidden states that predict the response tokens (row-major over batch.response_mask), the
    input of the LM head."""
    lengths = batch.prompt_lens + batch.response_lens
    attention = (torch.arange(batch.tokens.shape[1])[None, :] < lengths[:, None]).long()
    hidden = model.get_decoder()(input_ids=batch.tokens, attention_mask=attention).last_hidden_state
    rows, cols = batch.response_mask.nonzero(as_tuple=True)
    return hidden[rows, batch.prompt_lens[rows] + cols - 1].float()


def megatron_lr(config, step: int, total: int) -> float:
    """The learning rate of optimizer step `step` under the trainer's schedule (megatron's
    OptimizerParamScheduler as `dnmopd.trainer.step.optimization` builds it: warm-up from 0, so step 0 has lr 0)."""
    warmup = min(config.lr_warmup_updates, max(total - 1, 0))
    if warmup and step <= warmup:
        return config.lr * step / warmup
    if config.lr_decay_style == "constant":
        return config.lr
    decay = max(total, warmup + 1) - warmup
    ratio = min(max(step - warmup, 0) / decay, 1.0)
    coeff = 1 - ratio if config.lr_decay_style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1)
    return config.min_lr + coeff * (config.lr - config.min_lr)


def build_optimizer(model: torch.nn.Module, config) -> torch.optim.Optimizer:
    """megatron's torch fallback: AdamW (decoupled decay) or SGD; no decay on biases and 1-D parameters."""
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    if config.name == "sgd":
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.sgd_momentum)
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_eps)


# ------------------------------------------------------------------------------------------- the probe
class ProbeSet:
    """Held-out prompts of each domain with responses sampled once from the initial student, and the routed
    teacher's full log-softmax at every response position (fixed: the curve moves only when the student does)."""

    def __init__(self, batch: TrainBatch, teacher_logp: torch.Tensor, domains: list[str], source: list[dict]):
        self.batch, self.teacher_logp, self.domains, self.source = batch, teacher_logp, domains, source

    @classmethod
    def build(cls, config: TrainerConfig, tokenizer, student, teachers, method: Method, *, prompts_per_domain: int,
              responses_per_prompt: int) -> ProbeSet:
        train = {p.prompt_ids for p in PromptSet.load(
            resolve_data_path(config.data.train_file), tokenizer, domains=config.data.domains,
            max_prompt_tokens=config.data.max_prompt_tokens, model_vocab=student.config.vocab_size)}
        chosen, source = [], []
        for domain in config.data.domains:
            pool = PromptSet.load(resolve_data_path(Path(PROBE_FILES[domain])), tokenizer, domains=[domain],
                                  max_prompt_tokens=config.data.max_prompt_tokens,
                                  model_vocab=student.config.vocab_size)
            held_out = [p for p in pool.prompts if p.prompt_ids not in train][:prompts_per_domain]
            if len(held_out) < prompts_per_domain:
                raise ValueError(f"{PROBE_FILES[domain]}: only {len(held_out)} prompts are not training prompts, "
                                 f"{prompts_per_domain} asked for")
            chosen += held_out
            source += [{"file": PROBE_FILES[domain], "row": p.index, "domain": domain} for p in held_out]
        n = responses_per_prompt
        params = config.rollout.sampling
        engine = InProcessRollout(InProcessRollout.Config(model_path=config.student.hf_path), model=student)
        requests = [RolloutRequest(p.prompt_ids, sample_id=PROBE_SEED + i * n + k)
                    for i, p in enumerate(chosen) for k in range(n)]
        rollouts = engine.generate_batch(requests, params)
        prompts = [chosen[(r.sample_id - PROBE_SEED) // n] for r in rollouts]
        domain_ids = [method.domain_index(p.domain) for p in prompts]
        batch = TrainBatch.from_rows([p.prompt_ids for p in prompts], [r.response_ids for r in rollouts],
                                     [r.logprobs for r in rollouts], [r.logprobs for r in rollouts], domain_ids)
        routed = [method.teachers_needed(p.domain)[0] for p in prompts]
        token_rows = batch.response_mask.nonzero(as_tuple=True)[0]
        teacher_logp = torch.empty(len(token_rows), student.config.vocab_size)
        with torch.no_grad():
            for name in sorted(set(routed)):
                rows = torch.tensor([i for i, r in enumerate(routed) if r == name])
                sub = batch.select(rows).trimmed()
                at = torch.isin(token_rows, rows)
                teacher_logp[at] = torch.log_softmax(response_logits(teachers[name].model, sub), -1)
        return cls(batch, teacher_logp, list(config.data.domains), source)

    @torch.no_grad()
    def measure(self, student) -> tuple[dict[str, float], dict[str, float]]:
        """Token means of the exact KL(student || routed teacher) and of the student's entropy, per domain and
        over all probe tokens."""
        student_logp = torch.log_softmax(response_logits(student, self.batch), -1)
        probs = student_logp.exp()
        kl = (probs * (student_logp - self.teacher_logp)).sum(-1).double()
        entropy = -(probs * student_logp).sum(-1).double()
        domains = self.batch.domain_ids[self.batch.response_mask.nonzero(as_tuple=True)[0]]
        means = []
        for values in (kl, entropy):
            result = {d: values[domains == i].mean().item() for i, d in enumerate(self.domains)}
            result["all"] = values.mean().item()
            means.append(result)
        return means[0], means[1]


# ------------------------------------------------------------------------------------------- one update
def losses(student, teachers, batch: TrainBatch, teacher_names: list[str], loss_config, num_responses: int,
           exact: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The trainer's sampled-token clipped OPD loss (ratio 1: one optimizer step per rollout), and with `exact`
    the full-vocabulary loss sum_i (1/R)(1/|y_i|) sum_t w_d KL(q_t || p_T,t) it is an estimate of."""
    hidden = response_hidden(student, batch)
    head = student.get_output_embeddings().weight
    rows, cols = batch.response_mask.nonzero(as_tuple=True)
    targets = batch.tokens[rows, batch.prompt_lens[rows] + cols]
    weights = torch.ones(batch.size) if batch.weights is None else batch.weights
    mask = batch.loss_mask[rows, cols]
    sampled = fused_opd_loss(hidden, head, targets, rows, weights, teacher_logp=batch.target_logp[rows, cols],
                             mask=mask, num_responses=num_responses, eps_low=loss_config.eps_low,
                             eps_high=loss_config.eps_high, dual_clip=loss_config.dual_clip).loss
    full = None
    if exact:
        teacher_logp = torch.empty(len(rows), head.shape[0])
        with torch.no_grad():
            for name in sorted(set(teacher_names)):
                mine = torch.tensor([n == name for n in teacher_names])
                at = mine[rows]
                teacher_logp[at] = torch.log_softmax(response_logits(teachers[name].model, batch.select(mine)), -1)
        full = fused_reverse_kl(hidden, head, rows, weights, teacher_logits=teacher_logp, mask=mask,
                                num_responses=num_responses).loss
    return sampled, full


def flat_grad(model, loss: torch.Tensor, retain: bool) -> torch.Tensor:
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, retain_graph=retain, allow_unused=True)
    pairs = zip(params, grads, strict=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in pairs])


def run(config: TrainerConfig, args, save) -> dict:
    torch.manual_seed(config.run.seed)
    tokenizer = PromptTokenizer.from_pretrained(config.student.hf_path)
    student = load_causal_lm(config.student.hf_path, device="cpu", dtype="float32", attn_implementation="sdpa")
    for model in config.teachers.models:
        if model.backend != "inprocess":
            raise ValueError(f"teacher {model.config.name}: the harness needs in-process teachers")
    teachers = {m.config.name: InProcessTeacher(m.config) for m in config.teachers.models}
    method = Method(config.method, config.data.domains)
    prompts = PromptSet.load(resolve_data_path(config.data.train_file), tokenizer, domains=config.data.domains,
                             max_prompt_tokens=config.data.max_prompt_tokens, model_vocab=student.config.vocab_size)
    sampler = config.data.sampler.build(num_prompts=len(prompts))
    engine = InProcessRollout(config.rollout.engine.config, model=student)
    collector = ExperienceCollector(engine, config.teachers.fleet.build(teachers), sampling=config.rollout.sampling,
                                    samples_per_prompt=config.data.samples_per_prompt,
                                    teachers_for=method.teachers_needed)
    probe = ProbeSet.build(config, tokenizer, student, teachers, method, prompts_per_domain=args.probe_prompts,
                           responses_per_prompt=args.probe_responses)
    optimizer = build_optimizer(student, config.optimizer)
    steps_per_update = config.train.optimizer_steps_per_update
    total_steps = config.train.updates * steps_per_update
    domains = list(config.data.domains)
    records, step = [], 0
    tick = time.process_time()
    probe_kl, entropy = probe.measure(student)
    probe_seconds = time.process_time() - tick
    for update in range(config.train.updates):
        record = {"update": update, "probe_kl": probe_kl, "probe_entropy": entropy, "time/probe": probe_seconds}
        tick = time.process_time()
        student.eval()
        batch_prompts = [prompts[i] for i in sampler.next_batch().indices]
        offset = update * len(batch_prompts) * config.data.samples_per_prompt
        samples = collector.collect(batch_prompts, seed_offset=offset).samples
        lengths = [len(s.response_ids) for s in samples]
        targets, applied = method.targets([s.domain for s in samples], [s.scores for s in samples], lengths)
        batch = TrainBatch.from_rows([s.prompt.prompt_ids for s in samples], [s.response_ids for s in samples],
                                     [s.rollout_logp for s in samples], targets,
                                     [method.domain_index(s.domain) for s in samples])
        stats = domain_stats(batch.target_logp - batch.rollout_logp, batch.dn_mask, batch.domain_ids,
                             len(domains))
        weights, diagnostics = method.normalizer.from_statistics(stats)
        batch.weights = torch.tensor(weights, dtype=torch.float32)[batch.domain_ids]
        record["time/rollout_and_scoring"] = time.process_time() - tick
        record.update(diagnostics.to_metrics())
        record.update({f"kl/{d}": float(-stats[SUM, i] / stats[TOKENS, i]) for i, d in enumerate(domains)
                       if stats[TOKENS, i] > 0})
        record["response_tokens"] = int(batch.loss_mask.sum())

        tick = time.process_time()
        student.train()
        rows_per_step = -(-batch.size // steps_per_update)
        for k in range(steps_per_update):
            piece = batch.select(slice(k * rows_per_step, (k + 1) * rows_per_step))
            names = applied[k * rows_per_step:(k + 1) * rows_per_step]
            exact = args.snr_every > 0 and update % args.snr_every == 0 and k == 0
            sampled, full = losses(student, teachers, piece, names, config.method.loss, piece.size, exact)
            if exact:
                snr_tick = time.process_time()
                g_sampled = flat_grad(student, sampled, retain=True)
                g_full = flat_grad(student, full, retain=True)
                record["snr/cosine"] = torch.nn.functional.cosine_similarity(g_sampled, g_full, dim=0).item()
                record["snr/norm_ratio"] = (g_sampled.norm() / g_full.norm()).item()
                record["full_vocab_loss"] = full.item()
                record["time/snr"] = time.process_time() - snr_tick
            for group in optimizer.param_groups:
                group["lr"] = megatron_lr(config.optimizer, step, total_steps)
            optimizer.zero_grad()
            if config.method.loss.kind == "full_vocab_reverse_kl":
                sampled, full = losses(student, teachers, piece, names, config.method.loss, piece.size, True)
                full.backward()
                record["loss"] = full.item()
            else:
                sampled.backward()
                record["loss"] = sampled.item()
            clip = config.optimizer.clip_grad
            norm = torch.nn.utils.clip_grad_norm_(student.parameters(), clip if clip > 0 else float("inf"))
            record["grad_norm"], record["lr"] = norm.item(), optimizer.param_groups[0]["lr"]
            optimizer.step()
            step += 1
        record["time/train"] = time.process_time() - tick - record.get("time/snr", 0.0)
        tick = time.process_time()
        probe_kl, entropy = probe.measure(student)
        probe_seconds = time.process_time() - tick
        records.append(record)
        save({"config": dump_yaml(config), "overrides": args.overrides, "probe": probe.source, "updates": records,
              "final": {"update": update + 1, "probe_kl": probe_kl, "probe_entropy": entropy}})
        if args.verbose:
            print(f"{update:>3} " + " ".join(f"{d}={record['probe_kl'][d]:.4f}" for d in domains)
                  + " w=" + ",".join(f"{record[f'dn/{d}/applied']:.2f}" for d in domains)
                  + (f" cos={record['snr/cosine']:.3f}" if "snr/cosine" in record else ""), flush=True)
    final = {"update": config.train.updates, "probe_kl": probe_kl, "probe_entropy": entropy}
    first, last = records[0]["probe_kl"], probe_kl
    return {"config": dump_yaml(config), "overrides": args.overrides, "probe": probe.source,
            "probe_tokens": int(probe.batch.response_mask.sum()), "updates": records, "final": final,
            "falls": {d: last[d] < first[d] for d in [*domains, "all"]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action="append", required=True, help="trainer YAML config (repeatable)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config value, as for launch/pretrain_dnmopd.py")
    parser.add_argument("--probe-prompts", type=int, default=8, help="held-out probe prompts per domain (8)")
    parser.add_argument("--probe-responses", type=int, default=2, help="probe responses per prompt (2)")
    parser.add_argument("--snr", dest="snr_every", type=int, default=0, metavar="K",
                        help="measure the gradient cosine every K updates (0: never)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file of the results")
    parser.add_argument("--quiet", dest="verbose", action="store_false", help="no line per update")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = load_config(TrainerConfig, args.config, args.overrides)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(result: dict) -> None:  # after every update, so that a stopped run keeps its curve
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(args.out)

    start = time.process_time()
    result = run(config, args, save)
    result["time/total_cpu"] = time.process_time() - start
    save(result)
    first, last = result["updates"][0]["probe_kl"], result["final"]["probe_kl"]
    print("probe KL first -> last: " + ", ".join(f"{d} {first[d]:.4f} -> {last[d]:.4f}" for d in first)
          + f"  ({result['time/total_cpu']:.0f} CPU s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
