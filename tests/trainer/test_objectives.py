"""The trainer's objectives against float64 references: the full-vocabulary KL to a routed teacher and to the pool
mixture, the SFT cross-entropy, the tempered student distribution, and the log-probs the PPO ratio is taken
against."""

from types import SimpleNamespace

import pytest
import torch

from dnmopd.trainer.step.batch import TrainBatch
from dnmopd.trainer.step.forward_backward import TokenView
from dnmopd.trainer.step.objectives import (
    ClippedSurrogate,
    FullVocabReverseKL,
    LMHead,
    LogProbs,
    TokenCrossEntropy,
    ratio_reference,
)

V, D, H, K = 37, 8, 6, 3  # vocab (not a power of two), student hidden, teacher hidden, teachers
DOMAINS = ("math", "code", "ifeval")


def problem(temperature, seed=0):
    """Four responses (the last one's teacher failed: masked) and their flattened response tokens."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [3, 4, 2, 3]
    batch = TrainBatch.from_rows([[1, 2]] * 4, [torch.randint(0, V, (n,), generator=gen).tolist() for n in lengths],
                                 [torch.full((n,), -1.0) for n in lengths],
                                 [torch.full((n,), -2.0) for n in lengths[:3]] + [None], [0, 1, 2, 0])
    batch.weights = torch.tensor([2.0, 1.0, 0.25, 1.0])
    batch.teacher_index = torch.tensor([2, -1, 0, 0])  # routed, pool mixture, routed, (masked)
    batch.teacher_hidden = torch.randn(4, max(lengths), K * H, generator=gen)
    rows, cols = batch.response_mask.nonzero(as_tuple=True)
    hidden = torch.randn(rows.shape[0], D, generator=gen, requires_grad=True)
    tokens = TokenView(hidden, rows, cols, batch.tokens[rows, batch.prompt_lens[rows] + cols])
    weight = (torch.randn(V, D, generator=gen) * 0.7).requires_grad_()
    head = LMHead(SimpleNamespace(output_shard=lambda: SimpleNamespace(weight=weight, vocab_start=0)), None, None,
                  temperature)
    teachers = [torch.randn(V, H, generator=gen) * 0.8 for _ in range(K)]
    return batch, tokens, weight, head, teachers


def reference_kl_loss(batch, tokens, weight, teachers, temperature, num_responses):
    """float64: sum_r w_r / (R n_r) sum_t KL(softmax(z_t / T) || target_t), targets at temperature 1."""
    hidden = tokens.hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    log_student = torch.log_softmax(hidden @ w.T / temperature, dim=-1)
    teacher_hidden = batch.teacher_hidden.double()[tokens.rows, tokens.cols].view(-1, K, H)
    index = batch.teacher_index[tokens.rows]
    # the pool mixture: every teacher's own hidden states, side by side
    log_teachers = torch.stack([torch.log_softmax(teacher_hidden[:, k] @ teachers[k].double().T, dim=-1)
                                for k in range(K)], dim=1)  # [N, K, V]
    log_pool = torch.logsumexp(log_teachers, dim=1) - torch.log(torch.tensor(float(K), dtype=torch.float64))
    # a routed teacher: its hidden states in the first slot
    heads = torch.stack([teachers[k].double() for k in index.clamp(min=0).tolist()])  # [N, V, H]
    log_routed = torch.log_softmax(torch.einsum("nh,nvh->nv", teacher_hidden[:, 0], heads), dim=-1)
    log_target = torch.where((index < 0)[:, None], log_pool, log_routed)
    kl = (log_student.exp() * (log_student - log_target)).sum(-1)
    mask = batch.loss_mask[tokens.rows, tokens.cols].double()
    lengths = batch.loss_mask.sum(1).double().clamp(min=1)
    coef = batch.weights.double()[tokens.rows] / (num_responses * lengths[tokens.rows])
    loss = (coef * kl * mask).sum()
    loss.backward()
    return loss, hidden.grad, w.grad, kl


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_full_vocab_kl_to_routed_teachers_and_the_pool_mixture(temperature):
    batch, tokens, weight, head, teachers = problem(temperature)
    objective = FullVocabReverseKL(head, teachers, num_responses=6, domains=DOMAINS)
    loss, pieces = objective(batch, tokens)
    loss.backward()
    want_loss, want_grad_hidden, want_grad_weight, want_kl = reference_kl_loss(batch, tokens, weight, teachers,
                                                                               temperature, num_responses=6)
    torch.testing.assert_close(loss.double(), want_loss, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(tokens.hidden.grad.double(), want_grad_hidden, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(weight.grad.double(), want_grad_weight, rtol=1e-4, atol=1e-6)
    mask = batch.loss_mask[tokens.rows, tokens.cols]
    domains = batch.domain_ids[tokens.rows]
    for d in range(len(DOMAINS)):  # the exact per-domain KL sums behind kl_full/<domain>
        mine = mask & (domains == d)
        torch.testing.assert_close(pieces["kl_full"][d].double(), want_kl[mine].sum(), rtol=1e-5, atol=1e-7)
        assert pieces["kl_full_tokens"][d] == mine.sum()
    metrics = objective.metrics({k: v.double() for k, v in pieces.items() if k in objective.sizes}, steps=1)
    assert metrics["kl_full/all"].count == mask.sum()


def test_sft_cross_entropy_is_the_token_mean_over_the_global_batch():
    batch, tokens, weight, head, _ = problem(1.0, seed=2)
    num_tokens = 17  # the optimizer batch's valid tokens: more than this micro-batch holds
    loss, _ = TokenCrossEntropy(head, num_tokens=num_tokens)(batch, tokens)
    loss.backward()
    hidden = tokens.hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    logp = torch.log_softmax(hidden @ w.T, dim=-1).gather(1, tokens.targets[:, None]).squeeze(1)
    mask = batch.loss_mask[tokens.rows, tokens.cols]  # the masked response adds nothing
    want = -(logp * mask).sum() / num_tokens
    want.backward()
    torch.testing.assert_close(loss.double(), want, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(tokens.hidden.grad.double(), hidden.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(weight.grad.double(), w.grad, rtol=1e-5, atol=1e-7)
    assert not mask.all() and torch.all(tokens.hidden.grad[~mask] == 0)


def test_the_student_distribution_is_tempered():
    temperature = 0.6
    batch, tokens, weight, head, _ = problem(temperature, seed=1)
    _, pieces = LogProbs(head)(batch, tokens)
    want = torch.log_softmax(tokens.hidden.double() @ weight.double().T / temperature, dim=-1)
    want = want.gather(1, tokens.targets[:, None]).squeeze(1)
    torch.testing.assert_close(pieces["logp"].double(), want, rtol=1e-5, atol=1e-6)
    surrogate = ClippedSurrogate(head, num_responses=4, eps_low=0.2, eps_high=0.2, dual_clip=None)
    _, pieces = surrogate(batch, tokens)
    torch.testing.assert_close(pieces["logp"].double(), want, rtol=1e-5, atol=1e-6)


def test_the_ratio_is_taken_against_the_generating_policy():
    batch, *_ = problem(1.0)
    current = torch.full(batch.response_mask.shape, -0.5)
    assert ratio_reference(batch, 0, None) is None  # one step on-policy: ratio 1, no old-log-prob forward
    assert ratio_reference(batch, 0, current) is current  # several steps: pi_theta0, computed once
    batch.injected = torch.tensor([False, True, False, False])
    old = ratio_reference(batch, 1, current)  # one version old: the rollout engine's log-probs ...
    assert torch.equal(old[0], batch.rollout_logp[0]) and torch.equal(old[2], batch.rollout_logp[2])
    assert torch.equal(old[1], current[1])  # ... except on the teacher's injected trajectory
