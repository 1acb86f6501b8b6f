"""Modes dn / observe / fixed / frozen, bounds, validation, state round trip and diagnostics."""

import json
import math

import pytest
import torch
from dn_batches import DOMAINS, make_batch, ragged

from dnmopd.core import DomainNormalizer


def spread_batch(seed, spreads=(0.5, 1.0, 3.0)):
    return make_batch(seed, spreads=dict(zip(DOMAINS, spreads, strict=True)))


def test_dn_applies_the_measured_factor():
    weights, diag = DomainNormalizer(DOMAINS).multipliers_batched(*spread_batch(0))
    for i, d in enumerate(DOMAINS):
        assert weights[i].item() == pytest.approx(diag.domains[d].factor)
        assert diag.domains[d].applied == diag.domains[d].factor
    assert weights[0] > 1 > weights[2] and 0.25 <= weights.min() and weights.max() <= 4


def test_observe_applies_one_but_measures_the_same_factors():
    batch = spread_batch(1)
    _, dn = DomainNormalizer(DOMAINS).multipliers_batched(*batch)
    weights, observed = DomainNormalizer(DOMAINS, mode="observe").multipliers_batched(*batch)
    assert torch.equal(weights, torch.ones(3))
    assert {d: x.factor for d, x in observed.domains.items()} == {d: x.factor for d, x in dn.domains.items()}


def test_fixed_applies_constants_and_still_measures():
    constants = {"math": 2.009, "code": 0.811, "ifeval": 0.341}  # the 4B frozen update-0 control
    normalizer = DomainNormalizer(DOMAINS, mode="fixed", fixed=constants)
    weights, diag = normalizer.multipliers_batched(*spread_batch(2))
    assert weights.tolist() == pytest.approx([2.009, 0.811, 0.341])
    assert diag.domains["math"].factor != 2.009 and diag.domains["math"].applied == 2.009


@pytest.mark.parametrize(
    "kwargs, message",
    [({"mode": "fixed", "fixed": {"math": 2.0, "code": 1.0}}, "missing for registered domains"),
     ({"mode": "fixed", "fixed": {"math": 5.0, "code": 1.0, "ifeval": 1.0}}, "outside bounds"),
     ({"mode": "fixed"}, "needs a non-empty"),
     ({"mode": "dn", "fixed": {"math": 1.0}}, "only allowed with mode 'fixed'")],
)
def test_fixed_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DomainNormalizer(DOMAINS, **kwargs)


def test_fixed_discovered_domain_without_constant():
    normalizer = DomainNormalizer(mode="fixed", fixed={"math": 2.0})
    with pytest.raises(ValueError, match="no fixed multiplier for domain 'code'"):
        normalizer.multipliers([("math", torch.randn(5)), ("code", torch.randn(5))])


def test_frozen_holds_the_first_measurement():
    normalizer = DomainNormalizer(DOMAINS, mode="frozen")
    first, _ = normalizer.multipliers_batched(*spread_batch(3))
    second, diag = normalizer.multipliers_batched(*spread_batch(4, spreads=(3.0, 1.0, 0.2)))
    assert torch.equal(first, second)
    assert diag.domains["math"].factor != first[0].item()
    assert normalizer.state_dict()["frozen_step"] == {"math": 0, "code": 0, "ifeval": 0}


def test_frozen_waits_for_a_measurable_batch():
    normalizer = DomainNormalizer(DOMAINS, mode="frozen")
    g = torch.Generator().manual_seed(0)
    first = [("math", torch.randn(50, generator=g) * 0.3), ("code", torch.randn(50, generator=g)),
             ("ifeval", torch.tensor([4.0]))]
    weights, _ = normalizer.multipliers(first)
    assert weights["ifeval"] == 1.0 and "ifeval" not in normalizer.frozen
    second = [("math", torch.randn(50, generator=g)), ("code", torch.randn(50, generator=g)),
              ("ifeval", torch.randn(20, generator=g) * 3)]
    weights, diag = normalizer.multipliers(second)
    assert weights["ifeval"] == diag.domains["ifeval"].factor
    assert normalizer.state_dict()["frozen_step"] == {"math": 0, "code": 0, "ifeval": 1}


def test_state_dict_json_round_trip_resumes_frozen_values_and_step():
    normalizer = DomainNormalizer(DOMAINS, mode="frozen")
    normalizer.multipliers_batched(*spread_batch(5))
    state = json.loads(json.dumps(normalizer.state_dict()))
    resumed = DomainNormalizer(DOMAINS, mode="frozen")
    resumed.load_state_dict(state)
    batch = spread_batch(6, spreads=(2.0, 2.0, 0.1))
    expected, expected_diag = normalizer.multipliers_batched(*batch)
    got, got_diag = resumed.multipliers_batched(*batch)
    assert torch.equal(expected, got) and got_diag.step == expected_diag.step == 1


def test_load_into_a_different_mode_is_refused():
    state = DomainNormalizer(DOMAINS, mode="frozen").state_dict()
    with pytest.raises(ValueError, match="saved in mode 'frozen'"):
        DomainNormalizer(DOMAINS, mode="dn").load_state_dict(state)


def wide_and_narrow_pairs():
    """math: narrow and many tokens; ifeval: wide and few tokens (raw factors far outside [0.25, 4])."""
    g = torch.Generator().manual_seed(8)
    return [("math", torch.randn(400, generator=g) * 0.01), ("code", torch.randn(400, generator=g)),
            ("ifeval", torch.randn(10, generator=g) * 60)]


@pytest.mark.parametrize("bounds", [(0.5, 2.0), (1.0, 1.0)])
def test_configurable_bounds(bounds):
    weights, diag = DomainNormalizer(DOMAINS, bounds=bounds).multipliers(wide_and_narrow_pairs())
    assert weights["math"] == bounds[1] and weights["ifeval"] == bounds[0]
    assert diag.domains["math"].clipped and diag.domains["ifeval"].clipped


def test_unbounded_clipping_is_disabled():
    weights, diag = DomainNormalizer(DOMAINS, bounds=(0.0, math.inf)).multipliers(wide_and_narrow_pairs())
    assert weights["math"] > 4 and weights["ifeval"] < 0.25
    assert not any(d.clipped for d in diag.domains.values())


@pytest.mark.parametrize("bounds", [(2.0, 1.0), (-0.1, 4.0), (float("nan"), 4.0), (0.25,)])
def test_invalid_bounds(bounds):
    with pytest.raises(ValueError, match="bounds"):
        DomainNormalizer(DOMAINS, bounds=bounds)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [({"mode": "per_domain_scale"}, ValueError, "mode must be one of"),
     ({"domains": ("math", "math")}, ValueError, "unique"),
     ({"domains": ()}, ValueError, "must not be empty"),
     ({"domains": None, "sync": True}, ValueError, "explicit domains"),
     ({"sync": "yes"}, TypeError, "sync must be")],
)
def test_invalid_arguments(kwargs, error, message):
    kwargs = {"domains": DOMAINS, **kwargs}
    with pytest.raises(error, match=message):
        DomainNormalizer(**kwargs)


def test_diagnostics_serialize_and_step_counts():
    normalizer = DomainNormalizer(DOMAINS)
    steps = [normalizer.multipliers_batched(*spread_batch(s))[1].step for s in range(3)]
    assert steps == [0, 1, 2]
    _, diag = normalizer.multipliers(ragged(*spread_batch(9)))
    json.dumps(diag.to_dict())
    assert set(diag.to_dict()["domains"]) == set(DOMAINS)


def test_to_metrics_keys():
    pairs = [(d, torch.randn(200)) for d in DOMAINS]
    _, diag = DomainNormalizer(DOMAINS).multipliers(pairs)
    metrics = diag.to_metrics()
    assert metrics["dn/global_tokens"] == 600.0
    for d in DOMAINS:
        for key in ("tokens", "std", "raw_factor", "factor", "applied", "clipped"):
            assert isinstance(metrics[f"dn/{d}/{key}"], float)
