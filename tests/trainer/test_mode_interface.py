"""The mode interface: modes see the run only through their ModeContext, never the Trainer; every metric name a
mode or the loop reports is declared."""

import ast
from pathlib import Path

import pytest

from dnmopd.trainer.context import ModeContext
from dnmopd.trainer.modes.base import Mode, mode_class

MODES_DIR = Path(__import__("dnmopd.trainer.modes", fromlist=["x"]).__file__).parent


@pytest.mark.parametrize("path", sorted(MODES_DIR.glob("*.py")), ids=lambda p: p.name)
def test_modes_never_import_or_receive_the_trainer(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module not in ("dnmopd.trainer.trainer", "dnmopd.trainer.entry"), path.name
        if isinstance(node, ast.Name | ast.arg):
            assert getattr(node, "id", getattr(node, "arg", None)) != "trainer", f"{path.name}:{node.lineno}"
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            assert [a.arg for a in node.args.args] == ["self", "ctx"], f"{path.name}: {node.name}"


@pytest.mark.parametrize("name", ["opd", "grpo", "sft"])
def test_every_mode_is_a_mode_over_a_context(name):
    cls = mode_class(name)
    assert issubclass(cls, Mode) and cls.__init__.__code__.co_varnames[:2] == ("self", "ctx")
    fields = set(ModeContext.__dataclass_fields__)
    assert {"next_prompts", "collector", "method", "any_rank", "sum_over_dp", "logp", "run_once"} <= fields
