"""The embedded sample data (``data/samples`` in the repository, ``dnmopd/data/samples`` when installed).

Four small files in the release schema (16 math + 16 code + 16 IF student rows; 32 / 24 / 40 teacher-pool
rows; the IF rows are released rows) and their ``MANIFEST.json``: the default dataset of the CPU demo and of
the tests.
"""

from __future__ import annotations

from pathlib import Path

from dnmopd import CHECKOUT
from dnmopd.data.manifest import RELEASE_LAYOUT

SAMPLE_DIR = Path(__file__).resolve().parent / "samples"
CHECKOUT_SAMPLE_DIR = CHECKOUT / "data" / "samples"
SAMPLES_PREFIX = "samples:"
"""Names a file of the embedded sample data in a config's data paths: `samples:student/train_3domain.jsonl`."""


def sample_dir() -> Path:
    """The installed sample folder (or, run from a source checkout, its data/samples); a clear error if the
    package was built without it."""
    for folder in (SAMPLE_DIR, CHECKOUT_SAMPLE_DIR):
        if (folder / "MANIFEST.json").is_file():
            return folder
    raise FileNotFoundError(
        f"{SAMPLE_DIR} holds no sample data: the package was built without it (pyproject.toml "
        f"[tool.scikit-build] wheel.packages must map \"dnmopd/data/samples\" = \"data/samples\")")


def sample_file(rel: str) -> Path:
    """One of the four sample files, e.g. ``sample_file("student/train_3domain.jsonl")``."""
    if rel not in RELEASE_LAYOUT:
        raise KeyError(f"no sample file {rel!r} (files: {', '.join(RELEASE_LAYOUT)})")
    return sample_dir() / rel


def resolve_data_path(path: Path) -> Path:
    """`samples:<file>` names a file of the embedded sample data; other paths are used as given."""
    text = str(path)
    if text.startswith(SAMPLES_PREFIX):
        return sample_file(text[len(SAMPLES_PREFIX):])
    return path
