"""The update loop's order and metrics with fake engines: no megatron model, no process group.

The loop (`Trainer.train`, `_update`, `_optimize`, `_sync_weights`, the `Measurements` after an update) runs as
the trainer runs it; what it drives is replaced: a mode whose batches are fixed token rows, a one-matrix
"student" whose forward calls the real objectives (`TokenCrossEntropy`, `LogProbs`) on its output weight, a
rollout engine that records the weights and the probe, an optimizer that records its steps, a fixed probe and an
evaluation that record when they measure. Every call lands in one event log."""

from types import SimpleNamespace

import pytest
import torch

from dnmopd.trainer import trainer as trainer_module
from dnmopd.trainer.experience.collector import EXPERIENCE_METRICS
from dnmopd.trainer.measurements.metric_table import Mean, MetricTable
from dnmopd.trainer.measurements.probe import PROBE_METRICS
from dnmopd.trainer.measurements.progress import ProgressDisplay
from dnmopd.trainer.measurements.schedule import Measurements
from dnmopd.trainer.modes.base import Collected, Mode
from dnmopd.trainer.rollout_ahead import RolloutAhead
from dnmopd.trainer.step.batch import TrainBatch
from dnmopd.trainer.step.forward_backward import TokenView
from dnmopd.trainer.step.objectives import OBJECTIVE_METRICS, LMHead, TokenCrossEntropy

VOCAB, HIDDEN = 11, 4
PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
RESPONSES = [[2, 3, 4], [5, 6, 7, 8], [9, 10]]


class FakeMode(Mode):
    metrics = MetricTable(("fake/prepared_update", "global", "The update prepare() saw."))

    def __init__(self, ctx, events):
        super().__init__(ctx)
        self.events, self.head = events, ctx.head

    def collect(self, update):
        self.events.append(("collect", update))
        zeros = [torch.zeros(len(r)) for r in RESPONSES]
        batch = TrainBatch.from_rows(PROMPTS, RESPONSES, zeros, zeros, [0, 1, 2])
        now = float(update)
        return Collected(batch, {"response_tokens": float(batch.response_mask.sum())},
                         {"rollout": (now, now + 0.25), "scoring": (now + 0.1, now + 0.5)})

    def prepare(self, batch, update, staleness):
        self.events.append(("prepare", update, staleness))
        return {"fake/prepared_update": float(update)}

    def objective(self, counts):
        self.events.append(("objective", counts.responses, counts.tokens))
        return TokenCrossEntropy(self.head, num_tokens=counts.tokens)


class FakeForward:
    """One output matrix as the whole student: hidden state of a token = a fixed embedding of the token before
    it; the real objective runs on the whole batch as one micro-batch."""

    def __init__(self, events):
        self.events = events
        generator = torch.Generator().manual_seed(0)
        self.embedding = torch.randn(VOCAB, HIDDEN, generator=generator, dtype=torch.float64).float()
        self.weight = torch.nn.Parameter(torch.randn(VOCAB, HIDDEN, generator=generator) * 0.5)
        self.losses = []

    def output_shard(self):
        return SimpleNamespace(weight=self.weight, vocab_start=0, vocab_size=VOCAB)

    def run(self, batch, loss_fn, *, forward_only):
        self.events.append(("forward", "forward_only" if forward_only else "train", batch.size))
        rows, cols = batch.response_mask.nonzero(as_tuple=True)
        positions = batch.prompt_lens[rows] + cols
        tokens = TokenView(self.embedding[batch.tokens[rows, positions - 1]], rows, cols, batch.tokens[rows, positions])
        loss, metrics = loss_fn(batch, tokens)
        if not forward_only:
            loss.backward()
            self.losses.append(float(loss.detach()))
        return [metrics]

    def reference_logp(self, batch):
        """[B, T] float64 log-probs of the response tokens under the current weight."""
        out = torch.zeros(batch.response_mask.shape, dtype=torch.float64)
        for row, col in batch.response_mask.nonzero().tolist():
            position = int(batch.prompt_lens[row]) + col
            logits = self.embedding[batch.tokens[row, position - 1]].double() @ self.weight.detach().double().T
            out[row, col] = torch.log_softmax(logits, -1)[batch.tokens[row, position]]
        return out


class FakeOptimization:
    """SGD on the output matrix; the second step of every update is reported skipped (non-finite gradients)."""

    def __init__(self, forward, events):
        self.forward, self.events = forward, events
        self.model, self.steps = [torch.nn.Identity()], 0

    def zero_grad(self):
        self.events.append(("zero_grad",))
        self.forward.weight.grad = None

    def step(self):
        self.steps += 1
        norm = float(self.forward.weight.grad.norm())
        applied = self.steps % 2 == 1
        if applied:
            with torch.no_grad():
                self.forward.weight -= 0.5 * self.forward.weight.grad
        self.events.append(("step", applied))
        return applied, norm

    def learning_rate(self):
        return 0.5 / self.steps

    def state_dict(self):
        return {"steps": self.steps}


class FakeRolloutEngine:
    def __init__(self, forward, events):
        self.forward, self.events = forward, events

    def update_weights(self, tensors, probe):
        weights = dict(tensors)
        assert torch.equal(weights["lm_head.weight"], self.forward.weight.detach())
        prompt, length = probe.prompt_len, len(probe.token_ids) - probe.prompt_len
        probe_batch = TrainBatch.from_rows([probe.token_ids[:prompt]], [probe.token_ids[prompt:]],
                                           [torch.zeros(length)], [torch.zeros(length)], [0])
        expected = self.forward.reference_logp(probe_batch)[0, :length]
        torch.testing.assert_close(probe.expected.double(), expected, atol=1e-5, rtol=1e-5)
        self.events.append(("update_weights", probe.token_ids))


class FakeProbe:
    """Due after updates in `due_at`; its measurement is the update's number, as this rank's part of a mean."""

    def __init__(self, events, due_at):
        self.events, self.due_at, self.measured = events, due_at, 0

    def due(self, update):
        return update in self.due_at

    def measure(self):
        self.events.append(("probe",))
        self.measured += 1
        return {"probe_kl/all": Mean(2.0 * self.measured, 2.0)}


class FakeEvaluation:
    def __init__(self, events, due_at):
        self.events, self.due_at = events, due_at

    def due(self, update):
        return update in self.due_at

    def after_update(self, update):
        self.events.append(("eval", update))
        return {"eval/heldout": 10.0 * update}

    def close(self):
        self.events.append(("eval_closed",))


class FakeMetrics:
    path = "metrics.jsonl"  # what a failed write would name

    def __init__(self, events):
        self.events, self.records = events, {}

    def log(self, update, metrics):
        self.events.append(("log", update))
        self.records[update] = metrics

    def close(self):
        self.events.append(("metrics_closed",))


def fake_trainer(monkeypatch, tmp_path, *, updates, steps, ahead, save_every, probe_at=(), eval_at=()):
    events = []
    forward = FakeForward(events)
    config = SimpleNamespace(
        train=SimpleNamespace(updates=updates, optimizer_steps_per_update=steps),
        rollout=SimpleNamespace(weight_probe_tolerance=2e-2),
        checkpoint=SimpleNamespace(save_every=save_every, export_hf=False, keep_last=2),
        logging=SimpleNamespace(report=False))
    trainer = trainer_module.Trainer.__new__(trainer_module.Trainer)  # the loop without the composition root
    head = LMHead(forward, None, None)
    trainer.config, trainer.rank, trainer.dp_rank, trainer.leader, trainer.is_leader = config, 0, 0, 0, True
    trainer.dims = SimpleNamespace(dp_group=None, pp_size=1, pg=SimpleNamespace(mp=None, pp=None, tp=None))
    trainer.student = SimpleNamespace(is_last_stage=True, hf_tensors=lambda causal_lm_names: iter(
        [("lm_head.weight", forward.weight.detach().clone())]))
    trainer.head, trainer.forward = head, forward
    trainer.mode = FakeMode(SimpleNamespace(config=config, head=head), events)
    trainer.optimization = FakeOptimization(forward, events)
    trainer.rollout_engine = FakeRolloutEngine(forward, events)
    trainer.rollout_backend = SimpleNamespace(shared_across_ranks=False, causal_lm_weight_names=True)
    trainer.metric_table = (trainer_module.LOOP_METRICS | EXPERIENCE_METRICS | OBJECTIVE_METRICS | PROBE_METRICS
                            | FakeMode.metrics)
    trainer.rollout_ahead = RolloutAhead(trainer.mode.collect, ahead=ahead)
    trainer.start_update, trainer.last_metrics, trainer.manifest = 0, {}, {"format": "manifest"}
    # what the probe and the evaluation measure has tests of their own (test_probe, test_eval_during_training)
    trainer.measurements = Measurements(FakeEvaluation(events, eval_at), FakeProbe(events, probe_at))
    trainer.metrics = FakeMetrics(events)
    trainer.progress = ProgressDisplay(updates, 0, ["math"], enabled=False)
    trainer.run_dir = tmp_path
    trainer.sampler = SimpleNamespace(state_dict=lambda: {"sampler": "state"})

    def save(run_dir, update, student, optimization, state, keep_last, local_state, manifest):
        assert manifest == {"format": "manifest"}
        assert state == {"update": update, "sampler": {"sampler": "state"}, "mode": {},
                         "optimization": {"steps": update * steps}}
        assert local_state.keys() == {"rollout_ahead", "metrics"}
        assert local_state["rollout_ahead"] == {"ready": None}  # nothing collected ahead at the run's end
        assert local_state["metrics"]["fake/prepared_update"] == update - 1  # the record of the update it follows
        events.append(("save", update))

    monkeypatch.setattr(trainer_module.checkpoint, "save", save)
    return trainer, events, forward


def optimizer_step(responses, tokens):
    return [("zero_grad",), ("objective", responses, tokens), ("forward", "train", responses)]


def test_on_policy_loop_order_and_metrics(monkeypatch, tmp_path):
    trainer, events, forward = fake_trainer(monkeypatch, tmp_path, updates=3, steps=2, ahead=0, save_every=2)
    trainer.train()
    tokens = [sum(len(r) for r in RESPONSES[:2]), len(RESPONSES[2])]
    probe = tuple(PROMPTS[0] + RESPONSES[0])
    expected = []
    for update in range(3):
        expected += [("collect", update), ("prepare", update, 0)]
        expected += optimizer_step(2, tokens[0]) + [("step", True)] + optimizer_step(1, tokens[1]) + [("step", False)]
        expected += [("forward", "forward_only", 1), ("update_weights", probe)]
        if update in (1, 2):  # save_every 2, and the last update; its time joins the update's metrics
            expected.append(("save", update + 1))
        expected.append(("log", update))
    assert events == expected + [("metrics_closed",)]

    losses = forward.losses
    for update, record in trainer.metrics.records.items():
        assert record["loss"] == pytest.approx((losses[2 * update] + losses[2 * update + 1]) / 2)
        assert record["skipped_steps"] == 1.0 and record["lr"] == pytest.approx(0.5 / (2 * update + 2))
        assert record["grad_norm"] > 0 and record["rollout/staleness"] == 0.0
        assert record["response_tokens"] == 9.0 and record["fake/prepared_update"] == update
        assert record["time/rollout"] == pytest.approx(0.25) and record["timeline/scoring/start"] == update + 0.1
        assert record["time/train"] >= 0 and record["time/sync"] >= 0 and record["throughput/tokens_per_s"] > 0
        assert "time/wait" not in record
    assert trainer.last_metrics is trainer.metrics.records[2]
    saved = [trainer.metrics.records[u] for u in (1, 2)]  # the checkpoint's time is a metric of its update
    assert "time/checkpoint" not in trainer.metrics.records[0] and all(
        r["time/checkpoint"] >= 0 and r["timeline/checkpoint/start"] >= r["timeline/sync/end"] for r in saved)
    assert all("probe_kl/all" not in r and "time/probe" not in r and "eval/heldout" not in r
               for r in trainer.metrics.records.values())


def test_measurements_after_training_and_after_the_weight_sync(monkeypatch, tmp_path):
    """The probe measures the trained weights before the batch collected ahead finishes and the weights are
    synced; the evaluation runs on the synced engine, before the update is saved and its metrics logged."""
    trainer, events, _ = fake_trainer(monkeypatch, tmp_path, updates=3, steps=1, ahead=1, save_every=10,
                                      probe_at=(0, 2), eval_at=(1, 2))
    try:
        trainer.train()
    finally:
        trainer.rollout_ahead.close()
    trainer.measurements.close()
    sync = ("update_weights", tuple(PROMPTS[0] + RESPONSES[0]))
    main_thread = [e for e in events if e[0] in ("prepare", "step", "probe", "eval", "log", "save", "eval_closed")
                   or e == sync]
    assert main_thread == [
        ("prepare", 0, 0), ("step", True), ("probe",), sync, ("log", 0),
        ("prepare", 1, 1), ("step", False), sync, ("eval", 1), ("log", 1),
        ("prepare", 2, 1), ("step", True), ("probe",), sync, ("eval", 2), ("save", 3), ("log", 2),
        ("eval_closed",)]
    records = trainer.metrics.records
    assert [records[u].get("probe_kl/all") for u in range(3)] == [1.0, None, 2.0]  # Mean(2k, 2) reduced: k
    assert [records[u].get("eval/heldout") for u in range(3)] == [None, 10.0, 20.0]
    assert all(records[u]["time/probe"] >= 0 for u in (0, 2)) and "time/probe" not in records[1]
    # the probe's phase lies between the update's train phase and its weight sync
    for u in (0, 2):
        assert records[u]["timeline/train/end"] <= records[u]["timeline/probe/start"]
        assert records[u]["timeline/probe/end"] <= records[u]["timeline/sync/start"]


def test_rollout_ahead_collects_the_next_batch_before_training(monkeypatch, tmp_path):
    trainer, events, _ = fake_trainer(monkeypatch, tmp_path, updates=3, steps=1, ahead=1, save_every=10)
    try:
        trainer.train()
    finally:
        trainer.rollout_ahead.close()
    probe = ("update_weights", tuple(PROMPTS[0] + RESPONSES[0]))
    main_thread = [e for e in events if e[0] in ("prepare", "update_weights", "save")]
    assert main_thread == [("prepare", 0, 0), probe, ("prepare", 1, 1), probe, ("prepare", 2, 1), probe, ("save", 3)]
    syncs = [i for i, e in enumerate(events) if e == probe]
    collects = [events.index(("collect", u)) for u in range(3)]
    # batch u+1 is collected (in the background) before the weights of update u reach the engine
    assert collects[0] < events.index(("prepare", 0, 0)) and collects[1] < syncs[0] and collects[2] < syncs[1]
    assert collects[1] > events.index(("collect", 0)) and collects[2] > syncs[0]  # and not before its turn
    records = trainer.metrics.records
    assert [records[u]["rollout/staleness"] for u in range(3)] == [0.0, 1.0, 1.0]
    assert "time/wait" not in records[0] and all(records[u]["time/wait"] >= 0 for u in (1, 2))
    assert trainer.rollout_ahead.version == 3
