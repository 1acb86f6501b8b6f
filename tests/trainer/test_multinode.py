"""Multi-node readiness on one machine.

- Two torchrun agents with `--nnodes 2` meet through a c10d rendezvous and train the demo config end to end
  (one process each: data parallel 2 across the two "nodes").
- The Slurm script launch/slurm/dnmopd.sbatch: its node layout and commands (--dry-run under a stand-in
  `scontrol`, and outside an allocation), its argument errors, its pre-flight (--check: a missing model folder
  or data file is refused, naming the key), and a whole job on one "node" with stand-in `srun` (runs the step
  here), stand-in inference servers (replaying recorded SGLang answers) and a stand-in torchrun that checks the
  servers it is given while it "trains": overlay written and config checked before any server starts, servers
  started, maps awaited, servers stopped at the end. (`make demo-servers` runs it with --local, real vLLM
  servers and the real trainer: tests/test_demo_servers.py.)
"""

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dnmopd.examples.demo_models import build_demo_models
from dnmopd.trainer.measurements.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
SBATCH = REPO / "launch" / "slurm" / "dnmopd.sbatch"
REPLAY = REPO / "tests" / "inference" / "replay_server.py"
WIRE = REPO / "tests" / "fixtures" / "wire"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def executable(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


# ------------------------------------------------------------------------------------------- torchrun
@pytest.mark.slow
def test_two_torchrun_agents_train_the_demo(tmp_path):
    models = build_demo_models(tmp_path / "models")
    teachers = ", ".join(f"{{backend: inprocess, name: {d}_teacher, model_path: {models / f'{d}_teacher'}}}"
                         for d in ("math", "code", "ifeval"))
    overrides = [
        f"run.output_dir={tmp_path / 'runs'}", "run.name=two-nodes",
        f"student.hf_path={models / 'student'}", f"rollout.engine.model_path={models / 'student'}",
        f"teachers.models=[{teachers}]",
        "train.updates=2", "data.sampler.prompts_per_rollout=2", "data.samples_per_prompt=2",
        "rollout.sampling.max_new_tokens=4", "checkpoint.export_hf=false", "logging.report=false",
        "logging.progress=false",
    ]
    port = free_port()
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
               "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "dnmopd-two-nodes",
               str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(REPO / "configs" / "demo_cpu.yaml"),
               *[a for o in overrides for a in ("--set", o)]]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    logs = [tmp_path / f"agent{i}.log" for i in range(2)]
    agents = [subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
              for log in logs]
    try:
        codes = [agent.wait(timeout=900) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
    tails = "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-40:]) for log in logs)
    assert codes == [0, 0], tails

    run_dir = tmp_path / "runs" / "two-nodes"
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1]
    for record in records:
        assert record["response_tokens"] > 0 and record["loss"] == record["loss"]  # finite, not NaN
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    checkpoint = run_dir / "checkpoints" / "iter_0000002"
    assert (checkpoint / "complete").exists()
    # one process per agent, ranks 0 and 1 of one world: each saved its RNG state into the same checkpoint
    assert sorted(p.name for p in (checkpoint / "rng").iterdir()) == ["rank_00000.pt", "rank_00001.pt"]


# ------------------------------------------------------------------------------------------- Slurm
def slurm_env(tmp_path, nodes, **extra):
    fake = tmp_path / "bin"
    executable(fake / "scontrol", '#!/bin/sh\n[ "$1 $2" = "show hostnames" ] || exit 1\necho "$3" | tr , "\\n"\n')
    return {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": ",".join(nodes), "SLURM_SUBMIT_DIR": str(REPO), **extra}


def sbatch(args, env, timeout=120):
    return subprocess.run(["bash", str(SBATCH), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def dry_run(tmp_path, nodes, args):
    result = sbatch(["--dry-run", *args], slurm_env(tmp_path, nodes))
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines() if not line.startswith("dnmopd.sbatch:")]


def find(commands, word):
    return [c for c in commands if word in c]


TRAINER_ARGS = ["--", "--config", "configs/recipes/student_opd.yaml", "--set", "run.name=x"]


def test_four_node_layout(tmp_path):
    commands = dry_run(tmp_path, ["n0", "n1", "n2", "n3"], [
        "--train-nodes", "2", "--servers", "configs/clusters/h100_4nodes_9b.rollout.servers.yaml",
        "--servers", "configs/clusters/h100_4nodes_9b.teachers.servers.yaml", *TRAINER_ARGS])
    servers = find(commands, "launch/start_servers.py")
    assert [next(a for a in c if a.startswith("--nodelist=")) for c in servers] == ["--nodelist=n2", "--nodelist=n3"]
    assert [c[c.index("--config") + 1] for c in servers] == [
        "configs/clusters/h100_4nodes_9b.rollout.servers.yaml", "configs/clusters/h100_4nodes_9b.teachers.servers.yaml"]
    (overlay,) = find(commands, "launch/slurm/servers_overlay.py")  # from the server files, before they start
    files = [overlay[i + 1] for i, a in enumerate(overlay) if a == "--servers"]
    assert files == ["configs/clusters/h100_4nodes_9b.rollout.servers.yaml@n2",
                     "configs/clusters/h100_4nodes_9b.teachers.servers.yaml@n3"]
    (check,) = find(commands, "--print-config")
    assert commands.index(overlay) < commands.index(check) < commands.index(servers[0])
    (train,) = [c for c in commands if c[0] == "srun" and "torchrun" in c]
    torchrun = train[train.index("torchrun"):]
    assert "--nodes=2" in train and "--nodelist=n0,n1" in train
    assert torchrun[:11] == ["torchrun", "--nnodes", "2", "--nproc_per_node", "8", "--rdzv_backend", "c10d",
                             "--rdzv_endpoint", "n0:29500", "--rdzv_id", "4242"]
    assert torchrun[11:] == ["launch/pretrain_dnmopd.py", *TRAINER_ARGS[1:], "--config", "runs/slurm-4242/servers.yaml"]
    assert check[-3:] == ["--config", "runs/slurm-4242/servers.yaml", "--print-config"]


def test_one_node_with_servers_beside_the_trainer(tmp_path):
    commands = dry_run(tmp_path, ["gpu7"], ["--gpus-per-node", "4", "--servers",
                                             "configs/clusters/one_node_8gpu.servers.yaml@0", *TRAINER_ARGS])
    (server,) = find(commands, "launch/start_servers.py")
    assert "--nodelist=gpu7" in server and "--overlap" in server
    (train,) = [c for c in commands if "torchrun" in c]
    assert "--nodes=1" in train and train[train.index("--nproc_per_node") + 1] == "4"
    assert train[train.index("--rdzv_endpoint") + 1] == "gpu7:29500"


def test_a_run_without_servers_starts_only_the_trainer(tmp_path):
    commands = dry_run(tmp_path, ["a", "b"], ["--", "--config", "configs/recipes/seqkd_sft.yaml"])
    assert not find(commands, "launch/start_servers.py") and not find(commands, "launch/slurm/servers_overlay.py")
    (train,) = [c for c in commands if "torchrun" in c]
    assert train[train.index("--nnodes") + 1] == "2" and train[-2:] == ["--config", "configs/recipes/seqkd_sft.yaml"]


@pytest.mark.parametrize("args, nodes, message", [
    (["--bogus", *TRAINER_ARGS], 1, "unknown option --bogus"),
    (["--train-nodes", "1"], 1, "no trainer arguments"),
    (["--servers", "configs/clusters/missing.yaml", *TRAINER_ARGS], 2, "no such file configs/clusters/missing.yaml"),
    (["--servers", "configs/clusters/one_node_8gpu.servers.yaml@x", *TRAINER_ARGS], 1, "must be an index"),
    (["--servers", "configs/clusters/one_node_8gpu.servers.yaml@3", *TRAINER_ARGS], 2, "needs node 3 but the "
                                                                                       "allocation has 2 nodes"),
    (["--train-nodes", "1", *TRAINER_ARGS], 3, "the layout uses 1 of the 3 allocated nodes"),
    (["--gpus-per-node", "0", *TRAINER_ARGS], 1, "--gpus-per-node must be a positive integer"),
    (["--train-nodes"], 1, "--train-nodes needs a value"),
])
def test_argument_errors(tmp_path, args, nodes, message):
    result = sbatch(["--dry-run", *args], slurm_env(tmp_path, [f"n{i}" for i in range(nodes)]))
    assert result.returncode == 2 and message in result.stderr, result.stderr


def outside_slurm(tmp_path):
    return {k: v for k, v in slurm_env(tmp_path, ["n0"]).items() if not k.startswith("SLURM_")}


def test_outside_slurm_is_an_error(tmp_path):
    result = sbatch(TRAINER_ARGS, outside_slurm(tmp_path))
    assert result.returncode == 2 and "not inside a Slurm allocation" in result.stderr


def test_a_dry_run_outside_slurm_lays_the_job_out_on_placeholder_nodes(tmp_path):
    result = sbatch(["--dry-run", "--train-nodes", "2",
                     "--servers", "configs/clusters/h100_4nodes_9b.rollout.servers.yaml",
                     "--servers", "configs/clusters/h100_4nodes_9b.teachers.servers.yaml", *TRAINER_ARGS],
                    outside_slurm(tmp_path))
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if not line.startswith("dnmopd.sbatch:")]
    servers = find(commands, "launch/start_servers.py")
    assert [next(a for a in c if a.startswith("--nodelist=")) for c in servers] == ["--nodelist=node2",
                                                                                  "--nodelist=node3"]
    (train,) = [c for c in commands if "torchrun" in c]
    assert "--nodelist=node0,node1" in train and train[train.index("--rdzv_endpoint") + 1] == "node0:29500"
    assert "runs/slurm-dry-run/servers.yaml" in train


def test_more_trainer_processes_than_gpus_is_refused(tmp_path):
    env = slurm_env(tmp_path, ["n0"], SLURM_GPUS_ON_NODE="4")
    result = sbatch(["--dry-run", "--gpus-per-node", "8", *TRAINER_ARGS], env)
    assert result.returncode == 2 and "Slurm gave each node 4 GPUs" in result.stderr


def stand_in_job(tmp_path, models, *, broken=False):
    """A one-node job on the demo's models: stand-in srun (runs the step here), inference servers and torchrun."""
    fake = tmp_path / "bin"
    executable(fake / "srun", '#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done\n'
                              'exec "$@"\n')
    server = executable(tmp_path / "server",
                        f'#!/bin/sh\nexec "{sys.executable}" "{REPLAY}" --fixtures "{WIRE}" "$@"\n')
    if broken:
        server = executable(tmp_path / "broken", "#!/bin/sh\necho 'CUDA out of memory while loading'\nexit 3\n")
    # the stand-in torchrun "trains" by checking that every server of the overlay it was given answers
    torchrun = executable(tmp_path / "torchrun", f"""#!{sys.executable}
import json, sys, urllib.request, yaml
args = sys.argv[1:]
overlay = yaml.safe_load(open(args[len(args) - 1 - args[::-1].index("--config") + 1]))
urls = overlay["rollout"]["engine"]["pool"]["urls"]
urls += [u for m in overlay["teachers"]["models"] for u in m["pool"]["urls"]]
health = {{u: urllib.request.urlopen(u + "/health_generate", timeout=10).status for u in urls}}
json.dump({{"args": args, "health": health}}, open("{tmp_path / 'torchrun.json'}", "w"))
""")
    ports = {name: free_port() for name in ("rollout", "math_teacher", "code_teacher", "ifeval_teacher")}
    servers = {"health_timeout_s": 60, "servers": [
        {"name": name, "backend": "sglang", "port": port, "python": server,
         "model_path": str(models / ("student" if name == "rollout" else name))}
        for name, port in ports.items()]}
    (tmp_path / "servers.yaml").write_text(yaml.safe_dump(servers))
    env = slurm_env(tmp_path, ["localhost"], TORCHRUN=torchrun, PYTHON=sys.executable)
    env["PATH"] = f"{fake}:{env['PATH']}"
    args = ["--gpus-per-node", "1", "--job-dir", str(tmp_path / "job"), "--servers", f"{tmp_path / 'servers.yaml'}@0",
            "--", "--config", "configs/recipes/student_opd.yaml", "--config", "configs/models/tiny.yaml",
            "--config", "configs/methods/dn_mopd.yaml", "--set", "run.name=slurm-test",
            "--set", f"student.hf_path={models / 'student'}",
            "--set", "data.train_file=samples:student/train_3domain.jsonl"]
    return env, args, ports


def test_the_check_refuses_a_missing_model_or_data_file_before_any_server_starts(tmp_path, demo_models):
    env, args, ports = stand_in_job(tmp_path, demo_models)
    result = sbatch(["--check", *args], env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the config is valid" in result.stdout and (tmp_path / "job" / "resolved_config.yaml").is_file()
    result = sbatch([*args, "--set", "data.train_file=data/student/missing.jsonl"], env, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("--set data.train_file=data/student/missing.jsonl: data.train_file: no file data/student/missing.jsonl"
            in result.stderr and "the run's config is invalid" in result.stderr)
    assert not (tmp_path / "job" / "servers-0.log").exists()  # no server was started
    servers = yaml.safe_load((tmp_path / "servers.yaml").read_text())
    servers["servers"][1]["model_path"] = str(tmp_path / "no_teacher")  # the teachers' folders come from the file
    (tmp_path / "servers.yaml").write_text(yaml.safe_dump(servers))
    result = sbatch(["--check", *args], env, timeout=300)
    assert result.returncode == 2 and "teachers.models.0.model_path: no folder" in result.stderr, result.stderr


@pytest.mark.parametrize("where", ["slurm", "local"])
def test_a_whole_job_with_stand_in_servers(tmp_path, demo_models, where):
    env, args, ports = stand_in_job(tmp_path, demo_models)
    if where == "local":  # the same job on this machine, without Slurm (no srun: the stand-in one is not there)
        env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
        env["PATH"] = ":".join(p for p in env["PATH"].split(":") if p != str(tmp_path / "bin"))
        args = ["--local", *args]
    result = sbatch(args, env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    ran = json.loads((tmp_path / "torchrun.json").read_text())
    assert ran["args"][:4] == ["--nnodes", "1", "--nproc_per_node", "1"]
    assert ran["args"][ran["args"].index("--rdzv_id") + 1] == ("local" if where == "local" else "4242")
    assert ran["args"][-2:] == ["--config", str(tmp_path / "job" / "servers.yaml")]
    assert set(ran["health"].values()) == {200}
    assert sorted(ran["health"]) == sorted(f"http://127.0.0.1:{p}" for p in ports.values())
    resolved = yaml.safe_load((tmp_path / "job" / "resolved_config.yaml").read_text())
    assert resolved["rollout"]["engine"]["update_dir"] == str(tmp_path / "job" / "rollout_weights")
    assert resolved["teachers"]["models"][0]["pool"]["urls"] == [f"http://127.0.0.1:{ports['math_teacher']}"]
    assert not any(port_open(p) for p in ports.values())  # the servers were stopped when the job ended
    assert not (tmp_path / "job" / "servers-0.json").exists()


def test_a_server_that_fails_to_start_fails_the_job(tmp_path, demo_models):
    env, args, ports = stand_in_job(tmp_path, demo_models, broken=True)
    result = sbatch(args, env, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "stopped before they were healthy" in result.stderr and "CUDA out of memory" in result.stderr
    assert not (tmp_path / "torchrun.json").exists()
