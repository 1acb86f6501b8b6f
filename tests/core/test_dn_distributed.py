"""Cross-rank reduction over a real 2-process gloo group equals the single-process computation on the
concatenated batch; callable syncs and single-controller merging; identity without a group."""

import pytest
import torch
import torch.distributed as dist
from distributed import run_workers
from dn_batches import DOMAINS, make_batch, ragged

from dnmopd.core import DomainNormalizer, all_reduce_statistics, batch_statistics, merge_statistics


def uneven_shards():
    """Rank 0 gets responses of every domain; rank 1 gets no ifeval response at all."""
    log_ratio, mask, ids = make_batch(13, batch=30, empty_every=9)
    rank1 = (ids != 2) & (torch.arange(len(ids)) >= 12)
    rank0 = ~rank1
    return (log_ratio, mask, ids), [(log_ratio[s], mask[s], ids[s]) for s in (rank0, rank1)]


def _worker(rank, world_size):
    _, shards = uneven_shards()
    shard = shards[rank]
    results = {}
    weights, diag = DomainNormalizer(DOMAINS, sync=True).multipliers_batched(*shard)
    results["batched"] = (weights.tolist(), diag.to_dict())
    group = dist.new_group([0, 1])
    listed, _ = DomainNormalizer(DOMAINS, sync=group).multipliers(ragged(*shard))
    results["listed"] = listed
    frozen = DomainNormalizer(DOMAINS, mode="frozen", sync=True)
    results["frozen"] = [frozen.multipliers_batched(*shard)[0].tolist(),
                         frozen.multipliers_batched(*make_batch(20 + rank, spreads={"math": 2, "code": 1,
                                                                                    "ifeval": 0.1}))[0].tolist()]
    replicated = DomainNormalizer(DOMAINS, sync=True).multipliers_batched(*uneven_shards()[0])
    results["replicated"] = (replicated[0].tolist(), replicated[1].domains["math"].tokens)
    return results


@pytest.fixture(scope="module")
def worker_results():
    return run_workers(2, _worker)


def test_two_ranks_equal_single_process(worker_results):
    full, _ = uneven_shards()
    expected, expected_diag = DomainNormalizer(DOMAINS).multipliers_batched(*full)
    for result in worker_results:
        weights, diag = result["batched"]
        assert weights == pytest.approx(expected.tolist(), rel=1e-6)
        assert diag["global_std"] == pytest.approx(expected_diag.global_std, rel=1e-12)
        for d in DOMAINS:
            assert diag["domains"][d]["tokens"] == expected_diag.domains[d].tokens
            assert diag["domains"][d]["responses"] == expected_diag.domains[d].responses


def test_list_api_with_group_reports_globally_present_domains(worker_results):
    full, _ = uneven_shards()
    expected, _ = DomainNormalizer(DOMAINS).multipliers(ragged(*full))
    for result in worker_results:
        assert set(result["listed"]) == set(DOMAINS)  # rank 1 has no ifeval, yet sees it globally
        assert result["listed"] == pytest.approx(expected, rel=1e-6)


def test_frozen_mode_is_identical_across_ranks(worker_results):
    assert worker_results[0]["frozen"] == worker_results[1]["frozen"]
    assert worker_results[0]["frozen"][0] == worker_results[0]["frozen"][1]


def test_replicating_the_batch_on_every_rank_leaves_weights_unchanged(worker_results):
    full, _ = uneven_shards()
    expected, diag = DomainNormalizer(DOMAINS).multipliers_batched(*full)
    for result in worker_results:
        weights, tokens = result["replicated"]
        assert weights == pytest.approx(expected.tolist(), rel=1e-6)
        assert tokens == 2 * diag.domains["math"].tokens


def test_callable_sync_with_merge_equals_single_process():
    full, shards = uneven_shards()
    parts = [batch_statistics(*s, 3) for s in shards]
    expected, _ = DomainNormalizer(DOMAINS).multipliers_batched(*full)
    weights, _ = DomainNormalizer(DOMAINS, sync=lambda local: merge_statistics(parts)).multipliers_batched(
        *shards[0]
    )
    assert weights.tolist() == pytest.approx(expected.tolist(), rel=1e-6)


def test_without_a_group_reduction_is_identity():
    stats = batch_statistics(*make_batch(0), 3)
    assert all_reduce_statistics(stats) is stats
    local, _ = DomainNormalizer(DOMAINS).multipliers_batched(*make_batch(0))
    synced, _ = DomainNormalizer(DOMAINS, sync=True).multipliers_batched(*make_batch(0))
    assert torch.equal(local, synced)


def test_merge_statistics_validation():
    with pytest.raises(ValueError, match="at least one"):
        merge_statistics([])
    with pytest.raises(ValueError, match="shape"):
        merge_statistics([torch.zeros(4, 3), torch.zeros(4, 2)])
    with pytest.raises(ValueError, match="must return a tensor of shape"):
        DomainNormalizer(DOMAINS, sync=lambda s: s[:, :2]).multipliers_batched(*make_batch(0))
