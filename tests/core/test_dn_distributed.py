"""The trainer's reduction path over a real 2-process gloo group: each rank's kernel-op statistics summed with
`all_reduce_sum` (what `ctx.sum_over_dp` runs) equal the single-process statistics of the whole batch, and
so do the multipliers; without a group the sum is the identity."""

import pytest
import torch
import torch.distributed as dist
from distributed import run_workers
from dn_batches import DOMAINS, make_batch, multipliers, statistics

from dnmopd.core import DomainNormalizer
from dnmopd.trainer.collectives import all_reduce_sum


def uneven_shards():
    """Rank 0 gets responses of every domain; rank 1 gets no ifeval response at all."""
    log_ratio, mask, ids = make_batch(13, batch=30, empty_every=9)
    rank1 = (ids != 2) & (torch.arange(len(ids)) >= 12)
    rank0 = ~rank1
    return (log_ratio, mask, ids), [(log_ratio[s], mask[s], ids[s]) for s in (rank0, rank1)]


def _worker(rank, world_size):
    _, shards = uneven_shards()
    group = dist.new_group(list(range(world_size)))
    sum_over_dp = lambda local: all_reduce_sum(local, group)  # noqa: E731 - the trainer's ctx.sum_over_dp
    stats = sum_over_dp(statistics(*shards[rank]))
    weights, diag = DomainNormalizer(DOMAINS).from_statistics(stats)
    frozen = DomainNormalizer(DOMAINS, multipliers="frozen")
    later = make_batch(20 + rank, spreads={"math": 2, "code": 1, "ifeval": 0.1})
    frozen_weights = [frozen.from_statistics(stats)[0], frozen.from_statistics(sum_over_dp(statistics(*later)))[0]]
    replicated = sum_over_dp(statistics(*uneven_shards()[0]))
    return {"stats": stats, "weights": weights, "diag": diag.to_dict(), "frozen": frozen_weights,
            "replicated": replicated}


@pytest.fixture(scope="module")
def worker_results():
    return run_workers(2, _worker)


def test_summed_rank_statistics_equal_the_whole_batch(worker_results):
    full, _ = uneven_shards()
    expected = statistics(*full)
    expected_weights, expected_diag = multipliers(full)
    for result in worker_results:
        torch.testing.assert_close(result["stats"], expected, rtol=1e-12, atol=1e-12)
        assert result["weights"] == pytest.approx(expected_weights, rel=1e-12)
        assert result["diag"]["global_std"] == pytest.approx(expected_diag.global_std, rel=1e-12)
        for d in DOMAINS:  # rank 1 holds no ifeval response, yet measures it globally
            assert result["diag"]["domains"][d]["tokens"] == expected_diag.domains[d].tokens
            assert result["diag"]["domains"][d]["responses"] == expected_diag.domains[d].responses


def test_frozen_multipliers_are_identical_across_ranks(worker_results):
    assert worker_results[0]["frozen"] == worker_results[1]["frozen"]
    assert worker_results[0]["frozen"][0] == worker_results[0]["frozen"][1]


def test_replicating_the_batch_on_every_rank_doubles_the_counts_not_the_multipliers(worker_results):
    full, _ = uneven_shards()
    expected = statistics(*full)
    expected_weights, _ = multipliers(full)
    for result in worker_results:
        torch.testing.assert_close(result["replicated"], 2 * expected, rtol=1e-12, atol=1e-12)
        weights, _ = DomainNormalizer(DOMAINS).from_statistics(result["replicated"])
        assert weights == pytest.approx(expected_weights, rel=1e-9)


def test_without_a_group_the_sum_is_the_identity():
    stats = statistics(*make_batch(0))
    assert torch.equal(all_reduce_sum(stats, None), stats)
