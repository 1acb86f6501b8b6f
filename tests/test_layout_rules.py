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


def module_graph(sources: dict[str, str], packages: set[str]) -> dict[str, set[str]]:
    """{module: the modules its code imports}, anywhere in the module (inside functions too), among `sources`
    ({dotted name: source}; `packages` names those that are a package's __init__). `from a import b` is an
    import of the submodule a.b when there is one, else of a; a parent package's __init__, which Python runs
    first, counts only where it is imported."""
    graph = {}
    for name, source in sources.items():
        package = name if name in packages else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                edges |= {f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names}
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                    "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                edges.add(str(node.args[0].value))
        graph[name] = edges & sources.keys()
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules, or a module importing itself (Tarjan)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1 or node in graph[node]:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_cycle_inside_the_package():
    sources, packages = {}, set()
    for path in sorted((ROOT / "dnmopd").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if path.name == "__init__.py" else parts)
        sources[name] = path.read_text()
        if path.name == "__init__.py":
            packages.add(name)
    cycles = import_cycles(module_graph(sources, packages))
    assert cycles == [], f"import cycles inside dnmopd (imports inside functions count too): {cycles}"


def test_the_cycle_scan_sees_cycles_closed_inside_functions():
    sources = {"p": "", "p.a": "from p.b import thing\n", "p.b": "def f():\n    from p import c\n",
               "p.c": "import p.a\n", "p.d": "from p.a import x\n"}
    assert import_cycles(module_graph(sources, {"p"})) == [["p.a", "p.b", "p.c"]]
    assert import_cycles(module_graph({**sources, "p.c": ""}, {"p"})) == []
    relative = {"q": "", "q.x": "from . import y\n", "q.y": "from .x import z\n"}
    assert import_cycles(module_graph(relative, {"q"})) == [["q.x", "q.y"]]
    registry = {"r": "def get():\n    from r.impl import Impl\n", "r.impl": "from r import helper\n"}
    assert import_cycles(module_graph(registry, {"r"})) == [["r", "r.impl"]]  # a name from the package's __init__
    assert import_cycles(module_graph({**registry, "r.helper": ""}, {"r"})) == []  # a submodule of it
