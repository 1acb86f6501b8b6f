import pytest
from release_runs import train_and_release


@pytest.fixture(scope="session")
def trainer_run(tmp_path_factory):
    """`trainer_run(arch) -> run directory` of a short trainer run that exported `<run>/release` (one run per
    architecture and test session)."""
    runs = {}

    def run(arch: str):
        if arch not in runs:
            runs[arch] = train_and_release(tmp_path_factory.mktemp(f"release-{arch}"), arch, name=f"tiny-{arch}")
        return runs[arch]

    return run
