import pytest

from dnmopd.eval.catalog import load_catalog, prepare
from dnmopd.eval.protocol import SUITES


@pytest.fixture(scope="session")
def sample_data(tmp_path_factory):
    """Catalogs of every suite built from the samples shipped with dnmopd."""
    root = tmp_path_factory.mktemp("eval-data")
    prepare(list(SUITES), root, samples=True, progress=lambda _: None)
    return root


@pytest.fixture(scope="session")
def catalogs(sample_data):
    return {suite: load_catalog(suite, sample_data) for suite in SUITES}


@pytest.fixture(scope="session", autouse=True)
def _launch_on_path():
    """`launch/evaluate.py` importable as `launch_evaluate` (launch/ is not a package)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "launch" / "evaluate.py"
    spec = importlib.util.spec_from_file_location("launch_evaluate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["launch_evaluate"] = module
    spec.loader.exec_module(module)
