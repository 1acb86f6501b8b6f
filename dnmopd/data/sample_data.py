"""The embedded sample data (``data/samples`` in the repository, ``dnmopd/data/samples`` when installed).

Four small files in the release schema (16 math + 16 code + 16 IF student rows; 32 / 24 / 40 teacher-pool
rows) and their ``MANIFEST.json``: the default dataset of the CPU demo and of the tests.
"""

from __future__ import annotations

from pathlib import Path

from dnmopd.data.manifest import RELEASE_LAYOUT

SAMPLE_DIR = Path(__file__).resolve().parent / "samples"


def sample_dir() -> Path:
    """The installed sample folder; a clear error if the package was built without it."""
    if not (SAMPLE_DIR / "MANIFEST.json").is_file():
        raise FileNotFoundError(
            f"{SAMPLE_DIR} holds no sample data: the package was built without it (pyproject.toml "
            f"[tool.scikit-build] wheel.packages must map \"dnmopd/data/samples\" = \"data/samples\")")
    return SAMPLE_DIR


def sample_file(rel: str) -> Path:
    """One of the four sample files, e.g. ``sample_file("student/train_3domain.jsonl")``."""
    if rel not in RELEASE_LAYOUT:
        raise KeyError(f"no sample file {rel!r} (files: {', '.join(RELEASE_LAYOUT)})")
    return sample_dir() / rel
