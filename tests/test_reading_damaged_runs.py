"""The commands that read a run folder (`prep report`, `show`, `rejects`, `estimate`) over
whatever a user's disk holds: damaged records, foreign or broken Parquet files, link loops,
missing folders, hostile strings and large row groups.

Each ends in one line naming the damaged file, or renders what it can and says what it
left out; none writes into the run folder. The runs are small and made by hand."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import pipeline.commands.document_lookup as lookup
from pipeline.commands.main import main
from pipeline.formats.documents import LEDGER_SCHEMA
from pipeline.formats.token_shards import ShardWriter, sidecar, sidecar_path, write_sidecar
from pipeline.report import ledger

SCRIPT = "<script>alert(1)</script>"
# Characters HTML does not allow (C0 controls) or that reorder what follows (bidi overrides).
RAW_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


def ledger_row(doc_id: str, stage: str = "length", reason: str = "too-short", **fields) -> dict:
    row = {"id": doc_id, "source": "web", "stage": stage, "reason": reason, "file": "in.jsonl", "line": 1}
    return {name: {**row, "text": "dropped text", **fields}.get(name) for name in LEDGER_SCHEMA.names}


def write_ledger(path: Path, rows: list[dict], row_group_size: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA), path, row_group_size=row_group_size)
    return path


def make_run(folder: Path, rejects: list[dict] | None = None) -> Path:
    """A finished run as prep lays it out: manifest.json, docs/ and rejects/ (no tokens)."""
    rejects = rejects if rejects is not None else [ledger_row("r1"), ledger_row("r2", "dedup", "exact-duplicate")]
    rejected_by: dict[str, int] = {}
    for row in rejects:
        rule = f"{row['stage']}:{row['reason']}"
        rejected_by[rule] = rejected_by.get(rule, 0) + 1
    counts = {"input": 1 + len(rejects), "output": 1, "rejected": len(rejects)}
    manifest = {
        "balance": counts,
        "sources": {"web": {**counts, "rejected_by": rejected_by}},
        "stages": {"length": {"rejected": {"too-short": 1}, "counters": {}, "by_source": {"web": {"rejected": 1}}}},
        "stage_order": ["length"],
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "docs" / "web").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["k1"], "text": ["kept text"], "source": ["web"]}), folder / "docs/web/a.parquet")
    write_ledger(folder / "rejects" / "web" / "r.parquet", rejects)
    return folder


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result, *needles: str) -> None:
    """Exit 1 with one "Error: ..." line, from a ClickException, not an escaped exception
    nor the "PREP_DEBUG=1" line of an error prep did not expect."""
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert result.output.count("\n") == 1 and result.output.startswith("Error: "), result.output
    assert "PREP_DEBUG" not in result.output, result.output
    for needle in needles:
        assert needle in result.output, result.output


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*") if not p.name.endswith("loop")
    }


# --- damaged records -------------------------------------------------------------------------


def edit_manifest(run: Path, edit) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    edit(manifest)
    (run / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda run: (run / "manifest.json").write_text('{"balance": {"inp'), "manifest.json: not JSON"),
        (lambda run: (run / "manifest.json").write_text("[1, 2]"), "manifest.json: the file is an array"),
        (lambda run: edit_manifest(run, lambda m: m.pop("sources")), "manifest.json: sources is missing"),
        (
            lambda run: edit_manifest(run, lambda m: m["balance"].update(input="3")),
            "manifest.json: balance.input is a string, expected a count",
        ),
        # Drawn, a negative count ran its bar off the page's left edge.
        (
            lambda run: edit_manifest(run, lambda m: m["sources"]["web"]["rejected_by"].update({"x:y": -7})),
            "manifest.json: sources.web.rejected_by.x:y is -7, expected a count",
        ),
        # Beyond a float's range it ended in "OverflowError: int too large to convert to float".
        (
            lambda run: edit_manifest(run, lambda m: m["balance"].update(output=10**400)),
            "manifest.json: balance.output is beyond 64 bits, expected a count",
        ),
        # One check of the bounds (``records``' COUNT): the report's own let 2^63 through.
        (
            lambda run: edit_manifest(run, lambda m: m["balance"].update(output=2**63)),
            "manifest.json: balance.output is beyond 64 bits, expected a count",
        ),
        (
            lambda run: edit_manifest(run, lambda m: m["stages"]["length"]["counters"].update(x=-0.5)),
            "manifest.json: stages.length.counters.x is -0.5, expected a number of at least 0",
        ),
        (
            lambda run: (run / "cost.json").write_text(json.dumps({"cpu_seconds": {"tokenize": 10**400}})),
            "cost.json: cpu_seconds.tokenize is beyond 64 bits, expected a number of at least 0",
        ),
        (
            lambda run: (run / "cost.json").write_text(json.dumps({"cpu_seconds": {"total": -1.5}})),
            "cost.json: cpu_seconds.total is -1.5, expected a number of at least 0",
        ),
        (
            lambda run: (run / "cost.json").write_text(json.dumps({"workers": "w" * 1_000_000})),
            "cost.json: workers is a string, expected a count",
        ),
        # Every chart, table and caption repeats a source's name: a page of several megabytes.
        (
            lambda run: edit_manifest(run, lambda m: m["sources"].update({"s" * 1_000_000: m["sources"]["web"]})),
            "manifest.json: a source or stage is named with 1,000,000 characters",
        ),
    ],
)
def test_a_damaged_record_is_one_line_naming_the_file_and_key(tmp_path, damage, message):
    run = make_run(tmp_path / "run")
    damage(run)
    result = invoke("report", run, "-o", tmp_path / "page.html")
    assert_one_line_error(result, f"{run}/{message}")
    assert not (tmp_path / "page.html").exists()


def test_estimate_refuses_a_token_count_beyond_64_bits(tmp_path):
    (tmp_path / "mix.json").write_text('{"tokens": 1' + "0" * 400 + "}")
    assert_one_line_error(
        invoke("estimate", tmp_path, "--params", "1B"), f"{tmp_path}/mix.json: tokens is beyond 64 bits"
    )


# --- damaged and foreign Parquet files -------------------------------------------------------


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda path: path.write_bytes(b""), "Parquet file size is 0 bytes"),
        (lambda path: path.write_bytes(path.read_bytes()[:-100]), "Parquet magic bytes not found"),
        (lambda path: pq.write_table(pa.table({"a": [1]}), path), "not a file prep wrote: no text column 'id'"),
        (
            lambda path: pq.write_table(pa.table({"id": [1], "stage": [2], "reason": [3], "detail": [4]}), path),
            "not a file prep wrote: no text column 'id'",
        ),
        (lambda path: (path.unlink(), os.symlink(path.name, path)), "Too many levels of symbolic links"),
        (lambda path: (path.unlink(), os.symlink("/nonexistent/x.parquet", path)), "No such file or directory"),
    ],
)
def test_a_damaged_ledger_file_is_one_line_naming_it_in_every_command(tmp_path, damage, reason):
    """Each used to say Arrow's words: the path twice ("Could not open Parquet input source
    '...'"), "No match for FieldRef.Name(id)", or "Function 'equal' has no kernel"."""
    run = make_run(tmp_path / "run")
    path = run / "rejects" / "web" / "r.parquet"
    damage(path)
    for args in (["show", run, "r1"], ["rejects", run, "--stage", "nosuch"]):
        assert_one_line_error(invoke(*args), f"cannot read {path}: ")
        assert reason.split(":")[0] in invoke(*args).output
    # The report's words for a file that is no prep ledger name the first column it reads.
    assert_one_line_error(invoke("report", run, "-o", tmp_path / "page.html"), f"{path}: cannot read it (")


def test_a_kept_documents_file_whose_text_is_not_text_is_named(tmp_path):
    """It ended the report in "Function 'utf8_length' has no kernel matching input types"."""
    run = make_run(tmp_path / "run")
    pq.write_table(pa.table({"id": ["k1"], "text": [1], "source": ["web"]}), run / "docs/web/a.parquet")
    result = invoke("report", run, "-o", tmp_path / "page.html")
    assert_one_line_error(
        result, f"{run}/docs/web/a.parquet: cannot read it (not a file prep wrote: no text column 'text')"
    )


@pytest.mark.parametrize(
    "column, value, said, manifest",
    [
        # "TypeError: '<' not supported between instances of 'int' and 'str'", naming no file
        ("lang", 3, "its 'lang' column is int64, not text", {}),
        # numpy's "could not convert string to float: 'high'"
        (
            "quality_score",
            "high",
            "its 'quality_score' column is string, not a number",
            {"config": {"stages": [{"name": "classify", "models": [{"name": "quality"}]}]}},
        ),
    ],
)
def test_a_kept_documents_column_of_another_type_is_named(tmp_path, column, value, said, manifest):
    run = make_run(tmp_path / "run")
    edit_manifest(run, lambda m: m.update(manifest))
    table = pa.table({"id": ["k1"], "text": ["kept text"], "source": ["web"], column: [value]})
    pq.write_table(table, run / "docs/web/a.parquet")
    result = invoke("report", run, "-o", tmp_path / "page.html")
    assert_one_line_error(result, f"{run}/docs/web/a.parquet: cannot read it (not a file prep wrote: {said})")


def test_a_ledger_without_stage_or_reason_is_drawn(tmp_path):
    """A null stage or reason ended the report in "AttributeError: 'NoneType' object has no
    attribute 'split'"; such rows are now listed under "(none)"."""
    rows = [ledger_row("r1", stage=None), ledger_row("r2", reason=None), ledger_row("r3")]
    run = make_run(tmp_path / "run", [ledger_row("r3")])
    write_ledger(run / "rejects" / "web" / "r.parquet", rows)
    result = invoke("report", run, "-o", tmp_path / "page.html")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "page.html").read_text()
    assert "<b>(none):too-short</b>" in page and "<b>length:(none)</b>" in page


def test_a_duplicate_detail_nested_too_deeply_for_json_is_its_own_survivor():
    deep = '{"survivor":' * 100_000 + "1" + "}" * 100_000
    assert ledger.survivor(deep) == ("", deep)
    assert ledger.survivor('{"survivor": "a"}') == ("", "a")


# --- what the page shows ---------------------------------------------------------------------


def test_the_page_escapes_hostile_strings_and_stays_small(tmp_path):
    """Markup, controls and bidi overrides of a source, an id, a file, a detail and a text are
    escaped, and a megabyte id, detail or text is cut: the page stays near its usual size."""
    hostile = f"</textarea></pre>{SCRIPT}<img src=x onerror=alert(2)>\x1b[31m\x07\u202e"
    row = ledger_row(
        hostile + "i" * 1_000_000,
        file=hostile + ".jsonl",
        detail=json.dumps({"value": hostile + "d" * 1_000_000}),
        text=hostile + "t" * 1_000_000,
    )
    run = make_run(tmp_path / "run", [row])
    # A source named as a script: no folder can have its name ("/"), so it has no documents.
    edit_manifest(
        run, lambda m: m["sources"].update({SCRIPT: {"input": 0, "output": 0, "rejected": 0, "rejected_by": {}}})
    )
    edit_manifest(run, lambda m: m.update(config_file=hostile + "c" * 1_000_000))
    result = invoke("report", run, "-o", tmp_path / "page.html")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert len(page.encode()) < 200_000, len(page.encode())
    for raw in ("<script", "<img", "</textarea"):
        assert raw not in page
    assert page.count("<pre>") == page.count("</pre>") == 1  # the text's "</pre>" closes nothing
    assert not RAW_CONTROLS.search(page), RAW_CONTROLS.search(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the source, escaped
    assert r"\x1b[31m\x07\u202e" in page  # controls and the override, visible
    assert "ttt…</pre>" in page  # the text, cut


def test_a_missing_folder_is_said_on_the_page(tmp_path):
    """The page drew fewer documents without saying why when docs/<source> was gone."""
    run = make_run(tmp_path / "run")
    (run / "docs" / "web" / "a.parquet").unlink()
    (run / "docs" / "web").rmdir()
    (run / "docs" / "web").write_text("not a folder")
    assert invoke("report", run, "-o", tmp_path / "page.html").exit_code == 0
    page = (tmp_path / "page.html").read_text()
    assert f"the 1 kept document of web: {run}/docs/web is not a folder" in page


def test_reading_writes_nothing_into_the_run(tmp_path):
    run = make_run(tmp_path / "run")
    os.symlink(".", run / "rejects" / "web" / "loop")  # a link loop is not followed
    before = tree(run)
    for args in (
        ["report", run, "-o", tmp_path / "page.html"],
        ["show", run, "r1"],
        ["rejects", run],
        ["rejects", run, "--stage", "nosuch"],
    ):
        result = invoke(*args)
        assert "PREP_DEBUG" not in result.output and not isinstance(result.exception, (KeyError, TypeError))
    assert tree(run) == before


# --- large row groups ------------------------------------------------------------------------


def test_show_reads_a_large_row_group_in_batches(tmp_path, monkeypatch):
    """`prep show` read a whole row group (a gigabyte for a million ledger rows with their
    text); it reads batches now, and finds rows in any of them, every copy of an id."""
    monkeypatch.setattr(lookup, "SHOW_BATCH_ROWS", 100)
    rows = [ledger_row(f"r{i:05d}") for i in range(1000)] + [ledger_row("r00003", text="the second copy")]
    run = make_run(tmp_path / "run", rows[:1])
    write_ledger(run / "rejects" / "web" / "r.parquet", rows, row_group_size=len(rows))
    found = lookup.find_documents(run, "r00003")
    assert [m.row["text"] for m in found] == ["dropped text", "the second copy"]
    assert [m.row["id"] for m in lookup.find_documents(run, "r00999")] == ["r00999"]


def test_show_skips_the_row_groups_whose_statistics_rule_the_id_out(tmp_path, monkeypatch):
    path = write_ledger(tmp_path / "r.parquet", [ledger_row(f"r{i:03d}") for i in range(100)], row_group_size=10)
    parquet = pq.ParquetFile(path)
    assert [g for g in range(10) if lookup._may_hold(parquet, g, "r042")] == [4]


def test_report_examples_are_the_same_read_in_small_batches(tmp_path, monkeypatch):
    """The examples' second pass reads batches of the row groups that hold them, not whole
    row groups; the rows it picks are the ones a whole read picks."""
    rules = [("length", "too-short"), ("dedup", "exact-duplicate"), ("quality", "c4:x")]
    rows = [ledger_row(f"r{i:04d}", *rules[i % 3], text=f"text {i}") for i in range(3000)]
    path = write_ledger(tmp_path / "r.parquet", rows, row_group_size=3000)
    whole = ledger.examples([path])
    monkeypatch.setattr(ledger, "BATCH_ROWS", 64)
    assert ledger.examples([path]) == whole
    assert sorted(whole) == ["dedup:exact-duplicate", "length:too-short", "quality:c4:x"]
    assert all(e.text == f"text {int(e.id[1:])}" for examples in whole.values() for e in examples)


# --- token shards ----------------------------------------------------------------------------


def test_shards_inspect_escapes_what_a_sidecar_names(tmp_path):
    """A sidecar's tokenizer name went to the terminal raw (an escape sequence in it would
    retitle or clear it); it is now escaped as `prep show` escapes a document."""
    prefix = tmp_path / "web" / "shard-000"
    prefix.parent.mkdir()
    writer = ShardWriter(f"{prefix}.bin", f"{prefix}.idx", np.dtype(np.int32))
    writer.add_documents(np.arange(1, 6), np.array([5]))
    writer.close()
    tokenizer = SimpleNamespace(name="tok\x07\u202e<b>", spec="test", vocab_size=100, vocab_sha256="0" * 64)
    meta = sidecar(
        tokenizer=tokenizer, dtype=np.int32, eod_id=0, bos_id=None, documents=1, tokens=5, bin_sha256="0" * 64
    )
    write_sidecar(sidecar_path(prefix), meta)
    result = invoke("shards", "inspect", prefix)
    assert result.exit_code == 0, result.output
    assert r"tokenizer  tok\x07\u202e<b>" in result.output and not RAW_CONTROLS.search(result.output)


def test_rejects_cuts_a_huge_id_instead_of_padding_every_line_to_it(tmp_path):
    """One id of a megabyte made every line of the listing a megabyte wide (21 MB for 21 rows)."""
    run = make_run(tmp_path / "run", [ledger_row("x" * 1_000_000)] + [ledger_row(f"r{i}") for i in range(20)])
    result = invoke("rejects", run)
    assert result.exit_code == 0, result.output
    assert len(result.output) < 10_000, len(result.output)
    assert "x" * 100 + " ... (1,000,000 chars)" in result.output
