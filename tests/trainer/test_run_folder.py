"""A run folder is safe (2 CPU processes, data parallel 2, the real trainer): a resume refuses inputs that changed
since its checkpoint, naming them, and applies the changes `checkpoint.allow_changes` accepts; one trainer at a
time (a second is refused, naming the holder); the workers die with a SIGKILLed launcher and the restart resumes
exactly; a full disk during a checkpoint is named and loses nothing."""

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import time

import psutil
import pytest
from run_helpers import read_metrics, stable, tiny_overrides, torchrun

from dnmopd.data.sample_data import sample_file
from dnmopd.io import dump_row
from dnmopd.trainer import checkpoint, manifest

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TRAIN_FILE = "train.jsonl"  # relative: every copy of a run root resolves it inside itself


def overrides(models, root, *, updates=4, extra=()):
    """4 updates of 2 prompts x 2 responses, checkpoints after updates 2 and 4 (both kept), a cosine LR schedule,
    the train file inside `root` (the working directory of the run)."""
    return [*tiny_overrides(models, root, updates=updates), "data.sampler.prompts_per_rollout=2",
            f"data.train_file={TRAIN_FILE}", "checkpoint.save_every=2", "checkpoint.keep_last=2",
            "optimizer.lr_decay_style=cosine", *extra]


def train(models, root, **kwargs):
    return subprocess.run(torchrun(overrides(models, root, **kwargs)), cwd=root, env=ENV, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def finished(demo_models, tmp_path_factory):
    """A finished 4-update run under <root>/run, with its train file at <root>/train.jsonl."""
    root = tmp_path_factory.mktemp("finished")
    shutil.copy(sample_file("student/train_3domain.jsonl"), root / TRAIN_FILE)
    proc = train(demo_models, root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def copy_of(finished, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(finished, root)
    return root


def edit_row(path, line):
    lines = path.read_text().splitlines()
    row = json.loads(lines[line - 1])
    row["prompt"][0]["content"] += " Answer briefly."
    lines[line - 1] = dump_row(row)
    path.write_text("\n".join(lines) + "\n")


def reverse_rows(path):
    path.write_text("\n".join(reversed(path.read_text().splitlines())) + "\n")


def edit_chat_template(folder):
    template = folder / "chat_template.jinja"
    template.write_text(template.read_text() + "{#- edited -#}")


@pytest.mark.slow
@pytest.mark.parametrize("change", ["edited row", "reordered rows", "teachers"])
def test_a_resume_on_changed_inputs_is_refused_naming_the_change(demo_models, finished, tmp_path, change):
    root = copy_of(finished, tmp_path)
    extra, expected = [], []
    if change == "edited row":
        edit_row(root / TRAIN_FILE, 7)
        expected = [f"data.train_file: {TRAIN_FILE}: line 7 changed"]
    elif change == "reordered rows":
        reverse_rows(root / TRAIN_FILE)
        expected = [f"data.train_file: {TRAIN_FILE}: the same 48 rows in another order (line 1 now holds the row of "
                    "line 48)"]
    else:  # the math teacher's chat template edited (in a copy), the code teacher replaced by another model
        math_copy = shutil.copytree(demo_models / "math_teacher", tmp_path / "math_teacher")
        edit_chat_template(math_copy)
        extra = [f"teachers.models.0.model_path={math_copy}",
                 f"teachers.models.1.model_path={demo_models / 'ifeval_teacher'}"]
        expected = [f"teachers.models.0.model_path: {math_copy} (math_teacher): chat template sha256 ",
                    f"teachers.models.1.model_path: {demo_models / 'ifeval_teacher'} (code_teacher): weights sha256 "]
    config_before = (root / "run" / "config.yaml").read_text()

    proc = train(demo_models, root, extra=extra)
    assert proc.returncode != 0
    assert f"{root / 'run' / 'checkpoints' / 'iter_0000004'} was trained on other inputs than this run's" in proc.stderr
    for text in expected:
        assert text in proc.stderr, proc.stderr[-3000:]
    keys = "teachers.models.0.model_path, teachers.models.1.model_path" if change == "teachers" else "data.train_file"
    assert f"add them to checkpoint.allow_changes: [{keys}]" in proc.stderr
    assert (root / "run" / "config.yaml").read_text() == config_before  # refused before writing anything
    assert read_metrics(root) == read_metrics(finished)


@pytest.mark.slow
def test_a_changed_lr_is_refused_and_once_allowed_applies_from_the_resumed_step(demo_models, finished, tmp_path):
    root = copy_of(finished, tmp_path)
    new_lr, allow = "optimizer.lr=2e-3", "checkpoint.allow_changes=[optimizer.lr, train.updates]"
    proc = train(demo_models, root, updates=6, extra=[new_lr])
    assert proc.returncode != 0
    assert "optimizer.lr: 0.001 -> 0.002" in proc.stderr and "train.updates: 4 -> 6" in proc.stderr
    assert "add them to checkpoint.allow_changes: [optimizer.lr, train.updates]" in proc.stderr

    proc = train(demo_models, root, updates=6, extra=[new_lr, allow])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("with changed inputs (checkpoint.allow_changes): optimizer.lr: 0.001 -> 0.002; "
                             "train.updates: 4 -> 6") == 1
    records = read_metrics(root)
    assert [r["step"] for r in records] == list(range(6))
    # the LR after each update: the new peak on a cosine over the new length, at the resumed step (megatron's
    # formula, in float64); the checkpoint's schedule had ended at 0
    for record in records[4:]:
        steps = record["step"] + 1
        assert record["lr"] == pytest.approx(0.5 * (1 + math.cos(math.pi * steps / 6)) * 2e-3, rel=1e-9, abs=1e-15)
    assert records[4]["lr"] > 1e-4


@pytest.mark.parametrize(("old", "new", "described"), [
    ("abcdef", "abXdef", "line 3 changed"),
    ("abcdef", "abXYcdef", "lines 3-4 added"),
    ("abcdef", "abef", "lines 3-4 of the checkpoint's file removed"),
    ("abcdef", "abXef", "line 3 changed (were 2 rows)"),
    ("abcdef", "bacdef", "the same 6 rows in another order (line 1 now holds the row of line 2)"),
])
def test_the_changed_rows_of_a_prompt_file_are_named_by_line(old, new, described):
    assert manifest._rows_change(list(old), list(new)) == described


def test_allow_changes_entries_cover_dotted_prefixes_and_any_list_index():
    changes = [manifest.Change("teachers.models.0.model_path", "t0"), manifest.Change("optimizer.lr", "lr"),
               manifest.Change("run.mode", "mode")]
    assert manifest.judge(changes[:2], ["teachers.models.*", "optimizer"], "ckpt") is None
    refusal = manifest.judge(changes, ["teachers", "run.mode"], "ckpt")
    assert "  lr\n" in refusal and "add them to checkpoint.allow_changes: [optimizer.lr]" in refusal
    assert "  mode (cannot change in a resumed run: the checkpoint holds another mode's state)" in refusal
    assert "t0" not in refusal


def lock_holder(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def gone(process):
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_a_killed_launcher_takes_its_workers_along_and_a_second_trainer_is_refused(demo_models, finished, tmp_path):
    root = tmp_path / "killed"
    root.mkdir()
    shutil.copy(finished / TRAIN_FILE, root / TRAIN_FILE)
    launcher = subprocess.Popen(torchrun(overrides(demo_models, root)), cwd=root, env=ENV, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = root / "run" / "checkpoints" / "iter_0000002" / checkpoint.MARKER
    deadline = time.time() + 300
    while not marker.exists() and time.time() < deadline and launcher.poll() is None:
        time.sleep(0.02)
    assert marker.exists(), "the run never wrote its first checkpoint"
    workers = psutil.Process(launcher.pid).children(recursive=True)
    for worker in workers:  # held still inside update 3 while a second trainer tries the folder
        worker.suspend()
    holder = lock_holder(root / "run" / "trainer.lock")
    assert holder["pid"] in {w.pid for w in workers} and holder["host"] == socket.gethostname()
    started = time.time()
    second = subprocess.run(torchrun(overrides(demo_models, root)), cwd=root, env=ENV, capture_output=True,
                            text=True, timeout=120)
    refused_after = time.time() - started
    assert second.returncode != 0
    assert (f"{root / 'run'} is in use by another trainer (pid {holder['pid']} on {holder['host']}, started "
            f"{holder['started']}, holds {root / 'run' / 'trainer.lock'})") in second.stderr
    assert refused_after < 60, f"refused after {refused_after:.0f} s"
    print(f"second trainer refused after {refused_after:.1f} s")

    for worker in workers:
        worker.resume()
    os.kill(launcher.pid, signal.SIGKILL)  # the launcher alone: its workers are in sessions of their own
    launcher.wait()
    psutil.wait_procs(workers, timeout=30)
    assert all(gone(w) for w in workers), "a worker outlived its launcher"
    assert len(read_metrics(root)) < 4

    restarted = subprocess.run(torchrun(overrides(demo_models, root)), cwd=root, env=ENV, capture_output=True,
                               text=True, timeout=600)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert f"resumed from {marker.parent} (update 2)" in restarted.stderr
    assert stable(read_metrics(root)) == stable(read_metrics(finished))
    assert all(gone(w) for w in workers)


@pytest.fixture
def small_disk(finished, tmp_path):
    """A tmpfs with room for one checkpoint of the finished run, not two (skipped where mounting is refused)."""
    checkpoint_bytes = sum(p.stat().st_size for p in (finished / "run" / "checkpoints" / "iter_0000002").rglob("*")
                           if p.is_file())
    mount = tmp_path / "disk"
    mount.mkdir()
    size = checkpoint_bytes * 3 // 2
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here (it needs root or CAP_SYS_ADMIN): "
                    f"{proc.stderr.strip()}")
    yield mount, size
    subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_is_named_and_the_previous_one_resumes_exactly(demo_models, finished,
                                                                                       small_disk):
    root, size = small_disk
    shutil.copy(finished / TRAIN_FILE, root / TRAIN_FILE)
    proc = train(demo_models, root)
    assert proc.returncode != 0
    checkpoints = root / "run" / "checkpoints"
    assert (f"DiskError: [Errno 28] writing the checkpoint {checkpoints / 'iter_0000004'} failed: No space left on "
            f"device: the file system of {os.path.realpath(root)} (tmpfs, tmpfs) has ") in proc.stderr, \
        proc.stderr[-3000:]
    assert f" free of {size / 2**20:.1f} MiB" in proc.stderr
    assert (checkpoints / "iter_0000002" / checkpoint.MARKER).is_file()
    assert not (checkpoints / "iter_0000004" / checkpoint.MARKER).exists()

    subprocess.run(["mount", "-o", f"remount,size={3 * size}", str(root)], check=True)
    proc = train(demo_models, root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {checkpoints / 'iter_0000002'} (update 2)" in proc.stderr  # its files checked: intact
    assert stable(read_metrics(root)) == stable(read_metrics(finished))
