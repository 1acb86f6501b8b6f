"""`train.rollout_ahead: 1`: the next update's batch is generated while the current one trains, by the weights
the rollout engine serves; the engine is synced only between batches, so a batch never mixes two weight
versions; a killed run resumes with exactly the metrics of an uninterrupted one."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from distributed import free_port
from run_helpers import DEMO, REPO, read_metrics, tiny_overrides

from dnmopd.config import load_config
from dnmopd.rollout.inprocess import InProcessRollout
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.entry import run
from dnmopd.trainer.modes.opd import OPDMode

VOLATILE = ("time", "throughput/")
SLOW_GENERATION_S = 1.0
MODES = {"opd": ["method.loss.kind=sampled_token"],
         "grpo": ["run.mode=grpo", "data.train_file=samples:teacher/math_train.jsonl", "data.samples_per_prompt=4",
                  "grpo.max_generation_batches=1"]}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_three_overlapped_updates(demo_models, tmp_path, mode):
    overrides = tiny_overrides(demo_models, tmp_path) + MODES[mode] + ["train.rollout_ahead=1"]
    run(load_config(TrainerConfig, [DEMO], overrides))
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert [r["rollout/staleness"] for r in records] == [0.0, 1.0, 1.0]  # the first batch is on-policy
    for record in records:
        assert record["loss"] == record["loss"] and record["response_tokens"] > 0
    for current, ahead in zip(records, records[1:], strict=False):
        assert ahead["timeline/rollout/start"] < current["timeline/train/end"]  # generated while training ...
        assert ahead["timeline/scoring/end"] <= current["timeline/sync/start"]  # ... and done before the sync


@pytest.fixture
def engine_events(monkeypatch):
    """Every generation step, weight sync and collection of the in-process rollout engine, in order, with a
    fingerprint of the weights the engine held at that moment. Generation is slowed down to take longer than
    training (as a large rollout does), so that a sync that did not wait for the batch would land inside it."""
    events, lock = [], threading.Lock()

    def record(*event):
        with lock:
            events.append(event)

    def fingerprint(engine):
        return float(engine.model.get_output_embeddings().weight.double().sum())

    generate, update_weights, collect = (InProcessRollout._generate_group, InProcessRollout.update_weights,
                                         OPDMode.collect)

    def traced_generate(self, requests, params):
        record("generate", fingerprint(self))
        time.sleep(SLOW_GENERATION_S)
        rollouts = generate(self, requests, params)
        record("generate", fingerprint(self))
        return rollouts

    def traced_update(self, named_tensors, probe):
        update_weights(self, named_tensors, probe)
        record("sync", fingerprint(self))

    def traced_collect(self, update):
        record("collect", update)
        collected = collect(self, update)
        record("collected", update)
        return collected

    monkeypatch.setattr(InProcessRollout, "_generate_group", traced_generate)
    monkeypatch.setattr(InProcessRollout, "update_weights", traced_update)
    monkeypatch.setattr(OPDMode, "collect", traced_collect)
    return events


def test_in_flight_batches_never_mix_policy_versions(demo_models, tmp_path, engine_events):
    overrides = tiny_overrides(demo_models, tmp_path, updates=4) + [
        "train.rollout_ahead=1", "rollout.engine.max_batch_size=2", "method.loss.kind=sampled_token"]
    run(load_config(TrainerConfig, [DEMO], overrides))
    initial = next(value for kind, value in engine_events if kind == "generate")
    synced = [value for kind, value in engine_events if kind == "sync"]
    assert len(synced) == 4 and len({initial, *synced}) == 5  # every update changed the weights
    used, inside = {}, None
    for kind, value in engine_events:
        if kind == "collect":
            inside, used[value] = value, set()
        elif kind == "collected":
            inside = None
        elif kind == "generate":
            used[inside].add(value)  # a generation step happens only inside a collection
        else:
            assert inside is None, f"weights synced while update {inside}'s batch was being generated"
    assert all(len(fingerprints) == 1 for fingerprints in used.values()), used  # one version per batch
    # batch 0 and 1: the initial weights; batch u: the weights after update u - 2's sync (one version old)
    assert [used[u].pop() for u in range(4)] == [initial, initial, synced[0], synced[1]]


def command(models, run_dir, mode):
    overrides = tiny_overrides(models, run_dir, updates=4) + MODES[mode] + [
        "checkpoint.save_every=2", "data.sampler.prompts_per_rollout=4", "train.rollout_ahead=1"]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(DEMO),
            *[arg for o in overrides for arg in ("--set", o)]]


def stable(records):
    """Records without wall-clock measurements (times, timeline, throughput, latencies)."""
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE) and not k.endswith("latency_s")}
            for r in records]


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_killed_overlapped_run_resumes_with_identical_metrics(demo_models, tmp_path, mode):
    """Killed right after the checkpoint of update 2, when update 3's batch (collected ahead) is in the
    checkpoint, and before update 2's metrics record: the resumed run logs that record from the checkpoint,
    trains on the batch and logs the uninterrupted run's metrics (data parallel 2)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full, interrupted = tmp_path / "full", tmp_path / "interrupted"
    subprocess.run(command(demo_models, full, mode), env=env, check=True, capture_output=True, timeout=900)

    process = subprocess.Popen(command(demo_models, interrupted, mode), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    checkpoint = interrupted / "run" / "checkpoints" / "iter_0000002"
    deadline = time.time() + 600
    while not (checkpoint / "complete").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert (checkpoint / "complete").exists(), "the run never wrote its first checkpoint"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert sorted(p.name for p in (checkpoint / "local").iterdir()) == ["rank_00000.pt", "rank_00001.pt"]
    assert len(read_metrics(interrupted)) < 4
    metrics = interrupted / "run" / "metrics.jsonl"  # the kill may land before update 2's record (written after
    metrics.write_text("".join(line + "\n" for line in metrics.read_text().splitlines()[:1]))  # its checkpoint)

    subprocess.run(command(demo_models, interrupted, mode), env=env, check=True, capture_output=True, timeout=900)
    assert stable(read_metrics(interrupted)) == stable(read_metrics(full))
    assert [r["rollout/staleness"] for r in read_metrics(full)] == [0.0] + [1.0] * 3
