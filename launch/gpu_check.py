"""The GPU path in one command: every check a first GPU session must make, recorded in one JSON + Markdown report.

    python3 launch/gpu_check.py --out $OUT --wheels build/gpu-wheels   # a GPU machine without network (its image)
    make gpu-check                                                     # from .venv, report in runs/gpu-check
    python launch/gpu_check.py --device cpu --tiny --out runs/gpu-check-cpu   # every section at toy size (make test)
    python launch/gpu_check.py --download-wheels build/gpu-wheels      # the wheel recipe (make gpu-wheels)

Sections, in this order, each in processes of its own under a time limit (a failure, a missing package or a time
limit is a row of the report, never the end of the run):

  environment  Python, torch, CUDA, NCCL, the GPU, and every package the checks use (a missing optional one warns)
  trainer      DN-MOPD end to end on one device: a Qwen3.5 student with the real 2B layer shapes, 4 layers (3 Gated
               DeltaNet + 1 attention) and the real vocabulary (248,320; --tiny: the CPU demo's models), in-process
               rollout engine and teachers on the device, packed micro-batches, 2 updates with a checkpoint after
               each; the run resumed from its first checkpoint must repeat the second update exactly; its release
               reloads in transformers on the device; one update with the engines on the CPU must equal the same
               update on the CPU at the same seed; the update's phases (rollout, scoring, train, sync)
  student      tests/student/gpu_check.py: megatron vs Hugging Face logits and gradients, FLA vs torch GDN, packed vs
               padded through every available layer backend
  gpu_tests    pytest -m gpu; on CUDA also tests/kernels with the Triton kernels compiled
  throughput   the student's update (forward + backward + Adam) at the paper's length mix on the 2B shape, in tokens/s
               and peak memory, against the same model and update through transformers (and with FLA when importable)
  kernels      launch/bench_kernels.py at the Qwen3.5 LM-head shapes of configs/bench/shapes.yaml (TP 1 and TP 8
               shards) against the 3-GEMM floor, torch, torch.compile, Liger and Cut Cross-Entropy, with float64 errors
  multi_gpu    the trainer section at TP 2 and at PP 2: run when 2 GPUs are visible, else skipped with its command

The report: OUT/gpu_check.json (meta, failed checks, every row), OUT/gpu_check.md (the table, also printed at the
end) and OUT/gpu_check.log (every section's output); models, runs and benchmark folders go to --work. On CUDA the
sections share --budget seconds (default 480): one that would start later is skipped. Exit status 1 if a required
check failed. docs/benchmarks.md ("GPU check") describes the checks, their tolerances and the wheel recipe.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE_PATHS = []  # the checkout itself where dnmopd is not installed (a GPU image runs it from the source)
if importlib.util.find_spec("dnmopd") is None:
    sys.path.insert(0, str(REPO))
    SOURCE_PATHS.append(str(REPO))

from dnmopd.benchmarks.gpu_report import Check, RowLog, read_rows, write_report  # noqa: E402

SECTIONS = ("environment", "trainer", "student", "gpu_tests", "throughput", "kernels", "multi_gpu")
SECTION_LIMIT_S = {"environment": 90, "trainer": 300, "student": 180, "gpu_tests": 150, "throughput": 180,
                   "kernels": 150, "multi_gpu": 600}
"""Most seconds of each section on a GPU (capped by what is left of --budget)."""
CPU_SLOWDOWN = 4
"""On a CPU the limits are this many times longer (a loaded 2-core CI machine runs the toy sizes)."""
MIN_SECTION_S = 20
"""A section is not started with less than this left of the budget."""

WHEELS = (
    "megatron-core==0.19.2", "flash-linear-attention==0.6.0", "fla-core==0.6.0", "datasets==5.2.0", "dill==0.4.1",
    "multiprocess==0.70.19", "liger-kernel==0.8.5", "cut-cross-entropy==25.1.1",
)
"""What the GPU image (Python 3.12, torch 2.11, Triton 3.6, transformers 5.17) lacks: the student's megatron-core, FLA,
the prompt loader's datasets (with dill and multiprocess) and the kernel benchmark's peers. dnmopd itself runs from
the checkout, which travels anyway. Transformer Engine's wheels are far over the size limit."""
WHEEL_PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
                   "manylinux_2_28_x86_64")
WHEELS_MAX_MIB = 50

KERNEL_ERROR_LIMIT = {"bfloat16": 1e-2, "float32": 1e-4}
"""Relative error of the fused step's loss and gradients against float64 (bf16 on the H200: about 3.5e-3)."""


# ------------------------------------------------------------------------------------------------ wheels
def download_wheels(target: Path) -> int:
    """The wheel recipe: WHEELS for CPython 3.12 on manylinux x86-64 into `target` (replaced), at most
    WHEELS_MAX_MIB in all, exactly one wheel per pin."""
    from dnmopd.io import atomic_directory

    with atomic_directory(target) as tmp:
        platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                        *platforms, "--dest", str(tmp), *WHEELS], check=True)
        wheels = sorted(tmp.glob("*.whl"))
        names = sorted(_wheel_name(w) for w in wheels)
        wanted = sorted(_normalized(pin.split("==")[0]) for pin in WHEELS)
        if names != wanted:
            raise SystemExit(f"--download-wheels: got wheels {names}, expected one of each of {wanted}")
        size = sum(w.stat().st_size for w in wheels) / 2**20
        if size > WHEELS_MAX_MIB:
            raise SystemExit(f"--download-wheels: {size:.1f} MiB of wheels, over the {WHEELS_MAX_MIB} MiB limit")
    print(f"{len(wheels)} wheels, {size:.1f} MiB, in {target}")
    return 0


def _normalized(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def _wheel_name(path: Path) -> str:
    return _normalized(path.name.split("-")[0])


def install_wheels(wheels: Path, site: Path, log: RowLog) -> bool:
    """pip --no-index --no-deps of every wheel in `wheels` into a fresh `site` folder; a row per distribution."""
    files = sorted(wheels.glob("*.whl"))
    if not files:
        log.expect(f"wheels in {wheels}", False, 0, note="no .whl files: run make gpu-wheels where pip works")
        return False
    shutil.rmtree(site, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--target", str(site),
                           *map(str, files)], capture_output=True, text=True)
    size = sum(f.stat().st_size for f in files) / 2**20
    log.expect("pip install --no-index of the wheels", proc.returncode == 0, f"{len(files)} wheels",
               note="; ".join(filter(None, (f"{size:.1f} MiB into {site}", proc.stderr[-1500:].strip()))))
    if proc.returncode:
        return False
    from importlib.metadata import distributions

    installed = {_normalized(d.metadata["Name"]): d.version for d in distributions(path=[str(site)])}
    for wheel in files:
        name, version = _wheel_name(wheel), wheel.name.split("-")[1]
        log.expect(f"installed {name}", installed.get(name) == version, installed.get(name, "missing"),
                   note=f"from {wheel.name}")
    return True


# ------------------------------------------------------------------------------------------------ the orchestrator
class Session:
    """Runs the sections as child processes, each under its time limit, and gathers their rows."""

    def __init__(self, args):
        self.args, self.facts = args, {}
        self.started = time.monotonic()
        self.deadline = None if args.budget <= 0 else self.started + args.budget
        self.log_path = args.out / "gpu_check.log"
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.env.pop("TRITON_INTERPRET", None)  # set per tool (the kernel benchmark sets it itself on a CPU)
        self.add_paths(SOURCE_PATHS)

    def add_paths(self, paths: list[str]) -> None:
        """Put `paths` first on the sections' PYTHONPATH."""
        paths = paths + [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if paths:
            self.env["PYTHONPATH"] = os.pathsep.join(paths)

    def time_left(self, section: str) -> float | None:
        """Seconds the section may run (None: no time left to start it)."""
        limit = SECTION_LIMIT_S[section] * (CPU_SLOWDOWN if self.args.device == "cpu" else 1)
        if self.deadline is None:
            return limit
        left = self.deadline - time.monotonic()
        return min(limit, left) if left >= MIN_SECTION_S else None

    def run(self, label: str, command: list[str], limit: float) -> int | None:
        """Run `command` from the repository root with its output appended to the log; its exit status, or None
        when it ran out of time (it and every process it started are then killed)."""
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"\n===== {label} (limit {limit:.0f} s): {' '.join(command)}\n")
            log.flush()
            start = time.monotonic()
            proc = subprocess.Popen(command, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                _kill_tree(proc)
                code = None
            log.write(f"===== {label}: {'timed out' if code is None else f'exit {code}'} after "
                      f"{time.monotonic() - start:.1f} s\n")
        print(f"[gpu_check] {label}: {'timed out' if code is None else f'exit {code}'} after "
              f"{time.monotonic() - start:.0f} s", flush=True)
        return code

    def run_self(self, section: str, limit: float, *extra: str, label: str | None = None,
                 layout: tuple[int, int] | None = None) -> list[Check]:
        """This script's own --section in a child process (the trainer's at `layout`, TP x PP, default the
        command line's); its rows, plus one if it failed or timed out."""
        label = label or section
        tensor, pipeline = layout or (self.args.tensor, self.args.pipeline)
        rows_file = self.args.work / f"{label.replace(' ', '_')}.rows.jsonl"
        rows_file.unlink(missing_ok=True)
        command = [sys.executable, str(Path(__file__).resolve()), "--section", section, "--label", label,
                   "--device", self.args.device, "--work", str(self.args.work), "--rows", str(rows_file),
                   "--tensor", str(tensor), "--pipeline", str(pipeline),
                   *(["--tiny"] if self.args.tiny else []), *extra]
        code = self.run(label, command, limit)
        rows = read_rows(rows_file)
        if code != 0:
            rows.append(Check(label, "section process", "fail", "timed out" if code is None else f"exit {code}",
                              note=f"limit {limit:.0f} s; see gpu_check.log"))
        return rows


def _kill_tree(proc: subprocess.Popen) -> None:
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    proc.kill()
    for child in family:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    psutil.wait_procs(family, timeout=30)


def run_environment(session: Session, limit: float) -> list[Check]:
    rows = session.run_self("environment", limit)
    facts = session.args.work / "environment.json"
    session.facts = json.loads(facts.read_text()) if facts.is_file() else {}
    return rows


def run_trainer(session: Session, limit: float) -> list[Check]:
    return session.run_self("trainer", limit)


def run_student(session: Session, limit: float) -> list[Check]:
    out = session.args.work / "student"
    rows_file = out / "rows.jsonl"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    code = session.run("student", [sys.executable, str(REPO / "tests" / "student" / "gpu_check.py"), "--device",
                                   session.args.device, "--out", str(out), "--rows", str(rows_file)], limit)
    rows = read_rows(rows_file)
    if code is None:
        rows.append(Check("student", "section process", "fail", "timed out", note=f"limit {limit:.0f} s"))
    elif code and not any(r.status == "fail" for r in rows):
        rows.append(Check("student", "section process", "fail", f"exit {code}", note="see gpu_check.log"))
    return rows


def gpu_test_files() -> list[str]:
    """The test files with tests marked gpu, but the student's (the student section runs its check itself)."""
    files = [p for p in sorted((REPO / "tests").rglob("test_*.py")) if "mark.gpu" in p.read_text(encoding="utf-8")]
    return [str(p.relative_to(REPO)) for p in files if p.name != "test_student_gpu.py"]


def run_gpu_tests(session: Session, limit: float) -> list[Check]:
    args, work = session.args, session.args.work
    runs = [("pytest -m gpu", ["-m", "gpu", *gpu_test_files()])]
    kernel_tests = ["tests/kernels", "--ignore=tests/kernels/test_bench_harness.py",
                    "--ignore=tests/kernels/test_kernels_tp.py"]  # the CPU harness and the gloo TP test
    rows = []
    if args.device == "cuda":
        runs.append(("pytest tests/kernels (compiled Triton)", kernel_tests))
    else:
        rows.append(Check("gpu_tests", "pytest tests/kernels (compiled Triton)", "skip",
                          note="Triton compiles only on CUDA; on a CPU these tests run (interpreted) in make test"))
    started = time.monotonic()
    for number, (name, selection) in enumerate(runs):
        xml = work / f"pytest{number}.junit.xml"
        xml.unlink(missing_ok=True)
        left = limit - (time.monotonic() - started)
        code = session.run(name, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml",
                                  str(xml), *selection], max(left, 1))
        rows.append(junit_row(name, xml, code))
    return rows


def junit_row(name: str, xml: Path, code: int | None) -> Check:
    """One row for a pytest run: pass if nothing failed, skip if everything was skipped (with the reasons)."""
    import xml.etree.ElementTree as ElementTree

    if code is None or not xml.is_file():
        return Check("gpu_tests", name, "fail", "timed out" if code is None else f"exit {code}, no report",
                     note="see gpu_check.log")
    root = ElementTree.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    broken = [f"{c.get('classname')}.{c.get('name')}" for c in root.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]
    reasons = sorted({(s.get("message") or "").strip() for s in root.iter("skipped")})
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    value = f"{passed} passed, {total['failures'] + total['errors']} failed, {total['skipped']} skipped"
    if broken or total["failures"] + total["errors"] or code not in (0, 5):
        return Check("gpu_tests", name, "fail", value, note=f"exit {code}; failed: {', '.join(broken)[:1500]}")
    status = "pass" if passed else "skip"
    return Check("gpu_tests", name, status, value, note="; ".join(reasons)[:500] if reasons else "")


def run_throughput(session: Session, limit: float) -> list[Check]:
    from dnmopd.benchmarks.update_throughput import IMPLEMENTATIONS
    from dnmopd.benchmarks.update_throughput import rows as throughput_rows

    started, rows, results = time.monotonic(), [], {}
    for impl in IMPLEMENTATIONS:
        left = limit - (time.monotonic() - started)
        if left < 5:
            rows.append(Check("throughput", f"{impl} update", "skip", note="the section's time limit is spent"))
            continue
        result_file = session.args.work / "throughput" / f"{impl}.json"
        result_file.unlink(missing_ok=True)
        rows += session.run_self("throughput", left, "--impl", impl, label=f"throughput {impl}")
        results[impl] = json.loads(result_file.read_text()) if result_file.is_file() else None
    return rows + throughput_rows(results)


def run_kernels(session: Session, limit: float) -> list[Check]:
    args, out = session.args, session.args.work / "kernels"
    if args.device == "cpu":
        runs = {"cpu": (["--quick", "--impls", "floor,dnmopd,torch", "--repeats", "2"], limit)}
    elif args.tiny:
        runs = {"gpu": (["--shapes", "qwen3.5-2b-tp8", "--impls", "floor,dnmopd,torch", "--repeats", "2"], limit)}
    else:
        every = ",".join(f"qwen3.5-{size}-tp{tp}" for size in ("2b", "4b", "9b") for tp in (1, 8))
        runs = {"main": (["--shapes", every, "--impls", "floor,dnmopd,torch,liger,cce", "--repeats", "3",
                          "--time-budget", str(int(0.45 * limit))], 0.6 * limit),
                "peers": (["--shapes", "qwen3.5-9b-tp1,qwen3.5-9b-tp8", "--impls",
                           "floor,floor_chunked,torch_compile,dnmopd:logits_dtype=float32", "--repeats", "3",
                           "--time-budget", str(int(0.25 * limit))], 0.4 * limit)}
    rows = []
    for name, (options, share) in runs.items():
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        code = session.run(f"kernels {name}", [sys.executable, str(REPO / "launch" / "bench_kernels.py"), "--device",
                                               args.device, "--out", str(folder), *options], share)
        report = folder / "bench_kernels.json"
        if not report.is_file():
            rows.append(Check("kernels", f"bench_kernels {name}", "fail", "no report",
                              note=f"{'timed out' if code is None else f'exit {code}'}; see gpu_check.log"))
            continue
        rows += kernel_rows(json.loads(report.read_text()), name)
    return rows


def kernel_rows(report: dict, run: str) -> list[Check]:
    dtype = report["meta"]["dtype"].removeprefix("torch.")
    limit = KERNEL_ERROR_LIMIT[dtype]
    rows = []
    for r in report["results"]:
        name = f"{r['shape']} {r['impl']} ({run}), median ms"
        mine = r["impl"].startswith("dnmopd")
        if r["status"] != "ok":
            status = "skip" if r["status"] == "skipped" else ("fail" if mine or r["impl"] == "floor" else "warn")
            rows.append(Check("kernels", name, status, None, note=r["reason"][:500]))
            continue
        errors = [r[k] for k in ("loss_rel_err", "grad_hidden_rel_err", "grad_weight_rel_err") if r[k] is not None]
        peak = "" if r["peak_extra_gib"] is None else f", peak extra {r['peak_extra_gib']:.2f} GiB"
        floor = "" if r["ratio_to_floor"] is None else f"{r['ratio_to_floor']:.3f}x floor"
        rows.append(Check("kernels", name, "info", round(r["median_ms"], 3), note=f"{floor}{peak}"))
        if errors:
            rows.append(Check("kernels", f"{r['shape']} {r['impl']} ({run}), max rel error vs float64", "pass"
                              if max(errors) <= limit else ("fail" if mine else "warn"), max(errors), limit,
                              note="loss, grad_hidden, grad_weight"))
    return rows


def run_multi_gpu(session: Session, limit: float) -> list[Check]:
    gpus = session.facts.get("gpus", 0) if session.args.device == "cuda" else 0
    rows, started = [], time.monotonic()
    for label, option, layout in (("trainer TP 2", "--tensor", (2, 1)), ("trainer PP 2", "--pipeline", (1, 2))):
        command = f"python3 launch/gpu_check.py --out OUT --wheels build/gpu-wheels --sections trainer {option} 2"
        if gpus < 2:
            rows.append(Check("multi_gpu", f"{label}: DN-MOPD end to end on 2 GPUs", "skip",
                              note=f"needs 2 GPUs, {gpus} visible; on 2 GPUs: {command}"))
            continue
        rows += session.run_self("trainer", limit - (time.monotonic() - started), label=label, layout=layout)
    return rows


RUNNERS = {"environment": run_environment, "trainer": run_trainer, "student": run_student,
           "gpu_tests": run_gpu_tests, "throughput": run_throughput, "kernels": run_kernels,
           "multi_gpu": run_multi_gpu}


def orchestrate(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    session = Session(args)
    session.log_path.write_text("")
    wheel_log = RowLog(None, "wheels")
    if args.wheels and install_wheels(args.wheels, args.site, wheel_log):
        session.add_paths([str(args.site)])
    rows = list(wheel_log.rows)
    if not args.install_only:
        for section in (s for s in SECTIONS if s in args.sections):
            limit = session.time_left(section)
            if limit is None:
                rows.append(Check(section, "section", "skip", note=f"the --budget of {args.budget:.0f} s is spent"))
            elif args.device == "cuda" and session.facts.get("gpus") == 0:
                rows.append(Check(section, "section", "skip", note="no CUDA device visible (--device cpu runs here)"))
            else:
                rows += RUNNERS[section](session, limit)
    meta = {"device": session.facts.get("device", args.device), "tiny": args.tiny,
            "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "commit": _commit(),
            "seconds": round(time.monotonic() - session.started, 1),
            "sections": "none (--install-only)" if args.install_only else ",".join(args.sections)}
    json_path, md_path = write_report(args.out, meta, rows)
    print(md_path.read_text(encoding="utf-8"))
    print(f"wrote {json_path}, {md_path} and {session.log_path}")
    return 1 if any(r.status == "fail" for r in rows) else 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


# ------------------------------------------------------------------------------------------------ environment
PACKAGES = (  # distribution, module, required, what uses it
    ("torch", "torch", True, "everything"),
    ("triton", "triton", True, "the fused kernels on CUDA (the interpreter on a CPU)"),
    ("transformers", "transformers", True, "the in-process engines and teachers, releases"),
    ("megatron-core", "megatron.core", True, "the student"),
    ("datasets", "datasets", True, "the trainer's prompt files"),
    ("safetensors", "safetensors", True, "checkpoints and releases"),
    ("pytest", "pytest", True, "the gpu_tests section"),
    ("psutil", "psutil", True, "process and memory bookkeeping"),
    ("flash-linear-attention", "fla.ops.gated_delta_rule", False, "the FLA GDN paths (without it: torch GDN only)"),
    ("fla-core", "fla", False, "FLA's kernels (flash-linear-attention's core)"),
    ("transformer-engine", "transformer_engine", False, "Transformer Engine attention and THD packing"),
    ("liger-kernel", "liger_kernel", False, "the Liger peer of the kernel benchmark"),
    ("cut-cross-entropy", "cut_cross_entropy", False, "the Cut Cross-Entropy peer of the kernel benchmark"),
)


def section_environment(args, log: RowLog) -> None:
    import importlib
    import platform
    from importlib.metadata import PackageNotFoundError, version

    log.info("python", platform.python_version(), note=sys.executable)
    for dist, module, required, purpose in PACKAGES:
        try:
            found = version(dist)
        except PackageNotFoundError:
            found = None
        error = ""
        if found is not None:
            try:
                importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - any import failure is the finding
                error = f"import {module} failed: {type(exc).__name__}: {str(exc)[:300]}"
        present = found is not None and not error
        status = "pass" if present else ("fail" if required else "warn")
        note = error or ("" if present else f"not installed: {purpose} skipped")
        log.add(Check(log.section, f"package {dist}", status, found or "missing", note=note if note else purpose))
    import torch

    facts = {"device": "cpu", "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    log.info("torch CUDA build", torch.version.cuda or "none")
    log.info("TF32 allowed (float32 matmuls / cuDNN convolutions)",
             f"{torch.backends.cuda.matmul.allow_tf32} / {torch.backends.cudnn.allow_tf32}",
             note="torch's defaults; the trainer check's runs set NVIDIA_TF32_OVERRIDE=0 (the trainer has no option)")
    if args.device == "cuda":
        log.expect("CUDA device visible", torch.cuda.is_available(), facts["gpus"])
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            facts["device"] = props.name
            log.info("GPU", props.name, note=f"{props.total_memory / 2**30:.1f} GiB, capability "
                                             f"{props.major}.{props.minor}, {props.multi_processor_count} SMs")
            nccl = torch.cuda.nccl.version()
            log.info("NCCL", ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl))
            smi = shutil.which("nvidia-smi")
            if smi:
                query = "--query-gpu=driver_version,clocks.sm,clocks.max.sm,power.limit"
                found = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True, text=True)
                log.info("driver, SM clock / max, power limit", found.stdout.strip() or found.stderr.strip())
            from dnmopd.student.gated_delta_rule import HAVE_FLA, fla_backward_is_broken

            log.info("FLA backward usable here", HAVE_FLA and not fla_backward_is_broken(),
                     note="FLA's gated chunk backward refuses Triton >= 3.4.0, < 3.7.1 on Hopper without tilelang; "
                          "the student then trains GDN through the torch chunked form")
    (args.work / "environment.json").write_text(json.dumps(facts))


def section_trainer(args, log: RowLog) -> None:
    from dnmopd.benchmarks.trainer_check import TrainerCheck

    TrainerCheck(REPO, args.work / log.section.replace(" ", "_"), args.device, args.tiny, args.tensor,
                 args.pipeline).run(log)


def section_throughput(args, log: RowLog) -> None:
    from dnmopd.benchmarks.update_throughput import measure

    folder = args.work / "throughput"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{args.impl}.json").write_text(json.dumps(measure(folder, args.impl, args.device, args.tiny)))


# ------------------------------------------------------------------------------------------------ command line
IN_PROCESS = {"environment": section_environment, "trainer": section_trainer, "throughput": section_throughput}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/gpu-check"),
                   help="folder of gpu_check.json, gpu_check.md and gpu_check.log (default runs/gpu-check)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where the checks run (default cuda)")
    p.add_argument("--tiny", action="store_true", help="every section at toy size (the CPU demo's models)")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for all sections; one that would start later is skipped (default 480 on cuda, "
                        "none on cpu; 0: none)")
    p.add_argument("--work", type=Path, default=None,
                   help="folder for models, runs and benchmark outputs (default: a temporary folder, removed)")
    p.add_argument("--wheels", type=Path, default=None,
                   help="install every wheel in this folder with pip --no-index into --site first (make gpu-wheels)")
    p.add_argument("--site", type=Path, default=Path(tempfile.gettempdir()) / "dnmopd-gpu-site",
                   help="where --wheels are installed (replaced; put first on the sections' PYTHONPATH)")
    p.add_argument("--install-only", action="store_true", help="install --wheels, report them and stop")
    p.add_argument("--download-wheels", type=Path, metavar="DIR", default=None,
                   help="the wheel recipe: download the wheels the GPU image lacks into DIR and stop")
    p.add_argument("--tensor", type=int, default=1, help="tensor-parallel size of the trainer section (default 1)")
    p.add_argument("--pipeline", type=int, default=1, help="pipeline-parallel size of the trainer section (default 1)")
    p.add_argument("--section", choices=sorted(IN_PROCESS), help=argparse.SUPPRESS)  # one section, in this process
    p.add_argument("--label", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rows", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--impl", help=argparse.SUPPRESS)  # the throughput section's implementation
    args = p.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        p.error(f"--sections: unknown {unknown} (known: {', '.join(SECTIONS)})")
    if args.tensor < 1 or args.pipeline < 1:
        p.error("--tensor and --pipeline must be >= 1")
    if args.install_only and not args.wheels:
        p.error("--install-only needs --wheels")
    if args.budget is None:
        args.budget = 480.0 if args.device == "cuda" else 0.0
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.download_wheels:
        return download_wheels(args.download_wheels)
    if args.section:
        IN_PROCESS[args.section](args, RowLog(args.rows, args.label or args.section))
        return 0
    temporary = args.work is None
    args.work = Path(tempfile.mkdtemp(prefix="gpu-check-")) if temporary else args.work
    args.work.mkdir(parents=True, exist_ok=True)
    args.work, args.out = args.work.resolve(), args.out.resolve()
    try:
        return orchestrate(args)
    finally:
        if temporary:
            shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
