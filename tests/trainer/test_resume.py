"""Resume (2 CPU processes, data parallel 2): a run killed in the middle of an update resumes from its last
checkpoint and logs exactly the metrics of an uninterrupted run; checkpoint defects (no complete checkpoint,
truncated, altered or missing files) stop the run or fall back to the previous complete checkpoint, with
messages that name the files."""

import contextlib
import os
import shutil
import signal
import subprocess
import time

import psutil
import pytest
from run_helpers import read_metrics, stable, tiny_overrides, torchrun

from dnmopd.trainer import checkpoint

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
KEEP_TWO = ["checkpoint.keep_last=2"]


def command(models, run_dir, *, updates=6, extra=()):
    return torchrun(tiny_overrides(models, run_dir, updates=updates) + ["checkpoint.save_every=2",
                                                                        "data.sampler.prompts_per_rollout=4", *extra])


def kill_run(process):
    """SIGKILL torchrun and its workers (each worker runs in a session of its own, out of torchrun's group)."""
    workers = psutil.Process(process.pid).children(recursive=True)
    os.killpg(process.pid, signal.SIGKILL)
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.kill()
    process.wait()
    psutil.wait_procs(workers, timeout=30)


@pytest.mark.slow
def test_killed_run_resumes_with_identical_metrics(demo_models, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full, interrupted = tmp_path / "full", tmp_path / "interrupted"
    subprocess.run(command(demo_models, full), env=env, check=True, capture_output=True, timeout=900)

    process = subprocess.Popen(command(demo_models, interrupted), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    marker = interrupted / "run" / "checkpoints" / "iter_0000002" / "complete"
    deadline = time.time() + 600
    while not marker.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert marker.exists(), "the run never wrote its first checkpoint"
    kill_run(process)  # right after the checkpoint of update 2: inside update 3 of 6
    assert len(read_metrics(interrupted)) < 6

    resumed = subprocess.run(command(demo_models, interrupted), env=env, check=True, capture_output=True, text=True,
                             timeout=900)
    assert f"resumed from {marker.parent} (update 2)" in resumed.stderr  # not a restart from scratch
    assert stable(read_metrics(interrupted)) == stable(read_metrics(full))


@pytest.fixture(scope="module")
def finished(demo_models, tmp_path_factory):
    """A finished 4-update run with complete checkpoints after updates 2 and 4."""
    run_dir = tmp_path_factory.mktemp("finished")
    subprocess.run(command(demo_models, run_dir, updates=4, extra=KEEP_TWO), env=ENV, check=True,
                   capture_output=True, timeout=900)
    assert sorted(p.name for p in (run_dir / "run" / "checkpoints").iterdir()) == ["iter_0000002", "iter_0000004"]
    return run_dir


def rerun(demo_models, finished, tmp_path, *, damage=lambda checkpoints: None, updates=4, extra=()):
    """Copy the finished run, damage its checkpoints, run it again: (process, checkpoints folder, copy)."""
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    checkpoints = copy / "run" / "checkpoints"
    damage(checkpoints)
    proc = subprocess.run(command(demo_models, copy, updates=updates, extra=[*KEEP_TWO, *extra]), env=ENV,
                          capture_output=True, text=True, timeout=900)
    return proc, checkpoints, copy


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_bytes(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 8] = bytes(255 - b for b in data[len(data) // 2 : len(data) // 2 + 8])
    path.write_bytes(bytes(data))


def shard(checkpoints, update):
    return sorted((checkpoints / f"iter_{update:07d}" / "model").glob("*.distcp"))[0]


@pytest.mark.slow
def test_checkpoints_without_a_complete_one_stop_the_run_and_fresh_starts_over(demo_models, finished, tmp_path):
    def unmark(checkpoints):
        for marker in checkpoints.glob("iter_*/complete"):
            marker.unlink()

    proc, checkpoints, copy = rerun(demo_models, finished, tmp_path, damage=unmark)
    assert proc.returncode != 0
    assert f"{checkpoints}: no complete checkpoint among iter_0000002, iter_0000004" in proc.stderr
    assert "checkpoint.resume: fresh" in proc.stderr
    assert sorted(p.name for p in checkpoints.iterdir()) == ["iter_0000002", "iter_0000004"]  # nothing deleted
    assert read_metrics(copy) == read_metrics(finished)

    proc = subprocess.run(command(demo_models, copy, updates=2, extra=["checkpoint.resume=fresh"]), env=ENV,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checkpoint.resume: fresh: removing the 2 checkpoints" in proc.stderr
    assert [p.name for p in checkpoints.iterdir()] == ["iter_0000002"]
    assert [r["step"] for r in read_metrics(copy)] == [0, 1]


@pytest.mark.slow
def test_a_damaged_checkpoint_falls_back_to_the_previous_one_and_resumes_exactly(demo_models, finished, tmp_path):
    saved = shard(finished / "run" / "checkpoints", 4)
    proc, checkpoints, copy = rerun(demo_models, finished, tmp_path, damage=lambda c: truncate(shard(c, 4)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    bad = checkpoints / "iter_0000004" / "model" / saved.name
    assert f"checkpoint {checkpoints / 'iter_0000004'} is damaged: {bad}: {saved.stat().st_size // 2} bytes, " \
           f"{saved.stat().st_size} when saved" in proc.stderr
    assert f"resuming from the previous complete checkpoint {checkpoints / 'iter_0000002'} (update 2)" in proc.stderr
    assert (checkpoints / "iter_0000004.damaged").is_dir()
    assert (checkpoints / "iter_0000004" / "complete").is_file()  # saved again after updates 3 and 4
    assert stable(read_metrics(copy)) == stable(read_metrics(finished))


@pytest.mark.slow
@pytest.mark.parametrize("defect", ["altered shard", "missing rng file"])
def test_a_damaged_only_checkpoint_is_an_error_naming_the_file(demo_models, finished, tmp_path, defect):
    def target(checkpoints):
        if defect == "altered shard":
            return shard(checkpoints, 4)
        return checkpoints / "iter_0000004" / "rng" / "rank_00001.pt"

    def damage(checkpoints):
        shutil.rmtree(checkpoints / "iter_0000002")
        if defect == "altered shard":
            flip_bytes(target(checkpoints))  # same size, other bytes
        else:
            target(checkpoints).unlink()

    proc, checkpoints, copy = rerun(demo_models, finished, tmp_path, damage=damage)
    assert proc.returncode != 0
    reason = "contents changed since it was saved" if defect == "altered shard" else "missing"
    assert f"no usable checkpoint in {checkpoints}: {target(checkpoints)}: {reason}" in proc.stderr
    assert (checkpoints / "iter_0000004").is_dir()  # left in place for the user
    assert read_metrics(copy) == read_metrics(finished)


def test_keep_last_prunes_only_once_a_newer_checkpoint_is_complete(tmp_path):
    for update in (2, 4, 6):
        checkpoint.checkpoint_dir(tmp_path, update).mkdir(parents=True)
    for update in (2, 4):
        (checkpoint.checkpoint_dir(tmp_path, update) / checkpoint.MARKER).touch()
    checkpoint._prune(tmp_path, keep_last=1)  # iter_6 is being written: iter_4 stays, as the last complete one
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_0000004", "iter_0000006"]
    (checkpoint.checkpoint_dir(tmp_path, 6) / checkpoint.MARKER).touch()
    checkpoint._prune(tmp_path, keep_last=1)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["iter_0000006"]


@pytest.mark.slow
def test_an_sgd_run_resumes_exactly(demo_models, tmp_path):
    """SGD's momentum buffers load into a resumed run (megatron sets up optimizer state for Adam alone)."""
    sgd = ["optimizer.name=sgd", "checkpoint.save_every=1", "data.sampler.prompts_per_rollout=4", *KEEP_TWO]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    subprocess.run(torchrun(tiny_overrides(demo_models, full, updates=3) + sgd), env=ENV, check=True,
                   capture_output=True, timeout=900)
    shutil.copytree(full, resumed)
    shutil.rmtree(resumed / "run" / "checkpoints" / "iter_0000003")
    proc = subprocess.run(torchrun(tiny_overrides(demo_models, resumed, updates=3) + sgd), env=ENV,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(update 2)" in proc.stderr and stable(read_metrics(resumed)) == stable(read_metrics(full))
