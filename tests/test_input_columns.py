"""An input field named like a column prep adds is kept, never overwritten, never fatal.

Every stage declares the columns its ``process`` adds (``Stage.added_columns``); the
engine hands the run's names to the readers, which keep an input field of one of them as
``input_<name>``, as they keep an input ``source``. Without this, an input ``n_tokens``
holding a string aborted the run (the progress line summed it) and one holding 5 became
the tokenizer's count with no trace. The first tests hold every built-in stage's
declaration to what its ``process`` really adds, so a new stage cannot forget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, SAMPLE, write_config, write_jsonl

from pipeline.engine import stage_registry
from pipeline.engine.config import load_config
from pipeline.engine.run import run_pipeline
from pipeline.engine.unit import stage_columns
from pipeline.phases import finalize_here
from pipeline.readers import InputSpec, read_input
from pipeline.readers.common import to_documents
from pipeline.stage import GlobalStage, UnitContext

LID = REPO / "stages" / "models" / "lid.176.ftz"
ENGLISH = (
    "The old market by the river opens at dawn, and the bakers carry their bread along the quiet "
    "street while the city wakes. A friend wrote a letter about the garden behind the house, where "
    "green vines climb the wall and the morning light falls through the window onto the table."
)


def _benchmark(tmp: Path) -> dict:
    question = "how many apples does the farmer keep after the long winter"
    path = write_jsonl(tmp / "bench.jsonl", [{"question": question}])
    return {"benchmarks": [{"name": "bench", "path": str(path), "fields": ["question"]}]}


def _model(**threshold) -> Callable[[Path], dict]:
    return lambda tmp: {"models": [{"name": "english", "path": str(LID), "label": "en", **threshold}]}


# Options to exercise each stage with: (stage name, options given a scratch folder). Every
# registered stage needs one here; a stage whose options change its columns, one per kind.
EXAMPLES: dict[str, tuple[str, Callable[[Path], dict]]] = {
    "extract": ("extract", lambda tmp: {}),
    "fix_text": ("fix_text", lambda tmp: {}),
    "normalize": ("normalize", lambda tmp: {}),
    "length": ("length", lambda tmp: {"min_chars": 50}),
    "langid": ("langid", lambda tmp: {}),
    "quality": ("quality", lambda tmp: {}),
    "quality-ngram-sizes": ("quality", lambda tmp: {"gopher_top_n_grams": {"3": 0.2}, "gopher_dup_n_grams": {}}),
    "classify-min_score": ("classify", _model(min_score=0.5)),
    "classify-keep_top": ("classify", _model(keep_top=0.5)),
    "bad_words": ("bad_words", lambda tmp: {}),
    "column_filter": ("column_filter", lambda tmp: {"rules": {"short": "n_chars < 100"}, "drop_duplicates": True}),
    "url_filter": ("url_filter", lambda tmp: {}),
    "decontaminate": ("decontaminate", _benchmark),
    "pii": ("pii", lambda tmp: {}),
    "dedup": ("dedup", lambda tmp: {"partitions": 2}),
    "paragraph_dedup": ("paragraph_dedup", lambda tmp: {"partitions": 2}),
    "tokenize": ("tokenize", lambda tmp: {"tokenizer": "gpt2"}),
}


def _sample_documents() -> pa.RecordBatch:
    """Real web pages as the reader hands them to the stages (input fields, ``_line``),
    with two English pages repeated so the dedup stages have something to remove."""
    path = SAMPLE / "web" / "c4_guardian.json.gz"
    batch = next(c.docs for c in read_input(path, InputSpec(source="web", file_key=path.name)) if c.docs is not None)
    extra = pa.RecordBatch.from_pylist(
        [{**batch.slice(0, 1).to_pylist()[0], "id": f"copy-{i}", "text": ENGLISH} for i in range(2)],
        schema=batch.schema,
    )
    return pa.Table.from_batches([batch, extra]).combine_chunks().to_batches()[0]


def _commit(ctx: UnitContext) -> None:
    for tmp, final in ctx.pending.items():
        os.replace(tmp, final)
    ctx.pending.clear()


def _processed(cls, options, batch: pa.RecordBatch, tmp: Path) -> pa.RecordBatch:
    """``batch`` through one stage as the engine drives it: a global stage's map, reduce
    and finalize first, then (in a fresh instance, as another worker) ``process``."""
    ctx = UnitContext(out_dir=tmp / "out", source="web", unit="u0")
    stage = cls(options)
    phases = stage.phases() if isinstance(stage, GlobalStage) else None
    if phases is not None and phases.whole_run:
        work = tmp / "work"
        work.mkdir()
        if phases.map is not None:  # decontaminate's index reads no documents
            phases.map.run(iter([batch]), ctx, work)
            _commit(ctx)
        for partition in range(phases.reduce.partitions if phases.reduce else 0):
            phases.reduce.run(partition, work)
        finalize_here(phases.finalize, work)
        stage = cls(options)
        stage.bind(work)
    stage.open_unit(ctx)
    out = stage.process(batch, "web").batch
    stage.close_unit(ctx)
    return out


def test_every_built_in_stage_has_an_example():
    """Every stage of the ``stages`` package (a plug-in another test registers is its
    package's to check: its options are unknown here)."""
    stages = stage_registry.registry()
    built_in = {name for name, cls in stages.items() if cls.__module__.split(".")[0] == stage_registry.BUILT_IN}
    missing = built_in - {name for name, _ in EXAMPLES.values()}
    assert not missing, f"add options for {sorted(missing)} to EXAMPLES, so its added_columns is checked"


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_a_stage_declares_exactly_the_columns_its_process_adds(example, tmp_path):
    name, options_for = EXAMPLES[example]
    cls = stage_registry.registry()[name]
    options = cls.Options(**options_for(tmp_path))
    batch = _sample_documents()
    out = _processed(cls, options, batch, tmp_path)
    added = [column for column in out.schema.names if column not in batch.schema.names]
    assert sorted(added) == sorted(cls.added_columns(options))


def test_a_runs_stage_columns_cover_every_sources_options_and_every_segment(tmp_path):
    """One set for the run: a per-source option's columns, and a stage after a global one,
    count for every source, so a name means one column across the run's documents."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "x"}])
    config = write_config(
        tmp_path / "run.toml",
        """[sources.web]
paths = ["in/*.jsonl"]
[sources.code]
paths = ["in/*.jsonl"]
[[stages]]
name = "quality"
sources = ["code"]
[stages.per_source.code]
gopher_top_n_grams = {"9" = 0.1}
[[stages]]
name = "dedup"
[[stages]]
name = "length"
""",
    )
    columns = stage_columns(load_config(config))
    assert {"gr_top_9gram", "gr_top_2gram", "gq_words", "n_chars"} <= columns
    assert "n_tokens" not in columns


def _docs(out: Path) -> list[dict]:
    return [row for path in sorted((out / "docs").rglob("*.parquet")) for row in pq.read_table(path).to_pylist()]


def test_an_input_n_tokens_is_kept_beside_the_tokenizers_end_to_end(tmp_path):
    """A string aborted the run; a number became the tokenizer's count with no trace."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a", "text": "one two three", "n_tokens": "many"}])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": "b", "text": "four five", "n_tokens": 5}])
    config = write_config(
        tmp_path / "run.toml",
        # a unit per file: packed together, b's number would be cast to a's type (ParquetSink)
        '[run]\ngroup_bytes = 0\n[sources.web]\npaths = ["in/*.jsonl"]\n'
        '[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n',
    )
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(tmp_path / "out"), "-w", "1", "-q"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    docs = {row["id"]: row for row in _docs(tmp_path / "out")}
    assert docs["a"]["input_n_tokens"] == "many" and docs["b"]["input_n_tokens"] == 5
    assert docs["a"]["n_tokens"] == 4 and docs["b"]["n_tokens"] == 3  # the words, then the end-of-document token
    balance = json.loads((tmp_path / "out" / "manifest.json").read_text())["balance"]
    assert balance == {"input": 2, "output": 2, "rejected": 0}


def test_an_input_n_tokens_without_a_tokenizer_is_the_inputs_field(tmp_path):
    """No stage adds ``n_tokens``: the field keeps its name, and nothing of prep's reads it."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a", "text": "one two three", "n_tokens": "many"}])
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\n')
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    [doc] = _docs(tmp_path / "out")
    assert doc["n_tokens"] == "many" and doc["n_chars"] == 13


def test_every_stage_column_of_a_run_keeps_the_inputs_value(tmp_path):
    inputs = {"n_chars": "long", "lang": "xx", "lang_score": 2.5, "english_score": "high", "input_lang": "kept too"}
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a", "text": ENGLISH, **inputs}])
    config = write_config(
        tmp_path / "run.toml",
        f"""[sources.web]
paths = ["in/*.jsonl"]
[[stages]]
name = "length"
[[stages]]
name = "langid"
[[stages]]
name = "classify"
[[stages.models]]
name = "english"
path = "{LID}"
label = "en"
min_score = 0.5
""",
    )
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    [doc] = _docs(tmp_path / "out")
    assert doc["n_chars"] == len(ENGLISH) and doc["lang"] == "en" and doc["english_score"] > 0.5
    assert doc["lang_score"] > 0.5
    assert {key: doc[f"input_{key}"] for key in ("n_chars", "lang_score", "english_score")} == {
        "n_chars": "long",
        "lang_score": 2.5,
        "english_score": "high",
    }
    assert doc["input_lang"] == "kept too" and doc["input_input_lang"] == "xx"


def test_the_prefix_steps_past_our_names_and_the_inputs():
    """``input_x`` may itself be an input field, or a stage's column: the prefix repeats."""
    table = pa.table({"text": ["t"], "n_tokens": [1], "input_n_tokens": [2], "lang": ["xx"]})
    spec = InputSpec(source="web", file_key="f", stage_columns=frozenset({"n_tokens", "lang", "input_lang"}))
    docs = _only_docs(table, spec)
    assert len(set(docs.schema.names)) == docs.num_columns
    assert docs.to_pylist()[0] == {
        "id": "f:0",
        "text": "t",
        "source": "web",
        "input_input_n_tokens": 1,
        "input_n_tokens": 2,
        "input_input_lang": "xx",
        "_line": 0,
    }


def _only_docs(table: pa.Table, spec: InputSpec) -> pa.RecordBatch:
    docs, bad = to_documents(table, pa.array(range(table.num_rows), pa.int64()), spec)
    assert bad is None
    return docs


def test_input_fields_named_like_the_ledgers_columns_break_nothing(tmp_path):
    """``reason``, ``stage``, ``file``, ``line``, ``detail``, ``raw``: the ledger is written
    from prep's own values, the documents keep the input's, and a sampled run (which once
    read a document's ``reason`` as a ledger row's) still runs."""
    ledger_like = {"reason": 7, "stage": "theirs", "file": 1.5, "line": "l", "detail": [1], "raw": "r"}
    records = [{"id": f"d{i}", "text": "x" * (i % 3 * 40), **ledger_like} for i in range(60)]
    write_jsonl(tmp_path / "in" / "a.jsonl", records)
    config = write_config(
        tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\nmin_chars = 50\n'
    )
    for sample in (1.0, 0.5):
        out = tmp_path / f"out-{sample}"
        manifest = run_pipeline(config, out, workers=1, quiet=True, sample=sample)
        balance = manifest["balance"]
        assert balance["input"] == balance["output"] + balance["rejected"] and balance["rejected"] > 0
        ledger = [row for path in (out / "rejects").rglob("*.parquet") for row in pq.read_table(path).to_pylist()]
        assert {(row["stage"], row["reason"], row["file"]) for row in ledger} <= {
            ("read", "bad-input:empty-text", "a.jsonl"),
            ("length", "too-short", "a.jsonl"),
        }
        assert all(isinstance(row["line"], int) for row in ledger)
        assert all({key: doc[key] for key in ledger_like} == ledger_like for doc in _docs(out))
