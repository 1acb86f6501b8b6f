"""Single-rank megatron student vs Hugging Face: logits, gradients through both mixers, weight round trip.

Megatron runs in a spawned process (``run_workers(1, ...)``) so that its CPU compatibility layer never
touches the pytest process.
"""

from __future__ import annotations

import torch
from distributed import run_workers
from student_fixtures import tiny_models  # noqa: F401
from student_helpers import VOCAB, hf_logits, probe_ids, roundtrip_mismatches

TOLERANCE = 1e-4


def _grads_vs_hf(student, path: str, ids: torch.Tensor) -> dict[str, float]:
    """Relative max difference between megatron and HF gradients, per HF tensor, for the same loss."""
    from transformers import AutoModelForCausalLM

    from dnmopd.student.hf_mapping import rule_for

    weights = torch.randn(*ids.shape, VOCAB, generator=torch.Generator().manual_seed(5))
    model = student.chunks[0]
    model.train()
    (model(ids)[..., :VOCAB] * weights).sum().backward()
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    (hf(ids).logits * weights).sum().backward()
    hf_grads = {name: p.grad for name, p in hf.named_parameters()}
    prefix = "model.language_model." if student.arch.vision_language else "model."
    diffs = {}
    for name, param in model.named_parameters():
        rule, _ = rule_for(student.arch, model, name, student.padded_vocab)
        for hf_name, grad in zip(rule.hf_names, rule.to_hf([param.grad]), strict=True):
            if hf_name.endswith("linear_attn.norm.weight"):
                grad = grad - 1.0  # to_hf adds the out_norm offset, which does not apply to gradients
            reference = hf_grads[hf_name.replace(prefix, "model.", 1)]
            diffs[hf_name] = ((grad - reference).abs().max() / reference.abs().max().clamp_min(1e-12)).item()
    return diffs


def _weight_sync(student, path: str, ids: torch.Tensor) -> dict:
    """Load ``hf_tensors(causal_lm_names=True)`` into a zeroed transformers model, as a rollout engine would."""
    from transformers import AutoModelForCausalLM

    engine = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        for param in engine.parameters():
            param.zero_()
    result = engine.load_state_dict(dict(student.hf_tensors(causal_lm_names=True)), strict=False)
    with torch.no_grad():
        diff = (engine(ids).logits - hf_logits(path, ids)).abs().max().item()
    return {"missing": sorted(result.missing_keys), "unexpected": sorted(result.unexpected_keys), "logit_diff": diff}


def _single_rank_worker(rank, world, paths):
    from dnmopd.student import BuildOptions, ParallelDims, Student, init_distributed
    from dnmopd.student.logits import forward_logits

    init_distributed()
    report = {"cuda_literal_device": str(torch.zeros(1, device="cuda").device)}  # run_workers enters cpu_compat
    ids = probe_ids()
    for name, path in paths.items():
        dims = ParallelDims.Config().build()
        student = Student.from_hf(path, dims, BuildOptions(dtype="float32"))
        logits = forward_logits(student, ids)
        hidden = student.chunks[0](ids, return_hidden_states=True)
        shard = student.output_shard()
        report[name] = {
            "logit_diff": (logits - hf_logits(path, ids)).abs().max().item(),
            "hidden_head_diff": (hidden @ shard.weight.T - logits).abs().max().item(),
            "shard": (shard.vocab_start, shard.weight.shape[0], shard.vocab_size),
            "roundtrip_mismatches": roundtrip_mismatches(student, path),
            "sync": _weight_sync(student, path, ids),
            "grad_diffs": _grads_vs_hf(student, path, ids),
        }
        dims.destroy()
    return report


def _mixed_dtype_checkpoint(path: str, out_dir: str) -> str:
    """The tiny model in bfloat16 except ``A_log``/``dt_bias`` in float32, as released checkpoints store them."""
    import shutil
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    Path(out_dir).mkdir()
    shutil.copy(Path(path) / "config.json", out_dir)
    state = load_file(Path(path) / "model.safetensors")
    keep = ("A_log", "dt_bias")
    state = {k: v if k.endswith(keep) else v.to(torch.bfloat16) for k, v in state.items()}
    save_file(state, Path(out_dir) / "model.safetensors", metadata={"format": "pt"})
    return out_dir


def _dtype_worker(rank, world, path, out_dir):
    """bfloat16 student from a mixed-dtype checkpoint: every exported tensor keeps its source dtype."""
    import warnings

    from safetensors.torch import load_file

    from dnmopd.student import BuildOptions, ParallelDims, Student, init_distributed

    init_distributed()
    source = load_file(f"{_mixed_dtype_checkpoint(path, out_dir)}/model.safetensors")
    dims = ParallelDims.Config().build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        student = Student.from_hf(out_dir, dims, BuildOptions(dtype="bfloat16"))
    exported = dict(student.hf_tensors(source_dtypes=True))
    return {
        "param_dtypes": sorted({str(p.dtype) for p in student.chunks[0].parameters()}),
        "dtype_mismatches": [n for n in source if exported[n].dtype != source[n].dtype],
        "bf16_value_mismatches": [
            n for n in source if source[n].dtype == torch.bfloat16 and not torch.equal(exported[n], source[n])
        ],
        "fp32_rounded_to_bf16": all(
            torch.equal(exported[n], source[n].to(torch.bfloat16).float()) for n in source if n.endswith("A_log")
        ),
        "round_trip_warnings": [str(w.message) for w in caught if "round-trip" in str(w.message)],
    }


def _options_worker(rank, world, path):
    """Recompute and the GDN chunk length change nothing but speed/memory."""
    from dnmopd.student import BuildOptions, ParallelDims, Student, init_distributed

    init_distributed()
    ids = probe_ids(length=40)
    results = {}
    for label, options in {
        "default": BuildOptions(dtype="float32"),
        "recompute": BuildOptions(dtype="float32", activation_recompute=True),
        "chunk16": BuildOptions(dtype="float32", gdn_chunk_size=16),
    }.items():
        dims = ParallelDims.Config().build()
        model = Student.from_hf(path, dims, options).chunks[0]
        model.train()
        logits = model(ids)
        logits.sum().backward()
        results[label] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
        dims.destroy()
    base_logits, base_grads = results.pop("default")
    return {
        label: {
            "logit_diff": (logits - base_logits).abs().max().item(),
            "grad_rel_diff": max(((grads[n] - g).abs().max() / g.abs().max()).item() for n, g in base_grads.items()),
        }
        for label, (logits, grads) in results.items()
    }


def test_single_rank_matches_hf(tiny_models):  # noqa: F811
    models = {k: v for k, v in tiny_models.items() if k != "qwen3_5_kv1"}
    (report,) = run_workers(1, _single_rank_worker, models)
    assert report["cuda_literal_device"] == "cpu"
    for name in models:
        r = report[name]
        assert r["logit_diff"] <= TOLERANCE, (name, r["logit_diff"])
        assert r["hidden_head_diff"] <= 1e-5, (name, r["hidden_head_diff"])
        assert r["shard"] == (0, VOCAB, VOCAB)
        assert r["roundtrip_mismatches"] == [], (name, r["roundtrip_mismatches"])
        tied_head = {"lm_head.weight"} if name != "qwen3_5" else set()  # a tied head is no separate tensor
        assert set(r["sync"]["missing"]) <= tied_head and r["sync"]["unexpected"] == [], (name, r["sync"])
        assert r["sync"]["logit_diff"] == 0.0, (name, r["sync"])
        for hf_name, diff in r["grad_diffs"].items():
            # the GDN decay parameters' gradients are sums of many cancelling per-token terms: float32 puts them
            # ~1e-3 (relative) from a float64 evaluation in both implementations, so they agree only to that
            limit = 1e-3 if hf_name.endswith(("A_log", "dt_bias")) else 1e-4
            assert diff <= limit, (name, hf_name, diff)
    # gradients reached the parameters of both mixers
    grads = report["qwen3_5"]["grad_diffs"]
    assert any("linear_attn.A_log" in k for k in grads) and any("self_attn.q_proj" in k for k in grads)


def test_exported_tensors_keep_their_source_dtype(tiny_models, tmp_path):  # noqa: F811
    (report,) = run_workers(1, _dtype_worker, tiny_models["qwen3_5"], str(tmp_path / "mixed"))
    assert report["param_dtypes"] == ["torch.bfloat16"]
    assert report["dtype_mismatches"] == [] and report["bf16_value_mismatches"] == []
    assert report["fp32_rounded_to_bf16"] and report["round_trip_warnings"] == []


def test_recompute_and_chunk_size_do_not_change_results(tiny_models):  # noqa: F811
    (report,) = run_workers(1, _options_worker, tiny_models["qwen3_5"])
    # recomputation replays the same ops; another chunk length reorders float32 sums (decay-gradient cancellation)
    assert report["recompute"] == {"logit_diff": 0.0, "grad_rel_diff": 0.0}, report
    assert report["chunk16"]["logit_diff"] <= 1e-5 and report["chunk16"]["grad_rel_diff"] <= 1e-3, report
