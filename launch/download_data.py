"""Download the DN-MOPD data release (pinned in data/MANIFEST.json) and verify it.

    python launch/download_data.py                      # fetch whatever is missing or corrupt, verify all
    python launch/download_data.py --check              # verify local files only, never download
    python launch/download_data.py --only student/train_3domain.jsonl --validate

Exit status 0 only if every requested file is present with the pinned size and sha256 (and, with
--validate, passes the row schema with the manifest's row and domain counts).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from dnmopd.data.download import BACKENDS, Downloader, DownloadError
from dnmopd.data.manifest import Manifest, ManifestError, ManifestFile
from dnmopd.data.schema import validate_file

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=DATA_DIR / "MANIFEST.json",
                        help="manifest to follow (default: %(default)s)")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help="where the files go (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="verify local files only; never download")
    parser.add_argument("--only", nargs="+", metavar="PATH",
                        help="files to handle (as in the manifest, with or without a leading data/)")
    parser.add_argument("--force", action="store_true", help="download even files that already verify")
    parser.add_argument("--validate", action="store_true",
                        help="also check every row's schema and the manifest's row/domain counts")
    parser.add_argument("--backend", choices=BACKENDS, default="huggingface_hub", help="default: %(default)s")
    parser.add_argument("--endpoint", help="Hub URL (default: $HF_ENDPOINT or https://huggingface.co)")
    parser.add_argument("--repo-id", help="override the manifest's repository")
    parser.add_argument("--revision", help="override the manifest's pinned revision")
    return parser.parse_args(argv)


def validation_problem(path: Path, entry: ManifestFile) -> str | None:
    report = validate_file(path, prompt_format=entry.prompt, on_error="skip")
    if report.errors:
        return f"{report.skipped} rows break the schema, first: {report.errors[0]}"
    if report.rows != entry.rows or dict(report.domains) != entry.domains:
        return f"rows {report.rows} {dict(report.domains)} != manifest {entry.rows} {entry.domains}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        manifest = Manifest.load(args.manifest)
        entries = manifest.select(args.only)
        downloader = Downloader(Downloader.Config(
            data_dir=str(args.data_dir), backend=args.backend, endpoint=args.endpoint, repo_id=args.repo_id,
            revision=args.revision), manifest)
        if not args.check:
            for path, outcome in downloader.download(entries, force=args.force).items():
                print(f"{path}: {outcome}")
    except (ManifestError, DownloadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    failed = 0
    for entry in entries:
        problem = downloader.check([entry])[entry.path]
        if problem is None and args.validate:
            problem = validation_problem(args.data_dir / entry.path, entry)
        print(f"{'OK  ' if problem is None else 'FAIL'} {entry.path}" + (f": {problem}" if problem else ""))
        failed += problem is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
