"""Manifest pinning, --check and downloads against a local fake Hub (never the network)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from data_fake_hub import FakeHub

from dnmopd.data.download import Downloader, DownloadError
from dnmopd.data.manifest import Manifest, ManifestError, build_manifest

ROOT = Path(__file__).resolve().parents[2]
REPO, REV = "someone/DN-MOPD-Data", "0123456789abcdef0123456789abcdef01234567"
FILES = {"student/train_3domain.jsonl": b'{"a": 1}\n' * 300, "teacher/if_train.jsonl": b'{"b": 2}\n' * 500}


def manifest_for(files: dict[str, bytes]) -> Manifest:
    return Manifest.from_dict({
        "format": 1, "repo_id": REPO, "repo_type": "dataset", "revision": REV,
        "files": {p: {"config": p, "prompt": "messages", "bytes": len(b), "sha256": hashlib.sha256(b).hexdigest(),
                      "rows": 1, "domains": {"math": 1}} for p, b in files.items()}})


@pytest.fixture(params=["huggingface_hub", "https"])
def backend(request, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the fake hub is local
    return request.param


def downloader(tmp_path: Path, hub: FakeHub, backend: str, manifest: Manifest | None = None) -> Downloader:
    config = Downloader.Config(data_dir=str(tmp_path / "data"), backend=backend, endpoint=hub.endpoint, timeout_s=10)
    return Downloader(config, manifest or manifest_for(FILES))


def test_release_manifest_pins_the_four_files():
    manifest = Manifest.load(ROOT / "data" / "MANIFEST.json")
    assert manifest.repo_id == "XINLI1997/DN-MOPD-Data" and manifest.repo_type == "dataset"
    assert manifest.revision == "b54e10ff5dd53f10b9c19793a0c0103625e87c53"
    assert {p: (f.rows, f.bytes, f.sha256[:8]) for p, f in manifest.files.items()} == {
        "student/train_3domain.jsonl": (2700, 45968876, "53177397"),
        "teacher/math_train.jsonl": (8000, 3838298, "60ef3d6d"),
        "teacher/code_train.jsonl": (8000, 917096848, "f52b5143"),
        "teacher/if_train.jsonl": (8000, 3722418, "60b169a3"),
    }
    assert manifest.files["student/train_3domain.jsonl"].domains == {"code": 900, "ifeval": 900, "math": 900}
    assert manifest.files["teacher/if_train.jsonl"].prompt == "text"


def test_sample_manifest_matches_the_sample_files(tmp_path):
    built = build_manifest(ROOT / "data" / "samples", repo_id="local/dnmopd-samples", revision="samples-v1")
    assert built == json.loads((ROOT / "data" / "samples" / "MANIFEST.json").read_text())


@pytest.mark.parametrize("mutation, message", [
    (lambda m: m.pop("revision"), "'revision'"),
    (lambda m: m["files"]["a.jsonl"].update(sha256="ABC"), "'sha256'"),
    (lambda m: m["files"]["a.jsonl"].update(bytes=-1), "'bytes'"),
    (lambda m: m["files"]["a.jsonl"].update(rows=3), "'domains'"),
    (lambda m: m["files"].update({"../x.jsonl": m["files"]["a.jsonl"]}), "relative"),
    (lambda m: m.update(format=2), "'format'"),
])
def test_bad_manifest_is_refused_naming_the_field(tmp_path, mutation, message):
    raw = {"format": 1, "repo_id": REPO, "repo_type": "dataset", "revision": REV,
           "files": {"a.jsonl": {"prompt": "messages", "bytes": 1, "sha256": "0" * 64, "rows": 1,
                                 "domains": {"math": 1}}}}
    mutation(raw)
    path = tmp_path / "MANIFEST.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ManifestError, match=message):
        Manifest.load(path)


def test_only_accepts_paths_with_or_without_data_prefix():
    manifest = manifest_for(FILES)
    assert [f.path for f in manifest.select(["data/teacher/if_train.jsonl"])] == ["teacher/if_train.jsonl"]
    assert [f.path for f in manifest.select(["student/train_3domain.jsonl"])] == ["student/train_3domain.jsonl"]
    with pytest.raises(ManifestError, match="not in the manifest"):
        manifest.select(["teacher/nope.jsonl"])


def test_fetch_verify_and_no_second_download(tmp_path, backend):
    with FakeHub(REPO, REV, FILES) as hub:
        dl = downloader(tmp_path, hub, backend)
        outcome = dl.download(dl.manifest.select())
        assert set(outcome.values()) == {"downloaded and verified"}
        for path, data in FILES.items():
            assert (tmp_path / "data" / path).read_bytes() == data
        assert not (tmp_path / "data" / ".download").exists()
        assert dl.check(dl.manifest.select()) == {p: None for p in FILES}
        gets = len(hub.requests)
        assert set(dl.download(dl.manifest.select()).values()) == {"already present and verified"}
        assert len(hub.requests) == gets


@pytest.mark.parametrize("corruption", ["wrong size", "wrong hash"])
def test_mismatching_remote_file_fails_and_places_nothing(tmp_path, backend, corruption):
    served = dict(FILES)
    data = FILES["teacher/if_train.jsonl"]
    served["teacher/if_train.jsonl"] = data + b"x" if corruption == "wrong size" else data[:-2] + b"]\n"
    with FakeHub(REPO, REV, served) as hub:
        dl = downloader(tmp_path, hub, backend)
        with pytest.raises(DownloadError, match="size" if corruption == "wrong size" else "sha256"):
            dl.download(dl.manifest.select(["teacher/if_train.jsonl"]))
    assert not (tmp_path / "data" / "teacher" / "if_train.jsonl").exists()
    leftovers = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and ".cache" not in p.parts]
    assert leftovers == []


def test_interrupted_download_leaves_nothing_and_resumes(tmp_path, backend):
    path = "teacher/if_train.jsonl"
    with FakeHub(REPO, REV, FILES) as hub:
        hub.cut_at[path] = 1000
        dl = downloader(tmp_path, hub, backend)
        with pytest.raises(DownloadError, match="nothing was written"):
            dl.download(dl.manifest.select([path]))
        assert not (tmp_path / "data" / path).exists()
        assert dl.check(dl.manifest.select([path])) == {path: "missing"}
        del hub.cut_at[path]
        dl.download(dl.manifest.select([path]))  # a second run completes (resuming where the backend can)
        assert (tmp_path / "data" / path).read_bytes() == FILES[path]


def test_corrupt_local_file_is_replaced(tmp_path, backend):
    path = "student/train_3domain.jsonl"
    target = tmp_path / "data" / path
    target.parent.mkdir(parents=True)
    target.write_bytes(FILES[path][:-1] + b"!")
    with FakeHub(REPO, REV, FILES) as hub:
        dl = downloader(tmp_path, hub, backend)
        assert "sha256" in dl.check(dl.manifest.select([path]))[path]
        assert "replaced a corrupt local file" in dl.download(dl.manifest.select([path]))[path]
    assert target.read_bytes() == FILES[path]


def test_remote_manifest_disagreement_is_refused(tmp_path, backend):
    remote = {"files": {"teacher/if_train.jsonl": {"sha256": "f" * 64}}}
    with FakeHub(REPO, REV, dict(FILES, **{"MANIFEST.json": json.dumps(remote).encode()})) as hub:
        dl = downloader(tmp_path, hub, backend)
        with pytest.raises(DownloadError, match="refusing"):
            dl.download(dl.manifest.select(["teacher/if_train.jsonl"]))
        assert hub.gets("teacher/if_train.jsonl") == 0
        dl.download(dl.manifest.select(["student/train_3domain.jsonl"]))  # not listed remotely: fine


def test_cli_check_never_downloads_and_exit_status(tmp_path):
    manifest_path = tmp_path / "MANIFEST.json"
    manifest_path.write_text(json.dumps({
        "format": 1, "repo_id": REPO, "repo_type": "dataset", "revision": REV,
        "files": {p: {"prompt": "messages", "bytes": len(b), "sha256": hashlib.sha256(b).hexdigest(), "rows": 1,
                      "domains": {"math": 1}} for p, b in FILES.items()}}))
    with FakeHub(REPO, REV, FILES) as hub:
        cmd = [sys.executable, str(ROOT / "launch" / "download_data.py"), "--manifest", str(manifest_path),
               "--data-dir", str(tmp_path / "data"), "--endpoint", hub.endpoint, "--backend", "https"]
        check = subprocess.run(cmd + ["--check"], capture_output=True, text=True)
        assert check.returncode == 1 and check.stdout.count("FAIL") == 2 and "missing" in check.stdout
        assert hub.requests == []
        only = subprocess.run(cmd + ["--only", "data/teacher/if_train.jsonl"], capture_output=True, text=True)
        assert only.returncode == 0, only.stderr
        assert not (tmp_path / "data" / "student" / "train_3domain.jsonl").exists()


def test_cli_validates_the_sample_files():
    cmd = [sys.executable, str(ROOT / "launch" / "download_data.py"), "--check", "--validate",
           "--manifest", str(ROOT / "data" / "samples" / "MANIFEST.json"), "--data-dir", str(ROOT / "data" / "samples")]
    result = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("OK") == 4


@pytest.mark.skipif(os.environ.get("DNMOPD_LIVE_DOWNLOAD") != "1", reason="set DNMOPD_LIVE_DOWNLOAD=1 to use the Hub")
def test_live_download_of_the_smallest_release_file(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    manifest = Manifest.load(ROOT / "data" / "MANIFEST.json")
    dl = Downloader(Downloader.Config(data_dir=str(tmp_path)), manifest)
    assert dl.download(manifest.select(["teacher/if_train.jsonl"])) == {
        "teacher/if_train.jsonl": "downloaded and verified"}
