"""Student checks on one CUDA GPU, in one run: megatron vs Hugging Face logits/gradients, FLA vs torch GDN,
packed (THD) vs padded sequences through every layer backend (torch/FLA GDN, local/Transformer Engine attention).
The student section of launch/gpu_check.py, which runs it as

    python tests/student/gpu_check.py --out DIR --rows DIR/rows.jsonl     # from the repository root

Needs megatron-core (0.16.1+ / 0.19.x), transformers, safetensors, psutil; FLA (``flash-linear-attention`` +
``fla-core``) to check the FLA path. Writes ``DIR/student_gpu_check.json`` (and each check as a row of
launch/gpu_check.py's report to ``--rows``); exits 1 if a required check fails. ``--device cpu`` runs the same
script on a CPU (torch GDN, local attention), each GPU-only check reported as skipped with its reason.

Hugging Face references are computed first with FLA hidden from transformers, so they come from its pure
torch implementation and are independent of FLA.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))  # student_helpers (test tokenizer, round-trip check)

from dnmopd.benchmarks.gpu_report import RowLog  # noqa: E402

VOCAB = 300
TOLERANCE = {"torch": 1e-4, "fla": 2e-3}  # FLA's Triton dots may use TF32
LOG = RowLog(None, "student")  # main() points it at --rows


def fla_unusable(device) -> str | None:
    """Why the FLA path cannot run here (None: it can)."""
    from dnmopd.student.gated_delta_rule import HAVE_FLA

    if device.type != "cuda":
        return "FLA's kernels run on CUDA only"
    return None if HAVE_FLA else "flash-linear-attention is not installed"


def te_unusable(device) -> str | None:
    """Why Transformer Engine's layers cannot run here (None: they can)."""
    from dnmopd.student.specs import HAVE_TE

    if device.type != "cuda":
        return "Transformer Engine runs on CUDA only"
    return None if HAVE_TE else "transformer-engine is not installed"


def hf_references(paths: dict, device: torch.device, ids: torch.Tensor, weights: torch.Tensor) -> dict:
    """Logits of every model and gradients of the Qwen3.5 one (call while FLA is hidden)."""
    from transformers import AutoModelForCausalLM

    refs = {}
    for name, path in paths.items():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
        logits = model(ids.to(device)).logits
        refs[name] = {"logits": logits.detach()}
        if name == "qwen3_5":
            (logits * weights.to(device)).sum().backward()
            refs[name]["grads"] = {n: p.grad.detach() for n, p in model.named_parameters()}
        del model
    return refs


def grad_rel_diff(student, model, reference: dict) -> float:
    from dnmopd.student.hf_mapping import rule_for

    worst = 0.0
    for name, param in model.named_parameters():
        rule, _ = rule_for(student.arch, model, name, student.padded_vocab)
        for hf_name, grad in zip(rule.hf_names, rule.to_hf([param.grad]), strict=True):
            if hf_name.endswith("linear_attn.norm.weight"):
                grad = grad - 1.0  # to_hf adds the out_norm offset; gradients have none
            ref = reference[hf_name]
            worst = max(worst, ((grad - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item())
    return worst


def check_model(paths, refs, ids, weights, device) -> None:
    from dnmopd.student import BuildOptions, ParallelDims, Student
    from dnmopd.student.gated_delta_rule import HAVE_FLA, fla_backward_is_broken
    from dnmopd.student.logits import forward_logits

    backends = ["torch"] + ([] if fla_unusable(device) else ["fla"])
    if fla_unusable(device):
        LOG.skip("qwen3_5 logits vs HF, gdn=fla (forward)", fla_unusable(device))
    for name, path in paths.items():
        for backend in backends if name == "qwen3_5" else ["torch"]:
            dims = ParallelDims.Config().build()
            student = Student.from_hf(path, dims, BuildOptions(dtype="float32", gdn_backend=backend))
            diff = (forward_logits(student, ids) - refs[name]["logits"]).abs().max().item()
            LOG.judge(f"{name} logits vs HF, gdn={backend} (forward)", diff, TOLERANCE[backend])
            if name == "qwen3_5" and backend == "torch":
                from student_helpers import roundtrip_mismatches

                LOG.judge("qwen3_5 HF->megatron->HF mismatching tensors", len(roundtrip_mismatches(student, path)), 0)
            dims.destroy()
    # backward: "auto" takes FLA when its backward is usable, else the torch chunked form (with a warning)
    dims = ParallelDims.Config().build()
    student = Student.from_hf(paths["qwen3_5"], dims, BuildOptions(dtype="float32"))
    model = student.chunks[0]
    model.train()
    (model(ids.to(device))[..., :VOCAB] * weights.to(device)).sum().backward()
    path_used = "fla" if HAVE_FLA and device.type == "cuda" and not fla_backward_is_broken() else "torch"
    diff = grad_rel_diff(student, model, refs["qwen3_5"]["grads"])
    limit = 2e-3 if path_used == "fla" else 5e-4
    LOG.judge(f"qwen3_5 grads vs HF (rel), backward via {path_used}", diff, limit,
              note=f"fla_backward_is_broken={fla_backward_is_broken()}")
    dims.destroy()


def check_fla_backward_refusal(path, ids, device) -> None:
    """Record what FLA itself does when asked for the backward (informational)."""
    from dnmopd.student import BuildOptions, ParallelDims, Student
    from dnmopd.student.gated_delta_rule import fla_backward_is_broken

    if fla_unusable(device):
        LOG.skip("forced gdn=fla backward", fla_unusable(device))
        return
    dims = ParallelDims.Config().build()
    model = Student.from_hf(path, dims, BuildOptions(dtype="float32", gdn_backend="fla")).chunks[0]
    try:
        model(ids.to(device)).sum().backward()
        outcome = "ran"
    except Exception as error:  # noqa: BLE001 - the message is the result
        outcome = f"raised: {str(error)[:120]}"
    LOG.info("forced gdn=fla backward", outcome, note=f"predicted broken={fla_backward_is_broken()}")
    dims.destroy()


def check_checkpoint_and_release(paths, work: Path, ids, device) -> None:
    from student_helpers import build_test_tokenizer

    from dnmopd.hf.release import write_release
    from dnmopd.student import BuildOptions, ParallelDims, Student
    from dnmopd.student.logits import forward_logits

    dims = ParallelDims.Config().build()
    student = Student.from_hf(paths["qwen3_5"], dims, BuildOptions(dtype="float32"))
    before = forward_logits(student, ids)
    student.save_checkpoint(work / "ckpt")
    dims.destroy()
    dims = ParallelDims.Config().build()
    loaded = Student.from_checkpoint(work / "ckpt", dims)
    LOG.judge("checkpoint save/load logits diff", (forward_logits(loaded, ids) - before).abs().max().item(), 1e-6)
    tokenizer = build_test_tokenizer(work / "tokenizer")
    write_release(loaded, work / "release", tokenizer=tokenizer, tolerance=1e-3, log=lambda *_: None)
    LOG.expect("release written and verified", (work / "release" / "config.json").is_file())
    dims.destroy()


PACKED_LENGTHS = [130, 5, 64, 1, 200]  # sequences crossing the 64-token GDN chunks, one of exactly 64, one token
PACKED_TOLERANCE = {"float32": (1e-4, 1e-3), "bfloat16": (5e-2, 2e-1)}  # (hidden, gradients), relative to the max


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item()


def _packed_and_padded(model, lengths, device) -> dict:
    """Final hidden states of the real tokens and parameter gradients of a fixed projection, padded vs packed."""
    from dnmopd.student import PackedSequences

    gen = torch.Generator().manual_seed(7)
    sequences = [torch.randint(0, VOCAB, (n,), generator=gen) for n in lengths]
    direction = torch.randn(model.config.hidden_size, generator=gen).to(device)
    model.train()
    out = {}
    for layout in ("padded", "packed"):
        model.zero_grad(set_to_none=True)
        if layout == "padded":
            hidden = model(torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True).to(device),
                           return_hidden_states=True)
            real = torch.cat([hidden[i, :n] for i, n in enumerate(lengths)])
        else:
            packed = PackedSequences.from_lengths(lengths, device)
            real = model(torch.cat(sequences)[None].to(device), packed=packed, return_hidden_states=True)[0]
        (real.float() @ direction).sum().backward()
        grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
        out[layout] = (real.detach().float(), grads)  # (an untied LM head gets no gradient from this loss)
    return out


def check_packing(paths, device) -> None:
    """Packed vs padded through each layer backend: TE's THD attention and FLA's cu_seqlens where installed."""
    from dnmopd.student import BuildOptions, ParallelDims, Student

    variants = [("float32", "local", "torch"), ("bfloat16", "local", "torch")]
    if fla_unusable(device):
        LOG.skip("packed, bfloat16/local/gdn=fla", fla_unusable(device))
    else:
        variants.append(("bfloat16", "local", "fla"))
    if te_unusable(device):
        LOG.skip("packed, bfloat16/transformer_engine (THD attention)", te_unusable(device))
    else:
        variants.append(("bfloat16", "transformer_engine", "torch" if fla_unusable(device) else "fla"))
    for name in ("qwen3_5", "qwen3"):
        reference = None
        for dtype, impl, backend in variants:
            if name == "qwen3" and backend == "fla":
                continue
            label = f"{name} packed, {dtype}/{impl}/gdn={backend}"
            dims = ParallelDims.Config().build()
            try:
                options = BuildOptions(dtype=dtype, transformer_impl=impl, gdn_backend=backend)
                out = _packed_and_padded(Student.from_hf(paths[name], dims, options).chunks[0], PACKED_LENGTHS,
                                         device)
            finally:
                dims.destroy()
            reference = reference or out["padded"]  # float32, local attention, torch GDN, right-padded
            hidden_limit, grad_limit = PACKED_TOLERANCE[dtype]
            LOG.judge(f"{label}: hidden vs padded (rel)", _rel(out["packed"][0], out["padded"][0]), hidden_limit)
            # informational: bfloat16 weights and activations alone move a random tiny model's states by ~0.2
            LOG.info(f"{label}: hidden vs float32 padded reference (rel)", _rel(out["packed"][0], reference[0]))
            grads = out["packed"][1]
            worst = max(_rel(grads[n], g) for n, g in out["padded"][1].items())
            LOG.judge(f"{label}: gradients vs padded (worst rel)", worst, grad_limit, required=dtype == "float32")


def check_fla_varlen(device) -> None:
    """FLA's gated delta rule with cu_seqlens vs the pure-torch chunked form with the same packed sequences."""
    from dnmopd.student.gated_delta_rule import gated_delta_rule

    if fla_unusable(device):
        LOG.skip("GDN FLA cu_seqlens vs torch packed", fla_unusable(device))
        return
    gen = torch.Generator(device=device).manual_seed(3)
    total = sum(PACKED_LENGTHS)
    q, k = (torch.randn(1, total, 4, 64, device=device, generator=gen) for _ in range(2))
    v = torch.randn(1, total, 8, 64, device=device, generator=gen)
    g, beta = (torch.rand(1, total, 8, device=device, generator=gen) for _ in range(2))
    g = -g
    bf16 = [t.to(torch.bfloat16) for t in (q, k, v)]
    with torch.no_grad():
        reference = gated_delta_rule(q, k, v, g, beta, backend="torch", lengths=PACKED_LENGTHS).float()
        fla = gated_delta_rule(*bf16, g, beta.to(torch.bfloat16), backend="fla", lengths=PACKED_LENGTHS).float()
        unreset = gated_delta_rule(*bf16, g, beta.to(torch.bfloat16), backend="fla").float()
    diff = (fla - reference).abs().max().item()
    LOG.judge("GDN FLA cu_seqlens vs torch packed, max abs diff", diff, 5e-2)
    carried = (unreset - reference).abs().max().item()
    LOG.expect("GDN FLA without cu_seqlens differs (state carried across sequences)", carried > 10 * diff, carried)


def benchmark_gdn(device) -> None:
    from dnmopd.student.gated_delta_rule import gated_delta_rule

    if device.type != "cuda":
        LOG.skip("GDN forward ms, bf16 [1x4096, 16/32 heads x 128]", "a GPU timing")
        return
    gen = torch.Generator(device=device).manual_seed(0)
    shape = (1, 4096, 16)
    q, k = (torch.randn(*shape, 128, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(2))
    v = torch.randn(1, 4096, 32, 128, device=device, dtype=torch.bfloat16, generator=gen)
    g = -torch.rand(1, 4096, 32, device=device, generator=gen)
    beta = torch.rand(1, 4096, 32, device=device, generator=gen)
    outputs = {}
    for backend in ["torch"] + ([] if fla_unusable(device) else ["fla"]):
        with torch.no_grad():
            for _ in range(2):
                outputs[backend] = gated_delta_rule(q, k, v, g, beta, backend=backend)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(5):
                gated_delta_rule(q, k, v, g, beta, backend=backend)
            torch.cuda.synchronize()
        elapsed_ms = round((time.perf_counter() - start) / 5 * 1e3, 2)
        LOG.info(f"GDN forward ms, bf16 [1x4096, 16/32 heads x 128], {backend}", elapsed_ms)
    if "fla" in outputs:
        diff = (outputs["fla"].float() - outputs["torch"].float()).abs().max().item()
        LOG.judge("GDN bf16 FLA vs torch max abs diff", diff, 5e-2, required=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--rows", type=Path, default=None, help="append each check to this JSON-lines file")
    args = parser.parse_args()
    LOG.path = args.rows
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="student_gpu_check_"))
    try:
        env = run_checks(device, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    failed = [f"{r.name}" for r in LOG.rows if r.status == "fail"]
    report = {"env": env, "results": [asdict(r) for r in LOG.rows], "failed": failed}
    (args.out / "student_gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"\n{len(LOG.rows)} checks, {len(failed)} failed: {failed}", flush=True)
    return 1 if failed else 0


def run_checks(device, work: Path) -> dict:
    # Hide FLA until the HF references exist: transformers then binds its pure-torch GDN (independent of FLA).
    sys.modules["fla"] = None

    from dnmopd.examples.tiny import build_tiny_hf_checkpoint

    paths = {
        "qwen3_5": str(build_tiny_hf_checkpoint(work / "qwen3_5", arch="qwen3_5", vocab_size=VOCAB, seed=1)),
        "qwen3": str(build_tiny_hf_checkpoint(work / "qwen3", arch="qwen3", vocab_size=VOCAB, seed=3,
                                              tie_word_embeddings=True, num_layers=2)),
    }
    ids = torch.randint(0, VOCAB, (2, 130), generator=torch.Generator().manual_seed(0))
    weights = torch.randn(2, 130, VOCAB, generator=torch.Generator().manual_seed(5))
    refs = hf_references(paths, device, ids, weights)
    del sys.modules["fla"]

    import megatron.core
    import transformers

    from dnmopd.student import init_distributed
    from dnmopd.student.cpu_compat import cpu_compat
    from dnmopd.student.gated_delta_rule import HAVE_FLA

    init_distributed()
    env = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "megatron_core": megatron.core.__version__, "fla": HAVE_FLA,
    }
    print(json.dumps(env), flush=True)
    steps = {
        "megatron vs HF": lambda: check_model(paths, refs, ids, weights, device),
        "forced FLA backward": lambda: check_fla_backward_refusal(paths["qwen3_5"], ids, device),
        "checkpoint and release": lambda: check_checkpoint_and_release(paths, work, ids, device),
        "packed vs padded": lambda: check_packing(paths, device),
        "FLA cu_seqlens": lambda: check_fla_varlen(device),
        "GDN timing": lambda: benchmark_gdn(device),
    }
    with cpu_compat():  # megatron-core on a CPU; nothing on a GPU
        for name, step in steps.items():
            with LOG.guard(name):  # keep going, report everything
                step()
    torch.distributed.destroy_process_group()
    return env


if __name__ == "__main__":
    sys.exit(main())
