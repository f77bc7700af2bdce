"""The end-of-run summary tells a person what they need first: how long the run took,
the tokens it wrote, where each output is, and whether an earlier run had done the work."""

from __future__ import annotations

import io
import json

from conftest import write_config, write_jsonl

from pipeline.engine.run import run_pipeline
from pipeline.engine.summary import output_lines, print_summary
from pipeline.formats.layout import Layout

CONFIG = """
[run]
group_bytes = 0  # a unit per file, so a rerun can find one done and one not

[sources.web]
paths = ["in/*.jsonl"]

[[stages]]
name = "tokenize"
tokenizer = "cl100k_base"
"""


def _two_files(tmp_path):
    """A config over two small files, each its own unit."""
    for name in ("a", "b"):
        records = [{"text": f"document {name} {k} of some words"} for k in range(5)]
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", records)
    return write_config(tmp_path / "run.toml", CONFIG)


def _summary(config, out) -> str:
    manifest = run_pipeline(config, out, workers=1, progress="none")
    stream = io.StringIO()
    print_summary(manifest, out, stream)
    return stream.getvalue()


def test_the_summary_says_wall_time_tokens_and_where_the_output_is(tmp_path):
    config = _two_files(tmp_path)
    out = tmp_path / "out"
    summary = _summary(config, out)
    assert "  wall time " in summary and " s; " in summary
    stages = json.loads((out / Layout.MANIFEST).read_text())["stages"]
    tokens = sum(stage["counters"].get("tokens", 0) for stage in stages.values())
    assert tokens > 0 and f"{tokens:,} tokens written to {out}/{Layout.TOKENS}" in summary
    assert f"documents in {out}/{Layout.DOCS}, the rejects ledger in {out}/{Layout.REJECTS}" in summary
    assert "resumed" not in summary and "already complete" not in summary  # nothing was there before


def test_a_rerun_says_what_was_already_done_or_that_the_run_was_complete(tmp_path):
    config = _two_files(tmp_path)
    out = tmp_path / "out"
    _summary(config, out)
    assert "  already complete: an earlier run did every unit; nothing was run again\n" in _summary(config, out)
    markers = sorted((out / "stats" / Layout.segment_phase(0)).rglob("*.json"))
    assert len(markers) == 2
    markers[0].unlink()  # as a kill after one unit's marker leaves it
    again = _summary(config, out)
    assert "  resumed: 1 of 2 units was already done" in again and "already complete" not in again


def test_a_summary_without_cost_json_still_says_where_the_output_is(tmp_path):
    manifest = {"balance": {"input": 0, "output": 0, "rejected": 0}, "sources": {}, "stages": {}}
    manifest |= {"bad_input": {}, "warnings": []}
    stream = io.StringIO()
    print_summary(manifest, tmp_path, stream)
    assert "wall time unknown (no cost.json)" in stream.getvalue()
    assert f"documents in {tmp_path}/{Layout.DOCS}" in stream.getvalue()


def test_a_count_of_one_takes_the_singular(tmp_path):
    """A run of one document said "1 documents in" and "1 tokens written"."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "hello"}])
    summary = _summary(write_config(tmp_path / "run.toml", CONFIG), tmp_path / "out")
    assert "done: 1 document in, 1 kept, 0 rejected" in summary
    assert "; 2 tokens written" in summary  # its one word and the end-of-document token
    (took, _) = output_lines({"stages": {"tokenize": {"counters": {"tokens": 1}}}}, None, tmp_path)
    assert took.endswith(f"; 1 token written to {tmp_path}/{Layout.TOKENS}")


def test_stage_lines_line_up_when_a_stage_name_is_long(tmp_path):
    """paragraph_dedup, column_filter and decontaminate are longer than the other names:
    their counts still sit in the same columns as every other stage's."""
    counts = {"input": 24, "rejected": {}, "changed": 0}
    stages = {name: counts for name in ("dedup", "paragraph_dedup", "tokenize")}
    manifest = {"balance": {"input": 24, "output": 24, "rejected": 0}, "sources": {}, "stages": stages}
    manifest |= {"bad_input": {}, "warnings": []}
    stream = io.StringIO()
    print_summary(manifest, tmp_path, stream)
    lines = [line for line in stream.getvalue().splitlines() if line.startswith("  stage ")]
    assert len(lines) == 3 and len({line.index(" in ") for line in lines}) == 1, lines


def test_cost_json_sums_the_wall_time_of_every_command_that_ran_the_run(tmp_path):
    """cost.json's CPU counts every unit, whichever command ran it; beside it,
    ``run_wall_seconds`` sums those commands' wall time, where an "already complete" rerun
    once put its own fraction of a second."""
    config = _two_files(tmp_path)
    out = tmp_path / "out"

    def cost() -> dict:
        run_pipeline(config, out, workers=1, progress="none")
        return json.loads((out / Layout.COST_SUMMARY).read_text())

    first = cost()
    assert first["run_wall_seconds"] == first["wall_seconds"] > 0
    rerun = cost()
    assert rerun["resumed"]["complete_before"] and rerun["run_wall_seconds"] == first["run_wall_seconds"]
    assert rerun["cpu_seconds"]["total"] == first["cpu_seconds"]["total"]
    sorted((out / "stats" / Layout.segment_phase(0)).rglob("*.json"))[0].unlink()  # as a kill leaves it
    resumed = cost()
    assert resumed["run_wall_seconds"] == round(first["run_wall_seconds"] + resumed["wall_seconds"], 3)
