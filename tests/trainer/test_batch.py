"""TrainBatch: padded rows, micro-batches padded only to their own longest row, and the uniform pipeline form."""

import torch

from dnmopd.trainer.batch import TrainBatch


def batch_of(lengths, prompt=3):
    responses = [list(range(10, 10 + n)) for n in lengths]
    return TrainBatch.from_rows([[1] * prompt] * len(lengths), responses, [torch.full((n,), -1.0) for n in lengths],
                                [torch.full((n,), -2.0) if i != 1 else None for i, n in enumerate(lengths)],
                                [i % 3 for i in range(len(lengths))])


def test_rows_are_right_padded():
    batch = batch_of([2, 5, 1])
    assert batch.tokens.tolist()[0] == [1, 1, 1, 10, 11, 0, 0, 0]
    assert batch.response_lens.tolist() == [2, 5, 1] and batch.sample_valid.tolist() == [True, False, True]
    assert batch.loss_mask[1].sum() == 0 and batch.rollout_logp[0].tolist() == [-1, -1, 0, 0, 0]


def test_micro_batches_cover_every_row_once_and_trim_padding():
    batch = batch_of([2, 9, 1, 4, 9, 3])
    micro = batch.micro_batches(max_tokens=24)
    rows = torch.cat([index for index, _ in micro]).tolist()
    assert sorted(rows) == list(range(6))
    for index, mb in micro:
        assert mb.size * mb.tokens.shape[1] <= 24 or mb.size == 1
        assert mb.tokens.shape[1] == int((mb.prompt_lens + mb.response_lens).max())
        assert torch.equal(mb.tokens[:, : mb.tokens.shape[1]], batch.tokens[index, : mb.tokens.shape[1]])
        assert torch.equal(mb.target_logp, batch.target_logp[index, : mb.target_logp.shape[1]])
    assert [len(index) for index, _ in micro] == [2, 3, 1]  # longest first, totals 12+12 | 7+6+5 (3 x 7) | 4


def test_uniform_micro_batches_share_one_shape_and_pad_with_empty_rows():
    batch = batch_of([2, 9, 1, 4, 9])
    micro = batch.micro_batches(max_tokens=24, uniform=True, multiple_of=2)
    assert len(micro) == 4 and {tuple(mb.tokens.shape) for _, mb in micro} == {(2, 12)}
    index = torch.cat([i for i, _ in micro])
    assert sorted(index[index >= 0].tolist()) == list(range(5)) and (index < 0).sum() == 3
    for i, mb in micro:
        assert mb.response_mask[i < 0].sum() == 0
