"""The student's update throughput for `launch/gpu_check.py` (its throughput section): one update (forward + backward
+ Adam) over the paper's length mix (`paper_batch`), in tokens per second and peak memory, through the trainer's
path (megatron-core, packed micro-batches, the fused LM-head cross-entropy, megatron's Adam) and through transformers
(the same model, one sequence at a time, logits only at the response positions, torch's AdamW), without and with FLA.

Each implementation is measured in a process of its own (`measure`; transformers binds FLA or its own torch GDN when
imported, and each peak memory is its own), after a warm-up update on 4 sequences. Full size: a random Qwen3.5 with
the real 2B shapes (24 layers, vocabulary 248,320, tied embeddings), bf16 on the GPU, 3 prompts x 8 responses at
the paper's lengths; tiny: 4 layers of hidden 64, float32, lengths / 64.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from dnmopd.benchmarks.gpu_report import Check

IMPLEMENTATIONS = ("megatron", "transformers", "transformers_fla")
QWEN35_2B_LAYERS = 24
MICRO_BATCH_TOKENS = 16384
"""The recipes' train.micro_batch_tokens (scaled with the lengths when tiny)."""


def measure(work: Path, impl: str, device: str, tiny: bool) -> dict:
    """One implementation's result: tokens, responses, seconds, peak_bytes, tokens_per_s and a note; or
    {"skipped": reason} or {"error": message} (FLA's backward refuses some Triton versions: a finding)."""
    import importlib.util

    if impl == "transformers":
        sys.modules["fla"] = None  # transformers then binds its own torch GDN
    elif impl == "transformers_fla" and (device != "cuda" or importlib.util.find_spec("fla") is None):
        return {"skipped": "FLA runs on CUDA only" if device != "cuda" else "flash-linear-attention is not importable"}
    try:
        if impl != "megatron":
            return _measure(work, transformers_update, device, tiny)
        from dnmopd.student import init_distributed
        from dnmopd.student.cpu_compat import cpu_compat

        init_distributed()
        with cpu_compat():
            return _measure(work, megatron_update, device, tiny)
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        import traceback

        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def _measure(work: Path, update, device: str, tiny: bool) -> dict:
    import torch

    from dnmopd.benchmarks.paper_batch import PRESETS, QWEN35_VOCAB, LengthMix
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint

    on_gpu = device == "cuda"
    dtype = "bfloat16" if on_gpu else "float32"
    folder = work / ("tiny" if tiny else "qwen3.5-2b")
    vocab = 1024 if tiny else QWEN35_VOCAB
    if not (folder / "config.json").is_file():  # the first implementation builds it, the others reuse it
        build_tiny_hf_checkpoint(folder, arch="qwen3_5", vocab_size=vocab, seed=0, tie_word_embeddings=True,
                                 num_layers=4 if tiny else QWEN35_2B_LAYERS, dtype=dtype,
                                 overrides=PRESETS["tiny" if tiny else "qwen3.5-2b"])
    scale = 1 / 64 if tiny else 1.0
    batch = LengthMix.draw(3, 2 if tiny else 8, scale=scale).train_batch(vocab, seed=0)
    step, note = update(folder, dtype, device, round(MICRO_BATCH_TOKENS * scale))
    step(batch.select(slice(0, 4)))  # warm-up: compilation, autotuning, the allocator
    seconds, peak = [], None
    for _ in range(2 if tiny else 1):
        if on_gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        step(batch)
        if on_gpu:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        seconds.append(round(time.perf_counter() - start, 3))
    tokens = int(batch.sequence_lens.sum())
    return {"tokens": tokens, "responses": batch.size, "seconds": seconds, "peak_bytes": peak,
            "tokens_per_s": tokens / statistics.median(seconds), "note": note}


def megatron_update(folder: Path, dtype: str, device: str, micro_batch_tokens: int):
    """The trainer's update path: packed micro-batches, the fused LM-head cross-entropy, megatron's Adam."""
    from dnmopd.student import BuildOptions, ParallelDims, Student
    from dnmopd.student.build import resolved_impl
    from dnmopd.trainer.config import OptimizerConfig
    from dnmopd.trainer.step.forward_backward import StudentForward
    from dnmopd.trainer.step.objectives import LMHead, TokenCrossEntropy
    from dnmopd.trainer.step.optimization import build_optimization

    dims = ParallelDims.Config().build()
    student = Student.from_hf(folder, dims, BuildOptions(dtype=dtype))
    optimization = build_optimization(student, OptimizerConfig(lr=1e-6, lr_warmup_updates=0, weight_decay=0.0), 4)
    forward = StudentForward(student, optimization.model, micro_batch_tokens, packing=True)
    head = LMHead(student.chunks[-1], dims.pg.tp, None)

    def step(batch):
        for chunk in optimization.model:
            chunk.train()
        optimization.zero_grad()
        forward.run(batch, TokenCrossEntropy(head, num_tokens=int(batch.loss_mask.sum())), forward_only=False)
        optimization.step()

    from dnmopd.student.gated_delta_rule import HAVE_FLA, fla_backward_is_broken

    fla = HAVE_FLA and device == "cuda"
    gdn = "torch (FLA's backward is unusable here)" if fla and fla_backward_is_broken() else ("FLA" if fla else "torch")
    return step, (f"{dtype}, packed micro-batches of <= {micro_batch_tokens} tokens, GDN {gdn}, "
                  f"{resolved_impl(student.options)} layers")


def transformers_update(folder: Path, dtype: str, device: str, micro_batch_tokens: int):
    """The same update through transformers: float32 weights, bf16 autocast on CUDA, one sequence at a time (no
    padding), logits only at the response positions, torch's AdamW."""
    import torch
    import torch.nn.functional as F
    from transformers.utils.import_utils import is_flash_linear_attention_available

    from dnmopd.hf.models import load_causal_lm

    model = load_causal_lm(str(folder), device=device, dtype="float32", attn_implementation="sdpa").train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda")

    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        total = int(batch.loss_mask.sum())
        for row in range(batch.size):
            prompt, length = int(batch.prompt_lens[row]), int(batch.sequence_lens[row])
            ids = batch.tokens[row, :length].to(device)
            with autocast:
                hidden = decoder(input_ids=ids[None]).last_hidden_state[0, prompt - 1: length - 1]
                logits = head(hidden).float()
            (F.cross_entropy(logits, ids[prompt:], reduction="sum") / total).backward()
        optimizer.step()

    fla = is_flash_linear_attention_available() and device == "cuda"
    return step, (f"float32 weights{', bf16 autocast' if device == 'cuda' else ''}, one sequence at a time, "
                  f"GDN {'FLA' if fla else 'torch'}")


def rows(results: dict[str, dict | None], section: str = "throughput") -> list[Check]:
    """The report's rows: each implementation's tokens/s and peak memory, megatron's ratio to the others."""
    out = []
    for impl, result in results.items():
        name = f"{impl} update (fwd+bwd+Adam), tokens/s"
        if result is None:
            out.append(Check(section, name, "fail", "no result", note="see gpu_check.log"))
        elif "skipped" in result:
            out.append(Check(section, name, "skip", note=result["skipped"]))
        elif "error" in result:
            out.append(Check(section, name, "fail" if impl == "megatron" else "warn", "error",
                             note=result["error"][:1500]))
        else:
            peak = "n/a on a CPU" if result["peak_bytes"] is None else f"{result['peak_bytes'] / 2**30:.2f} GiB"
            out.append(Check(section, name, "info", round(result["tokens_per_s"], 1),
                             note=f"{result['tokens']:,} tokens ({result['responses']} responses), "
                                  f"{result['seconds']} s, peak memory {peak}; {result['note']}"))
    done = {k: r for k, r in results.items() if r and "tokens_per_s" in r}
    for other in ("transformers", "transformers_fla"):
        if "megatron" in done and other in done:
            mine, theirs = done["megatron"], done[other]
            memory = "" if mine["peak_bytes"] is None else \
                f"peak memory ratio {mine['peak_bytes'] / theirs['peak_bytes']:.3f}"
            out.append(Check(section, f"megatron / {other} tokens/s", "info",
                             round(mine["tokens_per_s"] / theirs["tokens_per_s"], 3), note=memory))
    return out
