"""Row schema: every kind of malformed row is refused with its file, line and field; skip mode reports."""

from __future__ import annotations

import copy
import json

import pytest

from dnmopd.data.schema import RowError, validate_file

GOOD = {"prompt": [{"content": "What is 1+1?", "role": "user"}], "label": "2", "domain": "math", "teacher": "math",
        "metadata": {"domain": "math", "data_source": "synthetic-math-v1", "src_index": 0}}
GOOD_CODE = {**GOOD, "label": json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]}), "domain": "code", "teacher": "code",
             "metadata": {"domain": "code", "data_source": "s", "src_index": 1}}
GOOD_IF = {**GOOD, "label": json.dumps([{"type": "no_commas"}, {"type": "word_count_min", "n": 5}]),
           "domain": "ifeval", "teacher": "ifeval",
           "metadata": {"domain": "ifeval", "data_source": "s", "src_index": 2}}


def reorder(row, keys):
    return {k: row[k] for k in keys}


DELETE = object()


def edit(base, **changes):
    """A deep copy of ``base`` with fields replaced (``a__b`` is ``row["a"]["b"]``) or deleted (``DELETE``)."""
    row = copy.deepcopy(base)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = row
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return row


MALFORMED = [
    ("not json", "{not json", "<line>"),
    ("not an object", [1, 2], "<row>"),
    ("missing label", edit(GOOD, label=DELETE), "label"),
    ("extra key", {**GOOD, "true_domain": "math"}, "true_domain"),
    ("keys out of order", reorder(GOOD, ["label", "prompt", "domain", "teacher", "metadata"]), "<row>"),
    ("unknown domain", edit(GOOD, domain="physics", teacher="physics", metadata__domain="physics"), "domain"),
    ("teacher differs", edit(GOOD, teacher="code"), "teacher"),
    ("metadata domain differs", edit(GOOD, metadata__domain="code"), "metadata.domain"),
    ("metadata missing src_index", edit(GOOD, metadata__src_index=DELETE), "metadata.src_index"),
    ("metadata negative src_index", edit(GOOD, metadata__src_index=-1), "metadata.src_index"),
    ("metadata bool src_index", edit(GOOD, metadata__src_index=True), "metadata.src_index"),
    ("metadata empty data_source", edit(GOOD, metadata__data_source=""), "metadata.data_source"),
    ("two messages", edit(GOOD, prompt=GOOD["prompt"] * 2), "prompt"),
    ("system role", edit(GOOD, prompt=[{"content": "x", "role": "system"}]), "prompt[0].role"),
    ("empty content", edit(GOOD, prompt=[{"content": " ", "role": "user"}]), "prompt[0].content"),
    ("string prompt in a messages file", edit(GOOD, prompt="What is 1+1?"), "prompt"),
    ("label not a string", edit(GOOD, label=2), "label"),
    ("empty math answer", edit(GOOD, label="  "), "label"),
    ("code label not JSON", edit(GOOD_CODE, label="inputs: 1"), "label"),
    ("code label empty inputs", edit(GOOD_CODE, label=json.dumps({"inputs": [], "outputs": []})), "label.inputs"),
    ("code label length mismatch", edit(GOOD_CODE, label=json.dumps({"inputs": ["1"], "outputs": ["1", "2"]})),
     "label.outputs"),
    ("code label without outputs", edit(GOOD_CODE, label=json.dumps({"inputs": ["1"]})), "label.outputs"),
    ("IF label unknown type", edit(GOOD_IF, label=json.dumps([{"type": "rhymes"}])), "label"),
    ("IF label empty list", edit(GOOD_IF, label="[]"), "label"),
    ("IF label bad parameter", edit(GOOD_IF, label=json.dumps([{"type": "word_count_min", "n": "five"}])), "label"),
]


def write(tmp_path, rows, name="rows.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_good_rows_pass(tmp_path):
    report = validate_file(write(tmp_path, [GOOD, GOOD_CODE, GOOD_IF]))
    assert report.rows == 3 and report.errors == [] and dict(report.domains) == {"math": 1, "code": 1, "ifeval": 1}


@pytest.mark.parametrize("kind, row, field", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_row_names_file_line_and_field(tmp_path, kind, row, field):
    path = write(tmp_path, [GOOD, GOOD_CODE, row, GOOD_IF])
    with pytest.raises(RowError) as info:
        validate_file(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 3, field)
    assert f"{path}:3: field {field!r}" in str(info.value)


def test_text_prompt_files(tmp_path):
    plain = edit(GOOD_IF, prompt="Write a poem.")
    assert validate_file(write(tmp_path, [plain]), prompt_format="text").rows == 1
    with pytest.raises(RowError, match="field 'prompt'"):
        validate_file(write(tmp_path, [GOOD_IF], "msgs.jsonl"), prompt_format="text")


def test_skip_mode_counts_every_bad_row(tmp_path):
    rows = [GOOD] + [m[1] for m in MALFORMED] + [GOOD_IF]
    report = validate_file(write(tmp_path, rows), on_error="skip")
    assert report.rows == 2 and report.skipped == len(MALFORMED)
    assert [e.line for e in report.errors] == list(range(2, 2 + len(MALFORMED)))
    assert [e.field for e in report.errors] == [m[2] for m in MALFORMED]
    assert "25 bad rows skipped" in report.summary()


def test_empty_file_and_bad_options(tmp_path):
    with pytest.raises(RowError, match="no rows"):
        validate_file(write(tmp_path, []))
    with pytest.raises(ValueError, match="on_error"):
        validate_file(write(tmp_path, [GOOD]), on_error="ignore")
