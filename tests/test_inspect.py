"""`prep show` on kept and dropped documents; `prep estimate` arithmetic."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import LIGHT_SAMPLE_CONFIG, REPO

import pipeline.commands.document_lookup as lookup
from pipeline.commands.main import main
from pipeline.engine.run import run_pipeline
from pipeline.formats.documents import LEDGER_SCHEMA
from pipeline.mix.estimate import estimate_hours
from pipeline.util.printable import printable


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("show") / "out"
    run_pipeline(LIGHT_SAMPLE_CONFIG, out, workers=1, quiet=True)
    return out


def test_show_a_dropped_document_names_stage_and_rule(run):
    ledger = pq.read_table(run / "rejects").to_pylist()
    short = next(r for r in ledger if r["reason"] == "too-short")
    result = CliRunner().invoke(main, ["show", str(run), short["id"]])
    assert result.exit_code == 0, result.output
    assert "DROPPED by stage 'length', rule 'too-short'" in result.output
    assert f"{short['file']}:{short['line']}" in result.output
    assert short["text"][:50] in result.output


def test_show_a_kept_document_with_its_signals(run):
    kept = pq.read_table(run / "docs" / "math").slice(0, 1).to_pylist()[0]
    result = CliRunner().invoke(main, ["show", str(run), kept["id"], "--chars", "0"])
    assert result.exit_code == 0
    assert f"{kept['id']}: kept (math)" in result.output
    assert f"n_chars: {kept['n_chars']}" in result.output and kept["text"] in result.output


def test_show_unknown_id(run):
    result = CliRunner().invoke(main, ["show", str(run), "no-such-id"])
    assert result.exit_code != 0 and "no document 'no-such-id'" in result.output


# --- a hand-made run folder: ids repeated across files, hostile bytes in every field -------


def test_a_reader_that_stops_early_ends_prep_quietly(run):
    """`prep rejects RUN | head -1`: once the reader has closed the pipe, prep ends with
    1 and nothing on stderr (it printed "Error: Broken pipe")."""
    reader_end, writer_end = os.pipe()
    os.close(reader_end)  # the reader is gone before the first line is written
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "pipeline", "rejects", str(run)]
    done = subprocess.run(command, stdout=writer_end, stderr=subprocess.PIPE, text=True, env=env)
    os.close(writer_end)
    assert (done.returncode, done.stderr) == (1, "")


def write_docs(path: Path, rows: list[dict]) -> None:
    """A kept-documents file, in row groups of 2 so the id filter has statistics to use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2)


def write_ledger(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    full = [{name: row.get(name) for name in LEDGER_SCHEMA.names} for row in rows]
    pq.write_table(pa.Table.from_pylist(full, schema=LEDGER_SCHEMA), path, row_group_size=2)


def kept(doc_id: str, text: str = "some text", **fields) -> dict:
    return {"id": doc_id, "text": text, "source": "web", "n_chars": len(text), **fields}


def rejected(doc_id: str, stage: str, reason: str, file: str, line: int, **fields) -> dict:
    return {
        "id": doc_id,
        "source": "web",
        "stage": stage,
        "reason": reason,
        "file": file,
        "line": line,
        "text": "dropped text",
        **fields,
    }


def invoke_show(run: Path, doc_id: str, *args: str):
    return CliRunner().invoke(main, ["show", str(run), doc_id, *args])


def assert_one_line_error(result, *needles: str) -> None:
    """A ClickException (exit 1, "Error: ..." on one line), not an escaped exception."""
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert result.output.count("\n") == 1 and result.output.startswith("Error: "), result.output
    for needle in needles:
        assert needle in result.output, result.output


# Everything a terminal acts on: OSC (retitle), CSI (clear screen), one-byte C1 CSI, BEL,
# backspace, carriage return, DEL, NUL, a bidi override and an isolate.
HOSTILE = "\x1b]0;pwned\x07|\x1b[2J|\x9b31m|\x08|\r|\x7f|\x00|\u202e|\u2066"
ESCAPED = r"\x1b]0;pwned\x07|\x1b[2J|\x9b31m|\x08|\x0d|\x7f|\x00|\u202e|\u2066"
TERMINAL_ACTS_ON = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_printable_escapes_controls_and_bidi_but_keeps_the_texts_lines():
    assert printable(HOSTILE) == ESCAPED
    assert printable("a\nb\tc") == r"a\x0ab\x09c"  # a field value stays on its line
    assert printable("a\nb\tc\r\n", text=True) == "a\nb\tc\\x0d\n"
    assert printable("naïve – ünïcode 日本 \u200d emoji 🙂") == "naïve – ünïcode 日本 \u200d emoji 🙂"


def test_show_escapes_what_the_data_would_do_to_the_terminal(tmp_path):
    doc_id = "id" + HOSTILE
    in_name, in_name_escaped = HOSTILE.replace("|\x00", ""), ESCAPED.replace(r"|\x00", "")  # no NUL in a file name
    write_docs(
        tmp_path / "docs" / "web" / f"a{in_name}.parquet",
        [
            kept(
                doc_id,
                f"line one{HOSTILE}\n\tline two",
                source=f"web{HOSTILE}",
                note=f"two\nlines{HOSTILE}",
                tags=[HOSTILE],
                **{f"field{HOSTILE}": 1},
            )
        ],
    )
    write_ledger(
        tmp_path / "rejects" / "web" / "r.parquet",
        [rejected(doc_id, f"st{HOSTILE}", f"re{HOSTILE}", f"in{HOSTILE}.jsonl", 7, detail=f"d{HOSTILE}")],
    )
    result = invoke_show(tmp_path, doc_id)
    assert result.exit_code == 0, result.output
    out = result.output
    assert not TERMINAL_ACTS_ON.search(out), repr(out)
    assert f"id{ESCAPED}: kept (web{ESCAPED})" in out
    assert f"found in: {tmp_path}/docs/web/a{in_name_escaped}.parquet" in out
    assert f"note: two\\x0alines{ESCAPED}" in out and f"field{ESCAPED}: 1" in out
    assert (
        r'tags: ["\u001b]0;pwned\u0007|\u001b[2J|\x9b31m|\b|\r|\x7f|\u0000|\u202e|\u2066"]' in out
    )  # JSON's escapes, then ours
    assert f"line one{ESCAPED}\n\tline two" in out  # the text keeps its newline and tab
    assert f"DROPPED by stage 'st{ESCAPED}', rule 're{ESCAPED}' (web, in{ESCAPED}.jsonl:7)" in out
    assert f"detail: d{ESCAPED}" in out
    missing = invoke_show(tmp_path, f"nothing{HOSTILE}")
    assert_one_line_error(missing, f"no document 'nothing{ESCAPED}'")
    assert not TERMINAL_ACTS_ON.search(missing.output)


def test_show_lists_every_document_with_the_id_and_where_each_is(tmp_path, monkeypatch):
    filler = [kept(f"other-{i:02d}") for i in range(6)]
    write_docs(tmp_path / "docs" / "web" / "a.parquet", filler[:3] + [kept("twin", "first copy")] + filler[3:])
    write_docs(tmp_path / "docs" / "code" / "b.parquet", [kept("twin", "second copy", source="code"), kept("b-only")])
    write_docs(tmp_path / "docs" / "web" / "c.parquet", [kept("c-only")])
    write_ledger(
        tmp_path / "rejects" / "web" / "r.parquet",
        [
            rejected("twin", "dedup", "exact-duplicate", "data/web/x.jsonl", 12, detail="survivor twin"),
            rejected("other-01", "length", "too-short", "data/web/x.jsonl", 3),
        ],
    )
    write_ledger(
        tmp_path / "rejects" / "code" / "r.parquet", [rejected("twin", "length", "too-short", "data/code/y.jsonl", 4)]
    )
    groups = []
    real_may_hold = lookup._may_hold
    monkeypatch.setattr(lookup, "_may_hold", lambda *a: groups.append(real_may_hold(*a)) or groups[-1])

    result = invoke_show(tmp_path, "twin")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("4 documents have id 'twin': 2 kept, 2 rejected\n")
    assert out.count("twin: kept") == 2 and out.count("twin: DROPPED") == 2
    assert f"found in: {tmp_path}/docs/code/b.parquet" in out and f"found in: {tmp_path}/docs/web/a.parquet" in out
    assert (
        f"found in: {tmp_path}/rejects/web/r.parquet" in out and f"found in: {tmp_path}/rejects/code/r.parquet" in out
    )
    assert "rule 'exact-duplicate' (web, data/web/x.jsonl:12)" in out and "detail: survivor twin" in out
    assert "rule 'too-short' (web, data/code/y.jsonl:4)" in out
    assert "first copy" in out and "second copy" in out
    # Every row group is searched through Parquet's statistics: those of "other-*" ids are not read.
    assert len(groups) == 8 and groups.count(False) == 4, groups

    single = invoke_show(tmp_path, "other-01")  # once kept, once rejected: a rejected twin
    assert single.output.startswith("2 documents have id 'other-01': 1 kept, 1 rejected\n")
    once = invoke_show(tmp_path, "other-02").output
    assert once.count("other-02: kept") == 1 and "documents have id" not in once  # no header for one


def test_show_prints_a_documents_classifier_scores(tmp_path):
    """classify's float32 ``<name>_score`` columns print like any signal (shortest form, not
    float32's 0.7300000190734863); a dropped document's score and threshold are its detail."""
    docs = tmp_path / "docs" / "web" / "a.parquet"
    docs.parent.mkdir(parents=True)
    scores = {"quality_score": [0.73, 0.12345678], "lang_score": [None, 0.9]}
    table = pa.table(
        {
            "id": ["good", "other"],
            "text": ["kept text", "more"],
            "source": ["web", "web"],
            **{name: pa.array(values, pa.float32()) for name, values in scores.items()},
        }
    )
    pq.write_table(table, docs)
    detail = '{"score": 0.31, "threshold": 0.5}'
    write_ledger(
        tmp_path / "rejects" / "web" / "r.parquet",
        [rejected("bad", "classify", "classify:lang", "a.jsonl", 3, detail=detail)],
    )
    out = invoke_show(tmp_path, "good").output
    assert "good: kept (web)" in out and "  quality_score: 0.73\n" in out
    assert "lang_score" not in out  # a null score (a source classify skipped) is not printed
    assert "  lang_score: 0.9\n" in invoke_show(tmp_path, "other").output
    assert "  quality_score: 0.1235\n" in invoke_show(tmp_path, "other").output
    out = invoke_show(tmp_path, "bad").output
    assert "bad: DROPPED by stage 'classify', rule 'classify:lang' (web, a.jsonl:3)" in out
    assert f"  detail: {detail}\n" in out


def test_show_names_a_file_it_cannot_read(tmp_path, monkeypatch):
    write_docs(tmp_path / "docs" / "web" / "a.parquet", [kept("doc")])
    bad = tmp_path / "rejects" / "web" / "bad.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"PAR1 this is not a parquet file")
    assert_one_line_error(invoke_show(tmp_path, "doc"), f"cannot read {bad}: ", "magic bytes not found")

    bad.unlink()
    bad.symlink_to(tmp_path / "gone.parquet")  # dangling
    assert_one_line_error(invoke_show(tmp_path, "doc"), f"cannot read {bad}: No such file or directory")
    bad.unlink()

    # Root reads through chmod 000, so a permission failure is simulated where the OS would raise it.
    real_open = lookup.pq.ParquetFile

    def denied(path, **kw):
        if Path(path).name == "a.parquet":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, **kw)

    monkeypatch.setattr(lookup.pq, "ParquetFile", denied)
    assert_one_line_error(invoke_show(tmp_path, "doc"), f"cannot read {tmp_path}/docs/web/a.parquet: Permission denied")


def test_show_names_a_folder_it_cannot_list(tmp_path, monkeypatch):
    (tmp_path / "docs").write_text("a file where the run has a folder")
    assert_one_line_error(invoke_show(tmp_path, "doc"), f"cannot read {tmp_path}/docs: Not a directory")
    (tmp_path / "docs").unlink()
    write_docs(tmp_path / "docs" / "web" / "a.parquet", [kept("doc")])
    real_walk = lookup.os.walk

    def denied(top, onerror=None, **kw):  # what os.walk does with a folder it may not list
        onerror(PermissionError(13, "Permission denied", str(top)))
        return real_walk(top, onerror=onerror, **kw)

    monkeypatch.setattr(lookup.os, "walk", denied)
    assert_one_line_error(invoke_show(tmp_path, "doc"), f"cannot read {tmp_path}/docs: Permission denied")


def test_estimate(tmp_path):
    # 1B parameters x 20B tokens = 1.2e20 FLOPs, at 40% of an H100's 989 TFLOP/s.
    result = estimate_hours(20_000_000_000, 1e9, 8, 0.4, 989e12)
    assert result["flops"] == pytest.approx(1.2e20)
    assert result["gpu_hours"] == pytest.approx(1.2e20 / (0.4 * 989e12) / 3600)
    assert result["wall_hours"] == pytest.approx(result["gpu_hours"] / 8)
    (tmp_path / "mix.json").write_text(json.dumps({"tokens": 20_000_000_000}))
    out = CliRunner().invoke(main, ["estimate", str(tmp_path), "--params", "1B", "--gpus", "8", "--mfu", "0.4"])
    assert out.exit_code == 0, out.output
    assert f"{result['gpu_hours']:,.4g} GPU-hours" in out.output
    # The line shows the whole 6·N·D product, so a reader can redo it: 6 x 1e9 x 2e10 = 1.2e20.
    assert "6 x 1,000,000,000 parameters x 20,000,000,000 tokens = 1.200e+20 FLOPs" in out.output
