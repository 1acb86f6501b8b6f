"""Rules of the package layout that a reader relies on."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = [*sorted((ROOT / "dnmopd").rglob("*.py")), *sorted((ROOT / "launch").rglob("*.py"))]
PROCESS_GROUPS = ROOT / "dnmopd" / "student" / "parallel.py"


def parallel_state_uses(tree: ast.AST) -> list[int]:
    """Lines that import megatron's parallel_state, or name it (`mpu.get_...`, `parallel_state.get_...`)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (
                "parallel_state" in node.module or any(a.name == "parallel_state" for a in node.names)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any("parallel_state" in a.name for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "parallel_state":
            lines.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "parallel_state":
            lines.append(node.lineno)
    return lines


def test_only_student_parallel_touches_megatron_parallel_state():
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in SOURCES if path != PROCESS_GROUPS
                 for line in parallel_state_uses(ast.parse(path.read_text(), str(path)))]
    assert offenders == [], f"megatron's parallel_state is used outside student/parallel.py: {offenders}"
    assert parallel_state_uses(ast.parse(PROCESS_GROUPS.read_text()))  # the rule's home, and the scan sees it


def test_the_scan_sees_every_form_of_use():
    for code in ("from megatron.core import parallel_state", "from megatron.core.parallel_state import get_x",
                 "import megatron.core.parallel_state as mpu", "import megatron.core as m\nm.parallel_state.get()"):
        assert parallel_state_uses(ast.parse(code)), code
