"""``--progress json`` is for machines: every line it writes on stderr is a JSON object,
the last one the run's summary, never the plain text a person reads."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import write_config, write_jsonl

from pipeline.formats.layout import Layout


def test_json_progress_ends_with_one_summary_object_and_no_plain_text(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": f"a document of a few words, number {k}"} for k in range(20)])
    config = write_config(
        tmp_path / "run.toml",
        '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "tokenize"\ntokenizer = "cl100k_base"\n',
    )
    out = tmp_path / "out"
    # Two workers for one unit: the run notes the second never starts, a line it would print.
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "-w", "2", "--progress", "json"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]  # fails on any plain line
    assert any("note" in record for record in records)
    summaries = [record for record in records if record.get("phase") == "done"]
    assert summaries == records[-1:]
    summary = records[-1]
    manifest = json.loads((out / Layout.MANIFEST).read_text())
    assert summary["balance"] == manifest["balance"] == {"input": 20, "output": 20, "rejected": 0}
    assert summary["output_tokens"] > 0 and summary["wall_seconds"] > 0
    assert summary["outputs"]["docs"] == f"{out}/docs" and summary["resumed"]["done_before"] == 0
