"""Fetch the pinned release files and verify them against the manifest.

Each requested file is fetched into ``<data_dir>/.download/`` (never the final path), checked for size and
sha256, then renamed into ``<data_dir>/<path>``; a file that does not verify is deleted, so the final path
only ever holds a verified file. A present file that verifies is not downloaded again; a corrupt one is
replaced. Before downloading, the revision's own ``MANIFEST.json`` (if the repository has one) must agree
with ours on each requested file's sha256. Backends:

* ``huggingface_hub`` (default): ``hf_hub_download`` at the pinned revision (honours ``HF_TOKEN``,
  ``HF_ENDPOINT`` and the hub's own retries);
* ``https``: plain ``GET <endpoint>/datasets/<repo>/resolve/<revision>/<path>`` with a resumable ``.part``
  file (HTTP Range), for machines without the hub client.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tqdm import tqdm

from dnmopd.data.manifest import Manifest, ManifestFile, file_problem

logger = logging.getLogger(__name__)

BACKENDS = ("huggingface_hub", "https")
STAGING = ".download"
REMOTE_MANIFEST = "MANIFEST.json"


class DownloadError(RuntimeError):
    """A file could not be fetched or did not verify."""


class _HubBackend:
    def __init__(self, repo_id: str, repo_type: str, revision: str, endpoint: str | None, timeout_s: float) -> None:
        self.repo_id, self.repo_type, self.revision = repo_id, repo_type, revision
        self.endpoint, self.timeout_s = endpoint, timeout_s

    def fetch(self, path: str, staging: Path) -> Path | None:
        """Download ``path`` under ``staging``; None if the repository has no such file."""
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        try:
            return Path(hf_hub_download(self.repo_id, path, repo_type=self.repo_type, revision=self.revision,
                                        local_dir=staging, endpoint=self.endpoint, etag_timeout=self.timeout_s))
        except EntryNotFoundError:
            return None


class _HttpsBackend:
    def __init__(self, repo_id: str, repo_type: str, revision: str, endpoint: str | None, timeout_s: float,
                 chunk_bytes: int) -> None:
        base = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        prefix = "" if repo_type == "model" else f"/{repo_type}s"
        self.url = f"{base}{prefix}/{repo_id}/resolve/{quote(revision, safe='')}/"
        self.timeout_s, self.chunk_bytes = timeout_s, chunk_bytes
        token = os.environ.get("HF_TOKEN")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def fetch(self, path: str, staging: Path) -> Path | None:
        """Download ``path`` to ``staging/path`` through a resumable ``.part`` file; None on HTTP 404."""
        target = staging / path
        part = target.with_name(target.name + ".part")
        part.parent.mkdir(parents=True, exist_ok=True)
        offset = part.stat().st_size if part.exists() else 0
        headers = dict(self.headers, **({"Range": f"bytes={offset}-"} if offset else {}))
        request = urllib.request.Request(self.url + quote(path), headers=headers)
        try:
            response = urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 416:  # the .part is not a prefix of the file any more: start over
                part.unlink()
                return self.fetch(path, staging)
            raise DownloadError(f"{path}: HTTP {exc.code} from {request.full_url}") from None
        resumed = response.status == 206
        total = int(response.headers.get("Content-Length", 0)) + (offset if resumed else 0)
        with response, open(part, "ab" if resumed else "wb") as out, tqdm(
                total=total or None, initial=offset if resumed else 0, unit="B", unit_scale=True, desc=path) as bar:
            while chunk := response.read(self.chunk_bytes):
                out.write(chunk)
                bar.update(len(chunk))
        os.replace(part, target)
        return target


class Downloader:
    """Downloads and verifies the files of a ``Manifest`` into a data folder."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        data_dir: str = "data"
        """Folder that receives the files (``<data_dir>/student/...``, ``<data_dir>/teacher/...``)."""
        backend: str = "huggingface_hub"
        """``huggingface_hub`` or ``https``."""
        endpoint: str | None = None
        """Hub URL (default: ``$HF_ENDPOINT``, else https://huggingface.co)."""
        repo_id: str | None = None
        """Override the manifest's repository."""
        revision: str | None = None
        """Override the manifest's pinned revision (files must still match the manifest's sha256)."""
        timeout_s: float = 60.0
        """Network timeout per request."""
        chunk_bytes: int = 4 << 20
        """Read size of the https backend."""

        def __post_init__(self) -> None:
            if self.backend not in BACKENDS:
                raise ValueError(f"Downloader.Config.backend must be one of {BACKENDS}, got {self.backend!r}")
            for name in ("timeout_s", "chunk_bytes"):
                if not getattr(self, name) > 0:
                    raise ValueError(f"Downloader.Config.{name} must be > 0, got {getattr(self, name)!r}")

    def __init__(self, config: Downloader.Config, manifest: Manifest) -> None:
        self.config, self.manifest = config, manifest
        self.data_dir = Path(config.data_dir)
        self.staging = self.data_dir / STAGING
        repo = (config.repo_id or manifest.repo_id, manifest.repo_type, config.revision or manifest.revision,
                config.endpoint, config.timeout_s)
        self.backend = (_HubBackend(*repo) if config.backend == "huggingface_hub"
                        else _HttpsBackend(*repo, chunk_bytes=config.chunk_bytes))

    def check(self, entries: list[ManifestFile]) -> dict[str, str | None]:
        """``path -> problem`` (None when the local file verifies); never touches the network."""
        return {e.path: file_problem(self.data_dir / e.path, e) for e in entries}

    def download(self, entries: list[ManifestFile], *, force: bool = False) -> dict[str, str]:
        """Fetch what is missing or corrupt (everything with ``force``); returns ``path -> what happened``."""
        todo = [e for e in entries if force or file_problem(self.data_dir / e.path, e) is not None]
        done = {e.path: "already present and verified" for e in entries if e not in todo}
        if todo:
            self._check_remote_manifest(todo)
        for entry in todo:
            logger.info("downloading %s (%.1f MB)", entry.path, entry.bytes / 1e6)
            done[entry.path] = self._download_one(entry)
        if todo and self.staging.exists():
            shutil.rmtree(self.staging)
        return done

    def _download_one(self, entry: ManifestFile) -> str:
        final = self.data_dir / entry.path
        try:
            staged = self.backend.fetch(entry.path, self.staging)
        except DownloadError:
            raise
        except Exception as exc:  # network, HTTP and hub errors all end the same way: nothing at `final`
            raise DownloadError(f"{entry.path}: download failed ({type(exc).__name__}: {exc}); nothing was "
                                f"written to {final}") from exc
        if staged is None:
            raise DownloadError(f"{entry.path}: not found in {self.manifest.repo_id} at the pinned revision")
        problem = file_problem(staged, entry)
        if problem is not None:
            staged.unlink()
            raise DownloadError(f"{entry.path}: downloaded file does not match the manifest ({problem}); "
                                f"nothing was written to {final}")
        replaced = final.exists()
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, final)
        return "downloaded and verified" + (" (replaced a corrupt local file)" if replaced else "")

    def _check_remote_manifest(self, entries: list[ManifestFile]) -> None:
        fetched = self.backend.fetch(REMOTE_MANIFEST, self.staging)
        if fetched is None:
            logger.info("the repository has no %s at this revision; relying on our manifest", REMOTE_MANIFEST)
            return
        try:
            remote = json.loads(fetched.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise DownloadError(f"the repository's {REMOTE_MANIFEST} is not valid JSON: {exc}") from None
        finally:
            fetched.unlink()
        for entry in entries:
            theirs = _remote_sha256(remote, entry.path)
            if theirs is not None and theirs != entry.sha256:
                raise DownloadError(f"{entry.path}: the revision's own {REMOTE_MANIFEST} lists sha256 {theirs}, "
                                    f"ours pins {entry.sha256}; refusing to download (wrong --revision?)")


def _remote_sha256(remote: object, path: str) -> str | None:
    """The sha256 a remote manifest lists for ``path`` (files as a path-keyed object or a list), if any."""
    files = remote.get("files") if isinstance(remote, dict) else None
    for key in (path, f"data/{path}"):
        if isinstance(files, dict) and isinstance(files.get(key), dict):
            return files[key].get("sha256")
        if isinstance(files, list):
            for item in files:
                if isinstance(item, dict) and item.get("path") == key:
                    return item.get("sha256")
    return None
