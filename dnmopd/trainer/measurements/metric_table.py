"""Named metrics: what a rank measured, how the data-parallel ranks' values combine, and what each one means.

Every metric the trainer logs is declared once, in a `MetricTable` next to the code that measures it (the
update loop, the experience collector, the objectives, each mode); `docs/metrics.md` lists them all
(`python docs/gen_metrics.py`). A rank reports a plain dict `{name: value}`, and `reduce_metrics` combines
the ranks' dicts over the data-parallel group, by the reduction each name declares:

    sum     the ranks' values add up (counts; a loss already split into per-rank shares)
    mean    the value is a `Mean(total, count)`: totals and counts add up, then total / count, so a token or
            response mean is over the whole batch, never a mean of per-rank means (absent when count is 0)
    max     the largest value (an end time; the slowest rank's seconds)
    min     the smallest value (a start time)
    global  already the same on every rank (computed from all-reduced statistics): taken as it is

A name may hold placeholders (`accuracy/{domain}`, `teacher/{teacher}/failures`). Reporting an undeclared
name is an error, so no metric goes undocumented.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.distributed as dist

from dnmopd.trainer.collectives import active, all_reduce_max, all_reduce_sum

REDUCTIONS = ("sum", "mean", "max", "min", "global")


class Mean(NamedTuple):
    """A rank's part of a mean: its total and its count."""

    total: float
    count: float


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    """The metric's name; `{placeholder}` stands for one path component (a domain, a teacher, a phase)."""
    reduce: str
    """How the ranks' values combine: one of REDUCTIONS."""
    doc: str
    """What it measures, with its unit."""

    def __post_init__(self):
        if self.reduce not in REDUCTIONS:
            raise ValueError(f"metric {self.name}: reduce must be one of {REDUCTIONS}, got {self.reduce!r}")

    @property
    def pattern(self) -> re.Pattern:
        parts = re.split(r"\{[a-z_]+\}", self.name)
        return re.compile("[^/]+".join(re.escape(p) for p in parts) + r"\Z")


class MetricTable:
    """Declared metrics; `table | other` is their union (the first declaration of a name wins)."""

    def __init__(self, *specs: tuple[str, str, str] | MetricSpec):
        self.specs = tuple(s if isinstance(s, MetricSpec) else MetricSpec(*s) for s in specs)
        self._patterns = [(spec.pattern, spec) for spec in self.specs]

    def __or__(self, other: MetricTable) -> MetricTable:
        names = {s.name for s in self.specs}
        return MetricTable(*self.specs, *(s for s in other.specs if s.name not in names))

    def __iter__(self) -> Iterator[MetricSpec]:
        return iter(self.specs)

    def spec(self, key: str) -> MetricSpec:
        for pattern, spec in self._patterns:
            if pattern.match(key):
                return spec
        raise KeyError(f"metric {key!r} is not declared in any MetricTable (declare it where it is measured)")


def _union_keys(local: Iterable[str], group) -> list[str]:
    """Every rank's metric names, in first-seen order (ranks may miss a name, e.g. a domain they had no
    response of)."""
    if not active(group):
        return list(local)
    gathered: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, list(local), group=group)
    return list(dict.fromkeys(key for keys in gathered for key in keys))


def reduce_metrics(values: Mapping[str, float | Mean], table: MetricTable, group=None) -> dict[str, float]:
    """Combine every rank's `values` over `group` by each name's declared reduction (see the module doc).
    Every rank of the group must call it."""
    for key, value in values.items():
        kind = table.spec(key).reduce
        if (kind == "mean") != isinstance(value, Mean):
            raise TypeError(f"metric {key!r} reduces by {kind}: report " +
                            ("a Mean(total, count)" if kind == "mean" else f"a number, not {value!r}"))
    keys = _union_keys(values, group)
    kinds = {key: table.spec(key).reduce for key in keys}
    summed = [k for k in keys if kinds[k] in ("sum", "mean")]
    extreme = [k for k in keys if kinds[k] in ("max", "min")]
    sums = torch.tensor([x for k in summed for x in
                         (tuple(values.get(k, Mean(0.0, 0.0))) if kinds[k] == "mean" else (values.get(k, 0.0),))],
                        dtype=torch.float64)
    sign = {"max": 1.0, "min": -1.0}
    extremes = torch.tensor([sign[kinds[k]] * values[k] if k in values else -math.inf for k in extreme],
                            dtype=torch.float64)
    sums, extremes = all_reduce_sum(sums, group), all_reduce_max(extremes, group)
    reduced, position = {}, 0
    sum_of, extreme_of = {}, dict(zip(extreme, extremes.tolist(), strict=True))
    for key in summed:
        width = 2 if kinds[key] == "mean" else 1
        sum_of[key] = sums[position: position + width].tolist()
        position += width
    for key in keys:
        kind = kinds[key]
        if kind == "global":
            if key in values:
                reduced[key] = float(values[key])
        elif kind == "sum":
            reduced[key] = sum_of[key][0]
        elif kind == "mean":
            total, count = sum_of[key]
            if count > 0:
                reduced[key] = total / count
        elif math.isfinite(extreme_of[key]):
            reduced[key] = sign[kind] * extreme_of[key]
    return reduced
