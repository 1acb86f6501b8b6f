"""Student checks on one CUDA GPU, in one run: megatron vs Hugging Face logits/gradients, FLA vs torch GDN,
packed (THD) vs padded sequences through every layer backend (torch/FLA GDN, local/Transformer Engine attention).

    PYTHONPATH=. python tests/student/gpu_check.py --out "$OUT"     # from the repository root

Needs megatron-core (0.16.1+ / 0.19.x), transformers, safetensors, psutil; FLA (``flash-linear-attention`` +
``fla-core``) to check the FLA path. Writes ``$OUT/student_gpu_check.json`` and prints a table; exits 1 if
a required check fails. ``--device cpu`` runs the same script on a CPU machine (torch GDN only), to test it.

Hugging Face references are computed first with FLA hidden from transformers, so they come from its pure
torch implementation and are independent of FLA.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))  # student_helpers (test tokenizer, round-trip check)

VOCAB = 300
TOLERANCE = {"torch": 1e-4, "fla": 2e-3}  # FLA's Triton dots may use TF32
RESULTS: list[dict] = []


def record(name: str, value, limit=None, *, required: bool = True, note: str = "", ok: bool | None = None) -> None:
    if ok is None and limit is not None:
        ok = value is not None and value <= limit
    RESULTS.append({"check": name, "value": value, "limit": limit, "ok": ok, "required": required, "note": note})
    verdict = "" if ok is None else ("ok" if ok else "FAIL")
    print(f"{name:58s} {str(value)[:60]:>26s}  limit {limit!s:>8s}  {verdict}", flush=True)


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

    backends = ["torch"] + (["fla"] if HAVE_FLA and device.type == "cuda" else [])
    for name, path in paths.items():
        for backend in backends if name == "qwen3_5" else ["torch"]:
            dims = ParallelDims.Config().build()
            student = Student.from_hf(path, dims, BuildOptions(dtype="float32", gdn_backend=backend))
            diff = (forward_logits(student, ids) - refs[name]["logits"]).abs().max().item()
            record(f"{name} logits vs HF, gdn={backend} (forward)", diff, TOLERANCE[backend])
            if name == "qwen3_5" and backend == "torch":
                from student_helpers import roundtrip_mismatches

                record("qwen3_5 HF->megatron->HF mismatching tensors", len(roundtrip_mismatches(student, path)), 0)
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
    record(f"qwen3_5 grads vs HF (rel), backward via {path_used}", diff, limit,
           note=f"fla_backward_is_broken={fla_backward_is_broken()}")
    dims.destroy()


def check_fla_backward_refusal(path, ids, device) -> None:
    """Record what FLA itself does when asked for the backward (informational)."""
    from dnmopd.student import BuildOptions, ParallelDims, Student
    from dnmopd.student.gated_delta_rule import HAVE_FLA, fla_backward_is_broken

    if not (HAVE_FLA and device.type == "cuda"):
        return
    dims = ParallelDims.Config().build()
    model = Student.from_hf(path, dims, BuildOptions(dtype="float32", gdn_backend="fla")).chunks[0]
    try:
        model(ids.to(device)).sum().backward()
        outcome = "ran"
    except Exception as error:  # noqa: BLE001 - the message is the result
        outcome = f"raised: {str(error)[:120]}"
    record("forced gdn=fla backward", outcome, required=False, note=f"predicted broken={fla_backward_is_broken()}")
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
    record("checkpoint save/load logits diff", (forward_logits(loaded, ids) - before).abs().max().item(), 1e-6)
    tokenizer = build_test_tokenizer(work / "tokenizer")
    write_release(loaded, work / "release", tokenizer=tokenizer, tolerance=1e-3, log=lambda *_: None)
    record("release written and verified", 0 if (work / "release" / "config.json").is_file() else 1, 0)
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
    from dnmopd.student.gated_delta_rule import HAVE_FLA
    from dnmopd.student.specs import HAVE_TE

    cuda = device.type == "cuda"
    variants = [("float32", "local", "torch"), ("bfloat16", "local", "torch")]
    variants += [("bfloat16", "local", "fla")] if HAVE_FLA and cuda else []
    variants += [("bfloat16", "transformer_engine", "fla" if HAVE_FLA else "torch")] if HAVE_TE and cuda else []
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
            record(f"{label}: hidden vs padded (rel)", _rel(out["packed"][0], out["padded"][0]), hidden_limit)
            # informational: bfloat16 weights and activations alone move a random tiny model's states by ~0.2
            record(f"{label}: hidden vs float32 padded reference (rel)", _rel(out["packed"][0], reference[0]),
                   required=False)
            grads = out["packed"][1]
            worst = max(_rel(grads[n], g) for n, g in out["padded"][1].items())
            record(f"{label}: gradients vs padded (worst rel)", worst, grad_limit, required=dtype == "float32")


def check_fla_varlen(device) -> None:
    """FLA's gated delta rule with cu_seqlens vs the pure-torch chunked form with the same packed sequences."""
    from dnmopd.student.gated_delta_rule import HAVE_FLA, gated_delta_rule

    if not (HAVE_FLA and device.type == "cuda"):
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
    record("GDN FLA cu_seqlens vs torch packed, max abs diff", diff, 5e-2)
    record("GDN FLA without cu_seqlens differs (state carried across sequences)",
           (unreset - reference).abs().max().item(), ok=(unreset - reference).abs().max().item() > 10 * diff)


def benchmark_gdn(device) -> None:
    from dnmopd.student.gated_delta_rule import HAVE_FLA, gated_delta_rule

    if device.type != "cuda":
        return
    gen = torch.Generator(device=device).manual_seed(0)
    shape = (1, 4096, 16)
    q, k = (torch.randn(*shape, 128, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(2))
    v = torch.randn(1, 4096, 32, 128, device=device, dtype=torch.bfloat16, generator=gen)
    g = -torch.rand(1, 4096, 32, device=device, generator=gen)
    beta = torch.rand(1, 4096, 32, device=device, generator=gen)
    outputs = {}
    for backend in ["torch"] + (["fla"] if HAVE_FLA else []):
        with torch.no_grad():
            for _ in range(2):
                outputs[backend] = gated_delta_rule(q, k, v, g, beta, backend=backend)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(5):
                gated_delta_rule(q, k, v, g, beta, backend=backend)
            torch.cuda.synchronize()
        elapsed_ms = round((time.perf_counter() - start) / 5 * 1e3, 2)
        record(f"GDN forward ms, bf16 [1x4096, 16/32 heads x 128], {backend}", elapsed_ms, required=False)
    if "fla" in outputs:
        diff = (outputs["fla"].float() - outputs["torch"].float()).abs().max().item()
        record("GDN bf16 FLA vs torch max abs diff", diff, 5e-2, required=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="student_gpu_check_"))
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
    from dnmopd.student.gated_delta_rule import HAVE_FLA

    init_distributed()
    env = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "megatron_core": megatron.core.__version__, "fla": HAVE_FLA,
    }
    print(json.dumps(env), flush=True)
    for step in (
        lambda: check_model(paths, refs, ids, weights, device),
        lambda: check_fla_backward_refusal(paths["qwen3_5"], ids, device),
        lambda: check_checkpoint_and_release(paths, work, ids, device),
        lambda: check_packing(paths, device),
        lambda: check_fla_varlen(device),
        lambda: benchmark_gdn(device),
    ):
        try:
            step()
        except Exception:  # noqa: BLE001 - keep going, report everything
            traceback.print_exc()
            record("exception", traceback.format_exc()[-1500:], ok=False)
    failed = [r["check"] for r in RESULTS if r["required"] and r["ok"] is False]
    report = {"env": env, "results": RESULTS, "failed": failed}
    (args.out / "student_gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"\n{len(RESULTS)} checks, {len(failed)} failed: {failed}", flush=True)
    torch.distributed.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
