"""Per-micro-batch losses on the last pipeline stage, each a fused LM-head kernel call.

Each returns (loss, metrics): the loss is this micro-batch's share of the global objective (normalized by
the global response or token count, see `optimization`), metrics hold detached sums and the per-token
log-probs (`rows`, `cols`, `logp`) so the caller can reassemble them.
"""

from __future__ import annotations

import torch

from dnmopd.kernels import fused_linear_logprob, fused_opd_loss, fused_reverse_kl
from dnmopd.trainer.batch import TrainBatch
from dnmopd.trainer.update import TokenView


def _token_metrics(mb: TrainBatch, tokens: TokenView, logp: torch.Tensor, loss: torch.Tensor) -> dict:
    mask = mb.loss_mask.to(logp.device)[tokens.rows, tokens.cols]
    rollout = mb.rollout_logp.to(logp.device)[tokens.rows, tokens.cols]
    return {"loss": loss.detach(), "rows": tokens.rows, "cols": tokens.cols, "logp": logp.detach(),
            "rollout_abs_diff": ((logp.detach() - rollout).abs() * mask).sum(), "tokens": mask.sum()}


def _per_token(mb: TrainBatch, tokens: TokenView, values: torch.Tensor | None) -> torch.Tensor | None:
    return None if values is None else values.to(tokens.hidden.device)[tokens.rows, tokens.cols]


def _weights(mb: TrainBatch, device) -> torch.Tensor:
    return torch.ones(mb.size, device=device) if mb.weights is None else mb.weights.to(device)


class ClippedSurrogate:
    """The clipped OPD/PPO loss on sampled tokens: advantage w * (target - old) or explicit advantages."""

    def __init__(self, output_chunk, tp_group, *, num_responses: int, eps_low: float, eps_high: float,
                 dual_clip: float | None, chunk_size: int | None):
        self.output_chunk, self.tp_group = output_chunk, tp_group
        self.num_responses = num_responses
        self.clip = {"eps_low": eps_low, "eps_high": eps_high, "dual_clip": dual_clip}
        self.chunk_size = chunk_size

    def __call__(self, mb: TrainBatch, tokens: TokenView):
        shard = self.output_chunk.output_shard()
        device = tokens.hidden.device
        explicit = mb.advantages is not None
        out = fused_opd_loss(
            tokens.hidden, shard.weight, tokens.targets, tokens.rows, _weights(mb, device),
            teacher_logp=None if explicit else _per_token(mb, tokens, mb.target_logp),
            advantages=_per_token(mb, tokens, mb.advantages) if explicit else None,
            mask=_per_token(mb, tokens, mb.loss_mask), old_logp=_per_token(mb, tokens, mb.old_logp),
            num_responses=self.num_responses, vocab_start=shard.vocab_start, tp_group=self.tp_group,
            chunk_size=self.chunk_size, **self.clip,
        )
        return out.loss, _token_metrics(mb, tokens, out.logp, out.loss)


class FullVocabReverseKL:
    """w_d * KL(student || routed teacher) over the whole vocabulary, per response token, response-mean.
    Also reports the exact per-domain KL sums (`kl_full`, `kl_full_tokens`, indexed by domain id)."""

    def __init__(self, output_chunk, tp_group, teacher_weights: list[torch.Tensor], *, num_responses: int,
                 num_domains: int, chunk_size: int | None):
        self.output_chunk, self.tp_group = output_chunk, tp_group
        self.num_domains = num_domains
        self.teacher_weights = teacher_weights
        self.num_responses = num_responses
        self.chunk_size = chunk_size

    def __call__(self, mb: TrainBatch, tokens: TokenView):
        shard = self.output_chunk.output_shard()
        device = tokens.hidden.device
        rows_teacher = mb.teacher_index.to(device)[tokens.rows]
        teacher_hidden = _per_token(mb, tokens, mb.teacher_hidden)
        mask = _per_token(mb, tokens, mb.loss_mask)
        loss = tokens.hidden.sum() * 0.0
        kl = torch.zeros(tokens.rows.shape[0], device=device)
        for k, weight in enumerate(self.teacher_weights):
            mine = rows_teacher == k
            if not bool(mine.any()):
                continue
            rows_of_shard = weight[shard.vocab_start: shard.vocab_start + shard.weight.shape[0]].to(device)
            out = fused_reverse_kl(
                tokens.hidden[mine], shard.weight, tokens.rows[mine], _weights(mb, device),
                teacher_hidden=teacher_hidden[mine].to(tokens.hidden.dtype), teacher_weight=rows_of_shard,
                mask=mask[mine], num_responses=self.num_responses, tp_group=self.tp_group,
                chunk_size=self.chunk_size,
            )
            loss = loss + out.loss
            kl[mine] = out.kl.detach().float()
        with torch.no_grad():
            logp = fused_linear_logprob(tokens.hidden, shard.weight, tokens.targets, vocab_start=shard.vocab_start,
                                        tp_group=self.tp_group, chunk_size=self.chunk_size)
        metrics = _token_metrics(mb, tokens, logp, loss)
        domains = mb.domain_ids.to(device)[tokens.rows]
        metrics["kl_full"] = torch.zeros(self.num_domains, device=device).index_add_(0, domains, kl * mask)
        metrics["kl_full_tokens"] = torch.zeros(self.num_domains, device=device).index_add_(0, domains, mask.float())
        return loss, metrics


class TokenCrossEntropy:
    """SFT: -sum(log p(y_t)) / num_tokens over the valid tokens of the global batch."""

    def __init__(self, output_chunk, tp_group, *, num_tokens: int, chunk_size: int | None):
        self.output_chunk, self.tp_group = output_chunk, tp_group
        self.num_tokens = num_tokens
        self.chunk_size = chunk_size

    def __call__(self, mb: TrainBatch, tokens: TokenView):
        shard = self.output_chunk.output_shard()
        logp = fused_linear_logprob(tokens.hidden, shard.weight, tokens.targets, vocab_start=shard.vocab_start,
                                    tp_group=self.tp_group, chunk_size=self.chunk_size)
        mask = _per_token(mb, tokens, mb.loss_mask)
        loss = -(logp * mask).sum() / self.num_tokens
        return loss, _token_metrics(mb, tokens, logp, loss)


class LogProbs:
    """Forward only: the student's log-prob of every response token (old log-probs, probes)."""

    def __init__(self, output_chunk, tp_group, *, chunk_size: int | None):
        self.output_chunk, self.tp_group, self.chunk_size = output_chunk, tp_group, chunk_size

    def __call__(self, mb: TrainBatch, tokens: TokenView):
        shard = self.output_chunk.output_shard()
        logp = fused_linear_logprob(tokens.hidden, shard.weight, tokens.targets, vocab_start=shard.vocab_start,
                                    tp_group=self.tp_group, chunk_size=self.chunk_size)
        zero = logp.sum() * 0.0
        return zero, _token_metrics(mb, tokens, logp, zero)
