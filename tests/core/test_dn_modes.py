"""Multiplier modes dn / observe / fixed / frozen, bounds, validation, state round trip and diagnostics."""

import json
import math

import pytest
import torch
from dn_batches import DOMAINS, make_batch, multipliers, padded

from dnmopd.core import DomainNormalizer


def spread_batch(seed, spreads=(0.5, 1.0, 3.0)):
    return make_batch(seed, spreads=dict(zip(DOMAINS, spreads, strict=True)))


def test_dn_applies_the_measured_factor():
    weights, diag = multipliers(spread_batch(0))
    for i, d in enumerate(DOMAINS):
        assert weights[i] == pytest.approx(diag.domains[d].factor)
        assert diag.domains[d].applied == diag.domains[d].factor
    assert weights[0] > 1 > weights[2] and 0.25 <= min(weights) and max(weights) <= 4


def test_observe_applies_one_but_measures_the_same_factors():
    batch = spread_batch(1)
    _, dn = multipliers(batch)
    weights, observed = multipliers(batch, DomainNormalizer(DOMAINS, multipliers="observe"))
    assert weights == [1.0, 1.0, 1.0] and observed.multipliers == "observe"
    assert {d: x.factor for d, x in observed.domains.items()} == {d: x.factor for d, x in dn.domains.items()}


def test_fixed_applies_constants_and_still_measures():
    constants = {"math": 2.009, "code": 0.811, "ifeval": 0.341}  # the 4B frozen update-0 control
    normalizer = DomainNormalizer(DOMAINS, multipliers="fixed", fixed=constants)
    weights, diag = multipliers(spread_batch(2), normalizer)
    assert weights == pytest.approx([2.009, 0.811, 0.341])
    assert diag.domains["math"].factor != 2.009 and diag.domains["math"].applied == 2.009


@pytest.mark.parametrize(
    "kwargs, message",
    [({"multipliers": "fixed", "fixed": {"math": 2.0, "code": 1.0}}, "missing for registered domains"),
     ({"multipliers": "fixed", "fixed": {"math": 5.0, "code": 1.0, "ifeval": 1.0}}, "outside bounds"),
     ({"multipliers": "fixed"}, "needs a non-empty"),
     ({"multipliers": "dn", "fixed": {"math": 1.0}}, "only allowed with multipliers 'fixed'")],
)
def test_fixed_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DomainNormalizer(DOMAINS, **kwargs)


def test_frozen_holds_the_first_measurement():
    normalizer = DomainNormalizer(DOMAINS, multipliers="frozen")
    first, _ = multipliers(spread_batch(3), normalizer)
    second, diag = multipliers(spread_batch(4, spreads=(3.0, 1.0, 0.2)), normalizer)
    assert first == second
    assert diag.domains["math"].factor != first[0]
    assert normalizer.state_dict()["frozen_step"] == {"math": 0, "code": 0, "ifeval": 0}


def test_frozen_waits_for_a_measurable_batch():
    normalizer = DomainNormalizer(DOMAINS, multipliers="frozen")
    g = torch.Generator().manual_seed(0)
    first = [("math", torch.randn(50, generator=g) * 0.3), ("code", torch.randn(50, generator=g)),
             ("ifeval", torch.tensor([4.0]))]
    weights, _ = multipliers(padded(first), normalizer)
    assert weights[2] == 1.0 and "ifeval" not in normalizer.frozen
    second = [("math", torch.randn(50, generator=g)), ("code", torch.randn(50, generator=g)),
              ("ifeval", torch.randn(20, generator=g) * 3)]
    weights, diag = multipliers(padded(second), normalizer)
    assert weights[2] == diag.domains["ifeval"].factor
    assert normalizer.state_dict()["frozen_step"] == {"math": 0, "code": 0, "ifeval": 1}


def test_state_dict_json_round_trip_resumes_frozen_values_and_step():
    normalizer = DomainNormalizer(DOMAINS, multipliers="frozen")
    multipliers(spread_batch(5), normalizer)
    state = json.loads(json.dumps(normalizer.state_dict()))
    resumed = DomainNormalizer(DOMAINS, multipliers="frozen")
    resumed.load_state_dict(state)
    batch = spread_batch(6, spreads=(2.0, 2.0, 0.1))
    expected, expected_diag = multipliers(batch, normalizer)
    got, got_diag = multipliers(batch, resumed)
    assert expected == got and got_diag.step == expected_diag.step == 1


def test_a_state_saved_before_the_rename_still_loads():
    normalizer = DomainNormalizer(DOMAINS, multipliers="frozen")
    multipliers(spread_batch(5), normalizer)
    state = normalizer.state_dict()
    state["mode"] = state.pop("multipliers")  # what checkpoints written before `multipliers` hold
    resumed = DomainNormalizer(DOMAINS, multipliers="frozen")
    resumed.load_state_dict(state)
    assert resumed.frozen == normalizer.frozen and resumed.step == 1


def test_load_into_different_multipliers_is_refused():
    state = DomainNormalizer(DOMAINS, multipliers="frozen").state_dict()
    with pytest.raises(ValueError, match="saved with multipliers 'frozen'"):
        DomainNormalizer(DOMAINS, multipliers="dn").load_state_dict(state)


def wide_and_narrow_batch():
    """math: narrow and many tokens; ifeval: wide and few tokens (raw factors far outside [0.25, 4])."""
    g = torch.Generator().manual_seed(8)
    return padded([("math", torch.randn(400, generator=g) * 0.01), ("code", torch.randn(400, generator=g)),
                   ("ifeval", torch.randn(10, generator=g) * 60)])


@pytest.mark.parametrize("bounds", [(0.5, 2.0), (1.0, 1.0)])
def test_configurable_bounds(bounds):
    weights, diag = multipliers(wide_and_narrow_batch(), DomainNormalizer(DOMAINS, bounds=bounds))
    assert weights[0] == bounds[1] and weights[2] == bounds[0]
    assert diag.domains["math"].clipped and diag.domains["ifeval"].clipped


def test_unbounded_clipping_is_disabled():
    weights, diag = multipliers(wide_and_narrow_batch(), DomainNormalizer(DOMAINS, bounds=(0.0, math.inf)))
    assert weights[0] > 4 and weights[2] < 0.25
    assert not any(d.clipped for d in diag.domains.values())


@pytest.mark.parametrize("bounds", [(2.0, 1.0), (-0.1, 4.0), (float("nan"), 4.0), (0.25,)])
def test_invalid_bounds(bounds):
    with pytest.raises(ValueError, match="bounds"):
        DomainNormalizer(DOMAINS, bounds=bounds)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"multipliers": "per_domain_scale"}, "multipliers must be one of"),
     ({"domains": ("math", "math")}, "unique"),
     ({"domains": ()}, "must not be empty"),
     ({"domains": ("math", "")}, "non-empty strings")],
)
def test_invalid_arguments(kwargs, message):
    kwargs = {"domains": DOMAINS, **kwargs}
    with pytest.raises(ValueError, match=message):
        DomainNormalizer(**kwargs)


def test_diagnostics_serialize_and_step_counts():
    normalizer = DomainNormalizer(DOMAINS)
    steps = [multipliers(spread_batch(s), normalizer)[1].step for s in range(3)]
    assert steps == [0, 1, 2]
    _, diag = multipliers(spread_batch(9), normalizer)
    serialized = json.loads(json.dumps(diag.to_dict()))
    assert serialized["multipliers"] == "dn" and set(serialized["domains"]) == set(DOMAINS)


def test_to_metrics_keys():
    _, diag = multipliers(padded([(d, torch.randn(200)) for d in DOMAINS]))
    metrics = diag.to_metrics()
    assert metrics["dn/global_tokens"] == 600.0
    for d in DOMAINS:
        for key in ("tokens", "std", "raw_factor", "factor", "applied", "clipped"):
            assert isinstance(metrics[f"dn/{d}/{key}"], float)
