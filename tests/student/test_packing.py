"""Packed (THD) micro-batches equal padded ones through the real training path: per-token log-probs, the loss
and every gradient, for Qwen3 and Qwen3.5, at TP 1/2, PP 1/2 and PP 2 x VPP 2 (gloo processes, CPU, float32);
each parallel layout's log-probs and loss also equal the single process's.

The padded path is the reference: every sequence in its own right-padded row, attention, rotary positions and
the GDN recurrence all starting at position 0 of the row. The packed path must reproduce it although its
sequences sit back to back in one row, in other micro-batches (balanced packing vs longest-first buckets) and,
with pipeline parallelism, with other tensor shapes between the stages.

Tolerances (float32): log-probs 2e-5 absolute, loss 1e-5 relative, gradients 1e-4 relative to each tensor's
largest entry, 1e-3 for the GDN decay parameters ``A_log``/``dt_bias`` (each gradient a sum of many cancelling
per-token terms, as for another GDN chunk length in test_student_model). Packing changes the GEMM shapes
(summation order) and, in the GDN layers, nothing else: both paths chunk every sequence from its first token.
"""

from __future__ import annotations

import pytest
import torch
from distributed import run_workers
from student_fixtures import tiny_models  # noqa: F401
from student_helpers import VOCAB

LOGP_TOLERANCE = 2e-5
LOSS_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4
DECAY_GRAD_TOLERANCE = 1e-3
MICRO_BATCH_TOKENS = 100
# (prompt, response) lengths: sequences whose responses cross the 64-token GDN chunks, a 1-token response, a row
# longer than a micro-batch (alone in its own), rows that pack several to a micro-batch. Short responses keep the
# LM-head kernels (Triton's interpreter on CPU) cheap; the prompts give the sequences their length.
SHAPES = [(60, 10), (3, 1), (90, 16), (5, 6), (20, 8), (4, 5), (9, 6), (6, 4), (15, 4)]


def training_batch(seed: int = 0):
    """A TrainBatch of SHAPES with random tokens, rollout/teacher log-probs and DN weights; row 3 unscored."""
    from dnmopd.trainer.step.batch import TrainBatch

    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, VOCAB, (p,), generator=gen).tolist() for p, _ in SHAPES]
    responses = [torch.randint(0, VOCAB, (r,), generator=gen).tolist() for _, r in SHAPES]
    rollout = [-3 * torch.rand(r, generator=gen) for _, r in SHAPES]
    targets = [None if i == 3 else -3 * torch.rand(r, generator=gen) for i, (_, r) in enumerate(SHAPES)]
    batch = TrainBatch.from_rows(prompts, responses, rollout, targets, [i % 3 for i in range(len(SHAPES))])
    batch.weights = 0.5 + 1.5 * torch.rand(len(SHAPES), generator=gen)
    return batch


def _run_both(student, optimization, batch) -> dict:
    from dnmopd.trainer.step.forward_backward import StudentForward, logp_matrix
    from dnmopd.trainer.step.objectives import ClippedSurrogate, LMHead

    objective = ClippedSurrogate(LMHead(student.chunks[-1], student.dims.pg.tp, None), num_responses=batch.size,
                                 eps_low=0.2, eps_high=0.28, dual_clip=None)
    results = {}
    for packing in (False, True):
        forward = StudentForward(student, optimization.model, MICRO_BATCH_TOKENS, packing=packing)
        for chunk in optimization.model:
            chunk.train()
        optimization.zero_grad()
        pieces = forward.run(batch, objective, forward_only=False)
        results[packing] = {
            "micro_batches": [(int((mb.index < 0).sum()), mb.num_tokens) for mb in forward.micro_batches(batch)],
            "logp": logp_matrix(batch, pieces) if student.is_last_stage else None,
            "loss": sum(float(p["loss"]) for p in pieces) if student.is_last_stage else None,
            "grads": {f"{i}.{n}": p.main_grad.detach().clone() for i, chunk in enumerate(student.chunks)
                      for n, p in chunk.named_parameters()},
        }
    return results


def _equality_worker(rank, world, paths, tensor, pipeline, virtual):
    from dnmopd.student import BuildOptions, ParallelDims, Student, init_distributed
    from dnmopd.trainer.config import OptimizerConfig
    from dnmopd.trainer.step.optimization import build_optimization

    init_distributed()
    dims = ParallelDims.Config(tensor=tensor, pipeline=pipeline, virtual_pipeline=virtual).build()
    batch = training_batch()
    report = {}
    for name, path in paths.items():
        student = Student.from_hf(path, dims, BuildOptions(dtype="float32"))
        optimization = build_optimization(student, OptimizerConfig(clip_grad=0.0), total_steps=1)
        padded, packed = _run_both(student, optimization, batch).values()
        grad_diffs = {n: ((packed["grads"][n] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
                      for n, g in padded["grads"].items()}
        report[name] = {
            "tokens": (padded["micro_batches"], packed["micro_batches"]),
            "logp": tuple(None if x is None else x.tolist() for x in (padded["logp"], packed["logp"])),
            "loss": (padded["loss"], packed["loss"]),
            "grad_diffs": grad_diffs,
            "grad_norms": {n: g.norm().item() for n, g in padded["grads"].items()},
        }
    dims.destroy()
    return report


LAYOUTS = {"tp2": (2, 2, 1, None), "pp2": (2, 1, 2, None), "pp2_vpp2": (2, 1, 2, 2)}
MODELS = ("qwen3_5_vl", "qwen3")  # Qwen3.5 (released layout, tied) and Qwen3; VPP 2 x PP 2 needs the 4 layers


@pytest.fixture(scope="module")
def single_process(tiny_models):  # noqa: F811
    """The reference layout (TP 1, PP 1), also checked itself."""
    return run_workers(1, _equality_worker, {name: tiny_models[name] for name in MODELS}, 1, 1, None)


def check_reports(reports, reference=None, layout="tp1_pp1"):
    real_tokens = sum(p + r for p, r in SHAPES)
    mask = training_batch().response_mask
    for rank, report in enumerate(reports):
        for name, r in report.items():
            padded, packed = r["tokens"]  # (filler rows, tokens computed) per micro-batch
            fillers = sum(rows for rows, _ in packed)  # 1-token rows filling the interleaved schedule's count
            assert sum(tokens for _, tokens in packed) == real_tokens + fillers, (name, r["tokens"])
            assert sum(tokens for _, tokens in padded) > real_tokens, (name, r["tokens"])
            if r["loss"][0] is not None:  # last pipeline stage
                padded_logp, packed_logp = (torch.tensor(x)[mask] for x in r["logp"])
                assert (packed_logp < 0).all(), (layout, name)
                assert (packed_logp - padded_logp).abs().max() <= LOGP_TOLERANCE, (layout, name, rank)
                assert r["loss"][1] == pytest.approx(r["loss"][0], rel=LOSS_TOLERANCE), (layout, name, r["loss"])
                if reference is not None:  # this layout's padded run vs the single process
                    expected = reference[name]
                    reference_logp = torch.tensor(expected["logp"][0])[mask]
                    assert (padded_logp - reference_logp).abs().max() <= LOGP_TOLERANCE, (layout, name)
                    assert r["loss"][0] == pytest.approx(expected["loss"][0], rel=LOSS_TOLERANCE), (layout, name)
            assert all(norm > 0 for norm in r["grad_norms"].values()), (layout, name, r["grad_norms"])
            for param, diff in r["grad_diffs"].items():
                limit = DECAY_GRAD_TOLERANCE if param.endswith(("A_log", "dt_bias")) else GRAD_TOLERANCE
                assert diff <= limit, (layout, name, rank, param, diff)


def test_packed_micro_batches_equal_padded_on_one_process(single_process):
    check_reports(single_process)


def test_causal_conv_restarts_at_every_sequence():
    from dnmopd.student.gated_delta_net import causal_conv1d

    gen = torch.Generator().manual_seed(0)
    lengths = [3, 1, 9, 2, 7]
    x, weight = torch.randn(1, 6, sum(lengths), generator=gen), torch.randn(6, 1, 4, generator=gen)
    expected = torch.cat([causal_conv1d(piece, weight) for piece in x.split(lengths, dim=-1)], dim=-1)
    torch.testing.assert_close(causal_conv1d(x, weight, lengths), expected, rtol=0, atol=1e-6)
    # float64 reference of one output: the third token of the third sequence sees that sequence's first three
    window = x[0, :, 4:7].double() * weight[:, 0, 1:].double()
    assert causal_conv1d(x, weight, lengths)[0, :, 6].double().sub(window.sum(-1)).abs().max() < 1e-5


def test_packed_sequences_are_validated():
    from megatron.core.packed_seq_params import PackedSeqParams

    from dnmopd.student.model import PackedSequences, packed_lengths

    packed = PackedSequences.from_lengths([3, 1, 5], "cpu")
    assert packed.cu_seqlens_q.tolist() == [0, 3, 4, 9] and packed.cu_seqlens_q.dtype == torch.int32
    assert packed.max_seqlen_q == 5 and packed_lengths(packed) == [3, 1, 5]
    assert packed_lengths(PackedSeqParams(qkv_format="thd", cu_seqlens_q=packed.cu_seqlens_q)) == [3, 1, 5]
    with pytest.raises(ValueError, match="lengths >= 1"):
        PackedSequences.from_lengths([3, 0], "cpu")
    with pytest.raises(ValueError, match="thd"):
        packed_lengths(PackedSeqParams(qkv_format="sbhd"))


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_packed_micro_batches_equal_padded_in_parallel(tiny_models, single_process, layout):  # noqa: F811
    processes, tensor, pipeline, virtual = LAYOUTS[layout]
    paths = {name: tiny_models[name] for name in MODELS[:1 if virtual else 2]}
    reports = run_workers(processes, _equality_worker, paths, tensor, pipeline, virtual)
    check_reports(reports, single_process[0], layout)
