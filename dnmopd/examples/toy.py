"""A toy DN-MOPD loop on bigram language models, small enough to read in one sitting and run in seconds.

Three frozen bigram teachers, one per domain, sit at different distances from the student's starting point:
the math-like teacher is close (its log-ratios r = log p_teacher - log p_student are sharp, i.e. narrowly
spread), the IF-like teacher is far (wide log-ratios), code lies in between. The student,
p(y_t | y_{t-1}, d) = softmax(table[y_{t-1}] + bias[d]), shares one table across domains and is distilled
on its own samples with label routing and the clipped OPD loss. Domain normalization gives the sharp domain
a multiplier above 1 and the wide domain one below 1, so no domain's spread dominates the shared update.

    python -m dnmopd.examples.toy --mode dn --steps 30
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from dnmopd.core import DomainNormalizer, clipped_opd_loss_batched, reverse_kl_advantages, scale_advantages_batched

DOMAINS = ("math", "code", "ifeval")
TEACHER_DISTANCE = {"math": 0.3, "code": 1.0, "ifeval": 3.0}
VOCAB, MAX_LEN, BOS = 16, 12, 0


class BigramLM(torch.nn.Module):
    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(table.clone())
        self.bias = torch.nn.Parameter(torch.zeros(len(DOMAINS), VOCAB))

    def log_probs(self, prev: torch.Tensor, domain_ids: torch.Tensor) -> torch.Tensor:
        """(B, T, V) next-token log-probs given previous tokens (B, T) and domains (B,)."""
        return torch.log_softmax(self.table[prev] + self.bias[domain_ids][:, None, :], dim=-1)

    def token_logp(self, tokens: torch.Tensor, domain_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) log-prob of each sampled token of sequences that start after BOS."""
        prev = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)
        return self.log_probs(prev, domain_ids).gather(-1, tokens[..., None])[..., 0]

    @torch.no_grad()
    def sample(self, domain_ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        prev = torch.full((len(domain_ids), 1), BOS)
        tokens, logps = [], []
        for _ in range(MAX_LEN):
            logp = self.log_probs(prev, domain_ids)[:, 0]
            token = torch.multinomial(logp.exp(), 1, generator=generator)
            tokens.append(token)
            logps.append(logp.gather(-1, token))
            prev = token
        return torch.cat(tokens, 1), torch.cat(logps, 1)


@dataclass
class ToyConfig:
    mode: str = "dn"
    steps: int = 30
    seed: int = 0
    batch: int = 48
    ppo_epochs: int = 2
    lr: float = 0.05


def build_models(seed: int) -> tuple[BigramLM, dict[str, BigramLM]]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(VOCAB, VOCAB, generator=g)
    teachers = {}
    for d in DOMAINS:
        teacher = BigramLM(base + TEACHER_DISTANCE[d] * torch.randn(VOCAB, VOCAB, generator=g))
        teachers[d] = teacher.requires_grad_(False)
    return BigramLM(base), teachers


def reverse_kl(student: BigramLM, teachers: dict[str, BigramLM], tokens, domain_ids, mask) -> dict[str, float]:
    """Mean over valid positions of the exact KL(student || routed teacher) of the next-token distribution."""
    prev = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)
    with torch.no_grad():
        student_lp = student.log_probs(prev, domain_ids)
        result = {}
        for i, d in enumerate(DOMAINS):
            rows = domain_ids == i
            teacher_lp = teachers[d].log_probs(prev[rows], domain_ids[rows])
            kl = (student_lp[rows].exp() * (student_lp[rows] - teacher_lp)).sum(-1)
            result[d] = float(kl[mask[rows]].mean())
    return result


def train(config: ToyConfig, log=print) -> list[dict]:
    torch.manual_seed(config.seed)
    g = torch.Generator().manual_seed(config.seed)
    student, teachers = build_models(config.seed)
    normalizer = DomainNormalizer(DOMAINS, mode=config.mode)
    optimizer = torch.optim.Adam(student.parameters(), lr=config.lr)
    history = []
    log(f"{'step':>4}  " + "  ".join(f"w/{d:<7}" for d in DOMAINS) + "  " + "  ".join(f"KL/{d:<6}" for d in DOMAINS))
    for step in range(config.steps):
        domain_ids = torch.randint(len(DOMAINS), (config.batch,), generator=g)
        tokens, rollout_logp = student.sample(domain_ids, g)
        lengths = torch.randint(1, MAX_LEN + 1, (config.batch,), generator=g)
        mask = torch.arange(MAX_LEN)[None, :] < lengths[:, None]
        teacher_logp = torch.empty_like(rollout_logp)
        for i, d in enumerate(DOMAINS):  # label routing: each response is scored by its domain's teacher
            rows = domain_ids == i
            teacher_logp[rows] = teachers[d].token_logp(tokens[rows], domain_ids[rows])
        kl = reverse_kl(student, teachers, tokens, domain_ids, mask)
        with torch.no_grad():
            old_logp = student.token_logp(tokens, domain_ids)
        weights, diagnostics = normalizer.multipliers_batched(teacher_logp - rollout_logp, mask, domain_ids)
        advantages = scale_advantages_batched(reverse_kl_advantages(teacher_logp, old_logp, mask), domain_ids, weights)
        for _ in range(config.ppo_epochs):
            loss = clipped_opd_loss_batched(student.token_logp(tokens, domain_ids), old_logp, advantages, mask)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        record = {"step": step, "loss": loss.item(), "kl": kl,
                  "w": {d: diagnostics.domains[d].applied for d in DOMAINS},
                  "factor": {d: diagnostics.domains[d].factor for d in DOMAINS}}
        history.append(record)
        log(f"{step:>4}  " + "  ".join(f"{record['w'][d]:>9.3f}" for d in DOMAINS) + "  "
            + "  ".join(f"{kl[d]:>9.4f}" for d in DOMAINS))
    return history


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("dn", "observe", "frozen"), default="dn",
                        help="dn: re-measured multipliers; observe: Label routing, multipliers logged only; "
                             "frozen: each domain's first measurable multiplier")
    parser.add_argument("--steps", type=int, default=30, help="updates to run (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="seed of models, data and sampling (default 0)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    history = train(ToyConfig(mode=args.mode, steps=args.steps, seed=args.seed))
    first, last = history[0]["kl"], history[-1]["kl"]
    print(f"reverse KL (mean over domains): {sum(first.values()) / 3:.4f} -> {sum(last.values()) / 3:.4f}")


if __name__ == "__main__":
    main()
