"""PromptSampler: seeded epochs, exact mid-epoch resume, data-parallel shards without overlap or loss."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from dnmopd.data.sampler import PromptSampler


def sampler(num_prompts=10, P=4, seed=3, dp_rank=0, dp_size=1, shuffle=True) -> PromptSampler:
    return PromptSampler.Config(prompts_per_rollout=P, seed=seed, shuffle=shuffle).build(
        num_prompts=num_prompts, dp_rank=dp_rank, dp_size=dp_size)


def take(s: PromptSampler, n: int) -> list:
    return [s.next_batch() for _ in range(n)]


def test_each_epoch_is_a_seeded_permutation_and_the_stream_loses_nothing():
    s = sampler(num_prompts=10, P=4)
    stream = [i for b in take(s, 10) for i in b.global_indices]  # 40 prompts = 4 epochs
    epochs = [stream[i:i + 10] for i in range(0, 40, 10)]
    assert all(sorted(e) == list(range(10)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 4  # reshuffled every epoch
    assert epochs == [sampler(num_prompts=10).epoch_order(e) for e in range(4)]  # a pure function of (seed, epoch)
    assert epochs[0] != sampler(num_prompts=10, seed=4).epoch_order(0)
    assert [b.epochs for b in take(sampler(num_prompts=10, P=4), 3)] == [(0,), (0,), (0, 1)]
    assert sampler(shuffle=False).epoch_order(5) == list(range(10))


@pytest.mark.parametrize("stop_after", [0, 1, 2, 3, 7])
def test_resume_from_state_dict_reproduces_the_uninterrupted_run(stop_after):
    reference = [b.global_indices for b in take(sampler(num_prompts=13, P=6), 12)]
    first = sampler(num_prompts=13, P=6)
    before = [b.global_indices for b in take(first, stop_after)]
    state = json.loads(json.dumps(first.state_dict()))  # survives a JSON checkpoint
    resumed = sampler(num_prompts=13, P=6)
    resumed.load_state_dict(state)
    after = take(resumed, 12 - stop_after)
    assert before + [b.global_indices for b in after] == reference
    assert [b.step for b in after] == list(range(stop_after, 12))


def test_random_stop_positions_resume_exactly():
    rng = random.Random(0)
    for _ in range(20):
        n, P = rng.randint(1, 30), rng.randint(1, 12)
        total = rng.randint(1, 15)
        stop = rng.randint(0, total)
        reference = [b.global_indices for b in take(sampler(num_prompts=n, P=P, seed=n), total)]
        a = sampler(num_prompts=n, P=P, seed=n)
        head = [b.global_indices for b in take(a, stop)]
        b = sampler(num_prompts=n, P=P, seed=n)
        b.load_state_dict(a.state_dict())
        assert head + [x.global_indices for x in take(b, total - stop)] == reference


@pytest.mark.parametrize("dp_size", [1, 2, 4, 8])
def test_data_parallel_shards_cover_each_batch_without_overlap(dp_size):
    ranks = [sampler(num_prompts=11, P=8, dp_rank=r, dp_size=dp_size) for r in range(dp_size)]
    single = sampler(num_prompts=11, P=8)
    for _ in range(6):
        shards = [s.next_batch() for s in ranks]
        whole = single.next_batch()
        assert [i for shard in shards for i in shard.indices] == whole.global_indices
        assert all(len(shard.indices) == 8 // dp_size for shard in shards)
        assert all(shard.global_indices == whole.global_indices for shard in shards)
    counts = Counter(i for b in take(sampler(num_prompts=11, P=8), 11) for i in b.global_indices)
    assert counts == Counter({i: 8 for i in range(11)})  # 88 prompts = 8 epochs: each prompt exactly 8 times


def test_resume_on_a_different_data_parallel_layout():
    run = sampler(num_prompts=9, P=4, dp_size=1)
    take(run, 3)
    state = run.state_dict()
    reference = [b.global_indices for b in take(run, 4)]
    for rank in range(2):
        shard = sampler(num_prompts=9, P=4, dp_rank=rank, dp_size=2)
        shard.load_state_dict(state)
        assert [b.indices for b in take(shard, 4)] == [g[2 * rank:2 * rank + 2] for g in reference]


def test_invalid_settings_and_states_are_refused():
    with pytest.raises(ValueError, match="multiple of the data-parallel size"):
        sampler(P=6, dp_size=4)
    with pytest.raises(ValueError, match="dp_rank"):
        sampler(dp_rank=2, dp_size=2)
    with pytest.raises(ValueError, match="empty"):
        sampler(num_prompts=0)
    with pytest.raises(ValueError, match="prompts_per_rollout"):
        PromptSampler.Config(prompts_per_rollout=0)
    state = sampler(num_prompts=10, seed=3).state_dict()
    for other in (sampler(num_prompts=11, seed=3), sampler(num_prompts=10, seed=4),
                  sampler(num_prompts=10, seed=3, shuffle=False)):
        with pytest.raises(ValueError, match="resume with the same"):
            other.load_state_dict(state)
    with pytest.raises(ValueError, match="consumed"):
        sampler().load_state_dict({**state, "consumed": -1})
