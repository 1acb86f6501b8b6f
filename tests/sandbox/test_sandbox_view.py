"""What a sandboxed Python program can see: the minimal runtime view (standard library only, no project
package, no label) at every level that confines files; a program that reads every readable file finds
none of the labels, sources or secrets that are outside its view."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from sandbox_helpers import levels_here, runtime_for, token

import dnmopd
from dnmopd.sandbox import Limits, PythonRuntime, run_python

PACKAGE = Path(dnmopd.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]

SEARCH = """\
import json, os, stat, sys
request = json.loads(sys.stdin.read())
needles = [n.encode() for n in request["needles"]]
found, seen, read = set(), set(), 0

def search(path):
    global read
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) in seen:
            return
        seen.add((info.st_dev, info.st_ino))
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return
    read += len(data)
    found.update(i for i, n in enumerate(needles) if n in data)

for root in request["roots"] + [os.getcwd(), os.path.dirname(os.__file__)]:
    for top, dirs, names in os.walk(root, onerror=lambda error: None):
        if top == "/":
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
        for name in names:
            search(os.path.join(top, name))
for path in request["files"]:
    search(path)
try:
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
except OSError:
    pids = []
for pid in pids + ["1", "self", str(os.getppid())]:
    for name in ("environ", "cmdline"):
        search(f"/proc/{pid}/{name}")
found.update(i for i, n in enumerate(needles) if n in repr(sorted(os.environ.items())).encode())
print(json.dumps({"found": sorted(found), "files": len(seen), "bytes": read}))
"""
ROOTS = ["/", "/usr", "/lib", "/lib64", "/bin", "/etc", "/home", "/root", "/opt", "/var", "/tmp", "/work", "/srv",
         "/mnt", str(PACKAGE.parent), str(ROOT)]


def needles(tmp_path: Path, monkeypatch) -> tuple[dict[str, str], list[str]]:
    """Strings that must stay out of reach, by where they live, and the files that hold them."""
    planted = tmp_path / "labels.jsonl"
    secret = token()
    planted.write_text(secret + "-file")
    planted.chmod(0o644)
    tmp_path.chmod(0o755)
    monkeypatch.setenv("DNMOPD_TEST_LABEL_SECRET", secret + "-env")
    wanted = {"a file outside the view": secret + "-file", "the caller's environment": secret + "-env",
              "the installed dnmopd sources": (PACKAGE / "verifiers" / "code.py").read_text().splitlines()[0],
              "the checkout's reference solutions": (ROOT / "tests/fixtures/data/code_solutions.json").read_text()[:60]}
    files = [str(planted), str(PACKAGE / "verifiers" / "code.py"),
             str(ROOT / "tests" / "fixtures" / "data" / "code_solutions.json")]
    for data in sorted((PACKAGE / "data" / "samples").rglob("*.jsonl")):  # the installed sample labels
        wanted[f"installed {data.relative_to(PACKAGE)}"] = data.read_text()[:80]
        files.append(str(data))
    assert any(name.startswith("installed data/samples/teacher/code") for name in wanted)
    return wanted, files


CONTROL = "def makedirs(name, mode=0o777, exist_ok=False):"  # in the standard library: must be found


@pytest.mark.parametrize("level", levels_here())
def test_a_program_reading_every_readable_file_finds_no_label(level, tmp_path, monkeypatch):
    if level == "seccomp":
        pytest.skip("the seccomp level confines no path: world-readable files stay readable there (documented)")
    hidden, files = needles(tmp_path, monkeypatch)
    names = [*hidden, "control"]
    request = {"needles": [*hidden.values(), CONTROL], "roots": [*ROOTS, str(tmp_path)], "files": files}
    result = run_python(SEARCH, stdin=json.dumps(request), runtime=runtime_for(level),
                        limits=Limits(wall_time_s=120, cpu_time_s=120), isolation=level)
    assert result.exit_code == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert [names[i] for i in report["found"]] == ["control"], report
    assert report["files"] > 500, report  # the walk did read the standard library
    assert Path(files[0]).read_text() == hidden["a file outside the view"]  # and left everything as it was


@pytest.mark.parametrize("level", levels_here())
def test_only_the_standard_library_is_importable(level):
    program = textwrap.dedent("""
        import importlib, json, sys
        result = {}
        for name in ("json", "collections", "ctypes", "unittest.mock", "dnmopd", "numpy", "pip", "torch"):
            try:
                importlib.import_module(name)
                result[name] = "imported"
            except ImportError as error:
                result[name] = type(error).__name__
        print(json.dumps(result))
        """)
    result = run_python(program, runtime=runtime_for(level), isolation=level)
    imported = json.loads(result.stdout)
    assert {k: v for k, v in imported.items() if v == "imported"}.keys() == {"json", "collections", "ctypes",
                                                                            "unittest.mock"}, imported


def test_the_view_is_the_base_interpreter_and_its_stdlib():
    runtime = PythonRuntime.of()
    assert ".venv" not in runtime.executable and not any(".venv" in path for path in runtime.read_only)
    assert any(path.endswith("site-packages") for path in runtime.hidden)
    assert not any(str(PACKAGE).startswith(path) or path.startswith(str(PACKAGE)) for path in runtime.read_only)


def test_a_requested_distribution_is_importable_and_nothing_else():
    runtime = PythonRuntime.of(None, ("numpy",))
    program = "import numpy\nprint(int(numpy.arange(5).sum()))\ntry:\n    import dnmopd\nexcept ImportError:\n" \
              "    print('no dnmopd')\n"
    result = run_python(program, runtime=runtime)
    assert result.stdout == "10\nno dnmopd\n", result.stderr[-2000:]
    with pytest.raises(ValueError, match="may not import dnmopd"):
        PythonRuntime.of(None, ("dnmopd",))
    with pytest.raises(ValueError, match="no installed distribution"):
        PythonRuntime.of(None, ("no-such-distribution-" + token(),))


def test_the_environment_holds_nothing_of_the_caller(monkeypatch):
    monkeypatch.setenv("DNMOPD_TEST_ENV_SECRET", "leaked")
    result = run_python("import os, json\nprint(json.dumps(dict(os.environ)))")
    environment = json.loads(result.stdout)
    assert "DNMOPD_TEST_ENV_SECRET" not in environment and set(environment) <= {
        "PATH", "HOME", "TMPDIR", "LANG", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LC_CTYPE"}
    assert os.environ["DNMOPD_TEST_ENV_SECRET"] == "leaked"
