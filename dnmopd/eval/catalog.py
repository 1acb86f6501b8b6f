"""Question catalogs: built from each suite's pinned source exactly as the paper's evaluation built them.

``<data_dir>/catalog/<suite>.jsonl`` holds one question per line (``json.dumps(row, ensure_ascii=False)``):
``id``, ``input_sha256`` (the hash of the question as the source states it), ``messages`` (the chat prompt)
and what the grader needs (``answer``; the IF ``instruction_id_list``/``kwargs``; LiveCodeBench's test
file). ``<data_dir>/CATALOG.json`` records per suite the source, the question count and the catalog's
sha256. Building refuses a source whose sha256 is not the pin and a rebuilt protocol catalog whose sha256
is not the paper's; loading refuses a catalog file whose sha256 differs from the one recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dnmopd.eval.lcb import Problem
from dnmopd.eval.protocol import AIME_SUFFIX, CATALOG_SHA256, SUITES
from dnmopd.eval.sources import SOURCES, Source, fetch, verified_sample
from dnmopd.io import atomic_write, sha256_file

STATE = "CATALOG.json"
LCB_TEST_INDEX = {"lcb_v5": 713, "lcb_v6": 880}
"""Index of each LiveCodeBench file's first problem in the paper's test cache (its catalogs' ``test_index``)."""


class CatalogError(ValueError):
    """A catalog or source that cannot be used; the message names the file and what differs."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return [line for line in handle if line.strip()]


def _records(path: Path) -> list[tuple[int, dict]]:
    out = []
    for number, line in enumerate(_lines(path), 1):
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise CatalogError(f"{path}:{number}: not JSON ({exc})") from None
    return out


def _field(row: dict, key: str, where: str):
    if key not in row:
        raise CatalogError(f"{where}: missing field {key!r}")
    return row[key]


def _math_row(qid: str, input_sha256: str, problem: str, answer) -> dict:
    return {"id": qid, "input_sha256": input_sha256,
            "messages": [{"role": "user", "content": problem + AIME_SUFFIX}], "visible": problem, "answer": answer}


def build_aime25(path: Path, source: Source) -> list[dict]:
    """Parquet rows {problem, answer, id}; the input hash is that of the sorted-key JSON of the row."""
    import pyarrow.parquet as pq

    rows = []
    for i, r in enumerate(pq.read_table(path).to_pylist()):
        where = f"{path} row {i}"
        row = {"problem": _field(r, "problem", where), "answer": str(_field(r, "answer", where)),
               "id": int(_field(r, "id", where)), "suite": "aime25"}
        rows.append(_math_row(str(row["id"]), sha256_text(json.dumps(row, sort_keys=True)), row["problem"],
                              row["answer"]))
    return rows


def build_aime26(path: Path, source: Source) -> list[dict]:
    """JSON lines {id, problem, answer} verbatim (answers keep their JSON type)."""
    return [_math_row(str(_field(r, "id", f"{path}:{n}")), sha256_text(json.dumps(r, sort_keys=True)),
                      _field(r, "problem", f"{path}:{n}"), _field(r, "answer", f"{path}:{n}"))
            for n, r in _records(path)]


def build_math500(path: Path, source: Source) -> list[dict]:
    out = []
    for n, r in _records(path):
        where = f"{path}:{n}"
        released = {"id": _field(r, "unique_id", where), "problem": _field(r, "problem", where),
                    "answer": str(_field(r, "answer", where))}
        out.append(_math_row(released["id"], sha256_text(json.dumps(released, sort_keys=True)), released["problem"],
                             released["answer"]))
    return out


def _if_rows(path: Path, source: Source, suite: str) -> list[dict]:
    """One user turn, the prompt verbatim; kwargs without None values (as both official evaluation libs
    read them). The input hash is that of the official fields plus the paper's metadata envelope."""
    out = []
    for index, (n, r) in enumerate(_records(path)):
        where = f"{path}:{n}"
        ids = _field(r, "instruction_id_list", where)
        if not ids:
            raise CatalogError(f"{where}: empty instruction_id_list")
        kwargs = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in (r.get("kwargs") or [{}] * len(ids))]
        if len(kwargs) != len(ids):
            raise CatalogError(f"{where}: {len(ids)} instructions but {len(kwargs)} kwargs")
        prompt, key = _field(r, "prompt", where), _field(r, "key", where)
        line = json.dumps({"key": key, "prompt": prompt, "instruction_id_list": ids, "kwargs": kwargs, "suite": suite,
                           "domain": f"{suite}_public", "data_source": source.provenance,
                           "src_index": source.rows[index] if source.rows else index,
                           "metadata": {"suite": suite, "n_instructions": len(ids), "split": "public_eval"}},
                          ensure_ascii=False) + "\n"
        out.append({"id": f"{suite}:{key}", "input_sha256": sha256_text(line), "visible": prompt,
                    "messages": [{"role": "user", "content": str(prompt)}], "key": key, "prompt": prompt,
                    "instruction_id_list": ids, "kwargs": kwargs, "suite": suite})
    return out


def build_ifeval(path: Path, source: Source) -> list[dict]:
    return _if_rows(path, source, "ifeval")


def build_ifbench(path: Path, source: Source) -> list[dict]:
    return _if_rows(path, source, "ifbench")


def _lcb_builder(suite: str) -> Callable[[Path, Source], list[dict]]:
    def build(path: Path, source: Source, tests_dir: Path) -> list[dict]:
        rows = []
        for row_index, line in enumerate(_lines(path)):
            problem = Problem.from_line(line, where=f"{path}:{row_index + 1}")
            tests = problem.evaluation_sample()
            test_index = LCB_TEST_INDEX[suite] + row_index
            with atomic_write(tests_dir / f"{test_index:04d}.json") as handle:
                handle.write(tests)
            rows.append({"id": problem.id, "input_sha256": sha256_text(line), "messages": problem.messages(),
                         "visible": problem.content, "test_index": test_index, "test_sha256": sha256_text(tests),
                         "tests": len(problem.tests["inputs"]), "date": problem.date,
                         "difficulty": problem.difficulty, "source_file": Path(source.file).name,
                         "source_row": row_index})
        return rows

    build.needs_tests_dir = True
    return build


BUILDERS = {"aime25": build_aime25, "aime26": build_aime26, "lcb_v5": _lcb_builder("lcb_v5"),
            "lcb_v6": _lcb_builder("lcb_v6"), "ifeval": build_ifeval, "ifbench": build_ifbench,
            "math500": build_math500}


def _state(data_dir: Path) -> dict:
    path = data_dir / STATE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CatalogError(f"{path}: not JSON ({exc})") from None


def build_catalog(suite: str, source: Source, path: Path, data_dir: Path, *, sample: bool) -> dict:
    """Build one suite's catalog from a verified source file; returns its CATALOG.json entry."""
    builder = BUILDERS[suite]
    rows = (builder(path, source, data_dir / "lcb_tests") if getattr(builder, "needs_tests_dir", False)
            else builder(path, source))
    if len({r["id"] for r in rows}) != len(rows):
        raise CatalogError(f"{path}: duplicate question ids")
    text = jsonl_text(rows)
    digest = sha256_text(text)
    if not sample:
        if len(rows) != SUITES[suite].questions:
            raise CatalogError(f"{suite}: {path} gives {len(rows)} questions, the protocol has "
                               f"{SUITES[suite].questions}")
        if suite in CATALOG_SHA256 and digest != CATALOG_SHA256[suite]:
            raise CatalogError(f"{suite}: the rebuilt catalog has sha256 {digest}, the paper's catalog "
                               f"{CATALOG_SHA256[suite]}; refusing it")
    with atomic_write(data_dir / "catalog" / f"{suite}.jsonl") as handle:
        handle.write(text)
    return {"source": {"host": source.host, "repo": source.repo, "revision": source.revision, "file": source.file,
                       "sha256": source.sha256},
            "questions": len(rows), "catalog_sha256": digest, "sample": sample}


def prepare(suites: list[str], data_dir: str | os.PathLike, *, samples: bool = False, endpoint: str | None = None,
            progress: Callable[[str], None] = print) -> dict:
    """Fetch (or take the shipped samples of) each suite's source and build its catalog. Returns CATALOG.json."""
    data_dir = Path(data_dir)
    state = _state(data_dir)
    for suite in suites:
        if suite not in SUITES:
            raise CatalogError(f"unknown suite {suite!r}; suites: {', '.join(SUITES)}")
        if samples:
            source, path = verified_sample(suite)
        else:
            source = SOURCES[suite]
            path = fetch(source, data_dir / "sources", endpoint=endpoint)
        state[suite] = build_catalog(suite, source, path, data_dir, sample=samples)
        with atomic_write(data_dir / STATE) as handle:
            handle.write(json.dumps(state, indent=1, sort_keys=True) + "\n")
        entry = state[suite]
        progress(f"{suite}: {entry['questions']} questions from {source.where} "
                 f"({'shipped sample' if samples else 'pinned source'}), catalog sha256 {entry['catalog_sha256'][:16]}")
    return state


@dataclass(frozen=True, slots=True)
class Catalog:
    suite: str
    rows: list[dict]
    sha256: str
    sample: bool
    data_dir: Path

    def lcb_tests(self, row: dict) -> dict:
        """The official tests of a LiveCodeBench question, checked against the catalog's test hash."""
        path = self.data_dir / "lcb_tests" / f"{row['test_index']:04d}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CatalogError(f"{path}: cannot read the tests of {row['id']} ({exc.strerror})") from None
        if sha256_text(text) != row["test_sha256"]:
            raise CatalogError(f"{path}: sha256 differs from the catalog's test hash of {row['id']}")
        return json.loads(json.loads(text)["input_output"])


def load_catalog(suite: str, data_dir: str | os.PathLike) -> Catalog:
    """The prepared catalog of ``suite``, refused unless its sha256 is the one CATALOG.json recorded."""
    data_dir = Path(data_dir)
    entry = _state(data_dir).get(suite)
    path = data_dir / "catalog" / f"{suite}.jsonl"
    if entry is None or not path.is_file():
        raise CatalogError(f"{path}: no prepared catalog of {suite}; run `python launch/evaluate.py prepare "
                           f"--suites {suite} --data-dir {data_dir}` (add --samples for the shipped test catalogs)")
    digest = sha256_file(path)
    if digest != entry["catalog_sha256"]:
        raise CatalogError(f"{path}: sha256 {digest} differs from the {entry['catalog_sha256']} recorded in "
                           f"{data_dir / STATE}; refusing a changed catalog (prepare it again)")
    rows = [row for _, row in _records(path)]
    return Catalog(suite, rows, digest, bool(entry["sample"]), data_dir)
