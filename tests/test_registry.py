"""Classes chosen by name: the backends of the rollout engine and the teachers, and the run modes."""

import json
import subprocess
import sys

import pytest

from dnmopd.registry import LazyRegistry
from dnmopd.rollout import rollout_class
from dnmopd.teachers import teacher_class
from dnmopd.trainer.modes.base import mode_class


def test_each_name_gives_its_class():
    from dnmopd.rollout.vllm import VLLMRollout
    from dnmopd.teachers.inprocess import InProcessTeacher
    from dnmopd.trainer.modes.grpo import GRPOMode

    assert rollout_class("vllm") is VLLMRollout and teacher_class("inprocess") is InProcessTeacher
    assert mode_class("grpo") is GRPOMode


@pytest.mark.parametrize("registry,kind,names", [
    (rollout_class, "rollout backend", "inprocess, sglang, vllm"),
    (teacher_class, "teacher backend", "inprocess, sglang, vllm"),
    (mode_class, "run mode", "opd, grpo, sft"),
])
def test_an_unknown_name_is_refused_with_the_kind_and_the_valid_names(registry, kind, names):
    with pytest.raises(ValueError, match=f"^{kind} 'trt': use one of {names}$"):
        registry("trt")


def test_a_class_is_imported_only_when_asked_for():
    code = ("import sys; from dnmopd.rollout import rollout_class; from dnmopd.teachers import teacher_class; "
            "before = {m for m in ('dnmopd.rollout.sglang', 'dnmopd.teachers.vllm') if m in sys.modules}; "
            "rollout_class('sglang'); print(sorted(before), 'dnmopd.rollout.sglang' in sys.modules, "
            "'dnmopd.teachers.vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "True", "False"]


def test_a_registry_names_its_entries_in_registration_order():
    registry = LazyRegistry("codec", {"zstd": "json:JSONDecoder", "gzip": "json:JSONEncoder"})
    assert registry.names == ("zstd", "gzip")
    assert registry("gzip") is json.JSONEncoder
