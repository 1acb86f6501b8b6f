"""Timing, memory and float64 error of the OPD-loss providers; JSON and markdown reports.

Method (also in docs/benchmarks.md): for each shape, every provider builds its step on the same inputs;
one warm-up step (compilation, autotuning, cuBLAS handles), then ``repeats`` timed steps (CUDA events on
GPU, a host clock on CPU), each with the gradients reset to None; the median is reported with its ratio to
the ``floor`` (three cuBLAS GEMMs) of the same run. Peak extra memory = peak allocated during one step
minus what was allocated before it minus the gradients the step must return (grad hidden + grad weight):
the CUDA allocator's peak on GPU, the resident set's high-water mark on CPU (``host_memory``).
The error check runs the provider once more on ``check_tokens`` tokens of the same hidden/vocab size and
compares loss and gradients with the plain-torch step in float64 on the same (upcast) inputs:
``||x - ref|| / ||ref||``. ``dnmopd`` keeps the chunk count of the timed run in the check, so its weight
gradient is accumulated over as many chunks as in the timed run.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import yaml

from dnmopd.benchmarks import host_memory
from dnmopd.benchmarks.providers import PROVIDERS, StepInputs, default_chunk_rows, make_inputs, torch_step
from dnmopd.io import atomic_write

OPTIONS = {"chunk_rows": int, "logits_dtype": str, "backend": str}


@dataclass(frozen=True)
class Shape:
    name: str
    tokens: int
    hidden: int
    vocab: int
    check_tokens: int
    quick: bool = False  # one of the shapes --quick runs


@dataclass(frozen=True)
class ImplSpec:
    """A provider plus options, written ``name`` or ``name:key=value,key=value``."""

    provider: str
    options: tuple[tuple[str, object], ...] = ()

    @property
    def label(self) -> str:
        if not self.options:
            return self.provider
        return f"{self.provider}[{','.join(f'{k}={v}' for k, v in self.options)}]"

    @staticmethod
    def parse(text: str) -> ImplSpec:
        name, _, opts = text.partition(":")
        if name not in PROVIDERS:
            raise ValueError(f"--impls: unknown implementation '{name}' (known: {', '.join(PROVIDERS)})")
        options = []
        for item in filter(None, opts.split(",")):
            key, sep, value = item.partition("=")
            if not sep or key not in OPTIONS:
                raise ValueError(f"--impls: bad option '{item}' in '{text}' "
                                 "(known: chunk_rows=N, logits_dtype=D, backend=auto|native|triton)")
            options.append((key, OPTIONS[key](value)))
        return ImplSpec(name, tuple(options))

    def opts(self) -> dict:
        opts = dict(self.options)
        if "logits_dtype" in opts:
            opts["logits_dtype"] = getattr(torch, str(opts["logits_dtype"]))
        return opts


@dataclass
class Result:
    shape: str
    impl: str
    status: str  # ok | skipped | error
    reason: str = ""
    tokens: int = 0
    hidden: int = 0
    vocab: int = 0
    median_ms: float | None = None
    ratio_to_floor: float | None = None
    peak_extra_gib: float | None = None
    loss_rel_err: float | None = None
    grad_hidden_rel_err: float | None = None
    grad_weight_rel_err: float | None = None
    times_ms: list[float] = field(default_factory=list)


def load_shapes(path: Path, section: str, names: list[str] | None = None, quick: bool = False) -> list[Shape]:
    """The section's shapes, or those named, or (``quick``) those marked ``quick: true`` if any are."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or section not in data:
        raise ValueError(f"{path}: no '{section}' section of shapes")
    shapes = []
    for name, spec in data[section].items():
        missing = {"tokens", "hidden", "vocab", "check_tokens"} - set(spec)
        if missing:
            raise ValueError(f"{path}: shape '{section}.{name}' lacks {sorted(missing)}")
        sizes = {k: int(spec[k]) for k in ("tokens", "hidden", "vocab", "check_tokens")}
        shapes.append(Shape(name, **sizes, quick=bool(spec.get("quick", False))))
    if quick and not names and any(s.quick for s in shapes):
        shapes = [s for s in shapes if s.quick]
    if names:
        unknown = set(names) - {s.name for s in shapes}
        if unknown:
            raise ValueError(f"--shapes: unknown {sorted(unknown)} in section '{section}' of {path}")
        shapes = [s for s in shapes if s.name in names]
    return shapes


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_grads(x: StepInputs) -> None:
    x.hidden.grad = None
    x.weight.grad = None


def time_step(step, x: StepInputs, device: torch.device, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        _reset_grads(x)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def peak_extra_gib(step, x: StepInputs, device: torch.device, host_tracked: bool) -> float | None:
    _reset_grads(x)
    gc.collect()
    if device.type == "cuda":
        _sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        _sync(device)
        extra = torch.cuda.max_memory_allocated(device) - base
    elif host_tracked:
        extra = host_memory.peak_during(step)
    else:
        return None
    grads = sum(g.numel() * g.element_size() for g in (x.hidden.grad, x.weight.grad) if g is not None)
    return (extra - grads) / 2**30


def rel_err(value: torch.Tensor | None, ref: torch.Tensor) -> float | None:
    if value is None:
        return None
    ref = ref.double()
    return float((value.double() - ref).norm() / ref.norm().clamp(min=1e-300))


def check_errors(spec: ImplSpec, shape: Shape, dtype, device, seed: int, timed_rows: int | None):
    """(loss, grad_hidden, grad_weight) relative errors of one step against float64 torch."""
    x = make_inputs(shape.check_tokens, shape.hidden, shape.vocab, dtype, device, seed=seed + 1)
    opts = spec.opts()
    if spec.provider == "dnmopd" and timed_rows:
        num_chunks = math.ceil(shape.tokens / timed_rows)
        opts["chunk_rows"] = math.ceil(shape.check_tokens / num_chunks)
    loss = PROVIDERS[spec.provider].setup(x, opts)()
    ref_x = x.upcast(torch.float64)
    ref_loss = torch_step(ref_x)
    ref_loss.backward()
    return (rel_err(loss, ref_loss.detach()), rel_err(x.hidden.grad, ref_x.hidden.grad),
            rel_err(x.weight.grad, ref_x.weight.grad))


def run_one(spec: ImplSpec, shape: Shape, x: StepInputs, device, dtype, repeats: int, seed: int,
            host_tracked: bool = False) -> Result:
    result = Result(shape.name, spec.label, "ok", tokens=shape.tokens, hidden=shape.hidden, vocab=shape.vocab)
    provider = PROVIDERS[spec.provider]
    reason = provider.needs(device)
    if reason:
        result.status, result.reason = "skipped", reason
        return result
    opts = spec.opts()
    if spec.provider == "floor_chunked":
        opts.setdefault("chunk_rows", default_chunk_rows(x))
    timed_rows = None
    if spec.provider == "dnmopd":
        timed_rows = opts.get("chunk_rows") or default_chunk_rows(x, opts.get("backend", "auto"))
    try:
        step = provider.setup(x, opts)
        _reset_grads(x)
        step()  # warm-up: compilation, autotuning, allocator
        _sync(device)
        result.times_ms = time_step(step, x, device, repeats)
        result.median_ms = statistics.median(result.times_ms)
        result.peak_extra_gib = peak_extra_gib(step, x, device, host_tracked)
        del step
        _reset_grads(x)
        if spec.provider == "torch_compile" and shape.check_tokens != shape.tokens:
            result.reason = "no error check: it would recompile for the check shape (same math as torch)"
        elif not spec.provider.startswith("floor"):
            errors = check_errors(spec, shape, dtype, device, seed, timed_rows)
            result.loss_rel_err, result.grad_hidden_rel_err, result.grad_weight_rel_err = errors
    except Exception as exc:  # noqa: BLE001 - one failing provider must not stop the others
        result.status, result.reason = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    finally:
        _reset_grads(x)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return result


def run(shapes: list[Shape], specs: list[ImplSpec], device: torch.device, dtype: torch.dtype, repeats: int,
        seed: int = 0, time_budget_s: float | None = None, on_result=None, host_tracked: bool = False) -> list[Result]:
    """Every spec on every shape, in order; once ``time_budget_s`` is spent the rest is reported as skipped.

    ``on_result(result)`` runs after each result (progress, incremental reports). Ratios are to the shape's
    ``floor`` result, so list ``floor`` first. ``host_tracked``: ``host_memory.track_freed_memory()``
    succeeded, so CPU steps get a peak memory.
    """
    results: list[Result] = []
    start = time.monotonic()
    for shape in shapes:
        x, floor_ms = None, None
        for spec in specs:
            if time_budget_s is not None and time.monotonic() - start > time_budget_s:
                result = Result(shape.name, spec.label, "skipped", "time budget spent", shape.tokens,
                                shape.hidden, shape.vocab)
            else:
                if x is None:
                    x = make_inputs(shape.tokens, shape.hidden, shape.vocab, dtype, device, seed=seed)
                result = run_one(spec, shape, x, device, dtype, repeats, seed, host_tracked)
            if spec.label == "floor" and result.median_ms:
                floor_ms = result.median_ms
            if floor_ms and result.median_ms is not None:
                result.ratio_to_floor = result.median_ms / floor_ms
            results.append(result)
            if on_result is not None:
                on_result(result)
        del x
        gc.collect()
    return results


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _note(r: Result) -> str:
    status = "" if r.status == "ok" else r.status
    return f"{status}: {r.reason}" if status and r.reason else status or r.reason


def markdown_table(results: list[Result]) -> str:
    lines = [
        "| shape | impl | median ms | x floor | peak extra GiB | loss err | grad_h err | grad_W err | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.shape} ({r.tokens}x{r.hidden}x{r.vocab}) | {r.impl} | {_fmt(r.median_ms, '.2f')} | "
            f"{_fmt(r.ratio_to_floor, '.3f')} | {_fmt(r.peak_extra_gib, '.2f')} | {_fmt(r.loss_rel_err, '.1e')} | "
            f"{_fmt(r.grad_hidden_rel_err, '.1e')} | {_fmt(r.grad_weight_rel_err, '.1e')} | "
            f"{_note(r)} |"
        )
    return "\n".join(lines)


def environment(device: torch.device) -> dict:
    import triton

    info = {"torch": torch.__version__, "triton": triton.__version__, "device": str(device),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "triton_interpret": os.environ.get("TRITON_INTERPRET", ""), "threads": torch.get_num_threads(),
            "load_average": round(os.getloadavg()[0], 1)}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def write_reports(results: list[Result], meta: dict, out_dir: Path) -> tuple[Path, Path]:
    """Write ``bench_kernels.json`` and ``bench_kernels.md`` atomically (temp file, then rename)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = (out_dir / "bench_kernels.json", out_dir / "bench_kernels.md")
    payloads = (
        json.dumps({"meta": meta, "results": [asdict(r) for r in results]}, indent=2),
        f"# Kernel benchmark\n\n{json.dumps(meta)}\n\n{markdown_table(results)}\n",
    )
    for path, payload in zip(paths, payloads, strict=True):
        with atomic_write(path) as handle:
            handle.write(payload)
    return paths
