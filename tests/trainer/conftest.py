import pytest

from dnmopd.examples.demo_models import build_demo_models


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory):
    """The CPU demo's tiny tokenizer, student and three teachers, built once per test session."""
    return build_demo_models(tmp_path_factory.mktemp("demo-models"))
