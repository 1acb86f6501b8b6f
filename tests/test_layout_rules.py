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


def imported_modules(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every module that code in `package` imports, relative imports resolved;
    `from a import b` counts as both `a` and `a.b` (b may be a submodule)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            found.append((node.lineno, str(node.args[0].value)))
    return found


def imports_package(tree: ast.AST, package: str, target: str) -> list[int]:
    """Lines where code in `package` imports `target` or anything inside it."""
    return [line for line, name in imported_modules(tree, package) if name == target or name.startswith(target + ".")]


def test_rollout_and_teachers_do_not_import_each_other():
    """What both need (the in-process model, serving plumbing) lives below them, in dnmopd.hf and dnmopd.serving."""
    offenders = []
    for here, there in (("rollout", "teachers"), ("teachers", "rollout")):
        for path in sorted((ROOT / "dnmopd" / here).rglob("*.py")):
            package = ".".join(path.parent.relative_to(ROOT).parts)
            tree = ast.parse(path.read_text(), str(path))
            offenders += [f"{path.relative_to(ROOT)}:{line} imports dnmopd.{there}"
                          for line in imports_package(tree, package, f"dnmopd.{there}")]
    assert offenders == [], offenders


def test_the_import_scan_sees_every_form_of_import():
    package = "dnmopd.rollout"
    for code in ("import dnmopd.teachers.base", "import dnmopd.teachers as t", "from dnmopd.teachers import base",
                 "from dnmopd.teachers.inprocess import InProcessTeacher", "from dnmopd import teachers",
                 "from ..teachers import base", "from ..teachers.base import ScoreRequest", "from .. import teachers",
                 "def f():\n    from dnmopd.teachers.fleet import TeacherFleet",
                 "importlib.import_module('dnmopd.teachers.sglang')"):
        assert imports_package(ast.parse(code), package, "dnmopd.teachers"), code
    for code in ("from dnmopd.hf.inprocess import score_responses", "from . import base", "import dnmopd.teachersx",
                 "from .sampling import draw"):
        assert not imports_package(ast.parse(code), package, "dnmopd.teachers"), code
