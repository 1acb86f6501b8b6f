"""The pinned public source of each suite, and fetching it: staged, verified by sha256, renamed into place.

Hugging Face sources go through ``huggingface_hub`` and GitHub sources through plain HTTPS (a resumable
``.part`` file), both with the training data's download backends (``dnmopd.data.download``). A file is
only ever at its final path once its sha256 equals the pin; a present file that verifies is not fetched
again, a corrupt one is replaced.

The small catalogs shipped with the package (``dnmopd/eval/samples``) are described by ``SAMPLES.json``
in the same way, so that ``prepare --samples`` builds catalogs from them exactly as from a download.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dnmopd.data.download import DownloadError, _HttpsBackend, _HubBackend
from dnmopd.io import sha256_file

STAGING = ".download"
GITHUB_RAW = "https://raw.githubusercontent.com"


@dataclass(frozen=True, slots=True)
class Source:
    host: str
    """huggingface (a dataset repository) or github."""
    repo: str
    revision: str
    """Full commit hash."""
    file: str
    sha256: str
    provenance: str = ""
    """Recorded in the IF catalogs' input hashes (the paper's wording)."""
    rows: tuple[int, ...] | None = None
    """For a shipped subset: the position of each of its lines in the pinned source file."""

    def __post_init__(self):
        if self.host not in ("huggingface", "github", "package"):
            raise ValueError(f"source {self.repo}: host must be huggingface, github or package, got {self.host!r}")

    @property
    def where(self) -> str:
        return f"{self.repo}@{self.revision[:8]}:{self.file}"


SOURCES = {
    "aime25": Source("huggingface", "yentinglin/aime_2025", "6f71d77b0b89b9dabe07ab466c51df33f514df7f",
                     "data/train-00000-of-00001-243207c6c994e1bd.parquet",
                     "b74b507c1a4de7c9fafd2c83dfe2ef7b80579bcf0e0a754a1765db0f21c205fc"),
    "aime26": Source("huggingface", "math-ai/aime26", "79037aebdb6580008fb960d17cb21fd3099083e3", "aime2026.jsonl",
                     "52822957957a3f577d1e9706c36a66a8108a3f99b6aff424cfb72dff0094a9ee"),
    "lcb_v5": Source("huggingface", "livecodebench/code_generation_lite", "0fe84c3912ea0c4d4a78037083943e8f0c4dd505",
                     "test5.jsonl", "7f77571c2a6df0c2a72a3277650309f67e01e0008e18117e624633df53f81214"),
    "lcb_v6": Source("huggingface", "livecodebench/code_generation_lite", "0fe84c3912ea0c4d4a78037083943e8f0c4dd505",
                     "test6.jsonl", "bb4c364f71921c4495a6ad15abe1a927350b720009f4933e2e71f8af0f6fd1f5"),
    "ifeval": Source("github", "google-research/google-research", "b24f2136e8ef405b900b5619760126304f190941",
                     "instruction_following_eval/data/input_data.jsonl",
                     "67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49",
                     "google/IFEval (canonical copy: google-research monorepo @ b24f2136, "
                     "instruction_following_eval/data/input_data.jsonl)"),
    "ifbench": Source("github", "allenai/IFBench", "1091c4c3de6c1f6ed12c012ed68f11ea450b0117",
                      "data/IFBench_test.jsonl",
                      "a2bf7b8e7ed11d39c65b4ec781da8b99663ed0121f97033d70fcecb61f8a9d85",
                      "allenai/IFBench_test (canonical copy: github.com/allenai/IFBench @ 1091c4c3, "
                      "data/IFBench_test.jsonl)"),
    "math500": Source("huggingface", "HuggingFaceH4/MATH-500", "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be", "test.jsonl",
                      "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"),
}
"""Pinned sources of the protocol (each file's sha256 is checked before anything is built from it)."""


class _GitHubRaw(_HttpsBackend):
    """The https backend pointed at raw.githubusercontent.com instead of the Hub's resolve URLs."""

    def __init__(self, repo: str, revision: str, timeout_s: float):
        super().__init__(repo, "model", revision, None, timeout_s, chunk_bytes=4 << 20)
        self.url = f"{GITHUB_RAW}/{repo}/{revision}/"


def source_path(source: Source, cache_dir: Path) -> Path:
    return Path(cache_dir) / source.repo.replace("/", "__") / source.revision / source.file


def fetch(source: Source, cache_dir: str | os.PathLike, *, endpoint: str | None = None,
          timeout_s: float = 300.0) -> Path:
    """The verified local copy of ``source`` under ``cache_dir`` (downloaded when missing or corrupt)."""
    final = source_path(source, Path(cache_dir))
    if final.is_file() and sha256_file(final) == source.sha256:
        return final
    staging = Path(cache_dir) / STAGING
    backend = (_HubBackend(source.repo, "dataset", source.revision, endpoint, timeout_s) if source.host == "huggingface"
               else _GitHubRaw(source.repo, source.revision, timeout_s))
    try:
        staged = backend.fetch(source.file, staging)
    except Exception as exc:  # network and hub errors alike: nothing reaches `final`
        raise DownloadError(f"{source.where}: download failed ({type(exc).__name__}: {exc})") from exc
    if staged is None:
        raise DownloadError(f"{source.where}: no such file at the pinned revision")
    digest = sha256_file(staged)
    if digest != source.sha256:
        staged.unlink()
        raise DownloadError(f"{source.where}: sha256 {digest} differs from the pinned {source.sha256}; "
                            f"nothing was written to {final}")
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, final)
    shutil.rmtree(staging, ignore_errors=True)
    return final


def sample_sources() -> dict[str, tuple[Source, Path, dict]]:
    """The shipped sample files: suite -> (their Source, their path, their SAMPLES.json entry)."""
    root = Path(str(resources.files("dnmopd.eval") / "samples"))
    described = json.loads((root / "SAMPLES.json").read_text(encoding="utf-8"))
    out = {}
    for suite, entry in described["suites"].items():
        pinned = SOURCES[suite]
        rows = tuple(entry["source_rows"]) if "source_rows" in entry else None
        source = Source("package", "dnmopd/eval/samples", "shipped", entry["file"], entry["sha256"],
                        pinned.provenance, rows)
        out[suite] = (source, root / entry["file"], entry)
    return out


def verified_sample(suite: str) -> tuple[Source, Path]:
    """A shipped sample file, refused if its bytes are not those SAMPLES.json records."""
    samples = sample_sources()
    if suite not in samples:
        raise KeyError(f"no shipped sample catalog for suite {suite!r} (shipped: {sorted(samples)})")
    source, path, _ = samples[suite]
    digest = sha256_file(path)
    if digest != source.sha256:
        raise DownloadError(f"{path}: sha256 {digest} differs from SAMPLES.json's {source.sha256}")
    return source, path
