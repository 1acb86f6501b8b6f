"""TrainBatch: padded rows; packed micro-batches (balanced bins, concatenated sequences, where each response token's
predicting state lives); padded micro-batches padded only to their own longest row, and the uniform pipeline form."""

import pytest
import torch

from dnmopd.trainer.step.batch import TrainBatch, balanced_bins


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


def test_balanced_bins_cover_every_item_within_capacity_and_evenly():
    lengths = torch.randint(1, 300, (200,), generator=torch.Generator().manual_seed(0)).tolist() + [700, 650]
    bins = balanced_bins(lengths, 1000)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    loads = [sum(lengths[i] for i in b) for b in bins]
    assert all(load <= 1000 for load in loads)
    # 99% full on average: one bin more than the total needs (the packing retries with one more per failure)
    assert len(bins) == -(-sum(lengths) // 1000) + 1
    assert max(loads) - min(loads) <= 300  # as even as the items allow: within one (small) item
    assert balanced_bins(lengths, 1000) == bins  # deterministic


def test_balanced_bins_edge_cases():
    assert balanced_bins([5000, 10, 20], 100) == [[0], [1, 2]]  # a longer item alone
    assert balanced_bins([60, 60, 60], 100) == [[0], [1], [2]]  # no two fit: one more bin per failure
    assert balanced_bins([3, 4, 5], 100, multiple_of=4) == [[2], [1], [0], []]  # count padded, one left empty
    assert len(balanced_bins([50] * 7, 100, multiple_of=2)) == 4
    with pytest.raises(ValueError, match="capacity"):
        balanced_bins([1], 0)


def test_packed_micro_batches_concatenate_rows_and_locate_their_tokens():
    batch = batch_of([2, 9, 1, 4, 9, 3])
    micro = batch.packed_micro_batches(max_tokens=24)
    assert sorted(torch.cat([mb.index for mb in micro]).tolist()) == list(range(6))
    assert [mb.num_tokens for mb in micro] == [mb.batch.sequence_lens.sum().item() for mb in micro]
    assert sum(mb.num_tokens for mb in micro) == int(batch.sequence_lens.sum())  # no padding computed
    assert [mb.num_tokens for mb in micro] == [23, 23]  # 46 tokens in two even packs (padded: three)
    for mb in micro:
        ids = mb.input_ids()
        expected = torch.cat([batch.tokens[i, : batch.sequence_lens[i]] for i in mb.index.tolist()])
        assert ids.shape == (1, mb.num_tokens) and torch.equal(ids[0], expected)
        rows, cols = mb.batch.response_mask.nonzero(as_tuple=True)
        positions = mb.batch.prompt_lens[rows] + cols
        where = mb.locate(rows, positions)  # the response token itself sits there in the packed row
        assert torch.equal(ids[where], mb.batch.tokens[rows, positions])
        assert torch.equal(mb.batch.target_logp, batch.target_logp[mb.index, : mb.batch.target_logp.shape[1]])


def test_packed_micro_batches_fill_the_interleaved_count_with_one_token_rows():
    batch = batch_of([2, 9, 1])
    micro = batch.packed_micro_batches(max_tokens=100, multiple_of=4)
    assert len(micro) == 4 and [mb.index.tolist() for mb in micro] == [[1], [0], [2], [-1]]
    filler = micro[-1]
    assert filler.num_tokens == 1 and filler.batch.response_mask.sum() == 0 and filler.input_ids().shape == (1, 1)


def test_padded_micro_batches_cover_every_row_once_and_trim_padding():
    batch = batch_of([2, 9, 1, 4, 9, 3])
    micro = batch.padded_micro_batches(max_tokens=24)
    rows = torch.cat([mb.index for mb in micro]).tolist()
    assert sorted(rows) == list(range(6))
    for mb in micro:
        tokens = mb.batch.tokens
        assert mb.num_tokens == tokens.numel() and (mb.num_tokens <= 24 or mb.batch.size == 1)
        assert tokens.shape[1] == int(mb.batch.sequence_lens.max()) and torch.equal(mb.input_ids(), tokens)
        assert torch.equal(tokens, batch.tokens[mb.index, : tokens.shape[1]])
        assert torch.equal(mb.batch.target_logp, batch.target_logp[mb.index, : mb.batch.target_logp.shape[1]])
    assert [len(mb.index) for mb in micro] == [2, 3, 1]  # longest first, totals 12+12 | 7+6+5 (3 x 7) | 4


def test_uniform_micro_batches_share_one_shape_and_pad_with_empty_rows():
    batch = batch_of([2, 9, 1, 4, 9])
    micro = batch.padded_micro_batches(max_tokens=24, uniform=True, multiple_of=2)
    assert len(micro) == 4 and {tuple(mb.batch.tokens.shape) for mb in micro} == {(2, 12)}
    index = torch.cat([mb.index for mb in micro])
    assert sorted(index[index >= 0].tolist()) == list(range(5)) and (index < 0).sum() == 3
    for mb in micro:
        assert mb.batch.response_mask[mb.index < 0].sum() == 0
