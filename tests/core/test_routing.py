"""Teacher routing: score validation, label/single/pool/dynamic targets, mixtures and config refusals."""

import math

import pytest
import torch

from dnmopd.core import SENTINEL, Router, RoutingConfig, ScoreError
from dnmopd.core.routing import argmin_name, mean_scores, mixture_logp, pool_logp, response_mask, validated_rows

TEACHERS = ["code_teacher", "ifeval_teacher", "math_teacher"]
LABEL_MAP = {"default": "code_teacher", "math": "math_teacher", "code": "code_teacher", "ifeval": "ifeval_teacher"}


def scores(length=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {t: -torch.rand(length, generator=g) * (i + 1) for i, t in enumerate(TEACHERS)}


def router(rule, **kwargs):
    if rule == "label":
        kwargs.setdefault("label_map", LABEL_MAP)
    return Router(RoutingConfig(rule=rule, teachers=TEACHERS, **kwargs))


def test_validated_rows_accepts_complete_scores():
    rows = validated_rows(scores(), TEACHERS, 5)
    assert set(rows) == set(TEACHERS) and all(r.dtype == torch.float32 for r in rows.values())


@pytest.mark.parametrize(
    "change, message",
    [(lambda s: s.pop("math_teacher"), "missing \\['math_teacher'\\]"),
     (lambda s: s.update(extra=torch.zeros(5)), "extra \\['extra'\\]"),
     (lambda s: s.update(code_teacher=torch.zeros(4)), "row shape \\(4,\\)"),
     (lambda s: s["code_teacher"].__setitem__(2, float("nan")), "non-finite log-prob at 2"),
     (lambda s: s["math_teacher"].__setitem__(0, SENTINEL), "failure sentinel at 0"),
     (lambda s: s.update(code_teacher=None), "no scores")],
)
def test_validated_rows_refusals(change, message):
    per_teacher = scores()
    change(per_teacher)
    with pytest.raises(ScoreError, match=message):
        validated_rows(per_teacher, TEACHERS, 5)


def test_response_mask_rules():
    assert response_mask(None, 3).tolist() == [True] * 3
    assert response_mask(torch.tensor([1, 0, 1]), 3).tolist() == [True, False, True]
    with pytest.raises(ScoreError, match="shape"):
        response_mask(torch.ones(2), 3)
    with pytest.raises(ScoreError, match="empty response mask"):
        response_mask(torch.zeros(3), 3)


def test_mean_scores_and_argmin_with_alphabetical_ties():
    rows = {"b": torch.tensor([-1.0, -3.0]), "a": torch.tensor([-2.0, -2.0]), "c": torch.tensor([0.0, -9.0])}
    means = mean_scores(rows, torch.tensor([True, True]))
    assert means == {"b": -2.0, "a": -2.0, "c": -4.5}
    assert argmin_name(means) == "c"
    assert argmin_name({"b": -2.0, "a": -2.0}) == "a"
    assert mean_scores(rows, torch.tensor([True, False]))["c"] == 0.0
    with pytest.raises(ScoreError, match="non-finite"):
        argmin_name({"a": float("nan"), "b": 1.0})
    with pytest.raises(ScoreError, match="no teacher scores"):
        argmin_name({})


def test_pool_is_the_log_of_the_uniform_mixture():
    rows = scores(seed=1)
    expected = [math.log(sum(math.exp(float(rows[t][i])) for t in TEACHERS) / 3) for i in range(5)]
    assert pool_logp(rows).tolist() == pytest.approx(expected, rel=1e-6)
    uniform = mixture_logp(rows, {t: 1 / 3 for t in TEACHERS})
    assert torch.allclose(uniform, pool_logp(rows), atol=1e-6)


def test_one_hot_mixture_is_that_teacher_exactly():
    rows = scores(seed=2)
    one_hot = mixture_logp(rows, {"code_teacher": 0.0, "ifeval_teacher": 1.0, "math_teacher": 0.0})
    assert torch.equal(one_hot, rows["ifeval_teacher"])


@pytest.mark.parametrize("weights", [{"code_teacher": 0.5, "ifeval_teacher": 0.6, "math_teacher": -0.1},
                                     {"code_teacher": 0.5, "ifeval_teacher": 0.4}])
def test_invalid_mixture_weights(weights):
    with pytest.raises(ValueError, match="mixture weights"):
        mixture_logp(scores(), weights)


def test_label_routes_by_domain_and_needs_one_teacher():
    r = router("label")
    per_teacher = scores()
    for domain, teacher in [("math", "math_teacher"), ("ifeval", "ifeval_teacher"), ("code", "code_teacher"),
                            ("poetry", "code_teacher"), (None, "code_teacher")]:
        assert r.teachers_needed(domain) == (teacher,)
        target, name = r.target(domain, {teacher: per_teacher[teacher]}, 5)
        assert name == teacher and torch.equal(target, per_teacher[teacher])


def test_single_teacher_routes_everything_to_it():
    r = router("single", teacher="math_teacher")
    for domain in ("math", "code", "ifeval"):
        assert r.teachers_needed(domain) == ("math_teacher",)
        assert r.target(domain, scores(), 5)[1] == "math_teacher"


def test_pool_and_dynamic_targets():
    per_teacher = scores(seed=3)
    target, name = router("pool").target("math", per_teacher, 5)
    assert name == "pool" and torch.allclose(target, pool_logp(per_teacher))
    mask = torch.tensor([True, True, False, True, True])
    target, name = router("dynamic").target("math", per_teacher, 5, mask)
    assert name == argmin_name(mean_scores(per_teacher, mask))
    assert torch.equal(target, per_teacher[name])
    assert router("pool").teachers_needed("math") == tuple(sorted(TEACHERS))


def test_a_failed_teacher_score_stops_the_batch():
    per_teacher = scores()
    per_teacher["ifeval_teacher"] = None
    with pytest.raises(ScoreError, match="ifeval_teacher"):
        router("pool").target("math", per_teacher, 5)
    with pytest.raises(ScoreError, match="ifeval_teacher"):
        router("label").target("ifeval", per_teacher, 5)
    # a teacher the label route does not need may fail without harm
    assert router("label").target("math", per_teacher, 5)[1] == "math_teacher"


@pytest.mark.parametrize(
    "kwargs, message",
    [({"rule": "ensemble"}, "routing.rule"),
     ({"rule": "label", "label_map": {"math": "math_teacher"}}, "'default'"),
     ({"rule": "label", "label_map": {"default": "nobody"}}, "unregistered"),
     ({"rule": "pool", "label_map": LABEL_MAP}, "only used by rule label"),
     ({"rule": "single", "teacher": "nobody"}, "routing.teacher must be"),
     ({"rule": "dynamic", "teacher": "math_teacher"}, "only used by rule single"),
     ({"rule": "pool", "teachers": ["math_teacher"]}, "at least two"),
     ({"rule": "label", "teachers": ["a", "a"], "label_map": {"default": "a"}}, "distinct")],
)
def test_config_refusals(kwargs, message):
    kwargs.setdefault("teachers", TEACHERS)
    with pytest.raises(ValueError, match=message):
        RoutingConfig(**kwargs)
