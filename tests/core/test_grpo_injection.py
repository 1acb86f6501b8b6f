"""GRPO group-normalized advantages, the bounded dynamic-sampling filter, and annealed injection."""

import statistics

import pytest
import torch

from dnmopd.core import (
    DynamicSamplingFilter,
    grpo_advantages,
    inject_constant_advantages,
    injection_constant,
    select_injection,
)


def test_grpo_advantages_match_the_unbiased_group_formula():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    adv = grpo_advantages(rewards, 4)
    for g in range(3):
        group = rewards[4 * g: 4 * g + 4].tolist()
        mean, std = statistics.fmean(group), statistics.stdev(group)
        expected = [(r - mean) / (std + 1e-6) for r in group]
        assert adv[4 * g: 4 * g + 4].tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert adv[8:].tolist() == [0.0] * 4  # a zero-variance group contributes nothing


@pytest.mark.parametrize("rewards, group, message",
                         [(torch.zeros(6), 4, "multiple of 4"), (torch.zeros(4), 1, "at least 2"),
                          (torch.tensor([1.0, float("nan")]), 2, "finite")])
def test_grpo_errors(rewards, group, message):
    with pytest.raises(ValueError, match=message):
        grpo_advantages(rewards, group)


def test_dynamic_sampling_keeps_varied_groups_and_releases_after_the_budget():
    f = DynamicSamplingFilter(target=2, max_generation_batches=2)
    flat, varied = torch.ones(4), torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert [f.keep(flat) for _ in range(4)] == [False] * 4  # budget 2 x 2 groups: all seen, none kept
    assert f.keep(flat) and f.keep(flat)  # beyond the budget: released unconditionally
    assert f.state_dict() == {"seen": 6, "kept": 2, "dropped": 4, "released": 2}
    assert f.keep(varied)  # a new rollout starts once the target was reached
    assert f.state_dict() == {"seen": 1, "kept": 1, "dropped": 0, "released": 0}
    resumed = DynamicSamplingFilter(target=2, max_generation_batches=2)
    resumed.load_state_dict(f.state_dict())
    assert resumed.keep(flat) is False and resumed.dropped == 1


def test_dynamic_sampling_validation():
    with pytest.raises(ValueError, match="must be >= 1"):
        DynamicSamplingFilter(target=0)


@pytest.mark.parametrize("update, expected", [(0, 1.0), (20, 0.5), (39, 0.025), (40, 0.0), (41, 0.0)])
def test_injection_constant_schedule(update, expected):
    assert injection_constant(update, 1.0, 40) == pytest.approx(expected)


@pytest.mark.parametrize("args", [(0, 0.0, 40), (0, 2.5, 40), (0, 1.0, 0), (-1, 1.0, 40)])
def test_injection_constant_validation(args):
    with pytest.raises(ValueError):
        injection_constant(*args)


def test_injection_selects_the_first_wrong_response_else_the_first():
    assert select_injection([True, False, True, False]) == 1
    assert select_injection([True, True]) == 0
    with pytest.raises(RuntimeError, match=r"missing correctness verdict for responses \[1\]"):
        select_injection([False, None])


def test_injected_advantages_are_the_constant_while_positive():
    adv = torch.tensor([0.3, -1.0, 2.0])
    assert inject_constant_advantages(adv, 0.5).tolist() == [0.5] * 3
    assert inject_constant_advantages(adv, 0.0) is adv
    assert inject_constant_advantages(adv, 0.025).tolist() == pytest.approx([0.025] * 3)
